"""``raise`` and ``assert`` in an op's own code on per-sample values.

numpy meets them only on the samples whose values take that branch: the traced op keeps a
run-time check that raises what numpy raises for those samples alone, naming the sample, or none
where the tracer proves that no sample takes the branch; never a refusal for a check numpy passes,
and never a message that prints the tracer's objects.

PYTEST_DONT_REWRITE: the ops' ``assert`` statements stay as Python runs them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import pattern_image, unregistered
from helpers import sized_dataset as _dataset
from test_trace import _emit_on

import augment_ops
import extsrc
from augment_ops.trace import TraceError, trace_op
from extsrc.errors import OpError


class TooSmall(Exception):
    """An exception class of the op's own."""


@unregistered()
def r_needs_rows(img, rows: int = 4):
    h = img.shape[0]
    if h < rows:
        raise ValueError(f"need {rows} rows, got {h} (shape {img.shape})")
    return img[:rows] // 2


@unregistered()
def r_asserts_width(img):
    w = img.shape[1]
    assert w % 2 == 0, f"odd width {w}"
    return img[:, : w // 2]


@unregistered()
def r_own_exception(img):
    h, w = img.shape[:2]
    if h > 6 and w > 6:
        raise TooSmall("too large")
    return img[::-1]


@unregistered()
def r_checks_that_never_fire(img, rng, size: int = 5):
    h = img.shape[0]
    c = min(size, h)
    assert h >= c, "impossible"
    y = int(rng.integers(0, h - c + 1))
    if y + c <= y or y < 0:
        raise ValueError("impossible")
    return img[y:y + c]


@unregistered()
def r_raises_always(img):
    if img.shape[0] > 3:
        raise ValueError("big")
    raise ValueError("small")



@pytest.mark.parametrize("op", [r_needs_rows, r_asserts_width, r_own_exception],
                         ids=lambda op: op.name)
def test_a_raise_on_some_samples_lowers_with_a_check_and_equals_numpy_elsewhere(op):
    traced = trace_op(op)
    assert len(traced.guards) == 1
    guard = traced.guards[0]
    assert "traced" not in guard.message and "Node" not in guard.message, guard.message
    assert guard.location.endswith(("raise ValueError(f\"need {rows} rows, got {h} (shape "
                                    "{img.shape})\")", "assert w % 2 == 0, f\"odd width {w}\"",
                                    "raise TooSmall(\"too large\")")), guard.location
    # Sizes on which numpy passes: the native path equals it, in one batch.
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(4, 6), (5, 2), (6, 4)])]
    outs = _emit_on(traced, imgs)
    for img, got in zip(imgs, outs, strict=True):
        (ref,) = op.apply(img, None)
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(("op", "sizes", "bad", "error", "message"), [
    (r_needs_rows, [(5, 5), (3, 8), (4, 4)], 1, "ValueError",
     r"need 4 rows, got <a per-sample value> \(shape \(<a per-sample value>, "),
    (r_asserts_width, [(5, 4), (4, 2), (3, 7)], 2, "AssertionError",
     "odd width <a per-sample value>"),
    (r_own_exception, [(5, 9), (7, 7)], 1, "TooSmall", "too large"),
])
def test_the_native_path_raises_for_the_samples_numpy_raises_for(tmp_path, op, sizes, bad,
                                                                  error, message):
    manifest = _dataset(tmp_path, sizes)
    with extsrc.Loader(manifest, batch_size=1, ops=[op], device="cpu", shuffle=False,
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {op.name: "native"}
        it = iter(loader)
        for k in range(bad):
            (ref,) = op.apply(pattern_image(k, *sizes[k]), None)
            np.testing.assert_array_equal(next(it)[f"{op.name}_0"][0].numpy(), ref)
        with pytest.raises(OpError, match=f"op '{op.name}' raised {error}: {message}") as e:
            next(it)
    text = str(e.value)
    assert f"line {bad + 2}" in text and f"img{bad}.png" in text, text
    assert "Node" not in text, text
    with pytest.raises(Exception, match=re.escape(message.split(" <")[0].replace("\\", ""))):
        op.apply(pattern_image(bad, *sizes[bad]), None)  # numpy raises it too


def test_checks_the_tracer_proves_never_fire_cost_nothing():
    """``assert h >= min(size, h)``, ``y + c <= y`` with ``c >= 1``, ``y < 0`` for a draw from
    0: no guard."""
    traced = trace_op(r_checks_that_never_fire)
    assert traced.guards == ()


def test_an_op_that_raises_on_every_branch_is_refused_with_its_error():
    with pytest.raises(TraceError, match=r"the op raises on every image: ValueError: (big|small)"
                                         r" at .*raise ValueError"):
        trace_op(r_raises_always)
    assert augment_ops.explain(r_raises_always).startswith(
        "numpy: the op raises on every image: ValueError:")


def test_a_raise_with_no_per_sample_condition_is_refused_as_numpy_raises():
    @unregistered()
    def r_param_check(img, size: int = -1):
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        return img

    with pytest.raises(TraceError, match=r"ValueError: size must be >= 0, got -1 at .*raise"):
        trace_op(r_param_check)
