"""Augmentations of YOLOv5 (ultralytics/yolov5 v7.0 as packaged on PyPI: yolov5 7.0.13,
yolov5/utils/augmentations.py) and Ultralytics 8.3.40 (ultralytics/data/augment.py), on the
image alone (their labels left out). ``random`` / ``np.random`` -> ``rng``: ``random.random()``
-> ``rng.random()``, ``random.randint(a, b)`` (b included) -> ``rng.integers(a, b,
endpoint=True)``; the in-place ops work on a copy."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: RUF046

from __future__ import annotations

import cv2
import numpy as np

from realops import realop

Y5 = "ultralytics/yolov5@v7.0 (PyPI yolov5 7.0.13) utils/augmentations.py"
UL = "ultralytics/ultralytics@v8.3.40 ultralytics/data/augment.py"


# yolov5 utils/augmentations.py @v7.0: augment_hsv (writes into im: here into a copy)
@realop("yolov5", f"{Y5}: augment_hsv")
def y5_augment_hsv(im: np.ndarray, rng: np.random.Generator, hgain: float = 0.5,
                   sgain: float = 0.5, vgain: float = 0.5) -> np.ndarray:
    im = im.copy()
    # HSV color-space augmentation
    if hgain or sgain or vgain:
        r = rng.uniform(-1, 1, 3) * [hgain, sgain, vgain] + 1  # random gains
        hue, sat, val = cv2.split(cv2.cvtColor(im, cv2.COLOR_BGR2HSV))
        dtype = im.dtype  # uint8

        x = np.arange(0, 256, dtype=r.dtype)
        lut_hue = ((x * r[0]) % 180).astype(dtype)
        lut_sat = np.clip(x * r[1], 0, 255).astype(dtype)
        lut_val = np.clip(x * r[2], 0, 255).astype(dtype)

        im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
        cv2.cvtColor(im_hsv, cv2.COLOR_HSV2BGR, dst=im)  # no return needed
    return im


# yolov5 utils/augmentations.py @v7.0: hist_equalize
@realop("yolov5", f"{Y5}: hist_equalize")
def y5_hist_equalize(im: np.ndarray, clahe: bool = True, bgr: bool = False) -> np.ndarray:
    # Equalize histogram on BGR image 'im' with im.shape(n,m,3) and range 0-255
    yuv = cv2.cvtColor(im, cv2.COLOR_BGR2YUV if bgr else cv2.COLOR_RGB2YUV)
    if clahe:
        c = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))
        yuv[:, :, 0] = c.apply(yuv[:, :, 0])
    else:
        yuv[:, :, 0] = cv2.equalizeHist(yuv[:, :, 0])  # equalize Y channel histogram
    return cv2.cvtColor(yuv, cv2.COLOR_YUV2BGR if bgr else cv2.COLOR_YUV2RGB)


# yolov5 utils/augmentations.py @v7.0: cutout (the image part; it wrote into im: here a copy)
@realop("yolov5", f"{Y5}: cutout")
def y5_cutout(im: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    im = im.copy()
    # Applies image cutout augmentation https://arxiv.org/abs/1708.04552
    if rng.random() < p:
        h, w = im.shape[:2]
        scales = [0.5] * 1 + [0.25] * 2 + [0.125] * 4 + [0.0625] * 8 + [0.03125] * 16
        for s in scales:
            mask_h = rng.integers(1, int(h * s), endpoint=True)  # create random masks
            mask_w = rng.integers(1, int(w * s), endpoint=True)

            # box
            xmin = max(0, rng.integers(0, w, endpoint=True) - mask_w // 2)
            ymin = max(0, rng.integers(0, h, endpoint=True) - mask_h // 2)
            xmax = min(w, xmin + mask_w)
            ymax = min(h, ymin + mask_h)

            # apply random color mask
            im[ymin:ymax, xmin:xmax] = [rng.integers(64, 191, endpoint=True) for _ in range(3)]
    return im


# ultralytics/data/augment.py @v8.3.40: RandomHSV.__call__ (on labels["img"], in place: a copy)
@realop("ultralytics", f"{UL}: RandomHSV.__call__")
def ul_random_hsv(img: np.ndarray, rng: np.random.Generator, hgain: float = 0.5,
                  sgain: float = 0.5, vgain: float = 0.5) -> np.ndarray:
    img = img.copy()
    if hgain or sgain or vgain:
        r = rng.uniform(-1, 1, 3) * [hgain, sgain, vgain] + 1  # random gains
        hue, sat, val = cv2.split(cv2.cvtColor(img, cv2.COLOR_BGR2HSV))
        dtype = img.dtype  # uint8

        x = np.arange(0, 256, dtype=r.dtype)
        lut_hue = ((x * r[0]) % 180).astype(dtype)
        lut_sat = np.clip(x * r[1], 0, 255).astype(dtype)
        lut_val = np.clip(x * r[2], 0, 255).astype(dtype)

        im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
        cv2.cvtColor(im_hsv, cv2.COLOR_HSV2BGR, dst=img)  # no return needed
    return img


# ultralytics/data/augment.py @v8.3.40: RandomFlip.__call__ (the image part)
@realop("ultralytics", f"{UL}: RandomFlip.__call__")
def ul_random_flip(img: np.ndarray, rng: np.random.Generator, p: float = 0.5,
                   direction: str = "horizontal") -> np.ndarray:
    # Flip up-down
    if direction == "vertical" and rng.random() < p:
        img = np.flipud(img)
    if direction == "horizontal" and rng.random() < p:
        img = np.fliplr(img)
    return np.ascontiguousarray(img)


# ultralytics/data/augment.py @v8.3.40: LetterBox.__call__ (the image part, center=True)
@realop("ultralytics", f"{UL}: LetterBox.__call__")
def ul_letterbox(img: np.ndarray, new_shape: tuple[int, int] = (32, 32), auto: bool = False,
                 scale_fill: bool = False, scaleup: bool = True, center: bool = True,
                 stride: int = 32) -> np.ndarray:
    shape = img.shape[:2]  # current shape [height, width]
    if isinstance(new_shape, int):
        new_shape = (new_shape, new_shape)

    # Scale ratio (new / old)
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:  # only scale down, do not scale up (for better val mAP)
        r = min(r, 1.0)

    # Compute padding
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]  # wh padding
    if auto:  # minimum rectangle
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)  # wh padding
    elif scale_fill:  # stretch
        dw, dh = 0.0, 0.0
        new_unpad = (new_shape[1], new_shape[0])

    if center:
        dw /= 2  # divide padding into 2 sides
        dh /= 2

    if shape[::-1] != new_unpad:  # resize
        img = cv2.resize(img, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)) if center else 0, int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)) if center else 0, int(round(dw + 0.1))
    img = cv2.copyMakeBorder(
        img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114)
    )  # add border
    return img


# ultralytics/data/augment.py @v8.3.40: CenterCrop.__call__ (numpy input)
@realop("ultralytics", f"{UL}: CenterCrop.__call__")
def ul_center_crop(im: np.ndarray, size: int = 16) -> np.ndarray:
    h, w = size, size
    imh, imw = im.shape[:2]
    m = min(imh, imw)  # min dimension
    top, left = (imh - m) // 2, (imw - m) // 2
    return cv2.resize(im[top : top + m, left : left + m], (w, h), interpolation=cv2.INTER_LINEAR)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "y5_augment_hsv": "lowers",
    "y5_hist_equalize": r"refuses: cv2\.createCLAHE\(\.\.\.\)\.apply \(CLAHE needs per-tile "
                        r"histograms",
    "y5_cutout": "lowers",
    "ul_random_hsv": "lowers",
    "ul_random_flip": "lowers",
    "ul_letterbox": r"refuses: cv2\.resize \(OpenCV's interpolation arithmetic",
    "ul_center_crop": r"refuses: cv2\.resize \(OpenCV's interpolation arithmetic \(fixed\-point",
}
