"""OpenCV's saturating arithmetic lowered by the tracer (``cv2.add``, ``subtract``, ``multiply``,
``divide``, ``absdiff``, ``convertScaleAbs``): each traced op is run by a real CPU DALI pipeline
and compared with OpenCV bit for bit, on images holding every uint8 value (every pair of them
for two arrays) and widths on both sides of OpenCV's vector blocks; the expressions lowered for
per-sample scalars are compared with OpenCV over thousands of scalars; what cannot be exact is
refused naming the call and why."""

from __future__ import annotations

import numpy as np
import pytest
from test_trace_cv2 import _check, _edge_images, _refusal

from augment_ops.trace.cv2_arith import _float_probe, _model

cv2 = pytest.importorskip("cv2")


def _pairs() -> np.ndarray:
    """Every pair of uint8 values: channel 0 the row, channel 1 the column, channel 2 their sum
    (256x256x3)."""
    v = np.arange(256, dtype=np.uint8)
    a, b = np.meshgrid(v, v, indexing="ij")
    return np.stack([a, b, a + b], axis=-1)


def _floats(img: np.ndarray) -> np.ndarray:
    """float32 values of every sign and magnitude, zeros included, from a uint8 image."""
    return (img.astype(np.float32) - 128) * np.float32(1 / 7)


# -- two arrays ------------------------------------------------------------------------------
def _ab(img):
    return np.ascontiguousarray(img[..., 0]), np.ascontiguousarray(img[..., 1])


def u_add(img):
    return cv2.add(*_ab(img))


def u_subtract(img):
    return cv2.subtract(*_ab(img))


def u_absdiff(img):
    return cv2.absdiff(*_ab(img))


def u_multiply(img):
    return cv2.multiply(*_ab(img))


def u_multiply_scaled(img):
    return cv2.multiply(*_ab(img), scale=1 / 255)


def u_divide(img):
    return cv2.divide(*_ab(img))


def u_divide_scaled(img):
    return cv2.divide(*_ab(img), scale=37.5)


def u_add_into(img):
    a, b = img[..., 0].copy(), img[..., 1].copy()
    cv2.add(a, b, a)  # in place, as OpenCV writes dst
    return a


def u_float_arrays(img):
    a, b = _ab(img)
    x, y = _floats(a), _floats(b)
    return np.stack([cv2.add(x, y), cv2.subtract(x, y), cv2.absdiff(x, y),
                     cv2.multiply(x, y, scale=0.5), cv2.divide(x, y), cv2.divide(x, y, scale=3.1)],
                    axis=-1)


@pytest.mark.parametrize("func", [u_add, u_subtract, u_absdiff, u_multiply, u_multiply_scaled,
                                  u_divide, u_divide_scaled, u_add_into])
def test_two_uint8_arrays_equal_opencv_on_every_pair(func):
    _check(func, [_pairs(), *_edge_images()[2:]], ndim=2)


def test_two_float32_arrays_equal_opencv_with_zeros_and_infinities():
    _check(u_float_arrays, [_pairs(), *_edge_images()[2:]], dtype=np.float32)


def test_a_scale_opencv_rounds_differently_by_layout_is_refused():
    # Found, not assumed: with this scale OpenCV's vector code (fused multiply-adds) and its
    # scalar code give different float32 products, so no lowering can match both.
    def u_scaled(img):
        x = _floats(img)
        return cv2.multiply(x, x[::-1].copy(), scale=2.7)
    assert "vector and scalar code give different results" in _refusal(u_scaled,
                                                                       dtype=np.float32)


# -- constant scalars ------------------------------------------------------------------------
def u_add_half(img):
    return cv2.add(img, 2.5)  # OpenCV rounds the scalar to 2 first (half to even)


def u_subtract_tuple(img):
    return cv2.subtract(img, (10, 20.5, -3.5))


def u_subtract_from(img):
    return cv2.subtract(255, img)


def u_absdiff_scalar(img):
    return cv2.absdiff(img, 100.5)


def u_multiply_scalar(img):
    return cv2.multiply(img, 1.37)


