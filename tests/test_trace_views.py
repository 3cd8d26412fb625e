"""Writes through views and numpy ufuncs' keyword arguments, traced into DALI: each op below is
run by a real CPU DALI pipeline and compared with numpy exactly (images of odd, even and
1-pixel sizes), aliasing included (every view of an array sees a write through any other), and
the writes numpy does not make through a view (a fancy index's copy) or the tracer refuses."""

from __future__ import annotations

import numpy as np
import pytest
from test_trace_arrays import _check, _refused

from augment_ops.trace import TraceError, trace_function


# -- writes through views -----------------------------------------------------------------------
def v_channel_scaled(img):
    a = img.astype(np.float32)
    ch = a[..., 0]
    ch *= 0.5
    return a


def v_channel_zeroed(img):
    a = img.copy()
    ch = a[:, :, 1]
    ch[:] = 0
    return a


def v_per_channel_loop(img):
    a = img.astype(np.int16)
    d = [3, -5, 7]
    for c in range(3):
        v = a[:, :, c]
        v += d[c]
    return a


def v_flipped_inner_region(img):
    a = img.copy()
    a[1:-1][:, ::-1] = 0
    return a


def v_reversed_rows_written(img):
    a = img.astype(np.int32)
    r = a[::-1]
    r[:2] = np.arange(3, dtype=np.int32) * 100  # rows last and last-but-one, per channel
    r[2:, 1:] -= 7
    return a


def v_clip_out_view(img):
    a = img.astype(np.float32) * 1.5 - 40
    v = a[1:, :2]
    np.clip(v, 0, 255, out=v)
    return a


def v_batchgenerators_channels(img):
    # batchgenerators' augment_brightness_multiplicative on data_sample = data[b] (a view)
    data = img.astype(np.float32).transpose(2, 0, 1)[None]
    sample = data[0]
    for c in range(sample.shape[0]):
        sample[c] = sample[c] * (0.8 + 0.1 * c)
    return data[0].transpose(1, 2, 0)


def v_new_axis_and_int_index(img):
    a = img.astype(np.int16)
    e = a[None, ..., 2]
    e[0, :, -1:] = -1
    row = a[0]
    row += 1000
    return a


def v_transposed_view_of_view(img):
    a = img.astype(np.int32)
    t = a.transpose(1, 0, 2)
    w = t[::-1, 1:]
    w -= 100
    return a


def v_augmented_item(img):
    a = img.astype(np.float32)
    a[..., 0] *= 0.5
    a[1:, ::-1, 1:] += 3.0
    return a


@pytest.mark.parametrize("op", [v_augmented_item, v_channel_scaled, v_channel_zeroed,
                                v_per_channel_loop,
                                v_flipped_inner_region, v_reversed_rows_written,
                                v_clip_out_view, v_batchgenerators_channels,
                                v_new_axis_and_int_index, v_transposed_view_of_view],
                         ids=lambda f: f.__name__)
def test_write_through_view_lowers_exactly(op):
    _check(op)


def _ops(op, dtype) -> list[str]:
    """The operations of ``op``'s traced graph, one per node."""
    traced = trace_function(op, params={}, random=False, num_outputs=1, dtype=dtype, ndim=3)
    seen, stack, ops = set(), list(traced.outputs), []
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        ops.append(n.op)
        stack.extend(a for a in n.args if hasattr(a, "op"))
    return ops


def test_augmented_item_assignment_writes_once():
    """``a[k] *= f`` writes through the view ``a[k]``, then stores that view into ``a[k]``:
    the store adds nothing. a[..., 0]: one concatenation on the channel axis; a[1:, ::-1, 1:]:
    one on the rows and one on the channels (the reversed columns are the whole axis)."""
    assert _ops(v_augmented_item, np.float32).count("cat") == 1 + 2


def test_constants_written_through_views_are_fills_of_the_base():
    ops = _ops(v_flipped_inner_region, np.uint8) + _ops(v_channel_zeroed, np.uint8)
    assert ops.count("fill") == 2 and "cat" not in ops


