"""The ops users meet first: the README's examples (this repository's README.md, section
"Quick start") and the built-in ``grid2x2`` (augment_ops/builtin.py), copied as a user copies
them into their own code."""

from __future__ import annotations

import numpy as np

from realops import realop


# README.md: jitter
@realop("README", "README.md: jitter")
def readme_jitter(img: np.ndarray, rng: np.random.Generator, amount: int = 20) -> np.ndarray:
    shift = int(rng.integers(-amount, amount + 1))   # an `rng` parameter makes the op random
    return np.clip(img.astype(np.int16) + shift, 0, 255).astype(np.uint8)


# README.md: halves
@realop("README", "README.md: halves", num_outputs=2)
def readme_halves(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = img.shape[1] // 2
    return img[:, :w], img[:, w:]


# augment_ops/builtin.py: grid2x2
@realop("README", "augment_ops/builtin.py: grid2x2", num_outputs=4, min_size=2)
def readme_grid2x2(img: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    h, w = img.shape[:2]
    hh, hw = h // 2, w // 2
    return img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "readme_jitter": "lowers",
    "readme_halves": "lowers",
    "readme_grid2x2": "lowers",
}
