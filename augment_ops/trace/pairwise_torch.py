"""numpy's pairwise float sum of a whole array, computed by torch on the GPU, bit for bit.

numpy sums an array of ``n`` values, taken in the order of its memory, as ``0.0 + s(0, n)``:
``s`` of fewer than 8 values adds them one by one to ``-0.0``; of up to 128, it keeps eight
running sums (value ``i`` goes to sum ``i % 8``, over the whole multiples of 8), adds them as
``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the rest one by one; of more, it is
``s`` of the first ``n2`` values plus ``s`` of the others, ``n2`` being half of ``n`` rounded
down to a multiple of 8. Every step is one float addition of two values, rounded, which a GPU
does as the CPU does. So the tree is built once per size (:func:`_tree`), and a batch is summed
with a few gathers and additions: the leaves' running sums over the whole batch at once
(:func:`batch_sums`), then the tree's nodes level by level.

:func:`model_holds` checks the rule against ``np.add.reduce`` of the installed numpy (once per
process, on torch's CPU tensors); where it does not hold, the sum is numpy's, on the CPU.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["GpuNumpySum", "batch_sums", "model_holds"]

#: numpy's block: up to this many values are summed in eight running sums.
_BLOCK = 128


@dataclass(frozen=True)
class _Tree:
    """The pairwise tree of ``n`` values: the leaves' lengths in order, then the inner nodes,
    each the sum of two values (``left``, ``right``: indices into the leaves' values followed
    by the inner nodes'), at a ``height`` above the leaves; the root is the last inner node
    (or the only leaf)."""

    leaves: np.ndarray
    left: np.ndarray
    right: np.ndarray
    height: np.ndarray

    @property
    def root(self) -> int:
        return len(self.leaves) + len(self.left) - 1

    @property
    def root_height(self) -> int:
        return int(self.height[-1]) if len(self.height) else 0


@functools.lru_cache(maxsize=4096)
def _tree(n: int) -> _Tree:
    empty = np.zeros(0, np.int64)
    if n <= _BLOCK:
        return _Tree(np.array([n], np.int64), empty, empty, empty)
    half = n // 2
    half -= half % 8
    a, b = _tree(half), _tree(n - half)
    la, lb, ia = len(a.leaves), len(b.leaves), len(a.left)
    total = la + lb

    def in_a(v: np.ndarray) -> np.ndarray:
        return np.where(v < la, v, v - la + total)

    def in_b(v: np.ndarray) -> np.ndarray:
        return np.where(v < lb, v + la, v - lb + total + ia)

    return _Tree(
        np.concatenate([a.leaves, b.leaves]),
        np.concatenate([in_a(a.left), in_b(b.left), in_a(np.array([a.root]))]),
        np.concatenate([in_a(a.right), in_b(b.right), in_b(np.array([b.root]))]),
        np.concatenate([a.height, b.height, [max(a.root_height, b.root_height) + 1]]))


def batch_sums(flats: list[Any]) -> list[Any]:
    """numpy's ``np.add.reduce`` of each of ``flats`` (1-D torch tensors of one float dtype, on
    one device, each a sample's values in the order of the numpy array's memory), as 0-D
    tensors."""
    import torch

    if not flats:
        return []
    device, dtype = flats[0].device, flats[0].dtype
    trees = [_tree(int(f.numel())) for f in flats]
    leaf_counts = np.array([len(t.leaves) for t in trees], np.int64)
    inner_counts = np.array([len(t.left) for t in trees], np.int64)
    sizes = np.array([f.numel() for f in flats], np.int64)
    leaves_total = int(leaf_counts.sum())
    leaf_base = np.cumsum(leaf_counts) - leaf_counts
    inner_base = leaves_total + np.cumsum(inner_counts) - inner_counts
    lengths = np.concatenate([t.leaves for t in trees])
    starts = np.concatenate([np.cumsum(t.leaves) - t.leaves + off
                             for t, off in zip(trees, np.cumsum(sizes) - sizes, strict=True)])
    pad = int(sizes.sum())
    # -0.0 pads: x + (-0.0) is x for every x, -0.0 included
    data = torch.cat([*(f.reshape(-1) for f in flats),
                      torch.full((1,), -0.0, dtype=dtype, device=device)])
    start = torch.from_numpy(starts).to(device)
    length = torch.from_numpy(lengths).to(device)
    groups = torch.where(length >= 8, length // 8, torch.zeros_like(length))
    g = torch.arange(_BLOCK // 8, device=device)
    j = torch.arange(8, device=device)
    idx = start[:, None, None] + g[None, :, None] * 8 + j[None, None, :]
    idx = torch.where(g[None, :, None] < groups[:, None, None], idx, pad)
    blocks = data[idx]  # (leaves, 16, 8)
    r = blocks[:, 0]
    for k in range(1, _BLOCK // 8):
        r = r + blocks[:, k]
    value = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + \
        ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    rest = length - groups * 8
    k7 = torch.arange(7, device=device)
    ridx = torch.where(k7[None, :] < rest[:, None], start[:, None] + groups[:, None] * 8 + k7,
                       pad)
    tail = data[ridx]
    for k in range(7):
        value = value + tail[:, k]
    values = torch.empty(leaves_total + int(inner_counts.sum()), dtype=dtype, device=device)
    values[:leaves_total] = value
    if inner_counts.any():
        def glob(v: np.ndarray, t: _Tree, lb: int, ib: int) -> np.ndarray:
            return np.where(v < len(t.leaves), v + lb, v - len(t.leaves) + ib)

        heights = np.concatenate([t.height for t in trees])
        outs = np.concatenate([np.arange(len(t.left)) + ib
                               for t, ib in zip(trees, inner_base, strict=True)])
        lefts = np.concatenate([glob(t.left, t, lb, ib)
                                for t, lb, ib in zip(trees, leaf_base, inner_base, strict=True)])
        rights = np.concatenate([glob(t.right, t, lb, ib)
                                 for t, lb, ib in zip(trees, leaf_base, inner_base, strict=True)])
        order = np.argsort(heights, kind="stable")
        bounds = np.searchsorted(heights[order], np.arange(1, heights.max() + 2))
        plan = torch.from_numpy(np.stack([outs[order], lefts[order], rights[order]])).to(device)
        for lo, hi in itertools.pairwise(bounds):
            o, a, b = plan[:, lo:hi]
            values[o] = values[a] + values[b]
    roots = torch.from_numpy(np.array([
        (ib + len(t.left) - 1) if len(t.left) else lb
        for t, lb, ib in zip(trees, leaf_base, inner_base, strict=True)])).to(device)
    out = values[roots] + 0.0  # numpy starts from the identity 0.0: -0.0 becomes 0.0
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