# -- aliasing: every view of the memory reads the write ------------------------------------------
def a_view_read_after_write_through_other(img):
    a = img.astype(np.int16)
    rows = a[1:]                 # taken before the write
    flipped = a[:, ::-1]
    flipped[..., 0] += 50        # lands in a, seen through rows
    return np.concatenate([rows, a[:1] * 2], axis=0)


def a_two_views_interleaved(img):
    a = img.copy()
    left = a[:, :3]
    top = a[:2]
    left[:] = 9
    top += 1                     # reads left's write where they overlap
    return left.copy().astype(np.int32).sum(axis=2, keepdims=True) + a[:, :1, :1]


def a_view_of_view_then_base(img):
    a = img.astype(np.float32)
    inner = a[1:-1]
    core = inner[:, 1:-1]
    core *= 2.0
    a += 1.0                     # a write into the base, seen by both views
    return np.concatenate([core, inner[:, :1] * 0 + core[:, :1]], axis=1) if core.shape[1] \
        else a


def a_rng_channel(img, rng):
    a = img.astype(np.float32)
    ch = a[:, :, 1]
    ch *= rng.uniform(0.5, 1.5)
    return np.clip(a, 0, 255).astype(np.uint8)


def a_single_elements(img):
    a = img.astype(np.int32)
    a[0, 0, 0] = -5              # a 0-d view
    a[-1, -1] = 7                # a 1-d view
    px = a[0, -1]
    px[1:] = px[:2] * 3          # a view assigned from an overlapping view: numpy reads first
    return a


@pytest.mark.parametrize("op", [a_view_read_after_write_through_other, a_two_views_interleaved,
                                a_single_elements],
                         ids=lambda f: f.__name__)
def test_views_alias(op):
    _check(op)


def test_view_of_view_sees_base_write():
    imgs = [np.arange(h * w * 3, dtype=np.uint8).reshape(h, w, 3) for h, w in
            [(3, 5), (6, 4), (9, 7)]]
    _check(a_view_of_view_then_base, imgs=imgs)


def a_drawn_bounds(img, rng):
    a = img.copy()
    y = int(rng.integers(0, a.shape[0]))
    v = a[y:]                    # per-sample bounds: a region of per-sample size
    v[:, :, 2] = 0
    v[:1] //= 2
    return a


def a_canvas_view(img):
    h, w = img.shape[:2]
    out = np.zeros((h + 4, w + 4, 3), np.uint8)
    v = out[2:-2]
    v[:, 2:-2] = img             # a view of a new array of a per-sample shape
    return out


def test_drawn_channel_view_write_is_random_and_exact():
    _check(a_rng_channel, random=True)
    _check(a_drawn_bounds, random=True)
    _check(a_canvas_view)


# -- copies, and the views that are refused ------------------------------------------------------
def c_fancy_copy_untouched(img):
    a = img.copy()
    f = a[..., [0, 2]]           # a copy: writing it leaves a alone
    f += 1
    return np.concatenate([a, f], axis=2)


def c_fancy_copy_of_input(img):
    f = img[..., [2, 1, 0]]      # a writable copy of the read-only input
    f[..., 0] = 0
    return f


def test_fancy_index_is_a_copy():
    _check(c_fancy_copy_untouched)
    _check(c_fancy_copy_of_input)


def r_flip_write(img):
    a = img.copy()
    r = np.flip(a, 0)
    r += 1
    return a


def r_reshape_write(img):
    a = img.copy()
    r = a.reshape(-1)
    r[:] = 0
    return a


def r_flip_read_after_write(img):
    a = img.copy()
    r = np.flip(a, 0)
    a += 1
    return r


def r_drawn_index_view_write(img, rng):
    a = img.astype(np.float32)
    ch = a[:, :, int(rng.integers(0, 3))]
    ch *= 0.5
    return a


def r_input_view_write(img):
    v = img[..., 0]
    v *= 2
    return img


