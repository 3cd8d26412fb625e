"""Held-out augmentations of PaddlePaddle's model libraries: PaddleClas
(PaddlePaddle/PaddleClas, ppcls/data/preprocess/ops/, at the commit each file was read at) and
PaddleDetection (PaddlePaddle/PaddleDetection at commit
666f597fd00d3157e84dd9fb2dd3f40bf9918ebc, ppdet/data/transform/operators.py). ``random`` /
``np.random`` -> ``rng`` (``random.randint(a, b)`` -> ``rng.integers(a, b, endpoint=True)``,
``np.random.randint(a, b)`` -> ``rng.integers(a, b)``, ``random.random()`` /
``np.random.uniform(0, 1)`` -> ``rng.random()`` / ``rng.uniform(0, 1)``); an operator's
``__init__`` arguments are keyword defaults, ``sample['image']`` the image."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: RUF046

from __future__ import annotations

import math

import cv2
import numpy as np
from PIL import Image, ImageEnhance
from realops import realop

PPCLS = "PaddlePaddle/PaddleClas"
PPCLS_OPS = (f"{PPCLS}@052349ea8ccad98d3ce87aec315bfb4c6701006e "
             "ppcls/data/preprocess/ops/operators.py")
PPCLS_ERASE = (f"{PPCLS}@15e364391bc1346c5a4615622de917a55eddcd32 "
               "ppcls/data/preprocess/ops/random_erasing.py")
PPDET = ("PaddlePaddle/PaddleDetection@666f597fd00d3157e84dd9fb2dd3f40bf9918ebc "
         "ppdet/data/transform/operators.py")


# ppcls/data/preprocess/ops/operators.py @052349e: NormalizeImage.__init__ and __call__
# (order='hwc', as ImageNet configs feeding HWC images set it; output float32)
@realop("PaddleClas", f"{PPCLS_OPS}: NormalizeImage.__call__", dtype=np.float32)
def ppcls_normalize_image(img: np.ndarray, scale: float | None = None,
                          mean: list[float] | None = None, std: list[float] | None = None,
                          order: str = 'hwc', output_fp16: bool = False,
                          channel_num: int = 3) -> np.ndarray:
    if isinstance(scale, str):
        scale = eval(scale)
    assert channel_num in [
        3, 4
    ], "channel number of input image should be set to 3 or 4."
    output_dtype = 'float16' if output_fp16 else 'float32'
    scale = np.float32(scale if scale is not None else 1.0 / 255.0)
    mean = mean if mean is not None else [0.485, 0.456, 0.406]
    std = std if std is not None else [0.229, 0.224, 0.225]

    shape = (3, 1, 1) if order == 'chw' else (1, 1, 3)
    mean = np.array(mean).reshape(shape).astype('float32')
    std = np.array(std).reshape(shape).astype('float32')

    assert isinstance(img,
                      np.ndarray), "invalid input 'img' in NormalizeImage"

    img = (img.astype('float32') * scale - mean) / std

    if channel_num == 4:
        img_h = img.shape[1] if order == 'chw' else img.shape[0]
        img_w = img.shape[2] if order == 'chw' else img.shape[1]
        pad_zeros = np.zeros(
            (1, img_h, img_w)) if order == 'chw' else np.zeros(
                (img_h, img_w, 1))
        img = (np.concatenate(
            (img, pad_zeros), axis=0)
               if order == 'chw' else np.concatenate(
                   (img, pad_zeros), axis=2))
    return img.astype(output_dtype)


# ppcls/data/preprocess/ops/operators.py @052349e: RandFlipImage.__call__ (flip_code=1)
@realop("PaddleClas", f"{PPCLS_OPS}: RandFlipImage.__call__")
def ppcls_rand_flip_image(img: np.ndarray, rng: np.random.Generator,
                          flip_code: int = 1) -> np.ndarray:
    assert flip_code in [-1, 0, 1
                         ], "flip_code should be a value in [-1, 0, 1]"
    if rng.integers(0, 1, endpoint=True) == 1:
        return cv2.flip(img, flip_code)
    else:
        return img


# ppcls/data/preprocess/ops/operators.py @052349e: CropImage.__call__ (size=3: a centre crop)
@realop("PaddleClas", f"{PPCLS_OPS}: CropImage.__call__", min_size=3)
def ppcls_crop_image(img: np.ndarray, size: int = 3) -> np.ndarray:
    if type(size) is int:
        size = (size, size)
    w, h = size
    img_h, img_w = img.shape[:2]
    w_start = (img_w - w) // 2
    h_start = (img_h - h) // 2

    w_end = w_start + w
    h_end = h_start + h
    return img[h_start:h_end, w_start:w_end, :]


# ppcls/data/preprocess/ops/random_erasing.py @15e3643: RandomErasing.__init__ defaults and
# __call__, with Pixels(mode="const") (it wrote into the image: here into a copy)
@realop("PaddleClas", f"{PPCLS_ERASE}: RandomErasing.__call__")
def ppcls_random_erasing(img: np.ndarray, rng: np.random.Generator, EPSILON: float = 0.5,
                         sl: float = 0.02, sh: float = 0.4, r1: float = 0.3,
                         mean: tuple[float, float, float] = (0., 0., 0.), attempt: int = 100,
                         use_log_aspect: bool = False) -> np.ndarray:
    r1 = (math.log(r1), math.log(1 / r1)) if use_log_aspect else (
        r1, 1 / r1)
    if rng.random() > EPSILON:
        return img

    img = img.copy()
    for _ in range(attempt):
        area = img.shape[0] * img.shape[1]

        target_area = rng.uniform(sl, sh) * area
        aspect_ratio = rng.uniform(*r1)
        if use_log_aspect:
            aspect_ratio = math.exp(aspect_ratio)

        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))

        if w < img.shape[1] and h < img.shape[0]:
            pixels = mean
            x1 = rng.integers(0, img.shape[0] - h, endpoint=True)
            y1 = rng.integers(0, img.shape[1] - w, endpoint=True)
            if img.shape[2] == 3:
                img[x1:x1 + h, y1:y1 + w, :] = pixels
            else:
                img[x1:x1 + h, y1:y1 + w, 0] = pixels[0]
            return img
    return img


# ppdet/data/transform/operators.py @666f597: RandomFlip.apply and apply_image (prob=0.5)
@realop("PaddleDetection", f"{PPDET}: RandomFlip.apply")
def ppdet_random_flip(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5) -> np.ndarray:
    im = img
    if rng.uniform(0, 1) < prob:
        im = im[:, ::-1, :]
    return im


# ppdet/data/transform/operators.py @666f597: RandomDistort.apply and its apply_* (defaults:
# random_apply=True, count=4); it hands on float32
@realop("PaddleDetection", f"{PPDET}: RandomDistort.apply", dtype=np.float32)
def ppdet_random_distort(img: np.ndarray, rng: np.random.Generator,
                         hue: tuple[float, float, float] = (-18, 18, 0.5),
                         saturation: tuple[float, float, float] = (0.5, 1.5, 0.5),
                         contrast: tuple[float, float, float] = (0.5, 1.5, 0.5),
                         brightness: tuple[float, float, float] = (0.5, 1.5, 0.5),
                         count: int = 4, prob: float = 1.0) -> np.ndarray:
    def apply_hue(img):
        low, high, prob = hue
        if rng.uniform(0., 1.) < prob:
            return img
        delta = rng.uniform(low, high)
        img = np.array(img.convert('HSV'))
        img[:, :, 0] = img[:, :, 0] + delta
        img = Image.fromarray(img, mode='HSV').convert('RGB')
        return img

    def apply_saturation(img):
        low, high, prob = saturation
        if rng.uniform(0., 1.) < prob:
            return img
        delta = rng.uniform(low, high)
        img = ImageEnhance.Color(img).enhance(delta)
        return img

    def apply_contrast(img):
        low, high, prob = contrast
        if rng.uniform(0., 1.) < prob:
            return img
        delta = rng.uniform(low, high)
        img = ImageEnhance.Contrast(img).enhance(delta)
        return img

    def apply_brightness(img):
        low, high, prob = brightness
        if rng.uniform(0., 1.) < prob:
            return img
        delta = rng.uniform(low, high)
        img = ImageEnhance.Brightness(img).enhance(delta)
        return img

    if rng.random() > prob:
        return img.astype(np.float32)
    img = Image.fromarray(img.astype(np.uint8))
    functions = [
        apply_brightness, apply_contrast,
        apply_saturation, apply_hue
    ]
    distortions = rng.permutation(functions)[:count]
    for func in distortions:
        img = func(img)
    img = np.asarray(img).astype(np.float32)
    return img


# ppdet/data/transform/operators.py @666f597: RandomExpand.apply (ratio=4., prob=0.5) and
# Pad.apply_image (pad_mode=-1); the image arrives float32, as RandomDistort before it in
# PaddleDetection's configs hands it on
@realop("PaddleDetection", f"{PPDET}: RandomExpand.apply, Pad.apply_image", dtype=np.float32)
def ppdet_random_expand(img: np.ndarray, rng: np.random.Generator, ratio: float = 4.,
                        prob: float = 0.5,
                        fill_value: tuple[float, float, float] = (127.5, 127.5, 127.5)
                        ) -> np.ndarray:
    im = img.astype(np.float32)
    if rng.uniform(0., 1.) < prob:
        return im

    height, width = im.shape[:2]
    ratio = rng.uniform(1., ratio)
    h = int(height * ratio)
    w = int(width * ratio)
    if not h > height or not w > width:
        return im
    y = rng.integers(0, h - height)
    x = rng.integers(0, w - width)

    # Pad(size=[h, w], pad_mode=-1, offsets=[x, y]).apply_image
    im_h, im_w = height, width
    canvas = np.ones((h, w, 3), dtype=np.float32)
    canvas *= np.array(fill_value, dtype=np.float32)
    canvas[y:y + im_h, x:x + im_w, :] = im.astype(np.float32)
    return canvas


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "ppcls_normalize_image": "lowers",
    "ppcls_rand_flip_image": "lowers",
    "ppcls_crop_image": "lowers",
    "ppcls_random_erasing": r"refuses: more than \d+ branch outcomes",
    "ppdet_random_flip": "lowers",
    "ppdet_random_distort": r"refuses: rng\.permutation of a list of function values \(a "
                            r"per-sample choice among Python objects",
    "ppdet_random_expand": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
