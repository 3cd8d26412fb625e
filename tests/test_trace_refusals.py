"""What the tracer refuses to lower, and when it does not run the op at all.

An op is traced by running its function once at loader build. An op forced to the numpy path is
never run then; an op that would end the program while traced is refused instead, with a reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import write_dataset

import augment_ops
import extsrc
from augment_ops.trace import TraceError, trace_function


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
                       op_path=op_path, op_workers=0, num_workers=0) as loader:
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
    assert op.paths == ("numpy",)
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
                       op_workers=0, num_workers=0) as loader:
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
