"""Built-in numpy ops: ``grid2x2`` and a handful of common image augmentations.

Each op is plain numpy on one HWC image, the reference that any faster implementation must match.
Random ops draw only from the ``rng`` they are given. All of them trace
(:mod:`augment_ops.trace`), so their native path is generated from these functions.
"""

from __future__ import annotations

import numpy as np

from augment_ops.registry import augment_op

__all__ = [
    "center_crop", "grayscale", "grid2x2", "hflip", "random_crop", "random_hflip", "rot90", "vflip",
]


@augment_op(num_outputs=4, min_size=2, gpu=True)
def grid2x2(img: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Four quadrant tiles: top-left, top-right, bottom-left, bottom-right.

    The split is at ``h // 2`` and ``w // 2``, so for odd sizes the right and bottom tiles are one
    pixel larger and every pixel lands in exactly one tile.
    """
    h, w = img.shape[:2]
    hh, hw = h // 2, w // 2
    return img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]


@augment_op(gpu=True)
def hflip(img: np.ndarray) -> np.ndarray:
    """Mirror left-right."""
    return img[:, ::-1]


@augment_op(gpu=True)
def vflip(img: np.ndarray) -> np.ndarray:
    """Mirror top-bottom."""
    return img[::-1]


@augment_op(gpu=True)
def rot90(img: np.ndarray, k: int = 1) -> np.ndarray:
    """Rotate by ``k`` quarter turns counter-clockwise."""
    return np.rot90(img, k=k, axes=(0, 1))


@augment_op
def grayscale(img: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma, repeated over three channels so it stays an RGB image.

    The luma is the float32 sum ``(r*0.299 + g*0.587) + b*0.114`` in this order, written out
    rather than ``@``: numpy's ``@`` sums in the host BLAS's order, and the result would then
    differ between machines and from the native path in the last bit, and after rounding by one
    grey level.
    """
    x = img[..., :3].astype(np.float32)
    w = np.array([0.299, 0.587, 0.114], dtype=np.float32)
    y = x[..., 0] * w[0] + x[..., 1] * w[1] + x[..., 2] * w[2]
    y = np.clip(np.rint(y), 0, 255).astype(np.uint8)
    return np.repeat(y[..., None], 3, axis=2)


@augment_op(gpu=True)
def random_hflip(img: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    """Mirror left-right with probability ``p``."""
    return img[:, ::-1] if rng.random() < p else img


@augment_op(gpu=True)
def random_crop(img: np.ndarray, rng: np.random.Generator, size: int = 64) -> np.ndarray:
    """A ``size`` x ``size`` window at a random position (the whole side where it is smaller)."""
    h, w = img.shape[:2]
    ch, cw = min(size, h), min(size, w)
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    return img[y:y + ch, x:x + cw]


@augment_op(gpu=True)
def center_crop(img: np.ndarray, size: int = 64) -> np.ndarray:
    """The central ``size`` x ``size`` window (the whole side where it is smaller)."""
    h, w = img.shape[:2]
    ch, cw = min(size, h), min(size, w)
    y, x = (h - ch) // 2, (w - cw) // 2
    return img[y:y + ch, x:x + cw]
