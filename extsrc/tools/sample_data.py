"""A small generated image dataset for the demo, the notebooks and the tests.

Each class is a shape (circle, square, triangle, ...) drawn at a random place, size and colour over
a random two-colour gradient, so previews and the ``grid2x2`` tiles look like something. The
images are real files (JPEG or PNG, written with Pillow) listed in a ``manifest.csv``
(``path,label`` with class names as labels), exactly what users point extsrc at.

>>> from extsrc.tools.sample_data import make_sample_dataset
>>> manifest = make_sample_dataset("/tmp/shapes", n=16)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["SHAPES", "make_sample_dataset"]

#: Class names, in the order classes are assigned (``num_classes`` takes the first ones).
SHAPES: tuple[str, ...] = (
    "circle", "square", "triangle", "cross", "diamond", "ring", "stripes", "dots",
)
_FORMATS = ("jpg", "png", "mixed")


def _gradient(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """An HWC uint8 linear gradient between two random colours, in a random direction."""
    c0, c1 = rng.integers(0, 256, size=(2, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = xx / max(w - 1, 1) * np.cos(angle) + yy / max(h - 1, 1) * np.sin(angle)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0 + (c1 - c0) * t[..., None]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int],
                colour: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    cx, cy, r = (x0 + x1) // 2, (y0 + y1) // 2, (x1 - x0) // 2
    width = max(2, r // 4)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=colour)
    elif shape == "cross":
        draw.rectangle((cx - width, y0, cx + width, y1), fill=colour)
        draw.rectangle((x0, cy - width, x1, cy + width), fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=colour)
    elif shape == "ring":
        draw.ellipse(box, outline=colour, width=width)
    elif shape == "stripes":
        for x in range(x0, x1, 2 * width):
            draw.rectangle((x, y0, min(x + width - 1, x1), y1), fill=colour)
    else:  # dots
        step = max(3, r // 2)
        for y in range(y0 + step // 2, y1, step):
            for x in range(x0 + step // 2, x1, step):
                draw.ellipse((x - width, y - width, x + width, y + width), fill=colour)


def make_sample_dataset(
    root: str | os.PathLike[str],
    n: int = 64,
    *,
    size: tuple[int, int] = (96, 128),
    num_classes: int = 4,
    fmt: str = "jpg",
    seed: int = 0,
) -> Path:
    """Write ``n`` labelled images under ``root`` and return the path of its ``manifest.csv``.

    Args:
        root: folder to write into (created if missing); images go to ``root/images/``.
        n: number of images; labels cycle through the classes, so every class appears.
        size: ``(height, width)`` of every image.
        num_classes: how many of :data:`SHAPES` to use (1 to 8).
        fmt: ``"jpg"``, ``"png"`` (lossless: decoded pixels equal what was written) or
            ``"mixed"`` (alternating).
        seed: the same seed writes the same images.

    The manifest is a CSV with a ``path,label`` header, relative paths and class names as
    labels; :func:`extsrc.read_manifest` turns the names into indices into ``manifest.classes``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if not 1 <= num_classes <= len(SHAPES):
        raise ValueError(f"num_classes must be in 1..{len(SHAPES)}, got {num_classes!r}")
    if fmt not in _FORMATS:
        raise ValueError(f"fmt must be one of {list(_FORMATS)}, got {fmt!r}")
    h, w = int(size[0]), int(size[1])
    if h < 8 or w < 8:
        raise ValueError(f"size must be at least (8, 8), got {size!r}")
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = ["path,label"]
    for i in range(n):
        shape = SHAPES[i % num_classes]
        img = Image.fromarray(_gradient(rng, h, w))
        side = int(rng.integers(min(h, w) // 3, int(min(h, w) * 0.8) + 1))
        x0 = int(rng.integers(0, w - side + 1))
        y0 = int(rng.integers(0, h - side + 1))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        _draw_shape(ImageDraw.Draw(img), shape, (x0, y0, x0 + side - 1, y0 + side - 1), colour)
        ext = fmt if fmt != "mixed" else ("png" if i % 2 == 0 else "jpg")
        rel = f"images/{i:05d}_{shape}.{ext}"
        if ext == "jpg":
            img.save(root / rel, quality=90)
        else:
            img.save(root / rel)
        lines.append(f"{rel},{shape}")
    manifest = root / "manifest.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest
