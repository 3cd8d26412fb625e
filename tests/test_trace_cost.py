"""The tracer's cost: facts memoised per node (linear in the graph, bounded by a budget), and
traced graphs cached in the process by the op's code and values, never stale."""

from __future__ import annotations

import pickle
import textwrap

import numpy as np
import pytest
from helpers import pattern_image, run_traced

import augment_ops
import extsrc
from augment_ops import augment_op, trace
from augment_ops.trace import TraceError, fact_steps, trace_op
from augment_ops.trace_cache import op_key
from extsrc.ops_runtime.paths import choose_paths


def make_op(source: str, name: str, **env):
    """The op ``name`` defined by ``source`` in a namespace of its own (as a notebook cell or a
    re-imported module defines it anew), left out of the registry."""
    g = {"np": np, "augment_op": augment_op, **env}
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), g)
    op = g[name]
    augment_ops.unregister(op.name)
    return op


def run_native(op, imgs: list[np.ndarray]) -> list[np.ndarray]:
    """A deterministic op's traced graph, lowered into a DALI pipeline, on one batch."""
    return [out for (out,) in run_traced(trace_op(op), imgs)]


# Each step's sides depend on both sides of the step before: as a tree the expression doubles per
# step, as the DAG it is it grows by a few nodes.
DEEP = """
@augment_op(replace=True)
def deep(img):
    h, w = img.shape[:2]
    a, b = h, w
    for k in range(STEPS):
        a, b = min(h, max(1, (a + b) // 2 - k % 3)), min(w, max(1, b - a // 3 + 1))
    out = img.copy()
    out[a // 2:a, b // 3:b] = FILL
    return out[:a, :b]
"""


def deep_reference(img: np.ndarray, steps: int, fill: int) -> np.ndarray:
    h, w = img.shape[:2]
    a, b = h, w
    for k in range(steps):
        a, b = min(h, max(1, (a + b) // 2 - k % 3)), min(w, max(1, b - a // 3 + 1))
    out = img.copy()
    out[a // 2:a, b // 3:b] = fill
    return out[:a, :b]


def test_deep_shape_arithmetic_traces_and_lowers_in_steps_linear_in_its_graph():
    op = make_op(DEEP.replace("STEPS", "30").replace("FILL", "7"), "deep")
    before = fact_steps()
    graph = trace_op(op)
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(9, 13), (40, 17), (1, 1)])]
    got = run_native(op, imgs)
    steps = fact_steps() - before
    nodes = sum(1 for _ in graph.nodes())
    assert nodes > 300  # deep indeed: 30 steps of min/max/floor-divide on both sides
    assert steps <= 10 * nodes, (steps, nodes)
    for img, out in zip(imgs, got, strict=True):
        np.testing.assert_array_equal(out, deep_reference(img, 30, 7))


@pytest.mark.slow
def test_deep_arithmetic_on_draws_runs_on_the_native_path_of_a_loader(tmp_path):
    op = make_op("""
        @augment_op(replace=True)
        def deep_draws(img, rng: np.random.Generator):
            h, w = img.shape[:2]
            y, x = int(rng.integers(0, h)), int(rng.integers(0, w))
            a, b = h, w
            for k in range(30):
                a, b = min(h, max(1, (a + y) // 2 + b % 3)), min(w, max(1, b - (a + x) // 3 + k))
            out = img.copy()
            out[y:a, x:b] = 0
            return out
    """, "deep_draws")
    manifest = extsrc.make_sample_dataset(tmp_path, n=4, size=(24, 32))
    before = fact_steps()
    with extsrc.Loader(manifest, batch_size=4, ops=[op], device="cpu",
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       shuffle=False, workers=extsrc.Workers(num_workers=0)) as loader:
        batch = next(iter(loader))
    steps = fact_steps() - before
    nodes = sum(1 for _ in trace_op(op).nodes())
    assert steps <= 10 * nodes, (steps, nodes)
    assert len(batch) > 0


