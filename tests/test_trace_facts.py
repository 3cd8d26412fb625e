"""Conditions on pixel values that the tracer's interval facts decide.

``if np.any(image < 0): raise`` on a uint8 image, ``assert img.max() <= 255``, ``np.all(x >= 0)``
after ``np.clip(x, 0, 1)``, ``np.isnan(x).any()`` of integers: the same for every image, so the
traced op takes that branch with no refusal, no guard and no operator. An undecided
``np.any``/``np.all`` is a per-sample value (a DALI reduction) usable in arithmetic; an undecided
branch on pixel values is refused as before, unless its other outcome raises (the op's own
``raise``/``assert``), where the native path raises numpy's error for the samples numpy raises
for. NaN (comparisons with it are False) and integer wrap-around never make a condition decided.

PYTEST_DONT_REWRITE: the ops' ``assert`` statements stay as Python runs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image, traced_equals_numpy, unregistered
from PIL import Image
from test_trace import _emit_on, u_pixel_branch

import extsrc
from augment_ops.trace import trace_op
from extsrc.errors import OpError


def _edge_images() -> list[np.ndarray]:
    """Images that hit the edge values: all 0, all 255, one pixel, and a pattern."""
    ramp = np.arange(5 * 7 * 3, dtype=np.int64).reshape(5, 7, 3) * 37 % 256
    return [np.zeros((3, 4, 3), np.uint8), np.full((4, 3, 3), 255, np.uint8),
            np.array([[[0, 255, 128]]], np.uint8), ramp.astype(np.uint8),
            pattern_image(3, 9, 11)]


# -- decided: no branch, no guard ---------------------------------------------------------------
@unregistered()
def f_any_negative(img):
    if np.any(img < 0):
        raise ValueError("negative values")
    return img[::-1]


@unregistered()
def f_min_negative(img):
    if img.min() < 0:
        raise ValueError("negative values")
    return img // 2


@unregistered()
def f_method_any_and_assert(img):
    if (img > 255).any():
        raise ValueError("values above 255")
    assert img.max() <= 255, "values above 255"
    assert img.min() >= 0 and img.max() <= 255
    return img[:, ::-1]


@unregistered()
def f_clipped_in_range(img):
    x = np.clip(img.astype(np.float32) / 255, 0, 1)
    if not (np.all(x >= 0) and np.all(x <= 1)):
        raise ValueError("out of range")
    return (x * 254).astype(np.uint8)


@unregistered()
def f_isnan_of_integers(img):
    if np.isnan(img).any() or not np.isfinite(img).all() or np.isinf(img).any():
        raise ValueError("not finite")
    return img + np.uint8(1)


@unregistered()
def f_isnan_of_scaled(img):
    x = img.astype(np.float32) / 255
    if np.isnan(x).any():
        raise ValueError("NaN")
    return img


@pytest.mark.parametrize("op", [f_any_negative, f_min_negative, f_method_any_and_assert,
                                f_clipped_in_range, f_isnan_of_integers, f_isnan_of_scaled],
                         ids=lambda op: op.name)
def test_a_condition_the_facts_decide_takes_its_branch_with_no_check(op):
    traced = trace_op(op)
    assert traced.num_paths == 1 and traced.guards == ()
    assert not any(n.op == "reduce" for n in traced.nodes())  # no operator computes it
    imgs = _edge_images()
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        (ref,) = op.apply(img, None)
        np.testing.assert_array_equal(got, ref)


# -- undecided np.any / np.all: a per-sample value ----------------------------------------------
@unregistered()
def f_scaled_by_all(img):
    return (img * np.all(img > 3)).astype(np.uint8) + np.any(img == 255).astype(np.uint8)


@unregistered()
def f_any_over_channels(img):
    bright = np.any(img > 200, axis=2)
    dark = img.all(axis=-1, keepdims=True)
    return np.where(bright[..., None], img, dark.astype(np.uint8) * 7)


@unregistered()
def f_any_of_rows_that_may_be_empty(img):
    """``img[5:]`` is empty on an image 5 rows high or less: ``any`` is False, ``all`` True."""
    rows = img[5:] > 100
    return np.stack([rows.any(axis=0), rows.all(axis=0)], axis=0).astype(np.uint8)


@unregistered()
def f_nan_compared(img):
    """``x / x`` is NaN where a pixel is 0: ``x == x`` is then False, not decided True."""
    x = img.astype(np.float32)
    y = x / x
    return (img // 2 + np.all(y == y) * 100 + np.any(y != y) * 10).astype(np.uint8)


@unregistered()
def f_wrapped(img):
    """``img + 10`` wraps around past 255 in uint8: ``>= 10`` is not decided True."""
    y = img + np.uint8(10)
    return (img // 2 + np.all(y >= 10) * 100).astype(np.uint8)


@unregistered()
def f_classified_floats(img):
    x = img.astype(np.float32)
    q = x / (x - 1)  # inf at 1, -0 at 0
    r = (x - 1) / (x - 1)  # NaN at 1
    return np.stack([np.isnan(r)[..., 0], np.isinf(q)[..., 1], np.isfinite(q)[..., 2],
                     np.isfinite(r)[..., 0]], axis=-1).astype(np.uint8)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning",
                            "ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("op", [f_scaled_by_all, f_any_over_channels,
                                f_any_of_rows_that_may_be_empty, f_nan_compared, f_wrapped,
                                f_classified_floats], ids=lambda op: op.name)
def test_an_undecided_any_or_all_is_a_per_sample_reduction_equal_to_numpy(op):
    traced = trace_op(op)
    assert traced.guards == ()
    # each reduction is true for some of these images and false for others
    imgs = [*_edge_images(), np.full((6, 5, 3), 250, np.uint8), pattern_image(1, 8, 5) | 4]
    imgs[3][0, 0] = (1, 0, 255)
    refs = [op.apply(img, None)[0] for img in imgs]
    for img, got, ref in zip(imgs, _emit_on(traced, imgs), refs, strict=True):
        np.testing.assert_array_equal(got, ref, err_msg=f"{img.shape}")


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning",
                            "ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("op", [f_clipped_in_range, f_scaled_by_all, f_any_over_channels,
                                f_any_of_rows_that_may_be_empty, f_nan_compared,
                                f_classified_floats], ids=lambda op: op.name)
def test_reductions_of_truth_values_on_gpu_equal_numpy(op):
    traced = trace_op(op)
    imgs = [*_edge_images(), np.full((6, 5, 3), 250, np.uint8), pattern_image(1, 8, 5) | 4]
    imgs[3][0, 0] = (1, 0, 255)
    for img, got in zip(imgs, _emit_on(traced, imgs, gpu=True), strict=True):
        np.testing.assert_array_equal(got, op.apply(img, None)[0], err_msg=f"{img.shape}")


def test_an_undecided_any_is_not_taken_for_a_constant():
    @unregistered()
    def f_nan_any(img):
        y = img.astype(np.float32) / img.astype(np.float32)
        if np.any(y != y):
            raise ValueError("NaN")
        return img

    @unregistered()
    def f_min_clipped(img):
        # np.minimum keeps NaN: min(NaN, 1) <= 1 is False
        y = np.minimum(img.astype(np.float32) / img.astype(np.float32), 1)
        if not np.all(y <= 1):
            raise ValueError("above 1")
        return img

    for op in (f_nan_any, f_min_clipped):
        assert len(trace_op(op).guards) == 1, op.name


# -- undecided branches: a guard where the other outcome raises, else the refusal ----------------
@unregistered()
def f_too_bright(img):
    if img.max() > 250:
        raise ValueError("too bright")
    assert not np.all(img == 0), "all black"
    return img // 2


def _write(root, imgs):
    lines = ["path,label"]
    for i, img in enumerate(imgs):
        Image.fromarray(img).save(root / f"img{i}.png")
        lines.append(f"img{i}.png,{i}")
    (root / "m.csv").write_text("\n".join(lines) + "\n")
    return root / "m.csv"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_raise_on_pixel_values_is_a_check_raising_for_the_samples_numpy_raises_for(tmp_path,
                                                                                     device):
    traced = trace_op(f_too_bright)
    assert [(g.error, g.message) for g in traced.guards] == [
        ("ValueError", "too bright"), ("AssertionError", "all black")]
    ok = [np.full((4, 5, 3), 250, np.uint8), pattern_image(0, 6, 7) % 251]
    bright = np.full((3, 3, 3), 250, np.uint8)
    bright[2, 2, 1] = 251
    black = np.zeros((5, 4, 3), np.uint8)
    for bad, error, message in ((bright, "ValueError", "too bright"),
                                (black, "AssertionError", "all black")):
        with pytest.raises(Exception, match=message):
            f_too_bright.apply(bad, None)  # numpy raises it
        folder = tmp_path / error
        folder.mkdir()
        manifest = _write(folder, [*ok, bad])
        with extsrc.Loader(manifest, batch_size=1, ops=[f_too_bright], device=device,
                           shuffle=False, op_runtime=extsrc.OpRuntime(op_path="native"),
                           workers=extsrc.Workers(num_workers=0)) as loader:
            assert loader.op_paths == {f_too_bright.name: "native"}
            it = iter(loader)
            for img in ok:
                (ref,) = f_too_bright.apply(img, None)
                got = next(it)[f"{f_too_bright.name}_0"][0].cpu().numpy()
                np.testing.assert_array_equal(got, ref)
            with pytest.raises(OpError, match=f"raised {error}: {message}") as e:
                next(it)
        assert "img2.png" in str(e.value)


@unregistered()
def u_any_branch(img):
    if np.any(img > 100) and img.min() < 50:
        return img // 2
    return img


@unregistered()
def u_nan_branch(img):
    y = img.astype(np.float32) / img.astype(np.float32)
    if np.all(y == y):
        return img
    return img[::-1]


@pytest.mark.parametrize("op", [u_pixel_branch, u_any_branch, u_nan_branch],
                         ids=lambda v: v.name)
def test_an_undecided_branch_on_pixel_values_is_a_select_equal_to_numpy(op):
    # a zero image (NaN in u_nan_branch), a dark one, a bright one, one of both
    imgs = [np.zeros((3, 4, 3), np.uint8), np.full((4, 3, 3), 30, np.uint8),
            np.full((2, 5, 3), 220, np.uint8), pattern_image(2, 6, 5)]
    traced_equals_numpy(op, imgs)


# -- a drawn offset below a size computed from a float: SSD's expand ---------------------------
@unregistered(dtype=np.float32)
def f_expand(img, rng):
    # PaddleDetection's RandomExpand in short: the canvas' size is int(size * ratio), the
    # offset drawn below the difference, so the pasted image always fits
    height, width = img.shape[:2]
    ratio = rng.uniform(1.0, 4.0)
    h, w = int(height * ratio), int(width * ratio)
    if not h > height or not w > width:
        return img.astype(np.float32)
    y = rng.integers(0, h - height)
    x = rng.integers(0, w - width)
    canvas = np.ones((h, w, 3), dtype=np.float32) * np.float32(127.5)
    canvas[y:y + height, x:x + width, :] = img.astype(np.float32)
    return canvas


def test_an_offset_drawn_below_a_difference_of_sizes_keeps_the_paste_inside():
    """``y < h - height`` bounds ``y + height`` by ``h`` for every sample that does not raise,
    also where ``h`` comes from a float: the paste needs no clamp and lowers."""
    # small images: int(size * ratio) is often the size itself, and the op returns the image
    imgs = [pattern_image(k, 1 + k % 3, 1 + k % 4) for k in range(24)]
    outs = traced_equals_numpy(f_expand, imgs, seed=3)
    shapes = {out.shape != img.shape for out, img in zip(outs, imgs, strict=True)}
    assert shapes == {True, False}


# -- bounds that wrap-around, NaN and wide types would break --------------------------------------
_NAN_TABLE = np.full(256, 1.5)
_NAN_TABLE[0] = np.nan
_NAN_TABLE.setflags(write=False)


@unregistered()
def f_branch_on_a_table_holding_nan(img):
    """A table holding NaN bounds nothing: np.maximum(0, NaN) is NaN, which is > 0.5 nowhere,
    and 1.5 is; the branch is per sample."""
    if (np.maximum(0.0, _NAN_TABLE[img]) > 0.5).any():
        return img // 2
    return img


@unregistered(dtype=np.int64)
def f_difference_of_a_huge_maximum(img):
    """max(t, u) - t of pixel values wraps around in int64 where t is very negative: not >= 0,
    though max(t, u) >= t (bitwise operators: bounds the tracer does not know)."""
    x = img.astype(np.int64)
    t = x | np.int64(-2 ** 63)
    u = x << np.int64(55)
    return (np.maximum(t, u) - t) // np.int64(7)


def test_bounds_hold_with_nan_tables_and_wrapping_differences():
    imgs = [pattern_image(k, 5, 6) for k in range(4)]
    imgs[0][:] = 0  # NaN everywhere
    imgs[1][0, 0, 0] = 7  # 1.5 somewhere
    traced_equals_numpy(f_branch_on_a_table_holding_nan, imgs)
    traced_equals_numpy(f_difference_of_a_huge_maximum, imgs)


def test_a_python_int_into_a_64_bit_type_is_not_checked_against_bounds_it_cannot_pass():
    @unregistered(dtype=np.uint64)
    def shifted(img):
        return img.astype(np.uint64) + np.uint64(img.shape[0] * 2 ** 40)

    assert trace_op(shifted).guards == ()
    traced_equals_numpy(shifted, [pattern_image(k, 3 + k, 4) for k in range(3)])


def test_integers_and_an_index_array_apart_are_refused_and_an_index_out_of_range_raises():
    from augment_ops.trace import TraceError

    @unregistered(ndim=2)
    def apart(img):
        return img[0, :, np.array([1, 2])]

    @unregistered()
    def out_of_range(img):
        return img[..., np.array([0, 3])]

    with pytest.raises(TraceError, match="numpy moves the indexed axes to the front"):
        trace_op(apart)
    with pytest.raises(TraceError, match="IndexError: index 3 is out of bounds"):
        trace_op(out_of_range)


def test_an_axis_added_keeps_what_the_facts_know_of_the_values():
    """``x[..., None]`` (np.newaxis) holds x's values: a zero of either sign, a NaN, a bound go
    through it (facts that took them for absent would lower a maximum over it, though numpy's
    sign of a zero result depends on its loop order)."""
    from augment_ops.trace import TraceError

    @unregistered(dtype=np.float32)
    def f_signed_zeros_max(img):
        zeros = np.where(img > 128, np.float32(-0.0), np.float32(0.0))  # both signs of zero
        return np.float32(1.0) / zeros[..., None].max() + img.astype(np.float32)

    with pytest.raises(TraceError, match=r"may hold both -0\.0 and 0\.0"):
        trace_op(f_signed_zeros_max)

    @unregistered(dtype=np.float32)
    def f_one_sign_max(img):
        zeros = np.where(img > 128, np.float32(-0.0), np.float32(0.0)) + np.float32(0.0)
        return np.float32(1.0) / zeros[..., None].max() + img.astype(np.float32)

    traced_equals_numpy(f_one_sign_max, [pattern_image(k, 4 + k, 5) for k in range(3)])
