"""Held-out augmenters of imgaug 0.4.0 (aleju/imgaug, tag 0.4.0), each as its augmenter runs on
one uint8 image with its default arguments, and the imgaug helpers they call (``apply_lut`` and
``_normalize_cv2_input_arr_`` are the corpus's copies, ``realops.imgaug_ops``). Random
parameters are drawn as the augmenter's ``StochasticParameter`` draws them for one image
(``Binomial(p)`` -> ``rng.binomial(1, p)``, ``Uniform(a, b)`` -> ``rng.uniform(a, b, size)``,
``Normal(loc, scale)`` -> ``rng.normal(loc, scale, size)``)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP031, RUF005, RUF059

from __future__ import annotations

import cv2
import numpy as np
from realops import realop
from realops.imgaug_ops import _normalize_cv2_input_arr_, apply_lut

SRC = "aleju/imgaug@0.4.0"

_FLIPLR_DTYPES_CV2 = {"uint8", "uint16", "int8", "int16"}


def normalize_dtype(dtype):
    # imgaug/dtypes.py @0.4.0: normalize_dtype
    assert not isinstance(dtype, list), (
        "Expected a single dtype-like, got a list instead.")
    return (
        dtype.dtype
        if isinstance(dtype, np.ndarray) or isinstance(dtype, np.generic)
        else np.dtype(dtype)
    )


def get_value_range_of_dtype(dtype):
    # imgaug/dtypes.py @0.4.0: get_value_range_of_dtype
    dtype = normalize_dtype(dtype)
    if dtype.kind == "f":
        finfo = np.finfo(dtype)
        return finfo.min, 0.0, finfo.max
    if dtype.kind == "u":
        iinfo = np.iinfo(dtype)
        return iinfo.min, iinfo.min + 0.5 * iinfo.max, iinfo.max
    if dtype.kind == "i":
        iinfo = np.iinfo(dtype)
        return iinfo.min, -0.5, iinfo.max
    if dtype.kind == "b":
        return 0, None, 1
    raise Exception("Cannot estimate value range of dtype '%s' "
                    "(type: %s)" % (str(dtype), type(dtype)))


def _fliplr_sliced(arr):
    # imgaug/augmenters/flip.py @0.4.0: _fliplr_sliced
    return arr[:, ::-1, ...]


def _fliplr_cv2(arr):
    # imgaug/augmenters/flip.py @0.4.0: _fliplr_cv2
    # cv2.flip() returns None for arrays with zero height or width
    # and turns channels=0 to channels=512
    if arr.size == 0:
        return np.copy(arr)

    # cv2.flip() fails for more than 512 channels
    if arr.ndim == 3 and arr.shape[-1] > 512:
        # TODO this is quite inefficient right now
        channels = [
            cv2.flip(_normalize_cv2_input_arr_(arr[..., c]), 1)
            for c
            in range(arr.shape[-1])
        ]
        result = np.stack(channels, axis=-1)
    else:
        # Normalization from imgaug.imgaug._normalize_cv2_input_arr_().
        # Moved here for performance reasons. Keep this aligned.
        # TODO recalculate timings, they were computed without this.
        flags = arr.flags
        if not flags["OWNDATA"]:
            arr = np.copy(arr)
            flags = arr.flags
        if not flags["C_CONTIGUOUS"]:
            arr = np.ascontiguousarray(arr)

        result = cv2.flip(_normalize_cv2_input_arr_(arr), 1)

    if result.ndim == 2 and arr.ndim == 3:
        return result[..., np.newaxis]
    return result


def fliplr(arr):
    # imgaug/augmenters/flip.py @0.4.0: fliplr
    # we don't check here if #channels > 512, because the cv2 function also
    # kinda works with that, it is very rare to happen and would induce an
    # additional check (with significant relative impact on runtime considering
    # flipping is already ultra fast)
    if arr.dtype.name in _FLIPLR_DTYPES_CV2:
        return _fliplr_cv2(arr)
    return _fliplr_sliced(arr)


# imgaug/augmenters/flip.py @0.4.0: Fliplr(0.5)._augment_batch_'s image part, fliplr
@realop("imgaug", f"{SRC} imgaug/augmenters/flip.py: fliplr (Fliplr)")
def iaa_fliplr(image: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    sample = rng.binomial(1, p)
    if sample >= 0.5:
        return fliplr(image)
    return image


def adjust_contrast_gamma(arr, gamma):
    # imgaug/augmenters/contrast.py @0.4.0: adjust_contrast_gamma (the uint8 branch; other
    # dtypes went to scikit-image)
    if arr.size == 0:
        return np.copy(arr)

    # int8 is also possible according to docs
    # https://docs.opencv.org/3.0-beta/modules/core/doc/operations_on_arrays.html#cv2.LUT ,
    # but here it seemed like `d` was 0 for CV_8S, causing that to fail
    if arr.dtype.name == "uint8":
        min_value, _center_value, max_value = \
            get_value_range_of_dtype(arr.dtype)
        dynamic_range = max_value - min_value

        value_range = np.linspace(0, 1.0, num=dynamic_range+1,
                                  dtype=np.float32)

        # 255 * ((I_ij/255)**gamma)
        # using np.float32(.) here still works when the input is a numpy array
        # of size 1
        table = (min_value
                 + (value_range ** np.float32(gamma))
                 * dynamic_range)
        table = np.clip(table, min_value, max_value).astype(arr.dtype)
        arr_aug = apply_lut(arr, table)
        return arr_aug
    raise NotImplementedError("non-uint8 images went to skimage.exposure.adjust_gamma")


def adjust_contrast_sigmoid(arr, gain, cutoff):
    # imgaug/augmenters/contrast.py @0.4.0: adjust_contrast_sigmoid (the uint8 branch; other
    # dtypes went to scikit-image)
    if arr.size == 0:
        return np.copy(arr)

    # int8 is also possible according to docs
    # https://docs.opencv.org/3.0-beta/modules/core/doc/operations_on_arrays.html#cv2.LUT ,
    # but here it seemed like `d` was 0 for CV_8S, causing that to fail
    if arr.dtype.name == "uint8":
        min_value, _center_value, max_value = \
            get_value_range_of_dtype(arr.dtype)
        dynamic_range = max_value - min_value

        value_range = np.linspace(0, 1.0, num=dynamic_range+1,
                                  dtype=np.float32)

        # 255 * 1/(1 + exp(gain*(cutoff - I_ij/255)))
        # using np.float32(.) here still works when the input is a numpy array
        # of size 1
        gain = np.float32(gain)
        cutoff = np.float32(cutoff)
        table = (min_value
                 + dynamic_range
                 * 1/(1 + np.exp(gain * (cutoff - value_range))))
        table = np.clip(table, min_value, max_value).astype(arr.dtype)
        arr_aug = apply_lut(arr, table)
        return arr_aug
    raise NotImplementedError("non-uint8 images went to skimage.exposure.adjust_sigmoid")


# imgaug/augmenters/contrast.py @0.4.0: GammaContrast(gamma=(0.7, 1.7)) through
# _ContrastFuncWrapper._augment_batch_ (per_channel=False: one sample of shape (1,))
@realop("imgaug", f"{SRC} imgaug/augmenters/contrast.py: adjust_contrast_gamma (GammaContrast)")
def iaa_gamma_contrast(image: np.ndarray, rng: np.random.Generator,
                       gamma: tuple[float, float] = (0.7, 1.7)) -> np.ndarray:
    samples_i = [rng.uniform(*gamma, (1,))]
    args = tuple([image] + samples_i)
    return adjust_contrast_gamma(*args)


# imgaug/augmenters/contrast.py @0.4.0: SigmoidContrast(gain=(5, 6), cutoff=(0.3, 0.6)) through
# _ContrastFuncWrapper._augment_batch_ (per_channel=False: one sample of shape (1,) each)
@realop("imgaug", f"{SRC} imgaug/augmenters/contrast.py: adjust_contrast_sigmoid "
                  "(SigmoidContrast)")
def iaa_sigmoid_contrast(image: np.ndarray, rng: np.random.Generator,
                         gain: tuple[float, float] = (5, 6),
                         cutoff: tuple[float, float] = (0.3, 0.6)) -> np.ndarray:
    samples_i = [rng.uniform(*gain, (1,)), rng.uniform(*cutoff, (1,))]
    args = tuple([image] + samples_i)
    return adjust_contrast_sigmoid(*args)


def _add_elementwise_to_uint8(image, values):
    # imgaug/augmenters/arithmetic.py @0.4.0: _add_elementwise_to_uint8
    # This special uint8 block is around 60-100% faster than the
    # corresponding non-uint8 function further below (more speedup
    # for smaller images).
    #
    # Also tested to instead compute min/max of image and value
    # and then only convert image/value dtype if actually
    # necessary, but that was like 20-30% slower, even for 224x224
    # images.
    #
    if values.dtype.kind == "f":
        values = np.round(values)

    image = image.astype(np.int16)
    values = np.clip(values, -255, 255).astype(np.int16)

    image_aug = image + values
    image_aug = np.clip(image_aug, 0, 255).astype(np.uint8)

    return image_aug


# imgaug/augmenters/arithmetic.py @0.4.0: AdditiveGaussianNoise(scale=(0, 15)) through
# AddElementwise._augment_batch_ (per_channel=False) and add_elementwise's uint8 branch
@realop("imgaug", f"{SRC} imgaug/augmenters/arithmetic.py: add_elementwise "
                  "(AdditiveGaussianNoise)")
def iaa_additive_gaussian_noise(image: np.ndarray, rng: np.random.Generator, loc: float = 0,
                                scale: tuple[float, float] = (0, 15)) -> np.ndarray:
    height, width, nb_channels = image.shape
    sample_shape = (height,
                    width,
                    1)
    # iap.Normal(loc, Uniform(*scale)).draw_samples: the scale once, then the values
    scale_sample = rng.uniform(*scale)
    values = rng.normal(loc, scale_sample, sample_shape)
    return _add_elementwise_to_uint8(image, values)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "iaa_fliplr": "lowers",
    "iaa_gamma_contrast": "lowers",
    "iaa_sigmoid_contrast": "lowers",
    "iaa_additive_gaussian_noise": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