def test_past_the_fact_budget_the_op_runs_on_the_numpy_path_and_explain_says_why(monkeypatch):
    op = make_op(DEEP.replace("STEPS", "12").replace("FILL", "3"), "deep")
    monkeypatch.setattr(trace, "MAX_FACT_STEPS", 50)
    why = augment_ops.explain(op)
    assert why.startswith("numpy: integer arithmetic on sizes and draws too deep to bound "
                          "(more than 50 facts about its values) at <deep>:"), why
    assert choose_paths([op], gpu=False) == {op.name: "numpy"}
    with pytest.raises(TraceError, match="too deep to bound"):
        trace_op(op)
    monkeypatch.undo()  # the budget is part of the cache's key: the refusal is not reused
    assert augment_ops.explain(op) == "native (traced)"


# -- traced once --------------------------------------------------------------------------------
CUTOUT = """
@augment_op(replace=True)
def cutout(img, rng: np.random.Generator, frac: float = 0.25):
    h, w = img.shape[:2]
    ch, cw = max(1, int(h * frac)), max(1, int(w * frac))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    out = img.copy()
    out[y:y + ch, x:x + cw] = 0
    return out
"""


def test_the_same_op_defined_again_is_not_traced_again(monkeypatch):
    calls = []
    real = trace.trace_function

    def counting(fn, **kw):
        calls.append(fn.__name__)
        return real(fn, **kw)

    monkeypatch.setattr(trace, "trace_function", counting)
    augment_ops.clear_trace_cache()
    first, again = make_op(CUTOUT, "cutout"), make_op(CUTOUT, "cutout")
    assert first is not again and first.fn is not again.fn
    assert trace_op(first) is trace_op(again)
    assert trace_op(first.with_params(frac=0.5)) is trace_op(again.with_params(frac=0.5))
    assert trace_op(first.with_params(frac=0.5)) is not trace_op(first)
    assert calls == ["cutout", "cutout"]
    augment_ops.clear_trace_cache()
    trace_op(again)
    assert calls == ["cutout", "cutout", "cutout"]


def _fill_op(source: str, **env):
    return make_op(source, "fill", **env)


FILL_SOURCES = {
    "constant": ("""
        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = VALUE
            return out
    """, "VALUE"),
    "global": ("""
        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = LEVEL
            return out
    """, None),
    "helper": ("""
        def level():
            return VALUE

        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = level()
            return out
    """, "VALUE"),
    "closure": ("""
        def make(v):
            @augment_op(replace=True)
            def fill(img):
                out = img.copy()
                out[: img.shape[0] // 2] = v
                return out
            return fill

        fill = make(LEVEL)
    """, None),
    "default": ("""
        @augment_op(replace=True)
        def fill(img, level=LEVEL):
            out = img.copy()
            out[: img.shape[0] // 2] = level
            return out
    """, None),
}


