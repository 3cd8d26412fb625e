"""Held-out augmentations of OpenMMLab: mmcv (open-mmlab/mmcv at commit
023c828a76053fd1860ebb70d6219777e4393ef8, mmcv/image/photometric.py and geometric.py, the
corpus's commit) and mmpretrain 1.2.0 (open-mmlab/mmpretrain, tag v1.2.0,
mmpretrain/datasets/transforms/processing.py). ``np.random`` -> ``rng``
(``np.random.randint(a, b)`` -> ``rng.integers(a, b)``, ``np.random.rand()`` ->
``rng.random()``); a transform's ``__init__`` arguments are keyword defaults, its
``results['img']`` the image."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP032, RUF046

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import cv2
import numpy as np
from realops import realop

MMCV = "open-mmlab/mmcv@023c828a76053fd1860ebb70d6219777e4393ef8"
MMPRE = "open-mmlab/mmpretrain@v1.2.0 mmpretrain/datasets/transforms/processing.py"

cv2_interp_codes = {
    'nearest': cv2.INTER_NEAREST,
    'bilinear': cv2.INTER_LINEAR,
    'bicubic': cv2.INTER_CUBIC,
    'area': cv2.INTER_AREA,
    'lanczos': cv2.INTER_LANCZOS4
}


def imnormalize_(img, mean, std, to_rgb=True):
    # mmcv/image/photometric.py @023c828: imnormalize_
    # cv2 inplace normalization does not accept uint8
    assert img.dtype != np.uint8
    mean = np.float64(mean.reshape(1, -1))
    stdinv = 1 / np.float64(std.reshape(1, -1))
    if to_rgb:
        cv2.cvtColor(img, cv2.COLOR_BGR2RGB, img)  # inplace
    cv2.subtract(img, mean, img)  # inplace
    cv2.multiply(img, stdinv, img)  # inplace
    return img


# mmcv/image/photometric.py @023c828: imnormalize (mmcv.transforms.Normalize with the ImageNet
# mean and std of OpenMMLab's configs, to_rgb=True)
@realop("mmcv", f"{MMCV} mmcv/image/photometric.py: imnormalize", dtype=np.float32)
def mmcv_imnormalize(img: np.ndarray, mean: tuple[float, ...] = (123.675, 116.28, 103.53),
                     std: tuple[float, ...] = (58.395, 57.12, 57.375),
                     to_rgb: bool = True) -> np.ndarray:
    mean = np.array(mean, dtype=np.float32)
    std = np.array(std, dtype=np.float32)
    img = img.copy().astype(np.float32)
    return imnormalize_(img, mean, std, to_rgb)


def impad(img,
          *,
          shape=None,
          padding=None,
          pad_val=0,
          padding_mode='constant'):
    # mmcv/image/geometric.py @023c828: impad
    assert (shape is not None) ^ (padding is not None)
    if shape is not None:
        padding = (0, 0, shape[1] - img.shape[1], shape[0] - img.shape[0])

    # check pad_val
    if isinstance(pad_val, tuple):
        assert len(pad_val) == img.shape[-1]
    elif not isinstance(pad_val, numbers.Number):
        raise TypeError('pad_val must be a int or a tuple. '
                        f'But received {type(pad_val)}')

    # check padding
    if isinstance(padding, tuple) and len(padding) in [2, 4]:
        if len(padding) == 2:
            padding = (padding[0], padding[1], padding[0], padding[1])
    elif isinstance(padding, numbers.Number):
        padding = (padding, padding, padding, padding)
    else:
        raise ValueError('Padding must be a int or a 2, or 4 element tuple.'
                         f'But received {padding}')

    # check padding mode
    assert padding_mode in ['constant', 'edge', 'reflect', 'symmetric']

    border_type = {
        'constant': cv2.BORDER_CONSTANT,
        'edge': cv2.BORDER_REPLICATE,
        'reflect': cv2.BORDER_REFLECT_101,
        'symmetric': cv2.BORDER_REFLECT
    }
    img = cv2.copyMakeBorder(
        img,
        padding[1],
        padding[3],
        padding[0],
        padding[2],
        border_type[padding_mode],
        value=pad_val)

    return img


# mmcv/image/geometric.py @023c828: impad (padding=2 on every side, constant 0)
@realop("mmcv", f"{MMCV} mmcv/image/geometric.py: impad")
def mmcv_impad(img: np.ndarray, padding: int = 2, pad_val: int = 0) -> np.ndarray:
    return impad(img, padding=padding, pad_val=pad_val)


# mmcv/image/geometric.py @023c828: cutout (shape=4; np.random.uniform(n), which is
# uniform(low=n, high=1.0), a draw between 1 and n -> rng.uniform(1.0, n), as Generator.uniform
# refuses high < low)
@realop("mmcv", f"{MMCV} mmcv/image/geometric.py: cutout")
def mmcv_cutout(img: np.ndarray, rng: np.random.Generator, shape: int = 4,
                pad_val: int = 0) -> np.ndarray:
    channels = 1 if img.ndim == 2 else img.shape[2]
    if isinstance(shape, int):
        cut_h, cut_w = shape, shape
    else:
        assert isinstance(shape, tuple) and len(shape) == 2, \
            f'shape must be a int or a tuple with length 2, but got type ' \
            f'{type(shape)} instead.'
        cut_h, cut_w = shape
    if isinstance(pad_val, (int, float)):
        pad_val = tuple([pad_val] * channels)
    elif isinstance(pad_val, tuple):
        assert len(pad_val) == channels, \
            'Expected the num of elements in tuple equals the channels' \
            'of input image. Found {} vs {}'.format(
                len(pad_val), channels)
    else:
        raise TypeError(f'Invalid type {type(pad_val)} for `pad_val`')

    img_h, img_w = img.shape[:2]
    y0 = rng.uniform(1.0, img_h)
    x0 = rng.uniform(1.0, img_w)

    y1 = int(max(0, y0 - cut_h / 2.))
    x1 = int(max(0, x0 - cut_w / 2.))
    y2 = min(img_h, y1 + cut_h)
    x2 = min(img_w, x1 + cut_w)

    if img.ndim == 2:
        patch_shape = (y2 - y1, x2 - x1)
    else:
        patch_shape = (y2 - y1, x2 - x1, channels)

    img_cutout = img.copy()
    patch = np.array(
        pad_val, dtype=img.dtype) * np.ones(
            patch_shape, dtype=img.dtype)
    img_cutout[y1:y2, x1:x2, ...] = patch

    return img_cutout


def _get_translate_matrix(offset, direction='horizontal'):
    # mmcv/image/geometric.py @023c828: _get_translate_matrix
    if direction == 'horizontal':
        translate_matrix = np.float32([[1, 0, offset], [0, 1, 0]])
    elif direction == 'vertical':
        translate_matrix = np.float32([[1, 0, 0], [0, 1, offset]])
    return translate_matrix


# mmcv/image/geometric.py @023c828: imtranslate (offset=3 pixels, horizontal)
@realop("mmcv", f"{MMCV} mmcv/image/geometric.py: imtranslate")
def mmcv_imtranslate(img: np.ndarray, offset: float = 3, direction: str = 'horizontal',
                     border_value: int = 0, interpolation: str = 'bilinear') -> np.ndarray:
    assert direction in ['horizontal',
                         'vertical'], f'Invalid direction: {direction}'
    height, width = img.shape[:2]
    if img.ndim == 2:
        channels = 1
    elif img.ndim == 3:
        channels = img.shape[-1]
    if isinstance(border_value, int):
        border_value = tuple([border_value] * channels)
    elif isinstance(border_value, tuple):
        assert len(border_value) == channels, \
            'Expected the num of elements in tuple equals the channels' \
            'of input image. Found {} vs {}'.format(
                len(border_value), channels)
    else:
        raise ValueError(
            f'Invalid type {type(border_value)} for `border_value`.')
    translate_matrix = _get_translate_matrix(offset, direction)
    translated = cv2.warpAffine(
        img,
        translate_matrix,
        (width, height),
        # Note case when the number elements in `border_value`
        # greater than 3 (e.g. translating masks whose channels
        # large than 3) will raise TypeError in `cv2.warpAffine`.
        # Here simply slice the first 3 values in `border_value`.
        borderValue=border_value[:3],
        flags=cv2_interp_codes[interpolation])
    return translated


# mmpretrain/datasets/transforms/processing.py @v1.2.0: RandomErasing.__init__ defaults,
# random_disable, random_patch, _fill_pixels (mode='const') and transform (it wrote into
# results['img']: here into a copy)
@realop("mmpretrain", f"{MMPRE}: RandomErasing.transform")
def mmpre_random_erasing(img: np.ndarray, rng: np.random.Generator, erase_prob: float = 0.5,
                         min_area_ratio: float = 0.02, max_area_ratio: float = 0.4,
                         aspect_range: tuple[float, float] = (3 / 10, 10 / 3),
                         fill_color: tuple[int, int, int] = (128, 128, 128)) -> np.ndarray:
    # random_disable
    if rng.random() > erase_prob:
        return img

    img_h, img_w = img.shape[:2]

    # random_patch
    # convert the aspect ratio to log space to equally handle width and
    # height.
    log_aspect_range = np.log(
        np.array(aspect_range, dtype=np.float32))
    aspect_ratio = np.exp(rng.uniform(*log_aspect_range))
    area = img_h * img_w
    area *= rng.uniform(min_area_ratio, max_area_ratio)

    h = min(int(round(np.sqrt(area * aspect_ratio))), img_h)
    w = min(int(round(np.sqrt(area / aspect_ratio))), img_w)
    top = rng.integers(0, img_h - h) if img_h > h else 0
    left = rng.integers(0, img_w - w) if img_w > w else 0

    # _fill_pixels, mode='const'
    img = img.copy()
    patch = np.empty((h, w, 3), dtype=np.uint8)
    patch[:, :] = np.array(fill_color, dtype=np.uint8)
    img[top:top + h, left:left + w] = patch
    return img


def bbox_clip(bboxes, img_shape):
    # mmcv/image/geometric.py @023c828: bbox_clip
    assert bboxes.shape[-1] % 4 == 0
    cmin = np.empty(bboxes.shape[-1], dtype=bboxes.dtype)
    cmin[0::2] = img_shape[1] - 1
    cmin[1::2] = img_shape[0] - 1
    clipped_bboxes = np.maximum(np.minimum(bboxes, cmin), 0)
    return clipped_bboxes


def bbox_scaling(bboxes, scale, clip_shape=None):
    # mmcv/image/geometric.py @023c828: bbox_scaling
    if float(scale) == 1.0:
        scaled_bboxes = bboxes.copy()
    else:
        w = bboxes[..., 2] - bboxes[..., 0] + 1
        h = bboxes[..., 3] - bboxes[..., 1] + 1
        dw = (w * (scale - 1)) * 0.5
        dh = (h * (scale - 1)) * 0.5
        scaled_bboxes = bboxes + np.stack((-dw, -dh, dw, dh), axis=-1)
    if clip_shape is not None:
        return bbox_clip(scaled_bboxes, clip_shape)
    else:
        return scaled_bboxes


def imcrop(img, bboxes, scale=1.0, pad_fill=None):
    # mmcv/image/geometric.py @023c828: imcrop (pad_fill=None, as RandomCrop calls it)
    chn = 1 if img.ndim == 2 else img.shape[2]
    if pad_fill is not None:
        if isinstance(pad_fill, (int, float)):
            pad_fill = [pad_fill for _ in range(chn)]
        assert len(pad_fill) == chn

    _bboxes = bboxes[None, ...] if bboxes.ndim == 1 else bboxes
    scaled_bboxes = bbox_scaling(_bboxes, scale).astype(np.int32)
    clipped_bbox = bbox_clip(scaled_bboxes, img.shape)

    patches = []
    for i in range(clipped_bbox.shape[0]):
        x1, y1, x2, y2 = tuple(clipped_bbox[i, :])
        patch = img[y1:y2 + 1, x1:x2 + 1, ...]
        patches.append(patch)

    if bboxes.ndim == 1:
        return patches[0]
    else:
        return patches


# mmpretrain/datasets/transforms/processing.py @v1.2.0: RandomCrop.rand_crop_params and
# .transform (the CIFAR recipe's RandomCrop(crop_size=32, padding=4), scaled down to the test
# images: crop_size=6, padding=2), with mmcv impad and imcrop
@realop("mmpretrain", f"{MMPRE}: RandomCrop.transform")
def mmpre_random_crop(img: np.ndarray, rng: np.random.Generator,
                      crop_size: int | Sequence[int] = 6, padding: int | None = 2,
                      pad_if_needed: bool = False, pad_val: int = 0,
                      padding_mode: str = 'constant') -> np.ndarray:
    if isinstance(crop_size, Sequence):
        assert len(crop_size) == 2
        assert crop_size[0] > 0 and crop_size[1] > 0
        crop_size = crop_size
    else:
        assert crop_size > 0
        crop_size = (crop_size, crop_size)

    if padding is not None:
        img = impad(img, padding=padding, pad_val=pad_val)

    # pad img if needed
    if pad_if_needed:
        h_pad = math.ceil(max(0, crop_size[0] - img.shape[0]) / 2)
        w_pad = math.ceil(max(0, crop_size[1] - img.shape[1]) / 2)

        img = impad(
            img,
            padding=(w_pad, h_pad, w_pad, h_pad),
            pad_val=pad_val,
            padding_mode=padding_mode)

    # rand_crop_params
    h, w = img.shape[:2]
    target_h, target_w = crop_size
    if w == target_w and h == target_h:
        offset_h, offset_w, target_h, target_w = 0, 0, h, w
    else:
        if w < target_w or h < target_h:
            target_w = min(w, target_w)
            target_h = min(h, target_h)
        offset_h = rng.integers(0, h - target_h + 1)
        offset_w = rng.integers(0, w - target_w + 1)

    img = imcrop(
        img,
        np.array([
            offset_w,
            offset_h,
            offset_w + target_w - 1,
            offset_h + target_h - 1,
        ]))
    return img


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "mmcv_imnormalize": "lowers",
    "mmcv_impad": "lowers",
    "mmcv_cutout": "lowers",
    "mmcv_imtranslate": "lowers",
    "mmpre_random_erasing": "lowers",
    "mmpre_random_crop": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
