"""Arrays combined from several traced arrays: ``np.where(c, a, b)``, ``np.concatenate`` and
``np.stack``, with numpy's result dtype; and one of several constants picked by a per-sample
index (:func:`select`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from augment_ops.trace.ir import Dim, Node, TraceError, _new
from augment_ops.trace.shapes import _same_dim
from augment_ops.trace.sym import (
    Sym,
    _broadcast,
    _dim_sym,
    _dop,
    _is_weak,
    _rep,
    _to_node,
    cast_node,
    cut_to,
    raise_where,
    ufunc,
)


def _where(c: Any, a: Any, b: Any) -> Sym:
    """``np.where(c, a, b)`` with numpy's result dtype."""
    if not isinstance(c, Sym):
        c = np.asarray(c)
        if c.ndim == 0:
            return a if bool(c) else b
        raise TraceError("np.where with a constant array condition")
    cn = cast_node(c.node, np.bool_) if c.dtype != np.bool_ else c.node
    with np.errstate(all="ignore"):
        try:
            rdt = np.result_type(_rep(a), _rep(b)) if not (_is_weak(a) and _is_weak(b)) else (
                np.result_type(np.asarray(_rep(a)), np.asarray(_rep(b))))
        except Exception as e:
            raise TraceError(f"np.where with operands numpy refuses ({e})") from None
    # np.where converts Python scalars as an unsafe cast does (np.where(c, u8, -1) holds 255).
    na, nb = (_to_node(np.asarray(v), rdt) if type(v) in (int, float, bool) else _to_node(v, rdt)
              for v in (a, b))
    if na is nb:
        return Sym(na)
    cuts: dict[int, Dim] = {}
    shape = _broadcast(cn.shape, na.shape, nb.shape, cuts=cuts)
    if cuts:
        cn, na, nb = (cut_to(x, cuts) for x in (cn, na, nb))
    return Sym(_new("where", (cn, na, nb), (), rdt, shape))


def select(idx: Sym, values: np.ndarray, weak: bool = False) -> Any:
    """``values[idx]`` of a 1-D array of constants for a per-sample ``idx`` that the caller
    knows lies in ``0..len(values) - 1``: a chain of ``np.where`` over the constants
    (``idx == 1``, ``idx == 2`` ...; ``values[0]`` where none holds), of ``values``' dtype, as a
    Python number where ``weak``."""
    out: Any = values[0]
    for i in range(1, len(values)):
        out = _where(ufunc("equal", idx, i), values[i], out)
    if not isinstance(out, Sym):
        return out.item() if weak else out
    return Sym(cast_node(out.node, values.dtype, weak))


def _matched(nodes: Sequence[Node], skip: int | None, message: str) -> list[Node]:
    """``nodes`` checked to have one size on every axis but ``skip``, as numpy checks arrays it
    concatenates or stacks: ValueError(``message``) now where constant sizes differ, for the
    samples where per-sample sizes differ otherwise. Those samples raise, but DALI computes
    every branch of an op for the whole batch (a branch no sample of a differing size takes
    included), so each array is also cut to the least size: the same arrays where the sizes
    agree, and no DALI error where they do not."""
    ref = nodes[0]
    if builtins.any(n.ndim != ref.ndim for n in nodes):
        raise ValueError(f"{message} (the arrays have different numbers of dimensions)")
    out = list(nodes)
    for ax in range(ref.ndim):
        dims = [n.shape[ax] for n in out]
        if ax == skip or builtins.all(_same_dim(d, dims[0]) for d in dims[1:]):
            continue
        if len({d for d in dims if isinstance(d, int)}) > 1:
            raise ValueError(f"{message} (they differ along dimension {ax})")
        bad: Any = False
        for d in dims[1:]:
            bad = ufunc("bitwise_or", bad, ufunc("not_equal", _dim_sym(d), _dim_sym(dims[0])))
        raise_where(bad, ValueError, f"{message} (they differ along dimension {ax})")
        least: Dim = dims[0]
        for d in dims[1:]:
            least = _dop("minimum", least, d)
        out = [n if _same_dim(n.shape[ax], least) else _new(
            "slice", (n, 0, least), (ax,), n.dtype,
            tuple(least if k == ax else d for k, d in enumerate(n.shape))) for n in out]
    return out


def _concat(nodes: Sequence[Node], axis: int) -> Node:
    nodes = _matched(nodes, axis, "all the input array dimensions except for the "
                     "concatenation axis must match exactly")
    shape = list(nodes[0].shape)
    total: Dim = 0
    for n in nodes:
        total = _dop("add", total, n.shape[axis])
    shape[axis] = total
    return _new("cat", tuple(nodes), (axis,), nodes[0].dtype, tuple(shape))


def _arrays(seq: Sequence[Any], what: str) -> list[Any]:
    seq = list(seq)
    if not seq or not builtins.any(isinstance(x, Sym) for x in seq):
        raise TraceError(f"{what} without a traced array")
    rdt = np.result_type(*(_rep(x) if isinstance(x, Sym) else np.asarray(x) for x in seq))
    return [_to_node(x, rdt) for x in seq]


def _np_concatenate(arrays: Sequence[Any], axis: int = 0, **kw: Any) -> Sym:
    if kw:
        raise TraceError(f"np.concatenate with {sorted(kw)}=")
    nodes = _arrays(arrays, "np.concatenate")
    return Sym(_concat(nodes, axis % nodes[0].ndim))


def _np_stack(arrays: Sequence[Any], axis: int = 0, **kw: Any) -> Sym:
    if kw:
        raise TraceError(f"np.stack with {sorted(kw)}=")
    nodes = _matched(_arrays(arrays, "np.stack"), None, "all input arrays must have the same "
                     "shape")
    axis = axis % (nodes[0].ndim + 1)
    shape = (*nodes[0].shape[:axis], len(nodes), *nodes[0].shape[axis:])
    return Sym(_new("stack", tuple(nodes), (axis,), nodes[0].dtype, shape))
