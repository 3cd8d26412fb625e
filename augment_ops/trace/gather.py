"""Per-sample lookup tables: a table numpy computes for each sample from its draws, read at the
pixel values.

A table built with float math DALI does not reproduce bit for bit (``np.exp``, ``**`` by a drawn
exponent: imgaug's ``GammaContrast`` and ``SigmoidContrast``, albumentations' ``RandomGamma``,
tensorpack's ``Gamma``) cannot be pushed onto the pixels as an elementwise expression
(:mod:`augment_ops.trace.lookup`), and one that depends on draws cannot be a constant table
(:mod:`augment_ops.trace.tables`). Such a table is computed by numpy itself, beside the op's other
draws, in the source's reader processes (:class:`augment_ops.trace.lower_dali.SampleScalars`),
with the op's own ufuncs and dtypes: each sample's table is the numpy path's table. Float math
of a uint8 image and draws (``(img / 255) ** gamma``) becomes the same: the expression evaluated
on ``np.arange(256)`` with the sample's draws, read at the pixels.

DALI has no operator that reads a per-sample table at per-pixel positions (``fn.lookup_table``
takes one constant table, ``fn.experimental.remap`` needs maps of its input's size), so the read
is one Python call per batch: numpy's ``take`` on the CPU, torch's on the GPU (through DLPack, on
the image's memory), exact on both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, Traced, TraceError, _new, bottom_up, const

__all__ = ["ELEMENTWISE", "GpuTableRead", "TableRead", "draw_only", "gather", "gathered_tables",
           "read_tables", "table_expression"]

#: Elementwise node kinds (a result at a position depends only on the arguments there).
ELEMENTWISE = ("bin", "un", "cast", "where")

#: Node kinds the readers' numpy program computes (:class:`augment_ops.trace.scalar_stage.
#: ScalarProgram`), the ones a per-sample table may be built with.
_NUMPY_NODES = frozenset({"const", "uniform", "cast", "bin", "un", "where", "select", "stack",
                          "take", "reshape", "broadcast"})


def draw_only(n: Node, memo: dict[int, bool] | None = None) -> bool:
    """Whether ``n`` is computed from the op's draws and constants alone (not from the image,
    its sizes or DALI's noise), by nodes numpy computes in the readers."""
    memo = {} if memo is None else memo

    def numpys(m: Node) -> bool:  # the node itself, whatever its arguments
        return not (m.pixel or m.op not in _NUMPY_NODES or (
            m.op in ("bin", "un") and not hasattr(np, m.attrs[0])) or
            (m.op == "take" and not isinstance(m.args[1], int)) or
            not all(isinstance(d, int) for d in m.shape))

    def args(m: Node) -> list[Node]:
        return [a for a in m.args if isinstance(a, Node)] if numpys(m) else []

    return bottom_up(n, memo, args, lambda m: numpys(m) and all(memo[id(a)] for a in args(m)))


def gather(table: Node, pos: Node, construct: str) -> Node:
    """``table`` (a 1-D per-sample table of draws) read at ``pos`` (uint8 or uint16 positions
    within it); raises :class:`TraceError` naming ``construct`` where numpy cannot compute the
    table in the readers."""
    if table.ndim != 1 or not isinstance(table.shape[0], int):
        raise TraceError(f"{construct}: a per-sample table of shape {list(table.shape)} (only a "
                         "1-D table of a fixed length is lowered)")
    if not draw_only(table):
        raise TraceError(f"{construct}: a table computed from the image's pixels or sizes with "
                         "float math DALI does not reproduce bit for bit (numpy computes a "
                         "per-sample table only from the op's draws and constants)")
    if table.dtype.kind not in "iuf" or table.dtype.itemsize > 8:
        # (booleans: not read through DLPack on the GPU path)
        raise TraceError(f"{construct}: a per-sample table of {table.dtype} values")
    return _new("gather", (table, pos), (), table.dtype, pos.shape)