def u_divide_scalar(img):
    return cv2.divide(img, (3, 0, 0.7))  # by 0 gives 0


def u_reciprocal(img):
    return cv2.divide(255.0, img)


def u_float_out(img):
    return np.concatenate([cv2.add(img, 3.5, dtype=cv2.CV_32F),
                           cv2.multiply(img, 0.1, dtype=cv2.CV_32F),
                           cv2.subtract(img, img[::-1].copy(), dtype=cv2.CV_32F)], axis=-1)


def u_double_out(img):
    return np.concatenate([cv2.add(img, 0.1, dtype=cv2.CV_64F),
                           cv2.divide(img.astype(np.float32), 7.3, dtype=cv2.CV_64F)], axis=-1)


def u_float_scalars(img):
    x = _floats(img)
    return np.concatenate([cv2.add(x, 0.1), cv2.subtract(x, (1 / 3, -2.5, 7)),
                           cv2.subtract(0.3, x), cv2.absdiff(x, 1.1), cv2.multiply(x, 1 / 58.3),
                           cv2.divide(x, 0.3), cv2.divide(2.0, x)], axis=-1)


def u_mmcv_normalize(img):
    """mmcv's imnormalize_: in-place subtract and multiply by float64 (1, 3) arrays."""
    x = img.astype(np.float32)
    mean = np.float64(np.array([123.675, 116.28, 103.53]).reshape(1, -1))
    stdinv = 1 / np.float64(np.array([58.395, 57.12, 57.375]).reshape(1, -1))
    cv2.subtract(x, mean, x)
    cv2.multiply(x, stdinv, x)
    return x


def u_gray(img):
    return cv2.add(np.ascontiguousarray(img[..., 1]), 7.5)


def u_convert_scale_abs(img):
    return cv2.convertScaleAbs(img, alpha=-1.3, beta=7)


@pytest.mark.parametrize("func", [u_add_half, u_subtract_tuple, u_subtract_from,
                                  u_absdiff_scalar, u_multiply_scalar, u_divide_scalar,
                                  u_reciprocal, u_convert_scale_abs])
def test_uint8_by_a_constant_equals_opencv(func):
    _check(func)


@pytest.mark.parametrize("func, dtype", [(u_float_out, np.float32), (u_double_out, np.float64),
                                         (u_float_scalars, np.float32),
                                         (u_mmcv_normalize, np.float32)])
def test_float_results_equal_opencv(func, dtype):
    _check(func, dtype=dtype)


def test_a_gray_image_equals_opencv():
    _check(u_gray, ndim=2)


# -- per-sample scalars ------------------------------------------------------------------------
def u_drawn_shift(img, rng):
    """albumentations' add_constant of a drawn shift (HueSaturationValue)."""
    return cv2.add(img, float(rng.uniform(-40, 40)))


def u_drawn_ops(img, rng):
    s = float(rng.uniform(-3, 3))
    d = float(rng.uniform(0.25, 3))  # a divisor the tracer keeps away from 0
    return np.concatenate([cv2.subtract(img, s * 20), cv2.absdiff(img, s * 50),
                           cv2.multiply(img, s), cv2.divide(img, d), cv2.divide(img, d - 4),
                           cv2.divide(s * 90, img), cv2.subtract(s * 90, img),
                           ], axis=-1)


def u_drawn_floats(img, rng):
    s = float(rng.uniform(-3, 3))
    x = _floats(img)
    return np.concatenate([cv2.add(x, s), cv2.subtract(s, x), cv2.absdiff(x, s),
                           cv2.multiply(x, s), cv2.divide(x, s), cv2.divide(s, x)], axis=-1)


def test_per_sample_scalars_equal_opencv():
    _check(u_drawn_shift, random=True)
    _check(u_drawn_ops, random=True)
    _check(u_drawn_floats, random=True, dtype=np.float32)


