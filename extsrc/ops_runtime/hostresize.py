"""Resizing on the host with Pillow, for CPU loaders: in the op workers, right after the op.

DALI's CPU resize (linear with antialiasing, its default) takes 3.3 ms for a 500x375 image
to 224x224 on one core; Pillow's bilinear resize, which also widens its filter when shrinking,
takes 1.6 ms (``benchmarks/cpu_resize_cost.py``). On a machine without a GPU that difference
decides whether extsrc keeps up with a PyTorch DataLoader, so CPU loaders resize their uint8
image outputs with Pillow: in the op pool's workers, after the op that made them (the main
image with the outputs of the first such op that reads it), or in a resize-only step for the
other images. GPU loaders resize with DALI on the GPU.

The sizes follow :class:`extsrc.graph.batchformat.BatchFormat`'s modes: ``"stretch"`` scales each
side to the requested size; ``"shorter_side"`` scales, keeping the aspect ratio, until the image
covers the requested size, then cuts the centre. Pixel values differ slightly from DALI's
resamplers; they do not depend on the number or kind of op workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["HostResize", "ResizeOnly", "ResizedOutputs", "host_resizable"]


def host_resizable(dtype: Any, ndim: int) -> bool:
    """Whether images of this dtype and rank are resized on the host: uint8 HWC or HW."""
    return np.dtype(dtype) == np.uint8 and ndim in (2, 3)


@dataclass(frozen=True)
class HostResize:
    """Resize one uint8 ``HWC`` (or ``HW``) image to ``size`` ``(h, w)`` in ``mode``."""

    size: tuple[int, int]
    mode: str = "shorter_side"

    def __post_init__(self) -> None:
        h, w = self.size
        if h < 1 or w < 1:
            raise ValueError(f"resize needs positive sides, got {self.size}")
        if self.mode not in ("shorter_side", "stretch"):
            raise ValueError(f"resize mode must be 'shorter_side' or 'stretch', got {self.mode!r}")

    def scaled_size(self, height: int, width: int) -> tuple[int, int]:
        """``(h, w)`` the image is scaled to before the centre cut (the requested size for
        ``"stretch"``)."""
        h, w = self.size
        if self.mode == "stretch":
            return h, w
        scale = max(h / height, w / width)
        # Rounded half up, as DALI's resize rounds its output size.
        return (max(h, math.floor(height * scale + 0.5)),
                max(w, math.floor(width * scale + 0.5)))

    def __call__(self, img: np.ndarray) -> np.ndarray:
        from PIL import Image

        if img.dtype != np.uint8 or img.ndim not in (2, 3):
            raise ValueError(f"host resize takes uint8 HWC or HW images, got {img.dtype} with "
                             f"shape {img.shape}")
        sh, sw = self.scaled_size(img.shape[0], img.shape[1])
        if (sh, sw) == img.shape[:2]:
            out = img
        elif img.ndim == 3 and img.shape[2] == 3:
            out = np.asarray(Image.fromarray(img, "RGB").resize((sw, sh), Image.BILINEAR))
        elif img.ndim == 2:
            out = np.asarray(Image.fromarray(img, "L").resize((sw, sh), Image.BILINEAR))
        else:
            # Any other channel count, one channel at a time: Pillow's RGBA resize weighs the
            # colours by alpha, and DALI treats every channel alike.
            out = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(img[..., c]), "L")
                                       .resize((sw, sh), Image.BILINEAR))
                            for c in range(img.shape[2])], axis=-1)
        h, w = self.size
        # The centre, rounded half up as DALI's crop places it (crop_pos 0.5).
        top, left = (sh - h + 1) // 2, (sw - w + 1) // 2
        return np.ascontiguousarray(out[top:top + h, left:left + w])


class ResizedOutputs:
    """An op whose outputs leave resized: what the numpy path runs on a CPU loader in place of
    the op, so the resize happens in the worker that ran it. ``with_input``: the op's input
    image leaves resized too, as a first output (the main image of a loader with ops, which
    would otherwise make a trip of its own through the pool). Picklable when the op is."""

    def __init__(self, op: Any, resize: HostResize, with_input: bool = False) -> None:
        self.op = op
        self.resize = resize
        self.with_input = with_input

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def random(self) -> bool:
        return self.op.random

    @property
    def num_outputs(self) -> int:
        return self.op.num_outputs + self.with_input

    def apply(self, img: np.ndarray, rng: Any = None) -> tuple[np.ndarray, ...]:
        outs = tuple(self.resize(o) for o in self.op.apply(img, rng))
        return (self.resize(img), *outs) if self.with_input else outs


class ResizeOnly:
    """The host resize as an op of its own, for an image that no numpy op made (no op, a native
    op's outputs, an op before other ops).

    A process pool runs it in threads of this process until its worker processes are up
    (:meth:`extsrc.ops_runtime.pool.OpPool.run`): it is extsrc's own code, and Pillow releases the
    GIL while it resamples, so the first batches need not wait for the workers' interpreters to
    start (0.2 of the 0.4 s to the first batch of a CPU loader); the later ones run in the
    workers, which scale past the parts of a resize that hold the GIL. Either way gives the
    same pixels."""

    name = "resize"
    random = False
    num_outputs = 1
    #: May run in threads of a process pool while its workers start (extsrc's own code).
    in_threads = True

    def __init__(self, resize: HostResize) -> None:
        self.resize = resize

    def apply(self, img: np.ndarray, rng: Any = None) -> tuple[np.ndarray, ...]:
        return (self.resize(img),)
