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
arrays made from C-ordered ones (arithmetic, casts, concatenation, padding, tables), of their
transposes and single channels, of C-ordered copies (``x.T.copy()``), and of arrays written
into (a write keeps the array's layout: :func:`kept`). A sum over a crop, or over an array
whose layout depends on operands in other orders, is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, TraceError, _new, bottom_up

__all__ = ["NumpySum", "copied", "float_sum", "gpu_sums", "kept", "layout", "made_new"]

#: Node kinds whose numpy array is a new C-contiguous one where every array operand is
#: C-ordered (``full_like`` and friends lay their result out as their operand is, numpy's ``K``
#: order; concatenation, padding and tables make a C array of C-ordered parts). Operands in
#: other orders are not followed: how numpy orders the axes then depends on every operand.
_NEW_OF_C = frozenset({"full", "cat", "stack", "pad", "lut", "gather"})
#: Elementwise node kinds: numpy lays their result out in the order of their operands (``K``),
#: a transposed one's too (``x.T - x.T.mean()`` is a transposed array).
_ELEMENTWISE = frozenset({"bin", "un", "cast", "where"})


def _all_ones(n: Node) -> bool:
    return all(isinstance(d, int) and d == 1 for d in n.shape)


#: Node kinds whose numpy array is always a new C-contiguous one: the input image, an array of
#: a per-sample shape made by ``np.zeros``/``full`` (in C order: an F-ordered one is refused
#: where it is made), noise, PIL's equalized image.
_NEW_C = frozenset({"input", "canvas", "noise", "equalize", "uniform", "in_dim"})

#: How an array lies in memory: its axes from the outermost (largest step) to the innermost,
#: and whether it is ``dense`` (no gaps: a new array, or a transpose of one), ``uniform`` (its
#: elements equally spaced: one channel of an interleaved image) or ``gapped``.
Layout = tuple[tuple[int, ...], str]


def _renumbered(order: tuple[int, ...], dropped: int) -> tuple[int, ...]:
    return tuple(a - (a > dropped) for a in order if a != dropped)


#: Node kinds whose layout follows from their array arguments' (:func:`_step`).
_FOLLOWS = _NEW_OF_C | _ELEMENTWISE | {"transpose", "reshape", "expand", "take", "fill",
                                       "select"}


def _step(n: Node, memo: dict[int, Layout | None]) -> Layout | None:
    """The :data:`Layout` of ``n``, its arguments' already in ``memo``."""
    identity = tuple(range(n.ndim))
    args = [a for a in n.args if isinstance(a, Node)]
    if n.ndim == 0 or n.op in _NEW_C:
        return (identity, "dense")
    if n.op == "const":
        return (identity, "dense") if np.asarray(n.value).flags.c_contiguous else None
    if n.op == "laid":
        return n.attrs[0]
    if n.op not in _FOLLOWS:
        return None  # flips (negative steps), broadcasts, writes through views, the rest
    if n.op in _ELEMENTWISE:
        # numpy's K order: a new array laid out in its operands' order; operands of size 1 on
        # every axis (a mean kept with keepdims) give no order, as numpy's iterator skips them
        # (and an operand of lower rank, broadcast along the leading axes, only agrees)
        shaped = [a for a in args if a.ndim and not _all_ones(a)]
        if any(memo[id(a)] is None for a in shaped):
            return None
        orders = {memo[id(a)][0] for a in shaped if a.ndim == n.ndim}
        if len(orders) > 1:
            return None
        order = orders.pop() if orders else identity
        for a in shaped:
            lead = n.ndim - a.ndim
            if tuple(x for x in order if x >= lead) != tuple(x + lead for x in memo[id(a)][0]):
                return None
        return (order, "dense")
    if n.op in _NEW_OF_C:
        ok = all((lay := memo[id(a)]) is not None and lay[0] == tuple(range(a.ndim))
                 for a in args if a.ndim)
        return (identity, "dense") if ok else None
    if n.op == "select":
        outcomes = {memo[id(a)] for a in args[1:]}
        return outcomes.pop() if len(outcomes) == 1 else None
    base = memo[id(args[0])]
    if base is None:
        return None
    if n.op == "transpose":
        perm = n.attrs[0]
        return (tuple(perm.index(a) for a in base[0]), base[1])
    if n.op in ("reshape", "expand"):
        # a view of a C-contiguous array is one
        return (identity, "dense") if base == (tuple(range(args[0].ndim)), "dense") else None
    if n.op == "fill":
        return base  # written in place
    order, kind = base  # take: an integer index on an axis
    ax = n.attrs[0]
    if ax == order[0]:
        return (_renumbered(order, ax), kind)
    if ax == order[-1] and kind == "dense":
        return (_renumbered(order, ax), "uniform")  # one channel of an interleaved image
    return (_renumbered(order, ax), "gapped")


def _memo() -> dict[int, Layout | None]:
    """The layouts known in this trace (nodes live as long as it does), else a new dict."""
    from augment_ops.trace.ir import _TRACING

    session = _TRACING.active
    if session is None:
        return {}
    return session.layouts


def layout(n: Node) -> Layout | None:
    """How the numpy path's array for ``n`` lies in memory (:data:`Layout`), None where the
    tracer does not know. Computed once per node and trace, without recursion (a chain of
    thousands of writes)."""
    memo = _memo()
    return bottom_up(n, memo, lambda m: [a for a in m.args if isinstance(a, Node)]
                     if m.op in _FOLLOWS else [], lambda m: _step(m, memo))


def kept(old: Node, new: Node) -> Node:
    """``new``, the values written into the array that was ``old``: a write keeps the array's
    memory, and so its layout (``g[...] = t.T`` leaves ``g`` C-contiguous). A ``laid`` node
    says so where ``new``'s own layout differs."""
    if old.ndim != new.ndim:
        return new
    lay_old = layout(old)
    if lay_old == layout(new):
        return new
    # also where the tracer builds the written values in another form (a channel written
    # through a transposed view is a concatenation of channels): the memory is the array's
    return _new("laid", (new,), (lay_old,), new.dtype, new.shape)


def made_new(n: Node) -> Node:
    """``n`` as a library that makes a new C-contiguous array computes it (OpenCV's results,
    PIL's images): the tracer builds it from numpy operators on the inputs, whose layout
    (a transposed input's) numpy would give the result, and a ``laid`` node says otherwise.
    An unknown layout stays unknown (float sums over it are refused either way)."""
    lay = layout(n)
    identity = tuple(range(n.ndim))
    if n.ndim <= 1 or lay is None or lay == (identity, "dense"):
        return n
    return _new("laid", (n,), ((identity, "dense"),), n.dtype, n.shape)


def copied(n: Node, order: str | None, copy: bool | None, what: str) -> Node:
    """The node of ``n`` as numpy's ``np.array(n, copy=copy, order=order)`` lays it out:
    ``n`` itself where numpy keeps the layout the tracer knows (no copy, or a copy in the same
    order), a ``laid`` node where it is a C-ordered copy of an array in another order (the same
    values, another layout for numpy's sums). numpy's ValueError where ``copy=False`` and a
    copy is needed; a Fortran-ordered copy, and an ``order='A'`` copy of an array in another
    order than C, are refused (named ``what``)."""
    if order in (None, "K") or n.ndim <= 1 or (order == "A" and not copy):
        return n
    if order == "F":
        raise TraceError(f"{what} with order='F' of a traced array (a Fortran-ordered copy: "
                         "the tracer follows C-ordered arrays and transposes of them)")
    lay = layout(n)
    identity = tuple(range(n.ndim))
    if lay is not None and lay[0] == identity and (lay[1] == "dense" or copy):
        return n  # C-contiguous already, or copied into C order in the same order
    if order == "C":
        if copy is False:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        return _new("laid", (n,), ((identity, "dense"),), n.dtype, n.shape)
    raise TraceError(f"{what} with order='A' of a traced array in another memory order than C "
                     "(numpy copies it in Fortran order where it is Fortran-contiguous, which "
                     "the tracer does not follow; order='C' lowers)")


def float_sum(called: str, n: Node, axes: tuple[int, ...], shape: tuple) -> Node:
    """``np.add.reduce(n, axis=axes)`` of a float32 or float64 array (for ``called``, the numpy
    function a refusal names): an ``npsum`` node, which
    numpy computes on an array laid out as the numpy path's (:class:`NumpySum`). Refused for
    other float types and where the layout is not known, or is one the Python call cannot make
    (a view with gaps; a reduction over some axes of a view of equally spaced elements)."""
    if n.dtype not in (np.float32, np.float64):
        raise TraceError(f"{called} of {n.dtype} values over the image")
    lay = layout(n)
    full = len(axes) == n.ndim
    if lay is None or lay[1] == "gapped" or (lay[1] == "uniform" and not full):
        # np.var and np.std sum their own array of squared deviations: a copy of the user's
        # array changes nothing there, the variance written out over a copy of it lowers
        instead = ("reduce the whole array, or write the variance out over a C-ordered copy "
                   "of the squared deviations, d = x - x.mean(axis=a); (d * d).copy().mean("
                   "axis=a) (np.sqrt of it for np.std), which lowers"
                   if called in ("np.var", "np.std") else
                   "reduce the whole array, or a C-ordered copy of it (x.copy()), instead")
        raise TraceError(
            f"{called} of floating-point values over an array whose memory layout the tracer "
            "does not follow (numpy sums pairwise in the order of the array's memory; the "
            "tracer follows arrays made from C-ordered ones, their transposes, single channels "
            f"and C-ordered copies, not crops or arrays made from operands in other orders); "
            f"{instead}")
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
