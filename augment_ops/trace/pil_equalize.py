"""PIL's ``ImageOps.equalize`` of a traced image, band by band, as PIL computes it.

PIL counts each band's 256 values, then builds a table in Python integers: with ``h`` the
counts, ``step = (sum of the counts - the count of the highest value present) // 255``, and
entry ``i`` is ``(step // 2 + h[0] + ... + h[i - 1]) // step``, or the identity where at most
one value is present or ``step`` is 0; ``Image.point`` clips the entries to 0..255. Every step
is integer arithmetic, exact wherever it runs.

DALI has no histogram operator and no operator that reads a per-sample table (``fn.lookup_table``
takes one constant table), so the whole of it is one Python call per batch: numpy's
``bincount`` and ``take`` on the CPU, torch's ``bincount``, ``cumsum`` and ``index_select`` on
the GPU, over the whole batch at once and on the image's memory (DLPack). :func:`model_holds`
checks the table rule against the installed Pillow's ``equalize`` once per process; a Pillow that
computes another table is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.ir import _new
from augment_ops.trace.sym import Sym

__all__ = ["CpuEqualize", "GpuEqualize", "equalize_bands", "equalize_tables", "model_holds"]


def equalize_bands(x: Sym) -> Sym:
    """A uint8 image (HxW, or HxWxC: each band on its own) through PIL's equalize tables."""
    node = x._checked()
    return Sym(_new("equalize", (node,), ("pil",), np.uint8, node.shape))


def equalize_tables(counts: np.ndarray) -> np.ndarray:
    """PIL's equalize tables (uint8, ``(..., 256)``) of value counts ``counts`` (``(...,
    256)``, one row per band)."""
    h = np.asarray(counts, dtype=np.int64)
    present = h > 0
    # the count of the highest value present: the last non-zero count of each row
    last = 255 - np.argmax(present[..., ::-1], axis=-1)
    top = np.take_along_axis(h, last[..., None], axis=-1)[..., 0]
    step = (h.sum(axis=-1) - top) // 255
    below = np.cumsum(h, axis=-1) - h  # h[0] + ... + h[i - 1]
    table = (step[..., None] // 2 + below) // np.maximum(step, 1)[..., None]
    identity = (present.sum(axis=-1) <= 1) | (step == 0)
    table = np.where(identity[..., None], np.arange(256), table)
    return np.clip(table, 0, 255).astype(np.uint8)


def _bands(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[1], -1)


class CpuEqualize:
    """Each sample equalized by numpy (``fn.python_function`` on the CPU, batch mode)."""

    def __call__(self, images: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for image in images:
            x = _bands(np.asarray(image))
            counts = np.stack([np.bincount(x[..., c].ravel(), minlength=256)
                               for c in range(x.shape[2])])
            tables = equalize_tables(counts)
            got = np.stack([tables[c][x[..., c]] for c in range(x.shape[2])], axis=-1)
            out.append(got.reshape(np.shape(image)))
        return out


class GpuEqualize:
    """The batch equalized on the GPU by torch, on DALI's memory
    (``fn.dl_tensor_python_function(device="gpu")``, batch mode): each pixel's key is its
    value plus 256 times its band's place in the batch, one ``bincount`` of the keys counts
    every band of every sample, and one ``index_select`` of the keys reads the tables. The
    previous batch's outputs are kept until the next call: DALI copies them on its stream after
    this call returns."""

    def __init__(self) -> None:
        self._previous: list[Any] = []

    def __call__(self, images: list[Any]) -> list[Any]:
        import torch
        from torch.utils.dlpack import from_dlpack, to_dlpack

        xs = [from_dlpack(x) for x in images]
        if not xs:
            return []
        device = xs[0].device
        with torch.cuda.device(device):
            bands = 1 if xs[0].ndim == 2 else xs[0].shape[2]
            sizes = [x.numel() for x in xs]
            keys = torch.cat([x.reshape(-1) for x in xs]).to(torch.int32)
            # band of each key: its place in the pixel (repeating 0..bands-1), plus the
            # sample's first band
            first = torch.arange(len(xs), dtype=torch.int32, device=device) * bands
            band = torch.repeat_interleave(first, torch.tensor(sizes, device=device) // bands,
                                           output_size=sum(sizes) // bands)
            band = (band.view(-1, 1) + torch.arange(bands, dtype=torch.int32,
                                                    device=device)).reshape(-1)
            keys += band * 256
            counts = torch.bincount(keys, minlength=len(xs) * bands * 256).view(-1, 256)
            tables = _tables_torch(counts).reshape(-1)
            out = tables.index_select(0, keys)
            outs = [o.view(x.shape) for o, x in zip(out.split(sizes), xs, strict=True)]
            torch.cuda.current_stream().synchronize()
        self._previous = outs
        return [to_dlpack(o) for o in outs]


def _tables_torch(h: Any) -> Any:
    """:func:`equalize_tables` in torch (int64 counts, one row per band)."""
    import torch

    present = h > 0
    last = 255 - torch.argmax(present.flip(-1).to(torch.uint8), dim=-1)
    top = h.gather(-1, last.unsqueeze(-1)).squeeze(-1)
    step = torch.div(h.sum(-1) - top, 255, rounding_mode="floor")
    below = torch.cumsum(h, -1) - h
    table = torch.div(torch.div(step, 2, rounding_mode="floor").unsqueeze(-1) + below,
                      step.clamp(min=1).unsqueeze(-1), rounding_mode="floor")
    identity = (present.sum(-1) <= 1) | (step == 0)
    ramp = torch.arange(256, device=h.device).expand_as(table)
    table = torch.where(identity.unsqueeze(-1), ramp, table)
    return table.clamp(0, 255).to(torch.uint8)


def _probe_images() -> list[np.ndarray]:
    """Images whose tables cover PIL's cases: one value, two values, ``step`` 0 and 1, clipped
    entries, and random images of several sizes."""
    rng = np.random.default_rng(5)
    images = [np.full((4, 5), 9, np.uint8), np.array([[0, 255]] * 3, np.uint8),
              np.array([[3] * 300 + [200] * 2], np.uint8),
              np.array([[1] * 255 + [7] * 40 + [90] * 3], np.uint8),
              np.array([[5] * 254 + [6] * 2], np.uint8)]
    for h, w in [(7, 9), (31, 40), (64, 48)]:
        images.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        images.append(rng.integers(40, 60, (h, w), dtype=np.uint8))
    return images


def model_holds(real: Any) -> bool:
    """Whether the installed Pillow's ``ImageOps.equalize`` (``real``) equals
    :class:`CpuEqualize` on :func:`_probe_images`, once per process and function."""
    if real not in _CHECKED:
        from PIL import Image

        run = CpuEqualize()
        _CHECKED[real] = all(
            np.array_equal(np.asarray(real(Image.fromarray(im))), run([im])[0])
            for im in _probe_images())
    return _CHECKED[real]


_CHECKED: dict[Any, bool] = {}
