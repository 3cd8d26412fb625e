"""Augmentations of OpenMMLab: mmcv (open-mmlab/mmcv, mmcv/image/photometric.py and
geometric.py at commit 023c828a76053fd1860ebb70d6219777e4393ef8), mmdet 3.3.0
(mmdet/datasets/transforms/transforms.py) and mmpretrain 1.2.0
(mmpretrain/datasets/transforms/processing.py). ``np.random`` / ``from numpy import random`` ->
``rng`` (``random.randint(n)`` -> ``rng.integers(n)``); a transform's ``__init__`` arguments are
keyword defaults, its ``results['img']`` the image."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from realops import realop

MMCV = "open-mmlab/mmcv@023c828a76053fd1860ebb70d6219777e4393ef8"
MMDET = "open-mmlab/mmdetection@v3.3.0 mmdet/datasets/transforms/transforms.py"
MMPRE = "open-mmlab/mmpretrain@v1.2.0 mmpretrain/datasets/transforms/processing.py"


def bgr2gray(img, keepdim=False):
    # mmcv/image/colorspace.py @023c828: bgr2gray
    out_img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    if keepdim:
        out_img = out_img[..., None]
    return out_img


def bgr2hsv(img):
    # mmcv/image/colorspace.py @023c828: bgr2hsv (made by convert_color_factory('bgr', 'hsv'))
    return cv2.cvtColor(img, cv2.COLOR_BGR2HSV)


def hsv2bgr(img):
    # mmcv/image/colorspace.py @023c828: hsv2bgr (made by convert_color_factory('hsv', 'bgr'))
    return cv2.cvtColor(img, cv2.COLOR_HSV2BGR)


# mmcv/image/photometric.py @023c828: iminvert
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: iminvert")
def mmcv_iminvert(img: np.ndarray) -> np.ndarray:
    return np.full_like(img, 255) - img


# mmcv/image/photometric.py @023c828: solarize
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: solarize")
def mmcv_solarize(img: np.ndarray, thr: int = 128) -> np.ndarray:
    img = np.where(img < thr, img, 255 - img)
    return img


# mmcv/image/photometric.py @023c828: posterize
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: posterize")
def mmcv_posterize(img: np.ndarray, bits: int = 4) -> np.ndarray:
    shift = 8 - bits
    img = np.left_shift(np.right_shift(img, shift), shift)
    return img


# mmcv/image/photometric.py @023c828: imequalize
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: imequalize")
def mmcv_imequalize(img: np.ndarray) -> np.ndarray:

    def _scale_channel(im, c):
        """Scale the data in the corresponding channel."""
        im = im[:, :, c]
        # Compute the histogram of the image channel.
        histo = np.histogram(im, 256, (0, 255))[0]
        # For computing the step, filter out the nonzeros.
        nonzero_histo = histo[histo > 0]
        step = (np.sum(nonzero_histo) - nonzero_histo[-1]) // 255
        if not step:
            lut = np.array(range(256))
        else:
            # Compute the cumulative sum, shifted by step // 2
            # and then normalized by step.
            lut = (np.cumsum(histo) + (step // 2)) // step
            # Shift lut, prepending with 0.
            lut = np.concatenate([[0], lut[:-1]], 0)
            # handle potential integer overflow
            lut[lut > 255] = 255
        # If step is zero, return the original image.
        # Otherwise, index from lut.
        return np.where(np.equal(step, 0), im, lut[im])

    # Scales each channel independently and then stacks
    # the result.
    s1 = _scale_channel(img, 0)
    s2 = _scale_channel(img, 1)
    s3 = _scale_channel(img, 2)
    equalized_img = np.stack([s1, s2, s3], axis=-1)
    return equalized_img.astype(img.dtype)


# mmcv/image/photometric.py @023c828: adjust_brightness
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: adjust_brightness")
def mmcv_adjust_brightness(img: np.ndarray, factor: float = 1.2) -> np.ndarray:
    degenerated = np.zeros_like(img)
    # Note manually convert the dtype to np.float32, to
    # achieve as close results as PIL.ImageEnhance.Brightness.
    # Set beta=1-factor, and gamma=0
    brightened_img = cv2.addWeighted(
        img.astype(np.float32), factor, degenerated.astype(np.float32),
        1 - factor, 0)
    brightened_img = np.clip(brightened_img, 0, 255)
    return brightened_img.astype(img.dtype)


# mmcv/image/photometric.py @023c828: adjust_contrast
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: adjust_contrast")
def mmcv_adjust_contrast(img: np.ndarray, factor: float = 1.2) -> np.ndarray:
    gray_img = bgr2gray(img)
    hist = np.histogram(gray_img, 256, (0, 255))[0]
    mean = round(np.sum(gray_img) / np.sum(hist))
    degenerated = (np.ones_like(img[..., 0]) * mean).astype(img.dtype)
    degenerated = cv2.cvtColor(degenerated, cv2.COLOR_GRAY2BGR)  # gray2bgr
    contrasted_img = cv2.addWeighted(
        img.astype(np.float32), factor, degenerated.astype(np.float32),
        1 - factor, 0)
    contrasted_img = np.clip(contrasted_img, 0, 255)
    return contrasted_img.astype(img.dtype)


# mmcv/image/photometric.py @023c828: auto_contrast
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: auto_contrast")
def mmcv_auto_contrast(img: np.ndarray, cutoff: float = 0) -> np.ndarray:

    def _auto_contrast_channel(im, c, cutoff):
        im = im[:, :, c]
        # Compute the histogram of the image channel.
        histo = np.histogram(im, 256, (0, 255))[0]
        # Remove cut-off percent pixels from histo
        histo_sum = np.cumsum(histo)
        cut_low = histo_sum[-1] * cutoff[0] // 100
        cut_high = histo_sum[-1] - histo_sum[-1] * cutoff[1] // 100
        histo_sum = np.clip(histo_sum, cut_low, cut_high) - cut_low
        histo = np.concatenate([[histo_sum[0]], np.diff(histo_sum)], 0)

        # Compute mapping
        low, high = np.nonzero(histo)[0][0], np.nonzero(histo)[0][-1]
        # If all the values have been cut off, return the origin img
        if low >= high:
            return im
        scale = 255.0 / (high - low)
        offset = -low * scale
        lut = np.array(range(256))
        lut = lut * scale + offset
        lut = np.clip(lut, 0, 255)
        return lut[im]

    if isinstance(cutoff, (int, float)):
        cutoff = (cutoff, cutoff)
    else:
        assert isinstance(cutoff, tuple), 'cutoff must be of type int, ' \
            f'float or tuple, but got {type(cutoff)} instead.'
    # Auto adjusts contrast for each channel independently and then stacks
    # the result.
    s1 = _auto_contrast_channel(img, 0, cutoff)
    s2 = _auto_contrast_channel(img, 1, cutoff)
    s3 = _auto_contrast_channel(img, 2, cutoff)
    contrasted_img = np.stack([s1, s2, s3], axis=-1)
    return contrasted_img.astype(img.dtype)


# mmcv/image/geometric.py @023c828: imflip
@realop("mmcv", f"{MMCV} mmcv/image/geometric.py: imflip")
def mmcv_imflip(img: np.ndarray, direction: str = "diagonal") -> np.ndarray:
    assert direction in ['horizontal', 'vertical', 'diagonal']
    if direction == 'horizontal':
        return np.flip(img, axis=1)
    elif direction == 'vertical':
        return np.flip(img, axis=0)
    else:
        return np.flip(img, axis=(0, 1))


# mmpretrain/datasets/transforms/processing.py @v1.2.0: Lighting.transform, which calls
# mmcv/image/photometric.py @023c828: adjust_lighting (ImageNet PCA values of mmpretrain's
# configs as defaults)
@realop("mmpretrain", f"{MMPRE}: Lighting.transform (mmcv adjust_lighting)")
def mmpre_lighting(img: np.ndarray, rng: np.random.Generator,
                   eigval: Sequence[float] = (55.4625, 4.7940, 1.1475),
                   eigvec: Sequence[Sequence[float]] = ((-0.5836, -0.6948, 0.4203),
                                                        (-0.5808, -0.0045, -0.8140),
                                                        (-0.5675, 0.7192, 0.4009)),
                   alphastd: float = 0.1, to_rgb: bool = True) -> np.ndarray:
    eigval = np.array(eigval)
    eigvec = np.array(eigvec)
    src = img
    assert isinstance(eigval, np.ndarray) and isinstance(eigvec, np.ndarray), \
        f'eigval and eigvec should both be of type np.ndarray, got ' \
        f'{type(eigval)} and {type(eigvec)} instead.'

    assert eigval.ndim == 1 and eigvec.ndim == 2
    assert eigvec.shape == (3, eigval.shape[0])
    n_eigval = eigval.shape[0]
    assert isinstance(alphastd, float), 'alphastd should be of type float, ' \
        f'got {type(alphastd)} instead.'

    img = img.copy().astype(np.float32)
    if to_rgb:
        cv2.cvtColor(img, cv2.COLOR_BGR2RGB, img)  # inplace

    alpha = rng.normal(0, alphastd, n_eigval)
    alter = eigvec \
        * np.broadcast_to(alpha.reshape(1, n_eigval), (3, n_eigval)) \
        * np.broadcast_to(eigval.reshape(1, n_eigval), (3, n_eigval))
    alter = np.broadcast_to(alter.sum(axis=1).reshape(1, 1, 3), img.shape)
    img_adjusted = img + alter
    return img_adjusted.astype(src.dtype)


# mmdet/datasets/transforms/transforms.py @v3.3.0: PhotoMetricDistortion._random_flags and
# .transform (its output is float32)
@realop("mmdet", f"{MMDET}: PhotoMetricDistortion.transform", dtype=np.float32)
def mmdet_photometric_distortion(img: np.ndarray, rng: np.random.Generator,
                                 brightness_delta: int = 32,
                                 contrast_range: Sequence[float] = (0.5, 1.5),
                                 saturation_range: Sequence[float] = (0.5, 1.5),
                                 hue_delta: int = 18) -> np.ndarray:
    contrast_lower, contrast_upper = contrast_range
    saturation_lower, saturation_upper = saturation_range
    mode = rng.integers(2)
    brightness_flag = rng.integers(2)
    contrast_flag = rng.integers(2)
    saturation_flag = rng.integers(2)
    hue_flag = rng.integers(2)
    swap_flag = rng.integers(2)
    delta_value = rng.uniform(-brightness_delta, brightness_delta)
    alpha_value = rng.uniform(contrast_lower, contrast_upper)
    saturation_value = rng.uniform(saturation_lower, saturation_upper)
    hue_value = rng.uniform(-hue_delta, hue_delta)
    swap_value = rng.permutation(3)

    img = img.astype(np.float32)

    # random brightness
    if brightness_flag:
        img += delta_value

    # mode == 0 --> do random contrast first
    # mode == 1 --> do random contrast last
    if mode == 1:
        if contrast_flag:
            img *= alpha_value

    # convert color from BGR to HSV
    img = bgr2hsv(img)

    # random saturation
    if saturation_flag:
        img[..., 1] *= saturation_value
        # For image(type=float32), after convert bgr to hsv by opencv,
        # valid saturation value range is [0, 1]
        if saturation_value > 1:
            img[..., 1] = img[..., 1].clip(0, 1)

    # random hue
    if hue_flag:
        img[..., 0] += hue_value
        img[..., 0][img[..., 0] > 360] -= 360
        img[..., 0][img[..., 0] < 0] += 360

    # convert color from HSV to BGR
    img = hsv2bgr(img)

    # random contrast
    if mode == 0:
        if contrast_flag:
            img *= alpha_value

    # randomly swap channels
    if swap_flag:
        img = img[..., swap_value]

    return img


# mmdet/datasets/transforms/transforms.py @v3.3.0: CutOut.__init__ and .transform (it wrote into
# results['img']: here into a copy)
@realop("mmdet", f"{MMDET}: CutOut.transform")
def mmdet_cutout(img: np.ndarray, rng: np.random.Generator,
                 n_holes: int | tuple[int, int] = (1, 3),
                 cutout_shape: list[tuple[int, int]] | None = [(4, 4), (4, 8), (8, 4)],  # noqa: B006
                 cutout_ratio: list[tuple[float, float]] | None = None,
                 fill_in: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    if isinstance(n_holes, int):
        n_holes = (n_holes, n_holes)
    with_ratio = cutout_ratio is not None
    candidates = cutout_ratio if with_ratio else cutout_shape
    if not isinstance(candidates, list):
        candidates = [candidates]
    img = img.copy()

    h, w, c = img.shape  # noqa: RUF059 (as written)
    n_holes = rng.integers(n_holes[0], n_holes[1] + 1)
    for _ in range(n_holes):
        x1 = rng.integers(0, w)
        y1 = rng.integers(0, h)
        index = rng.integers(0, len(candidates))
        if not with_ratio:
            cutout_w, cutout_h = candidates[index]
        else:
            cutout_w = int(candidates[index][0] * w)
            cutout_h = int(candidates[index][1] * h)

        x2 = np.clip(x1 + cutout_w, 0, w)
        y2 = np.clip(y1 + cutout_h, 0, h)
        img[y1:y2, x1:x2, :] = fill_in

    return img


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "mmcv_iminvert": "lowers",
    "mmcv_solarize": "lowers",
    "mmcv_posterize": "lowers",
    "mmcv_imequalize": r"refuses: np\.histogram",
    "mmcv_adjust_brightness": "lowers",
    "mmcv_adjust_contrast": r"refuses: np\.histogram of pixel values \(a histogram, or a lookup",
    "mmcv_auto_contrast": r"refuses: np\.histogram",
    "mmcv_imflip": "lowers",
    "mmpre_lighting": "lowers",
    "mmdet_photometric_distortion": r"refuses: cv2\.cvtColor between BGR/RGB and HSV of "
                                    r"float32 \(only OpenCV's 8-bit arithmetic",
    "mmdet_cutout": "lowers",
}