@pytest.mark.parametrize("op, match", [
    (r_flip_write, r"a write through a view made by np\.reshape, np\.flip"),
    (r_reshape_write, r"a write through a view made by np\.reshape, np\.flip"),
    (r_flip_read_after_write, r"use of a view \(made by np\.reshape, np\.flip, np\.rot90"),
    (r_input_view_write, r"in-place multiply on the input image or a view of it"),
    (r_drawn_index_view_write, r"a write through a view made by .* a per-sample index"),
], ids=["flip", "reshape", "flip-read-after-write", "input-view", "drawn-index"])
def test_views_not_written_through_are_refused(op, match):
    _refused(op, match, random=op is r_drawn_index_view_write)


# -- ufunc keywords -----------------------------------------------------------------------------
def k_multiply_dtype(img):
    return np.multiply(img, 0.7, dtype=np.float32)


def k_subtract_dtype(img):
    return np.subtract(img, 30, dtype=np.int16)


def k_add_out(img):
    c = np.zeros(img.shape, np.int32)
    np.add(img, img, out=c)
    return c


def k_subtract_out_view(img):
    c = img.astype(np.int16)
    np.subtract(c[:, 1:], 7, out=c[:, 1:])
    return c


def k_add_where_out(img):
    c = img.copy()
    np.add(img, 50, out=c, where=img < 100)
    return c


def k_add_unsafe_dtype(img):
    a = img.astype(np.float32) * 1.3
    return np.add(a, 1, dtype=np.uint8, casting="unsafe")


def k_returns_out(img):
    c = np.empty(img.shape, np.float32)
    return np.multiply(img, 0.25, out=c) + c


@pytest.mark.parametrize("op", [k_multiply_dtype, k_subtract_dtype, k_add_out,
                                k_subtract_out_view, k_add_where_out, k_add_unsafe_dtype,
                                k_returns_out], ids=lambda f: f.__name__)
def test_ufunc_keywords_lower_exactly(op):
    _check(op)


def e_same_kind_dtype(img):
    return np.add(img.astype(np.float32), 1, dtype=np.int32)


def e_out_cast(img):
    c = img.copy()
    np.multiply(img, 0.5, out=c)
    return c


def e_python_int_range(img):
    return np.add(img, 300, dtype=np.uint8)


def e_where_not_bool(img):
    c = img.copy()
    np.add(img, 1, out=c, where=img)
    return c


@pytest.mark.parametrize("op", [e_same_kind_dtype, e_out_cast, e_python_int_range,
                                e_where_not_bool],
                         ids=lambda f: f.__name__)
def test_ufunc_keywords_raise_numpy_errors(op):
    """The trace stops on numpy's own exception (so the op runs on numpy, which raises it for
    every sample), with numpy's type and words."""
    with pytest.raises(Exception) as numpy_error:
        op(np.zeros((4, 5, 3), np.uint8))
    with pytest.raises(TraceError) as traced:
        trace_function(op, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)
    cause = traced.value.__cause__
    assert type(cause) is type(numpy_error.value)
    assert str(cause) == str(numpy_error.value)


def k_where_without_out(img):
    return np.add(img, 1, where=img > 3)


def k_out_input_image(img):
    np.add(img, 1, out=img)
    return img


@pytest.mark.parametrize("op, match", [
    (k_where_without_out, r"np\.add with where= and no out="),
    (k_out_input_image, r"np\.add with out= the input image"),
], ids=["where-without-out", "out-input"])
def test_ufunc_keywords_refused(op, match):
    _refused(op, match)


def k_cv2_dst_view(img):
    import cv2

    a = img.copy()
    cv2.add(a[..., 0], a[..., 1], dst=a[..., 0])
    return a


def test_cv2_dst_view_refused():
    """OpenCV raises for a channel view as ``dst=``; the tracer refuses every view there."""
    cv2 = pytest.importorskip("cv2")
    with pytest.raises(cv2.error, match="Layout of the output array"):
        k_cv2_dst_view(np.zeros((4, 5, 3), np.uint8))
    _refused(k_cv2_dst_view, r"a cv2 dst= that is a view of an array")
