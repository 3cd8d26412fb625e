"""Float math numpy and DALI compute differently (``**`` by a non-integer constant, ``np.exp``,
``np.log``, ``np.tanh``, sigmoids) of one uint8 array and constants lowers as a lookup table
computed by numpy at trace time: each op's pixels from a CPU DALI pipeline equal numpy's bit
for bit on all 256 values; chains with a second array are refused (with a drawn operand: per-sample
tables, tests/test_trace_gather.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_trace import _emit_on

from augment_ops.trace import TraceError, trace_function


def _images() -> list[np.ndarray]:
    """An image holding every uint8 value in each channel, and random ones of odd sizes."""
    rng = np.random.default_rng(5)
    every = np.stack([np.arange(256, dtype=np.uint8).reshape(16, 16),
                      np.arange(255, -1, -1, dtype=np.uint8).reshape(16, 16),
                      (np.arange(256) * 7 % 256).astype(np.uint8).reshape(16, 16)], axis=2)
    return [every, rng.integers(0, 256, (13, 11, 3), dtype=np.uint8),
            rng.integers(0, 256, (1, 7, 3), dtype=np.uint8)]


def _trace(func, random: bool = False):
    with np.errstate(all="ignore"):
        ref = func(_images()[0])
    return trace_function(func, params={}, random=random, num_outputs=1, dtype=ref.dtype,
                          ndim=ref.ndim)


def _check(func) -> set[str]:
    """``func`` traced and run by DALI equals numpy bit for bit; the traced graph's node kinds."""
    traced = _trace(func)
    imgs = _images()
    outs = _emit_on(traced, imgs, ())
    for k, im in enumerate(imgs):
        with np.errstate(all="ignore"):
            ref = func(im)
        assert outs[k].dtype == ref.dtype and outs[k].shape == ref.shape
        np.testing.assert_array_equal(outs[k].view(np.uint8), ref.view(np.uint8),
                                      err_msg=f"{func.__name__} on image {k}")
    return {n.op for n in traced.nodes()}


def gamma_skimage(img):  # skimage.exposure.adjust_gamma
    return (((img / 255) ** 0.7) * 255).astype(np.uint8)


def gamma_float32(img):
    return np.power(img.astype(np.float32) / 255, np.float32(1.8))


def gamma_channel(img):
    return np.power(img[..., 1] / 255.0, 0.8)


def log_skimage(img):  # skimage.exposure.adjust_log
    return (np.log2(1 + img / 255) * 255).astype(np.uint8)


def log_with_infinity(img):
    return np.log(img / 255.0)


def sigmoid_skimage(img):  # skimage.exposure.adjust_sigmoid
    return ((1 / (1 + np.exp(10 * (0.5 - img / 255)))) * 255).astype(np.uint8)


def sigmoid_float64(img):
    return 1 / (1 + np.exp(-img / 32.0))


def exp_float32(img):
    return np.exp(img.astype(np.float32) / 40)


def tanh_float32(img):
    return np.tanh(img.astype(np.float32) / 60 - 2)


def cast_in_the_middle(img):
    return (np.exp(img / 255.0) * 90).astype(np.uint8).astype(np.float32) ** 1.3


def power_of_a_constant(img):
    return 2.0 ** (img / 64)


@pytest.mark.parametrize("func", [gamma_skimage, gamma_float32, gamma_channel, log_skimage,
                                  log_with_infinity, sigmoid_skimage, sigmoid_float64,
                                  exp_float32, tanh_float32, cast_in_the_middle,
                                  power_of_a_constant], ids=lambda f: f.__name__)
def test_float_math_of_uint8_lowers_as_a_table(func):
    ops = _check(func)
    assert "lut" in ops and "un" not in ops, ops


def test_uint8_result_is_one_table():
    assert _check(gamma_skimage) == {"input", "lut"}
    assert _check(sigmoid_skimage) == {"input", "lut"}


def test_a_second_array_operand_is_refused():
    def pow_flipped(img):
        return (img / 255.0) ** (img[::-1] / 255.0)

    with pytest.raises(TraceError, match=r"\*\* of pixel values by pixel values"):
        _trace(pow_flipped)


def test_two_channels_are_two_sources():
    def mixed(img):
        return np.exp(img[..., 0] / 255.0 + img[..., 1] / 255.0).astype(np.float32)

    with pytest.raises(TraceError, match=r"np\.exp of pixel values"):
        _trace(mixed)


def test_the_same_array_twice_is_one_table():
    def self_power(img):
        x = img / 255.0
        return np.tanh(x ** x)

    assert "lut" in _check(self_power)


def test_an_identity_test_of_the_dtype_takes_numpys_branch():
    """skimage's ``adjust_gamma`` tests ``image.dtype.type is np.uint8``: the traced ``np``'s
    scalar types (which convert traced values) compare as the real types there."""
    def by_identity(img):
        dtype = img.dtype.type
        if dtype is np.uint8:
            return np.minimum(np.rint(255 * np.linspace(0, 1, 256) ** 0.8), 255).astype(
                np.uint8)[img]
        return (((img / 255) ** 0.8) * 255).astype(dtype)

    def reversed_identity(img):
        dtype = img.dtype.type
        return img + np.uint8(1) if np.uint8 is not dtype else img - np.uint8(1)

    _check(by_identity)
    _check(reversed_identity)
    assert "lut" in _check(by_identity)


def test_the_dtypes_type_is_found_among_numpys_scalar_types():
    """``image.dtype.type in (np.uint8, ...)`` and ``{np.uint8: ...}[image.dtype.type]``, as
    scikit-image and albumentations pick a dtype's range, find the real type."""
    def by_membership(img):
        t = img.dtype.type
        top = {np.uint8: 255.0, np.uint16: 65535.0}[t]
        if t in (np.uint8, np.uint16) and t == np.uint8 and not t != np.uint8:
            return ((img / top) ** 1.4 * top).astype(np.uint8)
        return img

    assert "lut" in _check(by_membership)


def float_power_square(img):
    """np.float_power is its own routine: even its square differs from ``x * x`` in the last
    bit for some values, so it lowers only as a table."""
    return np.float_power(img / 41.0, 2)  # 3 of the 256 values differ from x * x


def float_power_gamma(img):
    return np.float_power(img[..., 2], 0.45)


@pytest.mark.parametrize("func", [float_power_square, float_power_gamma],
                         ids=lambda f: f.__name__)
def test_float_power_lowers_as_its_own_table(func):
    assert "lut" in _check(func)
