"""Augmentations of timm 1.0.11 (huggingface/pytorch-image-models, tag v1.0.11). timm's
auto-augment ops take PIL images and its random erasing a CHW tensor: a user feeding numpy
HWC images converts at the edges (``Image.fromarray`` / ``np.asarray``, ``torch.from_numpy``),
as these do. ``random`` -> ``rng`` (``random.randint(a, b)`` -> ``rng.integers(a, b,
endpoint=True)``)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: RUF046

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageOps

from realops import realop

SRC = "huggingface/pytorch-image-models@v1.0.11"


# timm/data/auto_augment.py @v1.0.11: solarize_add
@realop("timm", f"{SRC} timm/data/auto_augment.py: solarize_add")
def timm_solarize_add(image: np.ndarray, add: int = 40, thresh: int = 128) -> np.ndarray:
    img = Image.fromarray(image)
    lut = []
    for i in range(256):
        if i < thresh:
            lut.append(min(255, i + add))
        else:
            lut.append(i)

    if img.mode in ("L", "RGB"):
        if img.mode == "RGB" and len(lut) == 256:
            lut = lut + lut + lut
        return np.asarray(img.point(lut))

    return np.asarray(img)


# timm/data/auto_augment.py @v1.0.11: posterize
@realop("timm", f"{SRC} timm/data/auto_augment.py: posterize")
def timm_posterize(image: np.ndarray, bits_to_keep: int = 4) -> np.ndarray:
    img = Image.fromarray(image)
    if bits_to_keep >= 8:
        return np.asarray(img)
    return np.asarray(ImageOps.posterize(img, bits_to_keep))


# timm/data/random_erasing.py @v1.0.11: RandomErasing._erase (mode='const': _get_pixels gives
# zeros), on a CHW tensor made from the HWC image
@realop("timm", f"{SRC} timm/data/random_erasing.py: RandomErasing._erase")
def timm_random_erasing(image: np.ndarray, rng: np.random.Generator, probability: float = 0.5,
                        min_area: float = 0.02, max_area: float = 1 / 3,
                        min_aspect: float = 0.3, min_count: int = 1,
                        max_count: int = 1) -> np.ndarray:
    import torch

    img = torch.from_numpy(image.copy()).permute(2, 0, 1)
    chan, img_h, img_w = img.shape
    max_aspect = 1 / min_aspect
    log_aspect_ratio = (math.log(min_aspect), math.log(max_aspect))
    if rng.random() > probability:
        return image
    area = img_h * img_w
    count = min_count if min_count == max_count else \
        rng.integers(min_count, max_count, endpoint=True)
    for _ in range(count):
        for _attempt in range(10):
            target_area = rng.uniform(min_area, max_area) * area / count
            aspect_ratio = math.exp(rng.uniform(*log_aspect_ratio))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < img_w and h < img_h:
                top = rng.integers(0, img_h - h, endpoint=True)
                left = rng.integers(0, img_w - w, endpoint=True)
                img[:, top:top + h, left:left + w] = torch.zeros((chan, 1, 1), dtype=img.dtype)
                break
    return img.permute(1, 2, 0).numpy()


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "timm_solarize_add": "lowers",
    "timm_posterize": "lowers",
    "timm_random_erasing": r"refuses: torch\.from_numpy is outside numpy",
}
