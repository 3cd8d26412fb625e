"""Augmentations of imgaug 0.4.0 (aleju/imgaug, tag 0.4.0), with the helpers of
imgaug/imgaug.py they call. Random parameters are drawn as the augmenter's
``StochasticParameter`` draws them for one image (``DiscreteUniform(a, b)`` ->
``rng.integers(a, b, endpoint=True)``, ``Uniform(a, b)`` -> ``rng.uniform(a, b)``)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP031

from __future__ import annotations

import numbers
from collections.abc import Iterable

import cv2
import numpy as np

from realops import realop

SRC = "aleju/imgaug@0.4.0"


def is_single_integer(val):
    # imgaug/imgaug.py @0.4.0: is_single_integer
    return isinstance(val, numbers.Integral) and not isinstance(val, bool)


def is_single_float(val):
    # imgaug/imgaug.py @0.4.0: is_single_float
    return (
        isinstance(val, numbers.Real)
        and not is_single_integer(val)
        and not isinstance(val, bool)
    )


def is_single_number(val):
    # imgaug/imgaug.py @0.4.0: is_single_number
    return is_single_integer(val) or is_single_float(val)


def is_np_array(val):
    # imgaug/imgaug.py @0.4.0: is_np_array
    return isinstance(val, np.ndarray)


def is_np_scalar(val):
    # imgaug/imgaug.py @0.4.0: is_np_scalar
    return isinstance(val, np.generic)


def _normalize_cv2_input_arr_(arr):
    # imgaug/imgaug.py @0.4.0: _normalize_cv2_input_arr_
    flags = arr.flags
    if not flags["OWNDATA"]:
        arr = np.copy(arr)
        flags = arr.flags
    if not flags["C_CONTIGUOUS"]:
        arr = np.ascontiguousarray(arr)
    return arr


def apply_lut_(image, table):
    # imgaug/imgaug.py @0.4.0: apply_lut_ (its branch for images of at most 512 channels)
    image_shape_orig = image.shape
    nb_channels = 1 if len(image_shape_orig) == 2 else image_shape_orig[-1]

    if 0 in image_shape_orig:
        return image

    image = _normalize_cv2_input_arr_(image)

    # [(256,), (256,), ...] => (256, C)
    if isinstance(table, list):
        assert len(table) == nb_channels, (
            "Expected to get %d tables (one per channel), got %d instead." % (
                nb_channels, len(table)))
        table = np.stack(table, axis=-1)

    # (256, C) => (1, 256, C)
    if table.shape == (256, nb_channels):
        table = table[np.newaxis, :, :]

    assert table.shape == (256,) or table.shape == (1, 256, nb_channels), (
        "Expected 'table' to be any of the following: "
        "A list of C (256,) arrays, an array of shape (256,), an array of "
        "shape (256, C), an array of shape (1, 256, C). Transformed 'table' "
        "up to shape %s for image with shape %s (C=%d)." % (
            table.shape, image_shape_orig, nb_channels))

    assert image.dtype.name == "uint8", (
        "Expected uint8 image, got dtype %s." % (image.dtype.name,))
    assert table.dtype.name == "uint8", (
        "Expected uint8 table, got dtype %s." % (table.dtype.name,))

    image = cv2.LUT(image, table, dst=image)
    return image


def apply_lut(image, table):
    # imgaug/imgaug.py @0.4.0: apply_lut
    return apply_lut_(np.copy(image), table)


# imgaug/augmenters/arithmetic.py @0.4.0: _add_scalar_to_uint8 (Add(value=(-20, 20)))
@realop("imgaug", f"{SRC} imgaug/augmenters/arithmetic.py: _add_scalar_to_uint8 (Add)")
def iaa_add(image: np.ndarray, rng: np.random.Generator, low: int = -20,
            high: int = 20) -> np.ndarray:
    value = rng.integers(low, high, endpoint=True)
    is_single_value = (
        is_single_number(value)
        or is_np_scalar(value)
        or (is_np_array(value) and value.size == 1))
    is_channelwise = not is_single_value
    nb_channels = 1 if image.ndim == 2 else image.shape[-1]

    value = np.clip(np.round(value), -255, 255).astype(np.int16)
    value_range = np.arange(0, 256, dtype=np.int16)

    if is_channelwise:
        assert value.ndim == 1, (
            "Expected `value` to be 1-dimensional, got %d-dimensional "
            "data with shape %s." % (value.ndim, value.shape))
        assert image.ndim == 3, (
            "Expected `image` to be 3-dimensional when adding one value per "
            "channel, got %d-dimensional data with shape %s." % (
                image.ndim, image.shape))
        assert image.shape[-1] == value.size, (
            "Expected number of channels in `image` and number of components "
            "in `value` to be identical. Got %d vs. %d." % (
                image.shape[-1], value.size))

        tables = np.tile(
            value_range[:, np.newaxis],
            (1, nb_channels)
        ) + value[np.newaxis, :]
    else:
        tables = value_range + value
    tables = np.clip(tables, 0, 255).astype(image.dtype)
    return apply_lut(image, tables)


# imgaug/augmenters/arithmetic.py @0.4.0: _multiply_scalar_to_uint8 (Multiply((0.8, 1.2)))
@realop("imgaug", f"{SRC} imgaug/augmenters/arithmetic.py: _multiply_scalar_to_uint8 "
                  "(Multiply)")
def iaa_multiply(image: np.ndarray, rng: np.random.Generator, low: float = 0.8,
                 high: float = 1.2) -> np.ndarray:
    multiplier = rng.uniform(low, high)
    is_single_value = (
        is_single_number(multiplier)
        or is_np_scalar(multiplier)
        or (is_np_array(multiplier) and multiplier.size == 1))
    is_channelwise = not is_single_value
    nb_channels = 1 if image.ndim == 2 else image.shape[-1]

    multiplier = np.float32(multiplier)
    value_range = np.arange(0, 256, dtype=np.float32)

    if is_channelwise:
        tables = np.tile(
            value_range[:, np.newaxis],
            (1, nb_channels)
        ) * multiplier[np.newaxis, :]
    else:
        tables = value_range * multiplier
    tables = np.clip(tables, 0, 255).astype(image.dtype)
    return apply_lut(image, tables)


# imgaug/augmenters/contrast.py @0.4.0: adjust_contrast_linear (its uint8 branch)
@realop("imgaug", f"{SRC} imgaug/augmenters/contrast.py: adjust_contrast_linear")
def iaa_adjust_contrast_linear(arr: np.ndarray, alpha: float = 1.3) -> np.ndarray:
    # pylint: disable=no-else-return
    if arr.size == 0:
        return np.copy(arr)

    # iadt.get_value_range_of_dtype(uint8)
    min_value, center_value, max_value = 0, 127.5, 255
    # TODO get rid of this int(...)
    center_value = int(center_value)

    value_range = np.arange(0, 256, dtype=np.float32)

    # 127 + alpha*(I_ij-127)
    # using np.float32(.) here still works when the input is a numpy array
    # of size 1
    alpha = np.float32(alpha)
    table = center_value + alpha * (value_range - center_value)
    table = np.clip(table, min_value, max_value).astype(arr.dtype)
    arr_aug = apply_lut(arr, table)
    return arr_aug


# imgaug/augmenters/arithmetic.py @0.4.0: cutout_ with fill_mode="constant", which calls
# _fill_rectangle_constant_ (the original looks it up through importlib; it wrote into the
# image: here a copy)
@realop("imgaug", f"{SRC} imgaug/augmenters/arithmetic.py: cutout_, _fill_rectangle_constant_")
def iaa_cutout(image: np.ndarray, x1: float = 2, y1: float = 1, x2: float = 6, y2: float = 4,
               cval: int | tuple[int, ...] = (10, 128, 250),
               per_channel: bool = True) -> np.ndarray:
    image = image.copy()
    height, width = image.shape[0:2]
    x1 = min(max(int(x1), 0), width)
    y1 = min(max(int(y1), 0), height)
    x2 = min(max(int(x2), 0), width)
    y2 = min(max(int(y2), 0), height)

    if x2 > x1 and y2 > y1:
        if isinstance(cval, Iterable):  # ia.is_iterable
            if per_channel:
                nb_channels = None if image.ndim == 2 else image.shape[-1]
                if nb_channels is None:
                    cval = cval[0]
                elif len(cval) < nb_channels:
                    mul = int(np.ceil(nb_channels / len(cval)))
                    cval = np.tile(cval, (mul,))[0:nb_channels]
                elif len(cval) > nb_channels:
                    cval = cval[0:nb_channels]
            else:
                cval = cval[0]

        # without the array(), uint64 max value is assigned as 0
        image[y1:y2, x1:x2, ...] = np.array(cval, dtype=image.dtype)
    return image


# imgaug/augmenters/pillike.py @0.4.0: _equalize_no_pil_ (mask=None; in place: here a copy)
@realop("imgaug", f"{SRC} imgaug/augmenters/pillike.py: _equalize_no_pil_")
def iaa_equalize(image: np.ndarray) -> np.ndarray:
    image = image.copy()
    mask = None
    nb_channels = 1 if image.ndim == 2 else image.shape[-1]
    # TODO remove the first axis, no longer needed
    lut = np.empty((1, 256, nb_channels), dtype=np.int32)

    for c_idx in range(nb_channels):
        if image.ndim == 2:
            image_c = image[:, :, np.newaxis]
        else:
            image_c = image[:, :, c_idx:c_idx+1]
        histo = cv2.calcHist(
            [_normalize_cv2_input_arr_(image_c)], [0], mask, [256], [0, 256])
        if len(histo.nonzero()[0]) <= 1:
            lut[0, :, c_idx] = np.arange(256).astype(np.int32)
            continue

        step = np.sum(histo[:-1]) // 255
        if not step:
            lut[0, :, c_idx] = np.arange(256).astype(np.int32)
            continue

        n = step // 2
        cumsum = np.cumsum(histo)
        lut[0, 0, c_idx] = n
        lut[0, 1:, c_idx] = n + cumsum[0:-1]
        lut[0, :, c_idx] //= int(step)
    lut = np.clip(lut, None, 255, out=lut).astype(np.uint8)
    image = apply_lut_(image, lut)
    return image


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "iaa_add": "lowers",
    "iaa_multiply": "lowers",
    "iaa_adjust_contrast_linear": "lowers",
    "iaa_cutout": "lowers",
    "iaa_equalize": r"refuses: cv2\.calcHist \(a histogram of the image's pixels, which",
}
