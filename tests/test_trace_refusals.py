"""What the tracer refuses to lower, and when it does not run the op at all.

An op is traced by running its function once at loader build. An op forced to the numpy path is
never run then; an op that would end the program while traced is refused instead, with a reason.
"""

from __future__ import annotations

import functools
import linecache
import math
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from random import random as rand

import numpy as np
import pytest
from helpers import write_dataset

import augment_ops
import extsrc
from augment_ops.trace import TraceError, trace_function
from extsrc.ops_runtime.paths import choose_paths


def _op(name, fn):
    return augment_ops.Op(name=name, fn=fn)


# -- an op forced to the numpy path is not traced -----------------------------------------------
@pytest.mark.parametrize("op_path", ["numpy", {"refusals_counted": "numpy"}],
                         ids=["string", "per-op"])
def test_an_op_forced_to_numpy_is_not_run_at_loader_build(tmp_path, op_path):
    calls = []

    def counted(img):
        calls.append(img.shape)
        return img[::-1]

    manifest = write_dataset(tmp_path, 4)
    op = _op("refusals_counted", counted)
    with extsrc.Loader(manifest, batch_size=2, transforms=[op], device="cpu", resize=16,
                       op_runtime=extsrc.OpRuntime(op_path=op_path, op_workers=0),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {"refusals_counted": "numpy"}
        assert calls == []  # built, not traced
        next(iter(loader))
    # then run on the decoded images only (DALI may prefetch beyond the first batch)
    assert calls and all(len(s) == 3 and isinstance(s[0], int) for s in calls)


# -- ops that end the program are refused while traced --------------------------------------------
def _exits(img):
    sys.exit(0)


def _generator_exit(img):
    raise GeneratorExit("closed")


@pytest.mark.parametrize(("fn", "raised", "line"), [
    (_exits, r"SystemExit\(0\)", r"sys\.exit\(0\)"),
    (_generator_exit, r"GeneratorExit\('closed'\)", r"raise GeneratorExit"),
], ids=["sys.exit", "GeneratorExit"])
def test_an_op_ending_the_program_is_refused_with_a_reason(fn, raised, line):
    with pytest.raises(TraceError, match=rf"the op raised {raised} \(tracing runs the op at "
                       rf"loader build.* at \S+test_trace_refusals.py:\d+: {line}"):
        trace_function(fn, params={}, random=False, num_outputs=1, dtype="uint8", ndim=3)
    op = _op("refusals_ends", fn)
    assert augment_ops.available_paths(op) == ("numpy",)
    assert augment_ops.explain(op).startswith("numpy: the op raised ")


SCRIPT = """
import os, sys
sys.path.insert(0, {tests!r})
from helpers import write_dataset
import augment_ops, extsrc
from os import _exit

def with_module(img):
    os._exit(3)

def with_name(img):
    _exit(3)

def with_sys(img):
    sys.exit(0)

manifest = write_dataset(__import__("pathlib").Path({root!r}), 2)
for fn in (with_module, with_name, with_sys):
    op = augment_ops.Op(name=fn.__name__, fn=fn)
    with extsrc.Loader(manifest, batch_size=2, transforms=[op], device="cpu", resize=16,
                       op_runtime=extsrc.OpRuntime(op_workers=0),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        print(fn.__name__, loader.op_paths[fn.__name__], augment_ops.explain(op), flush=True)
print("built all", flush=True)
"""


@pytest.mark.slow
def test_a_loader_with_ops_that_exit_the_process_is_built(tmp_path):
    """``os._exit`` named by the op and ``sys.exit`` are refused while tracing: the automatic
    choice gives the numpy path and the program goes on."""
    script = SCRIPT.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0 and "built all" in p.stdout, (p.returncode, p.stdout, p.stderr)
    lines = p.stdout.splitlines()
    assert any(x.startswith("with_module numpy numpy: os._exit (it would end or replace the "
                            "process") for x in lines), lines
    assert any(x.startswith("with_name numpy numpy: os._exit() (it would end") for x in lines)
    assert any(x.startswith("with_sys numpy numpy: the op raised SystemExit(0)") for x in lines)


# -- ops that read or write state outside their call do not lower --------------------------------
CALLS = 0
EVERY = 2  # a module constant: read, never written
SHIFTS = (0, 1, 2)
STEP = 0
LEVELS = np.arange(4, dtype=np.uint8)  # writable
FROZEN_LEVELS = np.arange(4, dtype=np.uint8)
FROZEN_LEVELS.setflags(write=False)


def counting(img):
    global CALLS
    CALLS += 1
    if CALLS % EVERY:
        return img[::-1]
    return img


def _set_step(v):
    global STEP
    STEP = v
    return v


def calls_a_writer(img):
    return img[::-1] if _set_step(1) else img


def reads_a_global_another_function_writes(img):
    return img[::-1] if STEP else img


def advance():
    global STEP
    STEP += 1


def appending():
    seen = []

    def op(img):
        seen.append(img.shape)
        return img[::-1] if len(seen) % 2 else img

    return op


def nonlocal_counter():
    n = 0

    def op(img):
        nonlocal n
        n += 1
        return img[::-1] if n % 2 else img

    return op


def python_random(img):
    return img[::-1] if random.random() < 0.5 else img


def imported_random(img):
    return img[::-1] if rand() < 0.5 else img


def reads_writable_array(img):
    return img + LEVELS[1]


def reads_environment(img):
    return img[::-1] if os.environ.get("EXTSRC_FLIP") else img


def mutable_default(img, seen={}):  # noqa: B006 (what the analysis must refuse)
    seen[0] = seen.get(0, 0) + 1
    return img[::-1] if seen[0] % 2 else img


def module_constants(img):
    h = img.shape[0]
    out = img[:h // EVERY + SHIFTS[1]] + FROZEN_LEVELS[2]
    return np.clip(out, 0, math.floor(200.5)).astype(np.uint8)


def closure_constant(k):
    def op(img):
        return np.rot90(img, k)

    return op


@pytest.mark.parametrize(("fn", "construct", "line"), [
    (counting, r"a write to the global 'CALLS'", r"CALLS \+= 1"),
    (calls_a_writer, r"a write to the global 'STEP' .*, in _set_step\(\) called by the op",
     r"STEP = v"),
    (reads_a_global_another_function_writes, r"a read of the global 'STEP', which "
     r"(_set_step|advance)\(\) writes", r"return img\[::-1\] if STEP else img"),
    (appending(), r"a read of the closure variable 'seen', a list, which can change",
     r"seen\.append"),
    (nonlocal_counter(), r"a write to the closure variable 'n'", r"n \+= 1"),
    (python_random, r"random\.random \(global random state; draw from the op's rng\)",
     r"return img\[::-1\] if random\.random\(\)"),
    (imported_random, r"rand \(global random state", r"return img\[::-1\] if rand\(\)"),
    (reads_writable_array, r"a read of the global 'LEVELS', a writable ndarray \(make it "
     r"read-only", r"return img \+ LEVELS\[1\]"),
    (reads_environment, r"a read of os\.environ, a os\._Environ object, which has state",
     r"return img\[::-1\] if os\.environ"),
    (mutable_default, r"a read of the default value of 'seen', a dict", r"def mutable_default"),
], ids=["global-counter", "helper-writes-global", "global-written-elsewhere", "closure-list",
        "nonlocal", "random.random", "from-random-import", "writable-array", "os.environ",
        "mutable-default"])
def test_an_op_reading_or_writing_outside_state_is_refused_without_running_it(fn, construct,
                                                                               line):
    before = (CALLS, STEP)
    op = _op("refusals_state", fn)
    why = augment_ops.explain(op)
    assert re.fullmatch(rf"numpy: {construct}.* at \S+test_trace_refusals.py:\d+: {line}.*",
                        why), why
    assert augment_ops.available_paths(op) == ("numpy",)
    assert choose_paths([op], gpu=False) == {"refusals_state": "numpy"}
    with pytest.raises(ValueError, match=re.escape(why)):
        choose_paths([op], gpu=False, override="native")
    assert (CALLS, STEP) == before  # refused before it ran


@pytest.mark.parametrize("fn", [module_constants, closure_constant(3)],
                         ids=["module-constants", "closure-int"])
def test_constants_outside_the_op_still_lower(fn):
    op = _op("refusals_constants", fn)
    assert augment_ops.explain(op) == "native (traced)"
    img = np.arange(7 * 5 * 3, dtype=np.uint8).reshape(7, 5, 3)
    out = emit_one(op, img)
    np.testing.assert_array_equal(out, fn(img))


def eval_unreached(img, scale=None):
    # PaddleClas' NormalizeImage: a string scale is evaluated, a number is not
    if isinstance(scale, str):
        scale = eval(scale)
    return (img * np.float32(scale if scale is not None else 0.5)).astype(np.uint8)


def eval_reached(img, scale="1 / 2"):
    return (img * np.float32(eval(scale))).astype(np.uint8)


def exec_reached(img):
    space = {}
    exec("k = 1", space)
    return img[::-1] if space["k"] else img


def test_eval_is_refused_where_the_trace_reaches_it_not_where_it_stands():
    op = _op("refusals_eval_unreached", eval_unreached)
    assert augment_ops.explain(op) == "native (traced)"
    img = np.arange(7 * 5 * 3, dtype=np.uint8).reshape(7, 5, 3)
    np.testing.assert_array_equal(emit_one(op, img), eval_unreached(img))
    for fn, line in [(eval_reached, r"return \(img \* np.float32\(eval\(scale\)\)\)"),
                     (exec_reached, r'exec\("k = 1", space\)')]:
        why = augment_ops.explain(_op(f"refusals_{fn.__name__}", fn))
        assert re.fullmatch(rf"numpy: (eval|exec)\(\) \(it runs code that may read or write "
                            rf"state outside the op.* at \S+test_trace_refusals.py:\d+: "
                            rf"{line}.*", why), why


CONFIG = {"gain": 2}


def _gain_of(expr):
    return eval(expr)


GAIN = functools.partial(_gain_of, "CONFIG['gain']")


def eval_through_a_partial(img):
    return img // GAIN()


def eval_through_a_default(img, how=_gain_of):
    return img // how("CONFIG['gain']")


def eval_through_builtins(img):
    import builtins

    return img // builtins.eval("CONFIG['gain']")


def eval_imported_by_name(img):
    from builtins import eval as ev

    return img // ev("CONFIG['gain']")


def eval_through_getattr(img):
    import builtins

    return img // builtins.eval("CONFIG['gain']")


@pytest.mark.parametrize("fn", [eval_through_a_partial, eval_through_a_default,
                                eval_through_builtins, eval_imported_by_name,
                                eval_through_getattr], ids=lambda f: f.__name__)
def test_eval_outside_the_op_s_own_code_is_refused_where_it_stands(fn):
    """Functions reached through a partial or a default may run as they are, where a traced
    run cannot catch their eval: the bytecode check refuses it, as it does builtins.eval."""
    why = augment_ops.explain(_op(f"refusals_{fn.__name__}", fn))
    assert re.match(r"numpy: (a call of eval\(\)|a use of the builtins module) \(it reads or "
                    r"writes state outside the op|numpy: a use of the builtins module", why), why


def emit_one(op, img):
    """The op's traced graph run by a DALI CPU pipeline on one image."""
    from nvidia.dali import fn as dali_fn
    from nvidia.dali.pipeline import Pipeline

    from augment_ops.lower_dali import emit
    from augment_ops.trace import trace_op

    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        node = dali_fn.external_source(source=lambda: [img], batch=True, layout="HWC")
        pipe.set_outputs(*emit(trace_op(op), node))
    pipe.build()
    (out,) = pipe.run()
    return np.array(out[0])


# -- attributes of an object the op makes in its own call ---------------------------------------
class Flipper:
    """A transform object as MONAI's and others' are: set up, given its generator, then called."""

    def __init__(self, axis):
        self.axis = axis
        self.rng = None

    def __call__(self, img):
        return np.flip(img, self.axis) if self.rng.random() < 0.5 else img


class Cached:
    """A class whose ``__new__`` hands back one object: a call of it does not make a new one."""

    _one = None

    def __new__(cls):
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one


SHARED = (Flipper(0),)


def makes_its_object(img, rng):
    t = Flipper(axis=1)
    t.rng = rng
    return t(img)


def _shared():
    return SHARED[0]


def writes_an_object_a_function_returns(img, rng):
    t = _shared()
    t.rng = rng
    return t(img)


def writes_a_cached_object(img):
    t = Cached()
    t.axis = 1
    return img[:, ::-1]


def writes_an_object_it_may_rebind(img, rng):
    t = Flipper(axis=1)
    if img.shape[0] > 2:
        t = _shared()
    t.rng = rng
    return t(img)


def writes_inside_its_object(img):
    t = Flipper(axis=1)
    t.axis.real = 1
    return img


def writes_its_parameter(img, rng, t=None):
    t.rng = rng
    return t(img)


def test_an_op_writing_an_object_it_makes_in_its_call_lowers_and_equals_numpy():
    from helpers import run_traced, scalar_draws

    from augment_ops.trace import trace_op
    from extsrc.ops_runtime.seeding import counter_rng

    op = augment_ops.Op(name="refusals_fresh_object", fn=makes_its_object, random=True)
    assert augment_ops.explain(op) == "native (traced)"
    imgs = [np.random.default_rng(k).integers(0, 256, (7, 5, 3), dtype=np.uint8)
            for k in range(16)]
    index, epoch = np.arange(16, dtype=np.int64), np.zeros(16, np.int64)
    traced = trace_op(op)
    outs = run_traced(traced, imgs, scalar_draws(traced, 3, 1, index, epoch))
    refs = [makes_its_object(img, counter_rng(3, 0, k, 1)) for k, img in enumerate(imgs)]
    for (out,), ref in zip(outs, refs, strict=True):
        np.testing.assert_array_equal(out, ref)
    flipped = [not np.array_equal(ref, img) for ref, img in zip(refs, imgs, strict=True)]
    assert any(flipped) and not all(flipped)  # both outcomes occur in the batch


@pytest.mark.parametrize(("fn", "line"), [
    (writes_an_object_a_function_returns, "t.rng = rng"),
    (writes_a_cached_object, "t.axis = 1"),
    (writes_an_object_it_may_rebind, "t.rng = rng"),
    (writes_inside_its_object, "t.axis.real = 1"),
], ids=["returned-by-a-function", "class-with-own-new", "rebound", "attribute-of-attribute"])
def test_an_attribute_write_to_an_object_not_seen_made_in_the_call_is_refused(fn, line):
    why = augment_ops.explain(_op("refusals_object", fn))
    assert re.fullmatch(r"numpy: a write to the attribute '\.\w+' of an object not seen made "
                        r"in the op's call \(the traced graph would keep the value it had at "
                        rf"loader build; .*\) at \S+test_trace_refusals.py:\d+: {re.escape(line)}",
                        why), why


# -- explain() names a line inside the op, never its caller's --------------------------------------
def _passes_through(f):
    @functools.wraps(f)
    def wrapper(img, *args, **kwargs):
        return f(img, *args, **kwargs)

    return wrapper


def _bare_wrapper(f):
    def wrapper(img):
        return f(img)

    return wrapper


@_passes_through
def decorated(img):
    return np.fft.fft(img)  # decorated: the op's own line


@_bare_wrapper
def decorated_without_wraps(img):
    return np.fft.fft(img)  # without wraps: the op's own line


def with_param(img, kind: str = "moves"):
    if kind == "fft":
        return np.fft.fft(img)  # with_params: the op's own line
    return img[::-1]


def _helper(x):
    return np.fft.fft(x)  # helper: the function the op calls


def calls_helper(img):
    return _helper(img[::-1])


def late_view(img):  # late view: the def line
    out = img.copy()
    view = np.flip(out, 0)  # a view the tracer does not write through nor read anew
    out[:2] = 0
    return view


def _exec_op():
    """An op defined by ``exec``, with its source in linecache as notebooks register cells."""
    source = "import numpy as np\ndef cell_op(img):\n    return np.fft.fft(img)  # cell\n"
    filename = "<notebook-cell-3>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["cell_op"]


LAMBDA = lambda img: np.fft.fft(img)  # noqa: E731 (a lambda op: its own line)


@pytest.mark.parametrize(("fn", "params", "line"), [
    (decorated, {}, r"return np\.fft\.fft\(img\)  # decorated"),
    (decorated_without_wraps, {}, r"return np\.fft\.fft\(img\)  # without wraps"),
    (with_param, {"kind": "fft"}, r"return np\.fft\.fft\(img\)  # with_params"),
    (calls_helper, {}, r"return np\.fft\.fft\(x\)  # helper"),
    (LAMBDA, {}, r"LAMBDA = lambda img"),
    (late_view, {}, r"def late_view\(img\):  # late view"),
], ids=["decorated", "decorated-without-wraps", "with_params", "helper", "lambda", "late-view"])
def test_explain_names_a_line_inside_the_op_not_its_caller(fn, params, line):
    op = _op("refusals_where", fn)
    if params:
        op = op.with_params(**params)
    why = augment_ops.explain(op)
    assert re.fullmatch(rf"numpy: .* at \S+test_trace_refusals.py:\d+: {line}.*", why), why


def test_explain_names_the_line_of_an_op_from_exec_or_a_notebook_cell():
    why = augment_ops.explain(_op("refusals_cell", _exec_op()))
    assert why == ("numpy: np.fft.fft (not among the numpy functions and methods the tracer "
                   "lowers) at <notebook-cell-3>:3: return np.fft.fft(img)  # cell")


# -- an op that does not return while traced ------------------------------------------------------
def _loops_forever(img):
    n = 0
    while True:  # the line the refusal names
        try:
            n += 1
        except Exception:  # an op's own handler must not swallow the trace's time limit
            pass


def test_an_op_that_never_returns_while_traced_is_refused(monkeypatch):
    import signal

    from augment_ops import trace

    before = signal.getsignal(signal.SIGALRM)
    if before not in (signal.SIG_DFL, signal.SIG_IGN) or signal.getitimer(signal.ITIMER_REAL)[0]:
        pytest.skip("another SIGALRM handler or alarm is set (pytest-timeout?): no trace limit")
    monkeypatch.setattr(trace, "MAX_TRACE_SECONDS", 0.5)
    op = _op("refusals_loops", _loops_forever)
    assert augment_ops.available_paths(op) == ("numpy",)
    reason = augment_ops.explain(op)
    assert reason.startswith("numpy: tracing took longer than 0.5 s (an endless loop"), reason
    assert "test_trace_refusals.py" in reason, reason
    # The alarm and its handler are gone with the trace.
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert signal.getsignal(signal.SIGALRM) is before
