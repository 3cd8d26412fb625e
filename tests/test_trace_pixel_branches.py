"""Branches on pixel values (``if imin != imax:``): both outcomes traced and merged per sample.

Each op runs in a real DALI pipeline over one batch whose samples take every outcome (constant
images, dark and bright ones, sizes where a crop differs), and must equal numpy on each sample,
on the CPU and on the GPU, where the predicate and the sizes computed from pixel values are read
on the CPU. A loop on pixel values is still refused, with the reason and a rewrite.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image, traced_equals_numpy, unregistered

import augment_ops
from augment_ops.trace import MAX_PATHS, TraceError, trace_op
from augment_ops.trace.ir import MAX_PIXEL_BRANCHES


@unregistered()
def p_halve_if_bright(img):
    if img.mean() > 100:
        return img // 2
    return img


@unregistered()
def p_rescale(img):
    # skimage's rescale_intensity in short: a constant image keeps its value
    imin, imax = img.min(), img.max()
    if imin != imax:
        out = (img.astype(np.float64) - imin) / (imax - imin)
    else:
        out = np.zeros(img.shape)
    return (out * 255).astype(np.uint8)


@unregistered()
def p_nested(img):
    m = img.max()
    if m > 200:
        if img.min() < 20:
            return img
        return 255 - img
    elif m > 100:
        return img // 3
    return img * 2


@unregistered()
def p_crop_by_corner(img):
    # outputs of different sizes: the merged output's size is read on the CPU
    h = img.shape[0]
    if img[0, 0, 0] > 128:
        return img[: h // 2 + 1].copy()
    return img[h // 3:].copy()


@unregistered()
def p_crop_at_a_pixel_value(img):
    # a slice bound computed from a pixel value: an argument DALI takes on the CPU
    rows = img[0, 0, 1] % 3 + 1
    if img[0, 0, 1] < 128:
        return img[:rows]
    return img[:, :rows]


@unregistered(ndim=3)
def p_flip_or_fill(img):
    out = img.copy()
    if np.any(img[..., 0] > 250):
        out[:2, :2] = (1, 2, 3)
        return out
    return out[:, ::-1]


OPS = [p_halve_if_bright, p_rescale, p_nested, p_crop_by_corner, p_crop_at_a_pixel_value,
       p_flip_or_fill]


def _batch() -> list[np.ndarray]:
    rs = np.random.default_rng(3)
    corner = pattern_image(1, 7, 5)
    corner[0, 0] = (200, 10, 255)
    return [rs.integers(0, 256, (7, 5, 3), dtype=np.uint8),
            np.full((4, 6, 3), 9, np.uint8),
            np.full((3, 3, 3), 240, np.uint8),
            rs.integers(150, 256, (5, 8, 3), dtype=np.uint8),
            rs.integers(0, 90, (2, 2, 3), dtype=np.uint8),
            rs.integers(101, 200, (6, 4, 3), dtype=np.uint8),
            corner,
            np.full((1, 1, 3), 255, np.uint8)]


def _check(op, gpu: bool) -> None:
    outcomes = {w.tobytes() for w in traced_equals_numpy(op, _batch(), gpu=gpu)}
    assert len(outcomes) > 2, "the batch should take the branches' outcomes"


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)],
                         ids=["cpu", "gpu"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_a_branch_on_pixel_values_equals_numpy_on_each_sample(op, gpu):
    _check(op, gpu=gpu)


def test_the_outcomes_are_selects_on_the_predicate():
    traced = trace_op(p_nested)
    assert traced.num_paths == 4
    assert traced.outputs[0].op == "select" and traced.outputs[0].args[0].pixel


@unregistered()
def p_while_on_pixels(img):
    x = img.astype(np.int16)
    while x.max() > 10:
        x = x - 1
    return x.astype(np.uint8)


@unregistered()
def p_halving_while_on_pixels(img):
    """Five halvings bring any uint8 value to 7 at most: the bounds end the loop, each of its
    tests a branch on pixel values."""
    x = img.astype(np.int16)
    while x.max() > 10:
        x = x // 2
    return x.astype(np.uint8)


def test_a_loop_on_pixel_values_the_bounds_end_equals_numpy():
    assert trace_op(p_halving_while_on_pixels).num_paths == 6
    imgs = [pattern_image(k, 5, 6) for k in range(6)]
    for k, top in enumerate([0, 10, 11, 40, 200, 255]):
        imgs[k] = np.minimum(imgs[k], top).astype(np.uint8)
        imgs[k][0, 0, 0] = top
    traced_equals_numpy(p_halving_while_on_pixels, imgs)


def test_a_loop_on_pixel_values_is_refused_with_its_reason_and_a_rewrite():
    with pytest.raises(TraceError) as e:
        trace_op(p_while_on_pixels)
    text = str(e.value)
    assert "Python control flow (if/while/and/or) on pixel values" in text
    assert f"more than {MAX_PIXEL_BRANCHES} times in one run" in text
    assert "np.where" in text
    assert e.value.location.endswith("while x.max() > 10:"), e.value.location
    assert augment_ops.explain(p_while_on_pixels).startswith("numpy: Python control flow")


def test_a_predicate_between_outcomes_of_one_shape_stays_where_the_image_is():
    """``if imin != imax:`` between outcomes of one shape: an elementwise select, its predicate
    not copied to the CPU; outcomes of different shapes need DALI's conditional merge, whose
    predicate is on the CPU."""
    from augment_ops.lower_dali import _lowered, _pixel_scalars_on_cpu

    for op, on_cpu in [(p_rescale, False), (p_nested, False), (p_crop_by_corner, True)]:
        traced = _lowered(trace_op(op))
        preds = {id(n.args[0]) for n in traced.nodes() if n.op == "select"}
        assert preds and bool(preds & _pixel_scalars_on_cpu(traced)) == on_cpu, op.name


# -- float extremes over the image, as numpy gives them ---------------------------------------
@unregistered()
def p_branch_on_a_nan_max(img):
    y = img[..., 0].astype(np.float32) / img[..., 1].astype(np.float32)  # 0 / 0 is NaN
    if y.max() > 1.0:
        return img // 2
    return img


@unregistered(dtype=np.float32)
def p_scaled_by_a_nan_min(img):
    y = img.astype(np.float32) / img[..., :1].astype(np.float32)
    return img * y.min()


def test_a_float_max_or_min_over_the_image_is_nan_where_numpy_s_is():
    imgs = [pattern_image(k, 5, 6) for k in range(4)]
    imgs[1][0, 0, :2] = 0  # one 0 / 0
    imgs[2][..., 1] = 0  # a plane of them, and x / 0 = inf beside
    for op in (p_branch_on_a_nan_max, p_scaled_by_a_nan_min):
        traced_equals_numpy(op, imgs)


def test_a_float_extreme_numpy_and_dali_may_differ_on_is_refused():
    @unregistered()
    def signed_zeros(img):
        y = (img.astype(np.float32) - 128) * 0  # -0.0 below 128, 0.0 above
        return img // 2 if 1 / y.max() > 0 else img

    @unregistered()
    def float64_max(img):
        return img // 2 if (img / 3.0).max() > 50 else img

    for op, reason in [(signed_zeros, r"may hold both -0\.0 and 0\.0 .* add 0\.0 first"),
                       (float64_max, r"np\.max of float64 values over the image")]:
        with pytest.raises(TraceError, match=reason):
            trace_op(op)


def test_too_many_outcomes_beside_a_pixel_branch_are_refused_as_too_many_outcomes():
    @unregistered()
    def many(img, rng):
        out = img // 2 if img[0, 0, 0] > 128 else img
        for k in range(5):
            if rng.random() < 0.5:
                out = out + np.uint8(k)
        return out

    with pytest.raises(TraceError, match=rf"^more than {MAX_PATHS} branch outcomes"):
        trace_op(many)


def test_a_narrowed_tiny_negative_may_be_a_negative_zero():
    @unregistered(dtype=np.float32)
    def narrowed(img):
        x = (img.astype(np.float64) * 1e-300 - 1.28e-298).astype(np.float32)
        return np.float32(1) / x.max() + np.zeros_like(x)

    with pytest.raises(TraceError, match=r"may hold both -0\.0 and 0\.0"):
        trace_op(narrowed)
