"""Float sums over the image, as numpy computes them: by numpy.

numpy adds floats pairwise (blocks of 128 values in eight running sums, the blocks' sums in a
tree), in an order that follows the array's memory layout, and DALI's reductions add in
another order: ``np.mean(x)`` of a float image (keras' ``standardize``, batchgenerators'
contrast and gamma, tensorpack's ``MeanVarianceNormalize``) differs in the last bits. The sum
itself is therefore computed by numpy, in one Python call per batch (``fn.python_function``,
on the CPU), on the values DALI computed for the array, which equal numpy's bit for bit; on the
GPU, a sum of the whole array is numpy's tree of additions computed by torch there
(:mod:`augment_ops.trace.pairwise_torch`), and a sum over some axes copies the array to the
CPU for numpy. Everything around it (the casts before, the division by the count, the
arithmetic after) stays in DALI's operators.

numpy's result depends on the layout as well as on the values: it sums in the order of the
array's memory, and a view with gaps (a crop) in runs of its rows. DALI hands the Python call a
C-contiguous array, which it lays out as the numpy path's array before summing
(:class:`NumpySum`); the tracer follows the layout (:func:`layout`) of the input image, of new
arrays made by arithmetic and casts (laid out as their operands, numpy's ``K`` order), by
concatenation, padding and tables, of their transposes and of single channels of them (equally
spaced elements, summed whole). A sum over a crop, or over an array written through a view,
is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, TraceError, _new

__all__ = ["NumpySum", "copied", "float_sum", "gpu_sums", "layout"]

#: Node kinds whose numpy array is a new one laid out as its operands of the result's shape are
#: (numpy's ``K`` order for ufuncs and ``astype``).
_NEW_LIKE_OPERANDS = frozenset({"bin", "un", "cast", "where"})
#: Node kinds whose numpy array is a new C-contiguous one where their operands are C-ordered.
_NEW_C_OF_C = frozenset({"cat", "stack", "pad", "lut", "gather"})
#: Node kinds whose numpy array is always a new C-contiguous one.
_NEW_C = frozenset({"input", "canvas", "full", "noise", "equalize", "uniform", "in_dim"})

#: How an array lies in memory: its axes from the outermost (largest step) to the innermost,
#: and whether it is ``dense`` (no gaps: a new array, or a transpose of one), ``uniform`` (its
#: elements equally spaced: one channel of an interleaved image) or ``gapped``.
Layout = tuple[tuple[int, ...], str]


def _renumbered(order: tuple[int, ...], dropped: int) -> tuple[int, ...]:
    return tuple(a - (a > dropped) for a in order if a != dropped)


def _layout(n: Node, memo: dict[int, Layout | None]) -> Layout | None:
    """The :data:`Layout` of the numpy array node ``n`` stands for; None where not known."""
    if id(n) in memo:
        return memo[id(n)]
    identity = tuple(range(n.ndim))
    args = [a for a in n.args if isinstance(a, Node)]
    got: Layout | None = None
    if n.ndim == 0 or n.op in _NEW_C:
        got = (identity, "dense")
    elif n.op == "const":
        arr = np.asarray(n.value)
        got = (identity, "dense") if arr.flags.c_contiguous else None
    elif n.op in _NEW_LIKE_OPERANDS:
        # broadcast operands (fewer axes, or axes of length 1 the result stretches) have no
        # say in the order numpy lays the result out in
        orders = {lay[0] if lay is not None else None
                  for a in args if a.ndim == n.ndim and all(
                      d is e or not (isinstance(d, int) and d == 1)
                      for d, e in zip(a.shape, n.shape, strict=True))
                  for lay in [_layout(a, memo)]}
        if not orders:
            got = (identity, "dense")
        elif len(orders) == 1 and None not in orders:
            got = (orders.pop(), "dense")
    elif n.op in _NEW_C_OF_C:
        if all((lay := _layout(a, memo)) is not None and lay[0] == tuple(range(a.ndim))
               for a in args if a.ndim):
            got = (identity, "dense")
    elif n.op == "transpose":
        base = _layout(args[0], memo)
        if base is not None:
            perm = n.attrs[0]
            got = (tuple(perm.index(a) for a in base[0]), base[1])
    elif n.op in ("reshape", "expand"):
        base = _layout(args[0], memo)
        if base is not None and base == (tuple(range(args[0].ndim)), "dense"):
            got = (identity, "dense")  # a view of a C-contiguous array is one
    elif n.op == "take":
        base, ax = _layout(args[0], memo), n.attrs[0]
        if base is not None:
            order, kind = base
            if ax == order[0]:
                got = (_renumbered(order, ax), kind)
            elif ax == order[-1] and kind == "dense":
                got = (_renumbered(order, ax), "uniform")  # one channel of an interleaved image
            else:
                got = (_renumbered(order, ax), "gapped")
    elif n.op == "fill":
        got = _layout(args[0], memo)  # written in place
    elif n.op == "contig":
        got = (identity, "dense")
    elif n.op == "select":
        outcomes = {_layout(a, memo) for a in args[1:]}
        got = outcomes.pop() if len(outcomes) == 1 else None
    memo[id(n)] = got
    return got


def layout(n: Node) -> Layout | None:
    """How the numpy path's array for ``n`` lies in memory (:data:`Layout`), None where the
    tracer does not know."""
    return _layout(n, {})


def copied(n: Node, order: str | None, what: str) -> Node:
    """The node of a copy of ``n`` in memory order ``order`` (``"C"``, ``"F"``, ``"A"``, ``"K"``
    or None, as numpy's copies take it): ``n`` itself where the copy keeps the layout the tracer
    knows (or numpy would not copy), a ``contig`` node where it is a C-ordered copy of a
    transposed array (the same values, another layout for numpy's sums). ``what`` names the
    call for the refusal of a Fortran-ordered copy."""
    if order in (None, "K") or n.ndim <= 1:
        return n
    lay = layout(n)
    identity = tuple(range(n.ndim))
    if order == "A" and lay is not None and lay[1] == "dense" and lay[0] == identity[::-1]:
        return n  # Fortran-contiguous already: 'A' keeps it
    if order in ("C", "A"):
        if lay is not None and lay[0] == identity:
            return n
        return _new("contig", (n,), (), n.dtype, n.shape)
    raise TraceError(f"{what} with order={order!r} of a traced array (a Fortran-ordered "
                     "copy; the tracer follows C-ordered arrays and transposes of them)")


def float_sum(kind: str, n: Node, axes: tuple[int, ...], shape: tuple) -> Node:
    """``np.add.reduce(n, axis=axes)`` of a float32 or float64 array: an ``npsum`` node, which
    numpy computes on an array laid out as the numpy path's (:class:`NumpySum`). Refused for
    other float types and where the layout is not known, or is one the Python call cannot make
    (a view with gaps; a reduction over some axes of a view of equally spaced elements)."""
    if n.dtype not in (np.float32, np.float64):
        raise TraceError(f"np.{kind} of {n.dtype} values over the image")
    lay = layout(n)
    full = len(axes) == n.ndim
    if lay is None or lay[1] == "gapped" or (lay[1] == "uniform" and not full):
        raise TraceError(
            f"np.{kind} of floating-point values over an array whose memory layout the tracer "
            "does not follow (numpy sums pairwise in the order of the array's memory; it "
            "follows new arrays, their transposes and single channels of them, not slices or "
            "writes through views); reduce the whole array, or one made by arithmetic or "
            "astype, instead")
    return _new("npsum", (n,), (axes, lay[0]), n.dtype, shape)


def gpu_sums(n: Node) -> bool:
    """Whether a GPU graph computes the ``npsum`` node ``n`` there (a sum of the whole array:
    numpy's pairwise tree, by torch, :mod:`augment_ops.trace.pairwise_torch`) rather than by
    numpy on the CPU (a sum over some axes, in numpy's order for them)."""
    return n.op == "npsum" and len(n.attrs[0]) == n.args[0].ndim


class NumpySum:
    """``np.add.reduce`` of each sample over ``axes`` (``fn.python_function`` on the CPU, batch
    mode): the numpy path's own sum of the same values, on an array laid out in memory as the
    numpy path's (``order``: its axes from the outermost to the innermost). A view of equally
    spaced elements is summed as numpy sums it, in one run over them, as a new array of them."""

    def __init__(self, axes: tuple[int, ...], order: tuple[int, ...]) -> None:
        self.axes, self.order = axes, order
        self.inverse = tuple(int(i) for i in np.argsort(order))

    def __call__(self, arrays: list[Any]) -> list[np.ndarray]:
        out = []
        for a in arrays:
            x = np.asarray(a)
            if self.order != tuple(range(x.ndim)) or not x.flags.c_contiguous:
                # the numpy path's memory: its order outermost first, then viewed back
                x = np.ascontiguousarray(x.transpose(self.order)).transpose(self.inverse)
            out.append(np.asarray(np.add.reduce(x, axis=self.axes)))
        return out
