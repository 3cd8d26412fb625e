"""numpy's pairwise float sum of a whole array, computed by torch on the GPU, bit for bit.

numpy sums an array of ``n`` values, taken in the order of its memory, as ``0.0 + s(0, n)``:
``s`` of fewer than 8 values adds them one by one to ``-0.0``; of up to 128, it keeps eight
running sums (value ``i`` goes to sum ``i % 8``, over the whole multiples of 8), adds them as
``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the rest one by one; of more, it is
``s`` of the first ``n2`` values plus ``s`` of the others, ``n2`` being half of ``n`` rounded
down to a multiple of 8. Every step is one float addition of two values, rounded, which a GPU
does as the CPU does. So a batch is summed with a few gathers and additions over all its
samples at once (:func:`batch_sums`): the trees' segments level by level down, the leaves'
running sums, then the levels back up.

:func:`model_holds` checks the rule against ``np.add.reduce`` of the installed numpy (once per
process, on torch's CPU tensors); where it does not hold, the sum is numpy's, on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["GpuNumpySum", "batch_sums", "model_holds"]

#: numpy's block: up to this many values are summed in eight running sums.
_BLOCK = 128


def batch_sums(flats: list[Any]) -> list[Any]:
    """numpy's ``np.add.reduce`` of each of ``flats`` (1-D torch tensors of one float dtype, on
    one device, each a sample's values in the order of the numpy array's memory), as 0-D
    tensors. The trees of every sample are walked together on the tensors' device: down, each
    level's segments longer than a block split in two (the others carried down as they are);
    the leaves' running sums; up, each level's split segments the sum of their two halves."""
    import torch

    if not flats:
        return []
    device, dtype = flats[0].device, flats[0].dtype
    sizes = torch.tensor([int(f.numel()) for f in flats], dtype=torch.int64, device=device)
    start = torch.cumsum(sizes, 0) - sizes
    length = sizes
    levels = []
    while True:
        split = length > _BLOCK
        if not bool(split.any()):
            break
        half = length // 2
        half = half - half % 8
        children = torch.where(split, 2, 1)
        first = torch.cumsum(children, 0) - children  # each segment's first child
        total = int(children.sum())
        next_start = torch.empty(total, dtype=torch.int64, device=device)
        next_length = torch.empty(total, dtype=torch.int64, device=device)
        next_start[first] = start
        next_length[first] = torch.where(split, half, length)
        second = first[split] + 1
        next_start[second] = start[split] + half[split]
        next_length[second] = length[split] - half[split]
        levels.append((split, first))
        start, length = next_start, next_length
    # -0.0 pads: x + (-0.0) is x for every x, -0.0 included
    pad = int(sizes.sum())
    data = torch.cat([*(f.reshape(-1) for f in flats),
                      torch.full((1,), -0.0, dtype=dtype, device=device)])
    groups = torch.where(length >= 8, length // 8, torch.zeros_like(length))
    g = torch.arange(_BLOCK // 8, device=device)
    j = torch.arange(8, device=device)
    idx = start[:, None, None] + g[None, :, None] * 8 + j[None, None, :]
    idx = torch.where(g[None, :, None] < groups[:, None, None], idx, pad)
    blocks = data.index_select(0, idx.reshape(-1)).view(-1, _BLOCK // 8, 8)
    r = blocks[:, 0]
    for k in range(1, _BLOCK // 8):
        r = r + blocks[:, k]
    value = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + \
        ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    rest = length - groups * 8
    k7 = torch.arange(7, device=device)
    ridx = torch.where(k7[None, :] < rest[:, None], start[:, None] + groups[:, None] * 8 + k7,
                       pad)
    tail = data.index_select(0, ridx.reshape(-1)).view(-1, 7)
    for k in range(7):
        value = value + tail[:, k]
    for split, first in reversed(levels):
        left = value[first]
        right = value[torch.where(split, first + 1, first)]
        value = torch.where(split, left + right, left)
    out = value + 0.0  # numpy starts from the identity 0.0: -0.0 becomes 0.0
    return list(out.unbind(0))


def _probes() -> list[np.ndarray]:
    rs = np.random.default_rng(3)
    out = [np.array([-0.0]), np.array([-0.0, -0.0]), np.zeros(0)]
    for n in (*range(1, 20), 63, 64, 127, 128, 129, 135, 136, 257, 1000, 4097, 70001):
        out.append(rs.standard_normal(n) * 10.0 ** rs.uniform(-4, 6, n))
    return out


def model_holds() -> bool:
    """Whether :func:`batch_sums` equals this numpy's ``np.add.reduce`` on probes of float32 and
    float64 values of many lengths (on torch's CPU tensors), once per process."""
    if "pairwise" not in _CHECKED:
        import torch

        ok = True
        for dt in (np.float32, np.float64):
            arrays = [p.astype(dt) for p in _probes()]
            got = batch_sums([torch.from_numpy(a) for a in arrays])
            for a, g in zip(arrays, got, strict=True):
                want = np.add.reduce(a)
                ok = ok and np.asarray(g.numpy()).tobytes() == np.asarray(want).tobytes()
        _CHECKED["pairwise"] = ok
    return _CHECKED["pairwise"]


_CHECKED: dict[str, bool] = {}


class GpuNumpySum:
    """numpy's sum of each sample's whole array on the GPU (``fn.dl_tensor_python_function``,
    batch mode), the array's values taken in the order of the numpy path's memory (``order``:
    its axes from the outermost to the innermost). The previous batch's outputs are kept until
    the next call: DALI copies them on its stream after this call returns."""

    def __init__(self, order: tuple[int, ...]) -> None:
        self.order = order
        self._previous: list[Any] = []

    def __call__(self, arrays: list[Any]) -> list[Any]:
        import torch
        from torch.utils.dlpack import from_dlpack, to_dlpack

        xs = [from_dlpack(a) for a in arrays]
        if not xs:
            return []
        identity = tuple(range(xs[0].ndim))
        with torch.cuda.device(xs[0].device):
            flats = [x.reshape(-1) if self.order == identity else
                     x.permute(*self.order).reshape(-1) for x in xs]
            outs = batch_sums(flats)
            torch.cuda.current_stream().synchronize()
        self._previous = outs
        return [to_dlpack(o) for o in outs]
