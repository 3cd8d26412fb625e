"""Augmentations of tensorpack's ``dataflow.imgaug`` (tensorpack/tensorpack at commit
1547a54e8546494614ca31c984a1bfd1d0e24b77, v0.11 and later): imgproc.py, noise.py, convert.py,
misc.py and crop.py with the transforms of transform.py they return. tensorpack is not installed
here: each augmentor's ``_get_augment_params`` / ``get_transform`` (its draws) and ``_augment`` /
``apply_image`` (the pixels) are copied below as written, one after the other, as
``ImageAugmentor.augment`` runs them; the augmentor's ``self.rng`` (a ``np.random.RandomState``)
is the op's generator (``self.rng.randn(*shape)`` -> ``rng.standard_normal(shape)``), and
``ImageAugmentor._rand_range`` (base.py) is copied as ``_rand_range(rng, ...)``. The arguments
of ``__init__`` are keyword defaults."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: RUF059

from __future__ import annotations

import cv2
import numpy as np
from realops import realop

LIB = "tensorpack"
SRC = "tensorpack/tensorpack@1547a54e8546494614ca31c984a1bfd1d0e24b77 tensorpack/dataflow/imgaug"


def _rand_range(rng, low=1.0, high=None, size=None):
    # tensorpack/dataflow/imgaug/base.py @1547a54: ImageAugmentor._rand_range
    if high is None:
        low, high = 0, low
    if size is None:
        size = []
    return rng.uniform(low, high, size).astype("float32")


# imgaug/misc.py @1547a54: Flip.get_transform (horiz=True, prob=0.5), transform.py:
# FlipTransform.apply_image
@realop(LIB, f"{SRC}/misc.py: Flip.get_transform; transform.py: FlipTransform.apply_image")
def tp_flip(img: np.ndarray, rng: np.random.Generator, horiz: bool = True,
            prob: float = 0.5) -> np.ndarray:
    h, w = img.shape[:2]
    do = _rand_range(rng) < prob
    if not do:
        return img
    if horiz:
        return img[:, ::-1]
    else:
        return img[::-1]


# imgaug/crop.py @1547a54: CenterCrop.get_transform (crop_shape=4), transform.py:
# CropTransform.apply_image
@realop(LIB, f"{SRC}/crop.py: CenterCrop.get_transform; transform.py: CropTransform.apply_image",
        min_size=4)
def tp_center_crop(img: np.ndarray, crop_shape: tuple[int, int] = (4, 4)) -> np.ndarray:
    orig_shape = img.shape
    assert orig_shape[0] >= crop_shape[0] \
        and orig_shape[1] >= crop_shape[1], orig_shape
    h0 = int((orig_shape[0] - crop_shape[0]) * 0.5)
    w0 = int((orig_shape[1] - crop_shape[1]) * 0.5)
    y0, x0, h, w = h0, w0, crop_shape[0], crop_shape[1]
    return img[y0:y0 + h, x0:x0 + w]


# imgaug/imgproc.py @1547a54: Brightness (delta=30, clip=True)
@realop(LIB, f"{SRC}/imgproc.py: Brightness")
def tp_brightness(img: np.ndarray, rng: np.random.Generator, delta: float = 30.0,
                  clip: bool = True) -> np.ndarray:
    v = _rand_range(rng, -delta, delta)
    old_dtype = img.dtype
    img = img.astype('float32')
    img += v
    if clip or old_dtype == np.uint8:
        img = np.clip(img, 0, 255)
    return img.astype(old_dtype)


# imgaug/imgproc.py @1547a54: Contrast (factor_range=(0.8, 1.2), rgb=None: each channel's mean)
@realop(LIB, f"{SRC}/imgproc.py: Contrast")
def tp_contrast(img: np.ndarray, rng: np.random.Generator,
                factor_range: tuple[float, float] = (0.8, 1.2), rgb: bool | None = None,
                clip: bool = True) -> np.ndarray:
    r = _rand_range(rng, *factor_range)
    old_dtype = img.dtype

    if img.ndim == 3:
        if rgb is not None:
            m = cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY
            grey = cv2.cvtColor(img.astype('float32'), m)
            mean = np.mean(grey)
        else:
            mean = np.mean(img, axis=(0, 1), keepdims=True)
    else:
        mean = np.mean(img)

    img = img * r + mean * (1 - r)
    if clip or old_dtype == np.uint8:
        img = np.clip(img, 0, 255)
    return img.astype(old_dtype)


# imgaug/imgproc.py @1547a54: MeanVarianceNormalize (all_channel=True; float64 under numpy 2,
# though its docstring says float32: NumPy 2 keeps the float64 of np.sqrt(np.prod(shape)) in
# the floor of the std, and dividing by it)
@realop(LIB, f"{SRC}/imgproc.py: MeanVarianceNormalize", dtype=np.float64)
def tp_mean_variance_normalize(img: np.ndarray, all_channel: bool = True) -> np.ndarray:
    img = img.astype('float32')
    if all_channel:
        mean = np.mean(img)
        std = np.std(img)
    else:
        mean = np.mean(img, axis=(0, 1), keepdims=True)
        std = np.std(img, axis=(0, 1), keepdims=True)
    std = np.maximum(std, 1.0 / np.sqrt(np.prod(img.shape)))
    img = (img - mean) / std
    return img


# imgaug/imgproc.py @1547a54: Gamma (range=(-0.5, 0.5))
@realop(LIB, f"{SRC}/imgproc.py: Gamma")
def tp_gamma(img: np.ndarray, rng: np.random.Generator,
             range: tuple[float, float] = (-0.5, 0.5)) -> np.ndarray:
    gamma = _rand_range(rng, *range)
    old_dtype = img.dtype
    lut = ((np.arange(256, dtype='float32') / 255) ** (1. / (1. + gamma)) * 255).astype('uint8')
    img = np.clip(img, 0, 255).astype('uint8')
    ret = cv2.LUT(img, lut).astype(old_dtype)
    if img.ndim == 3 and ret.ndim == 2:
        ret = ret[:, :, np.newaxis]
    return ret


# imgaug/imgproc.py @1547a54: Saturation (alpha=0.4, rgb=True, clip=True)
@realop(LIB, f"{SRC}/imgproc.py: Saturation")
def tp_saturation(img: np.ndarray, rng: np.random.Generator, alpha: float = 0.4,
                  rgb: bool = True, clip: bool = True) -> np.ndarray:
    v = 1 + _rand_range(rng, -alpha, alpha)
    old_dtype = img.dtype
    m = cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY
    grey = cv2.cvtColor(img, m)
    ret = img * v + (grey * (1 - v))[:, :, np.newaxis]
    if clip or old_dtype == np.uint8:
        ret = np.clip(ret, 0, 255)
    return ret.astype(old_dtype)


# imgaug/noise.py @1547a54: GaussianNoise (sigma=1, clip=True)
@realop(LIB, f"{SRC}/noise.py: GaussianNoise")
def tp_gaussian_noise(img: np.ndarray, rng: np.random.Generator, sigma: float = 1,
                      clip: bool = True) -> np.ndarray:
    noise = rng.standard_normal(img.shape)
    old_dtype = img.dtype
    ret = img + noise * sigma
    if clip or old_dtype == np.uint8:
        ret = np.clip(ret, 0, 255)
    return ret.astype(old_dtype)


# imgaug/noise.py @1547a54: SaltPepperNoise (white_prob=0.05, black_prob=0.05; a copy: it
# writes into its input)
@realop(LIB, f"{SRC}/noise.py: SaltPepperNoise")
def tp_salt_pepper_noise(img: np.ndarray, rng: np.random.Generator, white_prob: float = 0.05,
                         black_prob: float = 0.05) -> np.ndarray:
    param = rng.uniform(low=0, high=1, size=img.shape)
    img = img.copy()
    img[param > (1 - white_prob)] = 255
    img[param < black_prob] = 0
    return img


# imgaug/convert.py @1547a54: Grayscale (rgb=True, keepshape=True: three equal channels) and
# ColorSpace._augment (keepdims=True)
@realop(LIB, f"{SRC}/convert.py: Grayscale, ColorSpace")
def tp_grayscale(img: np.ndarray, keepdims: bool = True, rgb: bool = True,
                 keepshape: bool = True) -> np.ndarray:
    mode = cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY
    transf = cv2.cvtColor(img, mode)
    if keepdims:
        if len(transf.shape) is not len(img.shape):
            transf = transf[..., None]
    ret = transf
    if keepshape:
        return np.concatenate([ret] * 3, axis=2)
    else:
        return ret


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "tp_flip": "lowers",
    "tp_center_crop": "lowers",
    "tp_brightness": "lowers",
    "tp_contrast": "lowers",
    "tp_mean_variance_normalize": "lowers",
    "tp_gamma": "lowers",
    "tp_saturation": "lowers",
    "tp_gaussian_noise": "lowers",
    "tp_salt_pepper_noise": "lowers",
    "tp_grayscale": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
