"""numpy's types where a traced op mixes numpy with Python numbers: a numpy function of a Python
number (a draw, a size) gives a numpy scalar, which promotes as numpy 2 promotes it; numpy's
scalar types raise where numpy raises on an out-of-range Python number; ``astype(copy=False)``
and ``np.uint8(img)`` give the input itself back, read-only. Each lowered op
is run by a real CPU DALI pipeline and compared with numpy exactly (draws replayed through the
counter generator)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import unregistered
from test_trace_arrays import _check, _refused
from test_trace_parity import _check_same_error

from extsrc.errors import OpError


# -- a numpy function of a Python number is a numpy scalar (NEP 50) ----------------------------
def t_clipped_gain(img, rng):
    f = np.clip(rng.uniform(0.5, 1.5), 0.6, 1.4)  # float64: the product is float64
    return (img.astype(np.float32) * f).astype(np.uint8)


def t_maximum_bins(img, rng):
    n = np.maximum(int(rng.integers(2, 17)), 2)  # int64: 256 / n is float64
    return (np.floor(img.astype(np.float32) / (256 / n)) * 16).astype(np.uint8)


def t_zero_d_array(img, rng):
    s = np.array(256 / int(rng.integers(2, 17)))  # a float64 array of one value
    return (np.floor(img.astype(np.float32) / s) * 16).astype(np.uint8)


def t_ufunc_of_a_draw(img, rng):
    return (img.astype(np.float32) * np.sqrt(rng.uniform(0.25, 2.0))).astype(np.uint8)


def t_clip_beside_a_numpy_bound(img, rng):
    # np.clip makes its first argument an array: float64, whatever its bounds' types
    f = np.clip(rng.uniform(0.5, 1.5), np.float32(0.6), 1.4)
    return (img.astype(np.float32) * f * 100).astype(np.uint16)


def t_python_gain(img, rng):
    return (img.astype(np.float32) * rng.uniform(0.5, 1.5)).astype(np.uint8)  # stays float32


@pytest.mark.parametrize("func", [t_clipped_gain, t_maximum_bins, t_zero_d_array,
                                  t_ufunc_of_a_draw, t_clip_beside_a_numpy_bound,
                                  t_python_gain])
def test_a_numpy_function_of_a_python_number_promotes_as_numpy(func):
    imgs = [np.full((5, 7, 3), v, np.uint8) for v in (45, 128, 200, 255)]
    for _ in range(3):  # several samples: several draws, among them the clip's bounds
        _check(func, random=True, imgs=imgs * 4)


# -- numpy's scalar types on Python numbers ------------------------------------------------------
@unregistered()
def t_shift_of_the_height(img):
    out = img.copy()
    out += np.uint8(img.shape[0] * 2.5 - 100)  # np.uint8(-50.0): OverflowError in numpy 2
    return out


def test_a_scalar_type_of_an_out_of_range_python_float_raises_on_both_paths(tmp_path):
    _check_same_error(tmp_path, t_shift_of_the_height, [(80, 80), (60, 50), (20, 30)], 2,
                      OpError, r"OverflowError: Python integer .*out of bounds for uint8")


def t_in_range_shift(img):
    return img + np.uint8(img.shape[0] * 2.5 + 0.7)


def test_a_scalar_type_of_an_in_range_python_float_truncates():
    _check(t_in_range_shift, imgs=[np.full((h, 3, 3), 7, np.uint8) for h in (1, 4, 9)])


# -- the input itself, read-only ------------------------------------------------------------------
def t_astype_no_copy(img):
    out = img.astype(np.uint8, copy=False)  # img itself
    out[:2, :2] = 0
    return out


def t_scalar_type_of_the_image(img):
    out = np.uint8(img)  # img itself
    out[:2, :2] = 0
    return out


@pytest.mark.parametrize("func", [t_astype_no_copy, t_scalar_type_of_the_image])
def test_the_input_given_back_by_numpy_stays_read_only(func):
    img = np.zeros((4, 4, 3), np.uint8)
    img.setflags(write=False)  # as the op's input is
    with pytest.raises(ValueError, match="read-only"):
        func(img)
    _refused(func, match="read-only")


def t_astype_no_copy_converting(img):
    out = img.astype(np.int16, copy=False)  # a new array: another dtype
    out[:2, :2] = -1
    return out


def test_astype_without_copy_to_another_dtype_is_a_new_array():
    _check(t_astype_no_copy_converting)


# -- matrix products of integers -------------------------------------------------------------
def t_matmul_integers(img):
    return (img.astype(np.int32) @ np.array([3, -2, 1], np.int32))[..., None]


def test_a_matmul_of_integers_traces():
    """Integer products wrap around alike in any order (floats: test_trace.py, products)."""
    _check(t_matmul_integers)


# -- a float array and an integer draw ------------------------------------------------------------
def t_float_times_integer_draw(img, rng):
    return img.astype(np.float32) * rng.integers(1, 4)  # float64, the draw converted exactly


def t_scaled_plus_integer_draw(img, rng):
    return img / 255.0 + rng.integers(-3, 4)


@pytest.mark.parametrize("func", [t_float_times_integer_draw, t_scaled_plus_integer_draw])
def test_a_float_array_with_an_integer_draw_lowers_and_equals_numpy(func):
    _check(func, random=True)


# -- comparisons with Python ints out of the array's range -----------------------------------
def t_compared_out_of_range(img):
    return ((img > -1) & (img < 256) & ~(img == -1)).astype(np.uint8) * img


def test_a_comparison_with_an_int_out_of_range_compares_the_values():
    _check(t_compared_out_of_range)  # numpy 2 compares them; no OverflowError


# -- np.std over some axes: the rewrite its refusal gives ----------------------------------------
def t_std_over_axes(img):
    x = img.astype(np.float32).copy()
    return (x - x.mean(axis=(0, 1))) / (x.std(axis=(0, 1)) + np.float32(1e-6))


def t_std_written_out(img):
    x = img.astype(np.float32)
    d = x - x.mean(axis=(0, 1))
    return d / (np.sqrt((d * d).copy().mean(axis=(0, 1))) + np.float32(1e-6))


def test_std_over_axes_is_refused_with_a_rewrite_that_lowers_to_numpys_values():
    from augment_ops.trace import TraceError, trace_function

    with pytest.raises(TraceError, match=r"\(d \* d\)\.copy\(\)\.mean\(axis=a\)"):
        trace_function(t_std_over_axes, params={}, random=False, num_outputs=1,
                       dtype=np.float32, ndim=3)
    img = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3) * 3
    np.testing.assert_array_equal(t_std_written_out(img), t_std_over_axes(img))  # the same sums
    _check(t_std_written_out)