@pytest.mark.parametrize("how", sorted(FILL_SOURCES))
def test_a_redefined_op_with_other_code_or_values_never_gets_a_stale_graph(how):
    source, placeholder = FILL_SOURCES[how]
    imgs = [pattern_image(0, 6, 5), pattern_image(1, 3, 8)]
    for value in (0, 200, 0):
        src = source.replace(placeholder, str(value)) if placeholder else source
        op = _fill_op(src, LEVEL=value)
        for img, out in zip(imgs, run_native(op, imgs), strict=True):
            want = img.copy()
            want[: img.shape[0] // 2] = value
            np.testing.assert_array_equal(out, want)


def test_a_user_module_constant_is_part_of_the_key(tmp_path):
    import types

    cfg = types.ModuleType("user_cfg_for_trace_cache")
    source = """
        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = cfg.LEVEL
            return out
    """
    img = pattern_image(2, 6, 4)
    for value in (9, 90):
        cfg.LEVEL = value
        (out,) = run_native(_fill_op(source, cfg=cfg), [img])
        assert (out[:3] == value).all()


def test_a_helper_from_a_user_module_with_a_standard_name_is_keyed_by_its_code(
        tmp_path, monkeypatch):
    import sys
    import types

    source = """
        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = level()
            return out
    """
    img = pattern_image(4, 6, 4)
    for value in (11, 22):
        mod = types.ModuleType("this")  # the user's this.py, not the standard library's
        mod.__file__ = str(tmp_path / "this.py")
        monkeypatch.setitem(sys.modules, "this", mod)
        exec(compile(f"def level():\n    return {value}\n", mod.__file__, "exec"), vars(mod))
        (out,) = run_native(_fill_op(source, level=mod.level), [img])
        assert (out[:3] == value).all()


def test_a_refusal_names_the_line_where_the_op_now_is(tmp_path):
    body = textwrap.dedent("""
        @augment_op(replace=True)
        def spectral(img):
            return np.fft.fft(img).real.astype(np.uint8)
    """)
    for pad in (0, 5):
        path = tmp_path / f"ops_{pad}.py"
        path.write_text("\n" * pad + body)
        g = {"np": np, "augment_op": augment_op}
        exec(compile(path.read_text(), str(path), "exec"), g)
        augment_ops.unregister("spectral")
        why = augment_ops.explain(g["spectral"])
        assert f"{path}:{pad + 4}: return np.fft.fft(img)" in why, why


def test_an_op_reading_an_object_without_a_key_is_traced_per_op_object():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Settings:  # a constant to the tracer; a user's class, so no key by content
        level: int

    source = """
        @augment_op(replace=True)
        def fill(img):
            out = img.copy()
            out[: img.shape[0] // 2] = settings.level
            return out
    """
    op = _fill_op(source, settings=Settings(5))
    assert op_key(op) is None
    img = pattern_image(3, 4, 4)
    assert (run_native(op, [img])[0][:2] == 5).all()
    # another op object of the same code reading other settings: traced anew
    assert (run_native(_fill_op(source, settings=Settings(6)), [img])[0][:2] == 6).all()


def test_a_traced_graph_pickles_without_its_facts():
    graph = trace_op(make_op(DEEP.replace("STEPS", "3").replace("FILL", "1"), "deep"))
    assert any(n.facts for n in graph.nodes())
    back = pickle.loads(pickle.dumps(graph))
    assert len(list(back.nodes())) == len(list(graph.nodes()))
    assert not any(n.facts for n in back.nodes())


def _divider(k):
    def h(x):
        return x // k
    return h


def _two_closures(f, g):
    def op(img):
        return f(img) - g(img)
    return op


def test_closures_of_one_factory_are_keyed_each_with_its_own_cells():
    f = _divider(1)
    a = augment_ops.Op(name="cost_closures_a", fn=_two_closures(f, _divider(2)))
    b = augment_ops.Op(name="cost_closures_b", fn=_two_closures(f, _divider(4)))
    assert op_key(a)[0] != op_key(b)[0]
    assert trace_op(a) is not trace_op(b)
    img = pattern_image(0, 9, 7)
    for op, k in ((a, 2), (b, 4)):
        assert np.array_equal(op.fn(img), img - img // k)


def test_library_objects_carrying_values_are_not_keyed_by_their_name():
    import functools
    import operator

    def op_with(h):
        def op(img):
            return h(img)
        return op

    for h1, h2 in ((functools.partial(operator.floordiv, 2), functools.partial(operator.floordiv,
                                                                              3)),
                   (np.vectorize(lambda x: x // 2), np.vectorize(lambda x: x // 3))):
        a = augment_ops.Op(name="cost_lib_a", fn=op_with(h1))
        b = augment_ops.Op(name="cost_lib_b", fn=op_with(h2))
        # Without a key of their own they are cached per op object (or refused), never shared.
        ka, kb = op_key(a), op_key(b)
        assert ka is None or kb is None or ka[0] != kb[0]
        augment_ops.explain(a)  # never raises: traced or refused with a reason
