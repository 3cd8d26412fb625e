"""Augmentations written the way users write them, for ``bench_user_ops.py``.

None of these is a built-in: they are plain numpy functions registered with ``@augment_op``,
with the habits of real augmentation code (Python ``int()`` around draws, ``max``/``min`` on
bounds, ``if rng.random() < p``, float64 arithmetic from mixing ``uint8`` with Python floats,
``copy()`` then slice assignment). ``gpu=True`` says the same code also runs on CuPy arrays,
which is what a user who wants the ``gpu`` path declares. ``posterize`` uses a lookup table
(fancy indexing) and ``box_blur`` ``np.pad``, which the tracer does not lower: they show the
fallback, ``box_blur`` with an op heavier than decoding.

The module registers its ops on import, in every process that imports it (DataLoader workers
and DALI's spawned readers included).
"""

from __future__ import annotations

import numpy as np

from augment_ops import augment_op


@augment_op(num_outputs=4, gpu=True, min_size=2, replace=True)
def tiles(img):
    """Four quadrants, the user's own version of a 2x2 grid."""
    h, w = img.shape[:2]
    return (img[: h // 2, : w // 2], img[: h // 2, w // 2:],
            img[h // 2:, : w // 2], img[h // 2:, w // 2:])


@augment_op(gpu=True, replace=True)
def random_flip(img, rng, p=0.5):
    """Mirror left-right with probability p."""
    if rng.random() < p:
        return img[:, ::-1]
    return img


@augment_op(gpu=True, replace=True)
def jitter(img, rng, brightness=0.2, contrast=0.2):
    """Brightness and contrast jitter around mid-grey."""
    c = rng.uniform(1 - contrast, 1 + contrast)
    b = rng.uniform(-brightness, brightness) * 255
    out = (img.astype(np.float32) - 128) * c + 128 + b
    return np.clip(out, 0, 255).astype(np.uint8)


@augment_op(gpu=True, replace=True)
def gray(img):
    """Luma, repeated over three channels."""
    y = img[..., 0] * 0.299 + img[..., 1] * 0.587 + img[..., 2] * 0.114
    y = y.astype(np.uint8)
    return np.stack([y, y, y], axis=-1)


@augment_op(gpu=True, replace=True)
def cutout(img, rng, size=64):
    """Zero a size x size square centred at a random pixel (clipped at the borders)."""
    h, w = img.shape[:2]
    y = int(rng.integers(0, h))
    x = int(rng.integers(0, w))
    out = img.copy()
    out[max(0, y - size // 2): y + size // 2, max(0, x - size // 2): x + size // 2] = 0
    return out


_LEVELS = (np.arange(256) // 64 * 64 + 32).astype(np.uint8)


@augment_op(replace=True)
def posterize(img):
    """Four levels per channel through a lookup table."""
    return _LEVELS[img]


@augment_op(replace=True)
def box_blur(img, k=5):
    """Mean over a k x k window from shifted slices of an edge-padded copy (no scipy): a heavy
    op (k * k passes over the image) that does not trace (np.pad)."""
    pad = k // 2
    h, w = img.shape[:2]
    p = np.pad(img.astype(np.float32), ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    acc = np.zeros(img.shape, np.float32)
    for dy in range(k):
        for dx in range(k):
            acc += p[dy:dy + h, dx:dx + w]
    return (acc / (k * k)).astype(np.uint8)


#: The suite: name -> (transforms, ops) for ``extsrc.Loader``. Single-output ops replace the image
#: (``transforms``), so their pipeline does the same resize work as the resize-only ceiling;
#: ``tiles`` adds four outputs, each resized too.
SUITE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "tiles": ((), ("tiles",)),
    "random_flip": (("random_flip",), ()),
    "jitter": (("jitter",), ()),
    "gray": (("gray",), ()),
    "cutout": (("cutout",), ()),
    "chain_jitter_tiles": (("jitter",), ("tiles",)),
    "posterize": (("posterize",), ()),
    "box_blur": (("box_blur",), ()),
}
