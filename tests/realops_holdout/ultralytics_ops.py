"""Held-out augmentations of YOLOv5 (ultralytics/yolov5, tag v7.0, utils/augmentations.py), on
the image alone (``targets=()``: no labels). ``random`` -> ``rng`` (``random.uniform(a, b)`` ->
``rng.uniform(a, b)``)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: E501

from __future__ import annotations

import math

import cv2
import numpy as np
from realops import realop

Y5 = "ultralytics/yolov5@v7.0 utils/augmentations.py"


# utils/augmentations.py @v7.0: random_perspective (targets=(), segments=(): the image part;
# hyp.scratch-low's degrees=0, translate=0.1, scale=0.5, shear=0)
@realop("yolov5", f"{Y5}: random_perspective")
def y5_random_perspective(im: np.ndarray, rng: np.random.Generator, degrees: float = 0.0,
                          translate: float = .1, scale: float = .5, shear: float = 0.0,
                          perspective: float = 0.0,
                          border: tuple[int, int] = (0, 0)) -> np.ndarray:
    # torchvision.transforms.RandomAffine(degrees=(-10, 10), translate=(0.1, 0.1), scale=(0.9, 1.1), shear=(-10, 10))
    # targets = [cls, xyxy]

    height = im.shape[0] + border[0] * 2  # shape(h,w,c)
    width = im.shape[1] + border[1] * 2

    # Center
    C = np.eye(3)
    C[0, 2] = -im.shape[1] / 2  # x translation (pixels)
    C[1, 2] = -im.shape[0] / 2  # y translation (pixels)

    # Perspective
    P = np.eye(3)
    P[2, 0] = rng.uniform(-perspective, perspective)  # x perspective (about y)
    P[2, 1] = rng.uniform(-perspective, perspective)  # y perspective (about x)

    # Rotation and Scale
    R = np.eye(3)
    a = rng.uniform(-degrees, degrees)
    # a += random.choice([-180, -90, 0, 90])  # add 90deg rotations to small rotations
    s = rng.uniform(1 - scale, 1 + scale)
    # s = 2 ** random.uniform(-scale, scale)
    R[:2] = cv2.getRotationMatrix2D(angle=a, center=(0, 0), scale=s)

    # Shear
    S = np.eye(3)
    S[0, 1] = math.tan(rng.uniform(-shear, shear) * math.pi / 180)  # x shear (deg)
    S[1, 0] = math.tan(rng.uniform(-shear, shear) * math.pi / 180)  # y shear (deg)

    # Translation
    T = np.eye(3)
    T[0, 2] = rng.uniform(0.5 - translate, 0.5 + translate) * width  # x translation (pixels)
    T[1, 2] = rng.uniform(0.5 - translate, 0.5 + translate) * height  # y translation (pixels)

    # Combined rotation matrix
    M = T @ S @ R @ P @ C  # order of operations (right to left) is IMPORTANT
    if (border[0] != 0) or (border[1] != 0) or (M != np.eye(3)).any():  # image changed
        if perspective:
            im = cv2.warpPerspective(im, M, dsize=(width, height), borderValue=(114, 114, 114))
        else:  # affine
            im = cv2.warpAffine(im, M[:2], dsize=(width, height), borderValue=(114, 114, 114))
    return im


# utils/augmentations.py @v7.0: LetterBox.__init__ and __call__ (classification preprocessing;
# size=16 in place of 640 for the test images)
@realop("yolov5", f"{Y5}: LetterBox.__call__")
def y5_classify_letterbox(im: np.ndarray, size: int | tuple[int, int] = 16, auto: bool = False,
                          stride: int = 32) -> np.ndarray:
    h_, w_ = (size, size) if isinstance(size, int) else size
    imh, imw = im.shape[:2]
    r = min(h_ / imh, w_ / imw)  # ratio of new/old
    h, w = round(imh * r), round(imw * r)  # resized image
    hs, ws = (math.ceil(x / stride) * stride for x in (h, w)) if auto else h_, w_
    top, left = round((hs - h) / 2 - 0.1), round((ws - w) / 2 - 0.1)
    im_out = np.full((h_, w_, 3), 114, dtype=im.dtype)
    im_out[top:top + h, left:left + w] = cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR)
    return im_out


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "y5_random_perspective": r"refuses: cv2\.getRotationMatrix2D \(not lowered",
    "y5_classify_letterbox": r"refuses: cv2\.resize \(OpenCV's interpolation",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