@pytest.mark.parametrize("op", ["add", "subtract", "absdiff", "multiply", "divide"])
@pytest.mark.parametrize("swap", [False, True])
def test_the_per_sample_expressions_are_opencvs_on_many_scalars(op, swap):
    # What a drawn scalar lowers to, in numpy, against OpenCV on every uint8 value and a sample
    # of float32 values, for scalars of every magnitude the bounds admit, halves included.
    rng = np.random.default_rng(5)
    scalars = np.concatenate([rng.uniform(-300, 300, 400), rng.uniform(-3, 3, 400),
                              np.arange(-20, 20) + 0.5, [0.0, 1.0, -1.0]])
    images = [np.arange(256, dtype=np.uint8).reshape(1, -1), _float_probe().reshape(1, -1)]
    fn = getattr(cv2, op)
    for s in scalars:
        for img in images:
            with np.errstate(all="ignore"):
                want = fn(float(s), img) if swap else fn(img, float(s))
                got = _model(op, img, np.float64(s), True, swap, 1.0, img.dtype)
            assert np.asarray(got).tobytes() == want.tobytes(), (op, swap, float(s), img.dtype)


# -- refusals ----------------------------------------------------------------------------------
def test_what_cannot_be_exact_is_refused_saying_why():
    def u_mask(img):
        return cv2.add(img, img, mask=np.ones(img.shape[:2], np.uint8))

    def u_drawn_scale(img, rng):
        return cv2.multiply(img, img, scale=rng.uniform(0, 1))

    def u_unbounded(img, rng):
        return cv2.add(img, float(1 / rng.uniform(0, 1)))

    def u_float32_scalar(img):
        return cv2.add(img, np.float32(2))

    def u_drawn_channels(img, rng):
        return cv2.add(img, (float(rng.uniform(0, 9)), 0.0, 0.0))

    def u_float_abs(img):
        return cv2.convertScaleAbs(img.astype(np.float32), alpha=2)

    def u_short(img):
        return cv2.add(img, img, dtype=cv2.CV_16S)

    def u_mixed(img):
        return cv2.add(img, img.astype(np.float32))

    def u_numbers_only(img, rng):
        return cv2.add(np.zeros((2, 2), np.float32), float(rng.uniform(0, 1)))

    assert "cv2.add with no traced image operand" in _refusal(u_numbers_only, random=True)
    assert "cv2.add with mask=" in _refusal(u_mask)
    assert "cv2.multiply with a per-sample scale" in _refusal(u_drawn_scale, random=True)
    def u_near_zero(img, rng):
        return cv2.divide(img, float(rng.uniform(0, 2)))  # 255 / 1e-9 overflows OpenCV's int

    assert "cannot bound within" in _refusal(u_unbounded, random=True)
    assert "cannot keep away from 0" in _refusal(u_near_zero, random=True)
    assert "OpenCV refuses" in _refusal(u_float32_scalar)
    assert "per-sample values per channel" in _refusal(u_drawn_channels, random=True)
    assert "cv2.convertScaleAbs of a float32 image" in _refusal(u_float_abs)
    assert "cv2.add with dtype=3" in _refusal(u_short)
    assert "cv2.add of arrays of different dtypes" in _refusal(u_mixed)


# -- albucore's OpenCV helpers -------------------------------------------------------------------
def test_albucores_opencv_helpers_equal_albucore():
    fn = pytest.importorskip("albucore.functions")

    def u_add(img):
        return fn.add_opencv(img, 17)

    def u_add_negative(img):  # a float32 image and back, as albucore does for a negative value
        return np.clip(fn.add_opencv(img, -17.0), 0, 255).astype(np.uint8)

    def u_add_drawn(img, rng):
        return fn.add_constant(img, int(rng.integers(-20, 20)))

    def u_multiply(img):
        return fn.multiply_opencv(img, 1.3)

    def u_normalize(img):
        return fn.normalize_opencv(img, np.array([123.675, 116.28, 103.53], np.float32),
                                   np.array([1 / 58.395, 1 / 57.12, 1 / 57.375], np.float32))
    _check(u_add)
    _check(u_add_negative)
    _check(u_add_drawn, random=True)
    _check(u_multiply, dtype=np.float32)
    _check(u_normalize, dtype=np.float32)