def table_expression(n: Node, src: Node, entries: int = 256) -> Node | None:
    """The elementwise expression ``n`` of the uint8 array ``src`` and per-sample scalars, with
    ``src`` replaced by its ``entries`` possible values (``np.arange``): the per-sample table
    whose entry ``v`` is ``n`` where ``src`` is ``v``. None where ``n`` reads another array."""
    positions = const(np.arange(entries, dtype=src.dtype))
    memo: dict[int, Node | None] = {id(src): positions}

    def at(m: Node) -> Node | None:
        if id(m) in memo:
            return memo[id(m)]
        if m.ndim == 0:
            got: Node | None = m
        elif m.op == "const" and np.size(m.value) == 1:
            got = const(np.asarray(m.value).reshape(()))
            if m.weak:
                got = _new("const", (), (), m.dtype, (), True, got.value)
        elif m.shape == (1,) and not m.pixel:
            got = _new("take", (m, 0), (0,), m.dtype, ())  # a draw of size (1,): its value
        elif m.op in ELEMENTWISE:
            args = []
            for a in m.args:
                b = at(a) if isinstance(a, Node) else a
                if b is None:
                    return None
                args.append(b)
            shaped = any(isinstance(b, Node) and b.ndim for b in args)
            got = _new(m.op, tuple(args), m.attrs, m.dtype, (entries,) if shaped else (),
                       m.weak)
        else:
            got = None
        memo[id(m)] = got
        return got

    return at(n)


def gathered_tables(roots: Any) -> set[int]:
    """The nodes reachable from ``roots`` only through the tables of ``gather`` nodes: numpy
    computes them in the readers, DALI never does."""
    outside: set[int] = set()
    stack = [r for r in roots if isinstance(r, Node)]
    while stack:
        n = stack.pop()
        if id(n) in outside:
            continue
        outside.add(id(n))
        args = n.args[1:] if n.op == "gather" else n.args
        stack.extend(a for a in args if isinstance(a, Node))
    inside: set[int] = set()
    stack = [n.args[0] for n in Traced(tuple(r for r in roots if isinstance(r, Node)), 0,
                                       0).nodes() if n.op == "gather"]
    while stack:
        n = stack.pop()
        if id(n) in inside or id(n) in outside:
            continue
        inside.add(id(n))
        stack.extend(a for a in n.args if isinstance(a, Node))
    return inside


class TableRead:
    """Each sample's table read at its positions, by numpy (``fn.python_function`` on the CPU,
    batch mode)."""

    def __call__(self, tables: list[np.ndarray], positions: list[np.ndarray]) -> list[np.ndarray]:
        return [np.take(np.asarray(t), np.asarray(p)) for t, p in zip(tables, positions,
                                                                    strict=True)]


def read_tables(tables: list[Any], positions: list[Any]) -> list[Any]:
    """Each of ``tables`` (torch tensors, 1-D, one length and dtype) read at ``positions``
    (uint8 or int32 tensors, any shapes), in one gather for the whole batch: the tables laid
    end to end, each sample's positions offset to its own (int32: a batch's tables hold far
    fewer than 2**31 entries). Views of one output tensor, one per sample."""
    import torch

    if not positions:
        return []
    device = positions[0].device
    entries = tables[0].numel()
    table = torch.cat([t.reshape(-1) for t in tables])
    sizes = [p.numel() for p in positions]
    flat = torch.cat([p.reshape(-1) for p in positions]).to(torch.int32)
    starts = torch.arange(len(positions), dtype=torch.int32, device=device) * entries
    flat += torch.repeat_interleave(starts, torch.tensor(sizes, device=device),
                                    output_size=sum(sizes))
    out = table.index_select(0, flat)
    return [o.view(p.shape) for o, p in zip(out.split(sizes), positions, strict=True)]


class GpuTableRead:
    """Each sample's table read at its positions on the GPU, by torch on DALI's memory
    (``fn.dl_tensor_python_function(device="gpu")``, batch mode, :func:`read_tables`). The
    previous batch's outputs are kept until the next call: DALI copies them on its stream
    after this call returns."""

    def __init__(self) -> None:
        self._previous: list[Any] = []

    def __call__(self, tables: list[Any], positions: list[Any]) -> list[Any]:
        import torch
        from torch.utils.dlpack import from_dlpack, to_dlpack

        # Tables arrive as signed integers or floats (the emitter reinterprets unsigned ones
        # of more than a byte), positions as uint8 or int32.
        pos = [from_dlpack(p) for p in positions]
        if not pos:
            return []
        with torch.cuda.device(pos[0].device):
            outs = read_tables([from_dlpack(t) for t in tables], pos)
            torch.cuda.current_stream().synchronize()
        self._previous = outs
        return [to_dlpack(o) for o in outs]
