"""Shared fixtures: small real image datasets written to disk, and the GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def pattern_image(index: int, height: int, width: int) -> np.ndarray:
    """A deterministic HWC uint8 image that encodes ``index`` and varies over every pixel."""
    yy, xx = np.mgrid[0:height, 0:width]
    r = (xx * 7 + index * 13) % 256
    g = (yy * 5 + index * 29) % 256
    b = (xx + yy + index * 53) % 256
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def write_dataset(
    root: Path, n: int, *, fmt: str = "png", size: tuple[int, int] = (33, 47),
    label_fn=lambda i: i % 5, name: str = "manifest.csv",
) -> Path:
    """Write ``n`` images and a ``path,label`` CSV (with header) under ``root``; return its path.

    ``fmt`` is ``"png"``, ``"jpg"`` or ``"mixed"`` (alternating). Sizes vary a little per sample so
    that resizing is exercised.
    """
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = ["path,label"]
    for i in range(n):
        ext = fmt if fmt != "mixed" else ("png" if i % 2 == 0 else "jpg")
        h, w = size[0] + (i % 3), size[1] + (i % 4)
        rel = f"images/{i:05d}.{ext}"
        img = Image.fromarray(pattern_image(i, h, w))
        if ext == "jpg":
            img.save(root / rel, quality=90)
        else:
            img.save(root / rel)
        lines.append(f"{rel},{label_fn(i)}")
    path = root / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def png_dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path, 23, fmt="png")


@pytest.fixture
def mixed_dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path, 23, fmt="mixed", label_fn=lambda i: [300, 70000, 7][i % 3])


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# DALI's worker processes inherit this; keeps BLAS from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
