"""numpy functions on :class:`Sym` (``np.clip``, reductions, ``np.dot``/``matmul``, ``np.pad``,
``np.rot90``, ...) as graph builders registered in :data:`augment_ops.trace.sym.HANDLERS` (the
:data:`_FUNCTIONS` table); indexing is in :mod:`.indexing`, ``np.where``/``concatenate``/``stack``
in :mod:`.combine` and array creation in :mod:`.creation`. Importing this module registers them
all.

A numpy function an op calls on a traced array reaches ``Sym.__array_function__``, which runs the
builder registered under the function's name; one that has none is refused (:class:`TraceError`)
and the op runs on the numpy path.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

import augment_ops.trace.arith
import augment_ops.trace.shapes  # noqa: F401  (registers reshape and broadcast_to)
from augment_ops.trace.checks import add_guard
from augment_ops.trace.combine import _concat, _np_concatenate, _np_stack, _where
from augment_ops.trace.creation import CREATION, _holds_sym, canvas_fill, np_ascontiguousarray
from augment_ops.trace.facts import _never, _no_nan, lower, no_negative_zero, sound, truth, upper
from augment_ops.trace.indexing import _flip, _setitem_value, _slice, _transpose, padded_slice
from augment_ops.trace.ir import Dim, Node, TraceError, _new, const
from augment_ops.trace.pairwise import float_sum
from augment_ops.trace.products import exact_in_any_order, grid, sums_in_order
from augment_ops.trace.sym import (
    Sym,
    _as_numpy_scalar,
    _dim,
    _dim_sym,
    _dop,
    cast_node,
    implements,
    raise_where,
    ufunc,
)
from augment_ops.trace.ufunc_kwargs import _out_operand, _reps, write_out


def _clip(x: Any, lo: Any, hi: Any) -> Any:
    if isinstance(x, Sym) and x.dtype.kind in "iu" and not x.node.weak:
        # np.clip takes Python int bounds outside the dtype's range as that range's ends.
        info = np.iinfo(x.dtype)
        lo, hi = (builtins.min(builtins.max(b, int(info.min)), int(info.max))
                  if type(b) is int else b for b in (lo, hi))
    out = x
    if lo is not None:
        out = ufunc("maximum", out, lo)
    if hi is not None:
        out = ufunc("minimum", out, hi)
    if lo is not None and isinstance(out, Sym) and out.node.op == "bin" and \
            out.node.attrs == ("minimum",) and out.node.ndim > 0:
        # np.clip keeps x where it equals a bound (-0.0 clipped at 0 stays -0.0), where
        # np.minimum and np.maximum give their second operand: marked, so the lowering may
        # use a clamp for np.clip only (augment_ops.trace.lower_dali._clamp_bounds).
        n = out.node
        out = Sym(_new("bin", n.args, ("minimum", "clip"), n.dtype, n.shape, n.weak))
    return out


def _np_clip(a: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
             min: Any = None, max: Any = None, **kwargs: Any) -> Any:
    """``np.clip`` and ``ndarray.clip`` with numpy 2's keywords: ``min=``/``max=`` are the
    bounds; ``out=`` (a traced writable array or a view of one) with ``casting=`` is written
    as numpy writes it; the other ufunc keywords (``dtype=``, ``where=``) are refused, so the
    op falls back instead of being traced without them."""
    if set(kwargs) - {"casting"} or (kwargs and out is None):
        names = ["out"] * (out is not None) + sorted(kwargs)
        raise TraceError(f"np.clip with {', '.join(n + '=' for n in names)}")
    if (min is not None or max is not None) and (a_min is not None or a_max is not None):
        raise TraceError("np.clip with both a_min/a_max and min/max")
    lo, hi = (min, max) if min is not None or max is not None else (a_min, a_max)
    a = _as_numpy_scalar(a)  # numpy makes the clipped value an array; only the bounds stay weak
    if out is None:
        return _clip(a, lo, hi)
    target = _out_operand("clip", out)
    with np.errstate(all="ignore"):  # numpy's error for a cast into out= that casting= forbids
        np.clip(*_reps((a, lo, hi)), out=np.ones(1, target.dtype), **kwargs)
    return write_out(target, _clip(a, lo, hi), True, "np.clip with out=")


def _axes(axis: Any, ndim: int, sequences: bool = False) -> tuple[int, ...]:
    """numpy's axes of ``axis`` (None: all; an int; a tuple, or any sequence where
    ``sequences``, as ``np.flip`` takes them and a reduction does not)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, tuple) or (sequences and isinstance(axis, list)):
        axes = tuple(sorted(np_normalize_axis(a, ndim) for a in axis))
        if len(set(axes)) != len(axes):
            raise ValueError("duplicate value in 'axis'")
        return axes
    return (np_normalize_axis(axis, ndim),)


def np_normalize_axis(axis: Any, ndim: int) -> int:
    """numpy's check of one axis: an integer in -ndim..ndim-1 (AxisError otherwise)."""
    if isinstance(axis, Sym):
        raise TraceError(
            "an axis drawn or computed per sample (DALI's operators take their axes when the "
            "pipeline is built, not per sample; branch on the value instead, `np.flip(img, 0) "
            "if k == 0 else np.flip(img, 1)`, whose outcomes lower to a choice per sample)")
    if not isinstance(axis, (int, np.integer)) or \
            isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"'{type(axis).__name__}' object cannot be interpreted as an integer")
    if not -ndim <= int(axis) < ndim:
        raise np.exceptions.AxisError(int(axis), ndim)
    return int(axis) % ndim


def _guard_empty(kind: str, n: Node, axes: tuple[int, ...]) -> None:
    """numpy's ValueError for a ``max``/``min`` over axes of which one may be empty (``img[:h //
    3].max()`` of an image under 3 rows): a run-time check for the samples where it is."""
    message = (f"zero-size array to reduction operation {'maximum' if kind == 'max' else 'minimum'}"
               " which has no identity")
    bad: Sym | None = None
    for a in axes:
        d = n.shape[a]
        if isinstance(d, int):
            if d == 0:
                raise ValueError(message)
            continue
        empty = ufunc("equal", Sym(d), np.int64(0))
        if _never(empty.node):  # an image's size, a crop the facts keep non-empty
            continue
        bad = empty if bad is None else ufunc("bitwise_or", bad, empty)
    if bad is not None:
        add_guard(bad.node, ValueError, message)


@implements("Sym.reduce")
def _reduce(kind: str, x: Sym, axis: Any, dtype: Any, keepdims: bool, *,
            called: str | None = None) -> Sym:
    """``np.sum``/``mean``/``max``/``min`` (``kind``) of ``x``; ``called``: the numpy function
    a refusal names (``np.std``, whose sums these are), ``np.<kind>`` by default."""
    n = x._checked()
    if dtype is not None:
        raise TraceError(f"{kind}(dtype=)")
    axes = _axes(axis, n.ndim)
    if kind in ("max", "min"):
        _guard_empty(kind, n, axes)
    known = builtins.all(isinstance(n.shape[a], int) for a in axes)
    with np.errstate(all="ignore"):
        rdt = getattr(np, kind)(np.ones((1,) * builtins.max(n.ndim, 1), n.dtype)).dtype
    if len(axes) == 1 and known and n.shape[axes[0]] <= 16:
        # A short axis of known length (the channels): numpy adds it in order, one element at a
        # time, and so does this.
        ax, size = axes[0], n.shape[axes[0]]
        parts = [Sym(_new("take", (n, i), (ax,), n.dtype, n.shape[:ax] + n.shape[ax + 1:]))
                 for i in range(size)]
        if kind in ("sum", "mean"):
            acc_dt = rdt if kind == "sum" else (n.dtype if n.dtype.kind == "f" else np.float64)
            acc = Sym(cast_node(parts[0].node, acc_dt))
            for p in parts[1:]:
                acc = ufunc("add", acc, Sym(cast_node(p.node, acc_dt)))
            out = ufunc("divide", acc, np.array(size, acc_dt)) if kind == "mean" else acc
            out = Sym(cast_node(out.node, rdt))
        else:
            out = parts[0]
            for p in parts[1:]:
                out = ufunc("minimum" if kind == "min" else "maximum", out, p)
    else:
        shape = tuple(d for i, d in enumerate(n.shape) if i not in axes)
        if kind in ("sum", "mean"):
            acc_dt = np.dtype(np.uint64 if n.dtype.kind in "u" else np.int64)
            if n.dtype.kind == "f":  # numpy's pairwise sum, by numpy (augment_ops.trace.pairwise)
                s = Sym(float_sum(called or f"np.{kind}", n, axes, shape))
            else:
                s = Sym(_new("reduce", (cast_node(n, acc_dt) if n.dtype.kind == "b" else n,),
                             ("sum", axes), acc_dt, shape))
            if kind == "mean":
                if n.dtype.kind in "iu":
                    _exact_in_float64("np.mean", n)
                out = ufunc("divide", Sym(cast_node(s.node, np.float64)), _count64(n, axes))
            else:
                out = s
            out = Sym(cast_node(out.node, rdt))
        else:
            out = _float_extreme(kind, n, axes, shape) if n.dtype.kind == "f" else \
                Sym(_new("reduce", (n,), (kind, axes), n.dtype, shape))
    if keepdims:
        node = out.node
        for a in axes:
            node = _new("expand", (node,), (a,), node.dtype,
                        (*node.shape[:a], 1, *node.shape[a:]))
        out = Sym(node)
    return Sym(out.node)


def _count64(n: Node, axes: tuple[int, ...]) -> Any:
    """The number of values a reduction of ``n`` over ``axes`` takes, as a float64 (a number,
    or a per-sample value), as numpy divides a sum by it."""
    count: Dim = 1
    for ax in axes:
        count = _dop("multiply", count, n.shape[ax])
    return Sym(cast_node(_dim_sym(count).node, np.float64)) if isinstance(count, Node) \
        else np.float64(count)


@implements("Sym.variance")
def _variance(kind: str, a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
              ddof: Any = 0, keepdims: bool = False, *, where: Any = True, mean: Any = None,
              correction: Any = None) -> Sym:
    """``np.var`` / ``np.std`` (``kind``) as numpy's ``_var`` computes them: the sum (float64
    for integers: exact here for values up to 2**20, :func:`_exact_in_float64`), divided by the
    count in float64 and rounded to the sum's dtype, the squared differences from it summed
    again and divided by ``max(count - ddof, 0)`` in float64, then the square root; each float
    sum numpy's own (:mod:`augment_ops.trace.pairwise`)."""
    if not isinstance(a, Sym):
        raise TraceError(f"np.{kind} of a constant")
    if dtype is not None or out is not None or where is not True or mean is not None or \
            correction is not None or isinstance(ddof, Sym):
        raise TraceError(f"np.{kind} with dtype=, out=, where=, mean=, correction= or a "
                         "per-sample ddof")
    n = a._checked()
    if n.dtype.kind not in "biuf" or n.dtype == np.float16:
        raise TraceError(f"np.{kind} of {n.dtype} values")
    axes = _axes(axis, n.ndim)
    acc = np.dtype(np.float64) if n.dtype.kind in "biu" else n.dtype
    count64 = _count64(n, axes)
    if not isinstance(ddof, (int, float, np.integer, np.floating)) or isinstance(ddof, bool):
        raise TraceError(f"np.{kind} with a ddof of type {type(ddof).__name__}")
    if n.dtype.kind in "biu":
        _exact_in_float64(f"np.{kind}", n)
    total = _reduce("sum", a, axes, None, True, called=f"np.{kind}")
    arrmean = Sym(cast_node(ufunc("divide", Sym(cast_node(total.node, np.float64)),
                                  count64).node, acc))
    x = ufunc("subtract", a if n.dtype.kind == "f" else Sym(cast_node(n, acc)), arrmean)
    x = ufunc("multiply", x, x)
    ret = _reduce("sum", x, axes, None, keepdims, called=f"np.{kind}")
    # numpy: maximum(count - ddof, 0), a float64 for a float ddof, then the division in float64
    rest64 = ufunc("maximum", ufunc("subtract", count64, np.float64(ddof)), np.float64(0))
    ret = Sym(cast_node(ufunc("divide", Sym(cast_node(ret.node, np.float64)), rest64).node,
                        acc))
    return ufunc("sqrt", ret) if kind == "std" else ret


#: The largest magnitude of integers whose float64 sum over an image is exact in any order.
_EXACT_INT = 2 ** 20


def _exact_in_float64(what: str, n: Node) -> None:
    """Refuse a mean or variance of integers the tracer sums exactly where numpy's float64
    sum may round: values beyond 2**20 in magnitude, or of unknown range (with at most 2**33
    values in an image, sums of smaller ones stay below 2**53, exact in float64)."""
    if n.dtype.kind == "b" or n.dtype.itemsize <= 2:
        return  # at most 65535 in magnitude
    lo, hi = lower(n), upper(n)
    if (lo is not None and hi is not None and
                               builtins.max(abs(lo), abs(hi)) <= _EXACT_INT):
        return
    raise TraceError(f"{what} of {n.dtype} values that may exceed 2**20 in magnitude (numpy "
                     "sums integers in float64 there, rounding where a partial sum passes "
                     "2**53, and the tracer sums them exactly; keep the values small, or "
                     "convert to float64 first)")


def _np_prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: bool = False, **kwargs: Any) -> Any:
    """``np.prod`` of a short integer vector (``np.prod(img.shape)``): its elements multiplied
    in order, with numpy's wrap-around (integer products are the same in any order)."""
    if not isinstance(a, Sym) or a.ndim != 1 or a.dtype.kind not in "biu" or axis not in (
            None, 0, -1) or dtype is not None or out is not None or keepdims or kwargs or \
            not isinstance(a.node.shape[0], int) or a.node.shape[0] > 16:
        raise TraceError("np.prod other than of a short vector of integers (np.prod(img.shape))")
    rdt = np.prod(np.ones(1, a.dtype)).dtype
    x = Sym(cast_node(a._checked(), rdt))
    if a.node.shape[0] == 0:
        return rdt.type(1)
    acc = x[0]
    for i in range(1, a.node.shape[0]):
        acc = ufunc("multiply", acc, x[i])
    return acc


def _float_extreme(kind: str, n: Node, axes: tuple[int, ...], shape: tuple) -> Sym:
    """numpy's float ``max``/``min`` over image axes: DALI's reduction, NaN where any element is
    NaN (numpy propagates it, DALI's reduction passes it over). Refused for float64 (DALI's
    reductions take no float64) and where both zeros may meet (numpy keeps the sign of the one
    its loop meets first, in an order DALI's reduction does not follow)."""
    if n.dtype != np.float32:
        raise TraceError(f"np.{kind} of {n.dtype} values over the image (DALI's reductions take "
                         "float32 and integers; reduce before converting, or over the channels)")
    if not no_negative_zero(n):
        raise TraceError(f"np.{kind} over the image of float values that may hold both -0.0 and "
                         "0.0 (numpy keeps the sign of whichever its loop meets first, in an "
                         "order DALI's reduction does not follow; add 0.0 first, x + 0.0, which "
                         "makes every zero 0.0)")
    out = Sym(_new("reduce", (n,), (kind, axes), n.dtype, shape))
    if _no_nan(n):
        return out
    x = Sym(n)
    nan = _any_all("any", ufunc("not_equal", x, x), axis=axes)
    return _where(nan, np.float32(np.nan), out)


@implements("Sym.truth_reduce")
def _any_all(kind: str, a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *,
             where: Any = None) -> Any:
    """``np.any`` / ``np.all`` (``kind``) and their ndarray methods. Where the facts the tracer
    knows decide every element of ``a`` for every image (``img < 0``, ``np.isnan`` of
    integers), the result is that constant; otherwise the greatest (any) or least (all) of
    ``a``'s truth values as bytes, per sample, exactly (the count of true ones over an axis
    that may be empty, whose ``any`` is False and ``all`` True)."""
    if not isinstance(a, Sym):
        raise TraceError(f"np.{kind} of a constant")
    if out is not None or where is not None:
        raise TraceError(f"np.{kind} with {'out' if out is not None else 'where'}=")
    n = a._checked()
    b = n if n.dtype == np.bool_ else ufunc("not_equal", a, 0).node  # NaN is true, as in numpy
    if n.ndim == 0:
        return Sym(b)
    axes = _axes(axis, n.ndim)
    known = truth(b)
    may_be_empty = builtins.any(lower(n.shape[i]) is None or lower(n.shape[i]) < 1 for i in axes)
    if known is not None and (not may_be_empty or known == (kind == "all")) and \
            len(axes) == n.ndim and not keepdims:
        return np.bool_(known)
    if kind == "all":  # all(b) is not any(not b)
        return ufunc("logical_not", _any_all("any", Sym(_new("un", (b,), ("logical_not",),
                                                               np.bool_, b.shape)),
                                             axis, None, keepdims))
    count = Sym(cast_node(b, np.uint8))
    if may_be_empty:
        return ufunc("greater", _reduce("sum", count, axis, None, keepdims), 0)
    return ufunc("greater", _reduce("max", count, axis, None, keepdims), 0)


#: The most multiplications a traced matrix product may take per pixel (channels x columns).
MAX_PRODUCT_TERMS = 64


def _matmul(a: Any, b: Any, kind: str = "dot") -> Sym:
    """``image @ w`` with a constant vector ``w`` (C,) or matrix ``w`` (C, K): the weighted sum of
    the channels written out, ``(x0*w0 + x1*w1) + x2*w2 ...``, each step rounded in the result
    dtype. Integer products wrap around alike in any order; a float product is lowered where
    numpy's product ``kind`` (``"dot"`` or ``"matmul"``) sums in that order on this machine
    (:mod:`augment_ops.trace.products`), and refused elsewhere."""
    what = "matrix products other than image @ constant vector or (channels, k) matrix"
    if isinstance(a, Sym) and isinstance(b, Sym) and b.ndim == 1:
        return _matmul_drawn(a, b, kind)
    if not isinstance(a, Sym) and isinstance(b, Sym) and b.ndim == 1 and \
            np.ndim(a) in (1, 2) and not _holds_sym(a):
        return _constant_times_vector(np.asarray(a), b, kind)
    if not isinstance(a, Sym) or isinstance(b, Sym):
        raise TraceError(what)
    w = np.asarray(b)
    if w.ndim not in (1, 2) or not isinstance(a.node.shape[-1], int) or \
            a.node.shape[-1] != len(w) or a.ndim < 1 or (w.ndim == 2 and a.ndim < 2):
        raise TraceError(what)
    if w.size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms per pixel")
    rdt = np.result_type(a.dtype, w.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    kx, mx = _grid_of(a)
    exact = exact_in_any_order(rdt, [(kx, mx, grid(w), float(np.abs(w).sum(axis=0).max()))])
    _in_order_or_refused(kind, rdt, len(w), exact=exact, dims=_dims(a), right=w)
    x = Sym(cast_node(a.node, rdt))
    wc = w.astype(rdt)
    ax = a.ndim - 1
    channels = [Sym(_new("take", (x.node, i), (ax,), rdt, x.node.shape[:-1]))
                for i in range(len(w))]

    def weighted(col: np.ndarray) -> Sym:
        acc = None
        for xi, wi in zip(channels, col, strict=True):
            part = ufunc("multiply", xi, wi)
            acc = part if acc is None else ufunc("add", acc, part)
        return _from_zero(Sym(cast_node(acc.node, rdt)))

    if w.ndim == 1:
        return weighted(wc)
    return _np_stack([weighted(wc[:, k]) for k in range(wc.shape[1])], axis=-1)


def _grid_of(x: Sym) -> tuple[int | None, float]:
    """``(k, bound)``: ``x``'s values are integers (``k`` 0) of magnitude at most ``bound``, where
    ``x`` is an integer array or one converted to floats; ``(None, 0.0)`` otherwise."""
    n = x._checked()
    if n.op == "cast" and n.dtype.kind == "f" and n.args[0].dtype.kind in "biu":
        n = n.args[0]
    if n.dtype.kind not in "biu":
        return None, 0.0
    lo, up = lower(n), upper(n)
    if lo is None or up is None or not sound(n):
        info = np.iinfo(n.dtype) if n.dtype.kind != "b" else np.iinfo(np.uint8)
        lo, up = int(info.min), int(info.max)
    return 0, float(max(abs(lo), abs(up)))


def _dims(x: Sym) -> tuple[int | None, ...]:
    """The lengths of ``x``'s axes before the last: an int where constant, None per sample."""
    return tuple(d if isinstance(d, int) else None for d in x._checked().shape[:-1])


def _from_zero(acc: Sym) -> Sym:
    """A written-out float sum as numpy's kernels end it, which start from +0.0: ``+ 0.0`` where
    every product may be -0.0 (their sum is then -0.0, numpy's +0.0); as it is elsewhere."""
    if acc.dtype.kind != "f" or no_negative_zero(acc._checked()):
        return acc
    return ufunc("add", acc, acc.dtype.type(0))


def _in_order_or_refused(kind: str, rdt: np.dtype, channels: int, *, exact: bool,
                         dims: tuple[int | None, ...] = (), left: np.ndarray | None = None,
                         right: np.ndarray | None = None) -> None:
    """Refuse a float product that numpy does not sum in the written-out order here, unless its
    sum is ``exact`` in any order (:func:`augment_ops.trace.products.exact_in_any_order`)."""
    if rdt == np.float16:
        raise TraceError(
            "a matrix product of float16 values (numpy does not round each step of it to "
            "float16, as the sum written out in float16 would); convert to float32 first, "
            "x.astype(np.float32)")
    if rdt.kind != "f" or exact or sums_in_order(kind, rdt, channels, dims=dims, left=left,
                                                 right=right):
        return
    call = "x.dot(w) or np.dot" if kind == "dot" else "@ or np.matmul"
    raise TraceError(
        f"a matrix product of {rdt} values with {call}, which numpy sums here in its BLAS "
        "kernel's order, not in the order of the sum written out: they differ in the last bit "
        "of some values, so the graph could not give numpy's; write the sum out, "
        "x[..., 0] * w[0] + x[..., 1] * w[1] + x[..., 2] * w[2], which traces exactly")


def _matmul_drawn(a: Sym, b: Sym, kind: str) -> Sym:
    """``image @ v`` with a per-sample vector ``v`` of constant length (drawn weights): the
    weighted sum of the channels written out, as :func:`_matmul` does for a constant one."""
    n, w = a._checked(), b._checked()
    size = w.shape[0]
    if a.ndim < 1 or not isinstance(size, int) or n.shape[-1] != size:
        raise TraceError("a matrix product with a per-sample vector other than image @ v with "
                         "v as long as the channel axis")
    if size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms per pixel")
    rdt = np.result_type(a.dtype, b.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    (kx, mx), (kv, mv) = _grid_of(a), _grid_of(b)
    exact = exact_in_any_order(rdt, [(kx, mx, kv, mv * size)])
    _in_order_or_refused(kind, rdt, size, exact=exact, dims=_dims(a))
    x, v = cast_node(n, rdt), cast_node(w, rdt)
    ax = a.ndim - 1
    acc = None
    for i in range(size):
        xi = Sym(_new("take", (x, i), (ax,), rdt, x.shape[:-1]))
        vi = Sym(_new("take", (v, i), (0,), rdt, ()))
        part = ufunc("multiply", xi, vi)
        acc = part if acc is None else ufunc("add", acc, part)
    return _from_zero(Sym(cast_node(acc.node, rdt)))


def _constant_times_vector(m: np.ndarray, v: Sym, kind: str) -> Sym:
    """``m @ v`` for a constant matrix (K, C) or vector (C,) and a per-sample vector ``v`` of
    constant length C (``eigenvectors @ (alpha * eigenvalues)``): each entry the sum written
    out, ``(m0*v0 + m1*v1) + m2*v2 ...``, where numpy sums in that order here."""
    w = v._checked()
    size = w.shape[0]
    if not isinstance(size, int) or m.shape[-1] != size:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {size} is different from {m.shape[-1]})")
    if m.size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms")
    rdt = np.result_type(m.dtype, v.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    kv, mv = _grid_of(v)
    rows_bound = float(np.abs(m).reshape(-1, size).sum(axis=1).max())
    exact = exact_in_any_order(rdt, [(grid(m), rows_bound, kv, mv)])
    _in_order_or_refused(kind, rdt, size, exact=exact, left=m)
    vs = [Sym(_new("take", (cast_node(w, rdt), i), (0,), rdt, ())) for i in range(size)]
    rows = m.astype(rdt).reshape(-1, size)
    out = []
    for row in rows:
        acc = None
        for mi, vi in zip(row, vs, strict=True):
            part = ufunc("multiply", vi, mi)
            acc = part if acc is None else ufunc("add", acc, part)
        out.append(_from_zero(Sym(cast_node(acc.node, rdt))))
    if m.ndim == 1:
        return out[0]
    return Sym(_new("stack", tuple(o.node for o in out), (0,), rdt, (len(out),)))



def _np_repeat(a: Any, repeats: Any, axis: Any = None) -> Sym:
    if not isinstance(a, Sym) or axis is None or not isinstance(repeats, int):
        raise TraceError("np.repeat other than of an axis of length 1 a constant number of times")
    axis = axis % a.ndim
    if a.node.shape[axis] != 1:
        raise TraceError("np.repeat other than of an axis of length 1 a constant number of times")
    return Sym(_concat([a._checked()] * repeats, axis))


def _np_rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Sym:
    if isinstance(k, Sym):
        # A per-sample k (k = rng.integers(0, 4)): one branch per quarter turn, merged per sample.
        if k.ndim != 0 or k.dtype.kind not in "iu":
            raise TraceError("np.rot90 with a per-sample k that is not an integer scalar")
        turns = k % 4
        for c in range(3):
            if turns == c:
                return _np_rot90(m, c, axes)
        return _np_rot90(m, 3, axes)
    k %= 4
    a0, a1 = (ax % m.ndim for ax in axes)
    if k == 0:
        return m[...]
    if k == 2:
        return m._view(_flip(_flip(m._checked(), a0), a1))
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return m._view(_transpose(_flip(m._checked(), a1), tuple(perm)))
    return m._view(_flip(_transpose(m._checked(), tuple(perm)), a1))


def _np_flip(m: Any, axis: Any = None) -> Sym:
    node = m._checked()
    for ax in _axes(axis, m.ndim, sequences=True):
        node = _flip(node, ax)
    return m._view(node)


def _np_expand_dims(a: Any, axis: int) -> Sym:
    return a[(slice(None),) * (axis % (a.ndim + 1)) + (None,)]


def _np_full_like(a: Any, fill_value: Any, dtype: Any = None) -> Sym:
    if not isinstance(a, Sym):
        raise TraceError("np.full_like of a constant")
    dt = np.dtype(dtype) if dtype is not None else a.dtype
    v = _setitem_value(dt, fill_value)
    vn = v.node if isinstance(v, Sym) else const(v)
    return Sym(_new("full", (a._checked(), vn), (), dt, a.node.shape))


#: The most rows (columns, ...) np.pad may add on one side of an axis: each is a copy of one
#: block in a DALI concatenation.
MAX_PAD = 256


def _np_pad(array: Any, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Sym:
    """``np.pad`` with constant widths, modes ``"constant"`` and ``"edge"``: each side of each
    axis a concatenation of copies of one block (a constant slab, or the first or last slab of
    the array), axis after axis as numpy pads them (the corners take the later axes' values)."""
    if not isinstance(array, Sym):
        raise TraceError("np.pad of a constant")
    if _holds_sym(pad_width) or isinstance(pad_width, Sym):
        return _pad_drawn(array, pad_width, mode, kwargs)
    if mode not in ("constant", "edge"):
        raise TraceError(f"np.pad(mode={mode!r}) (modes 'constant' and 'edge' are lowered; "
                         "'reflect' and 'symmetric' repeat rows that a small image may not have)")
    allowed = {"constant_values"} if mode == "constant" else set()
    if set(kwargs) - allowed:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': "
                         f"{set(kwargs) - allowed}")
    node = array._checked()
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = np.broadcast_to(widths, (node.ndim, 2))
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    if (widths > MAX_PAD).any():
        raise TraceError(f"np.pad by more than {MAX_PAD} on a side")
    values = kwargs.get("constant_values", 0)
    if _holds_sym(values) or (isinstance(values, Sym) and values.ndim):
        raise TraceError("np.pad with per-sample constant_values other than one scalar")
    if not isinstance(values, Sym):
        values = np.broadcast_to(np.asarray(values), (node.ndim, 2))
    for ax in range(node.ndim):
        before, after = (int(v) for v in widths[ax])
        if not before and not after:
            continue
        dim = node.shape[ax]
        if (isinstance(dim, int) and dim == 0) or (isinstance(dim, Node) and (
                lower(dim) is None or lower(dim) < 1)):
            raise TraceError("np.pad of an axis that may be empty")
        pieces: list[Node] = []
        for side, count in (("before", before), ("after", after)):
            if not count:
                continue
            if mode == "edge":
                at = 0 if side == "before" else _dop("subtract", dim, 1)
                block = _slice(node, [(ax, at, _dop("add", at, 1))])
            else:
                v = values if isinstance(values, Sym) else values[ax][0 if side == "before"
                                                                      else 1]
                block = _np_full_like(Sym(_slice(node, [(ax, 0, 1)])), v).node
            pieces.append(block)
        blocks_before = [pieces[0]] * before if before else []
        blocks_after = [pieces[-1]] * after if after else []
        node = _concat([*blocks_before, node, *blocks_after], ax)
    return Sym(node)


def _pad_drawn(array: Sym, pad_width: Any, mode: Any, kwargs: dict[str, Any]) -> Sym:
    """``np.pad`` with per-sample widths (MONAI's ``SpatialPad``: ``[(0, 0), (top, bottom),
    (left, right)]``), mode ``"constant"`` with one constant value, of a rank-2 or rank-3
    array padded on at most two axes (the third, of constant size, not padded): a padded slice
    of the array (:func:`~augment_ops.trace.indexing.padded_slice`: the array read from minus
    the widths before, the value where that falls outside it), the padded axes brought first
    and put back after. numpy raises ValueError for a negative width, and so does the traced
    op."""
    what = ("np.pad with per-sample widths other than mode 'constant' with one value, one "
            "(before, after) pair per axis, of an array of rank 2 or 3 padded on at most two "
            "axes")
    ndim = array.ndim
    if mode != "constant" or set(kwargs) - {"constant_values"} or ndim not in (2, 3) or \
            not isinstance(pad_width, (list, tuple)) or len(pad_width) != ndim or \
            not builtins.all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pad_width):
        raise TraceError(what)
    value = kwargs.get("constant_values", 0)
    if _holds_sym(value) or isinstance(value, Sym) or np.size(value) != 1:
        raise TraceError(what)
    value = np.array(value).ravel()[0]  # numpy's pad stores this numpy scalar (unsafe cast)
    if CREATION["asarray"](pad_width).dtype.kind != "i":  # numpy's dtype for the whole list
        raise TypeError("`pad_width` must be of integral type.")
    widths = [tuple(pair) for pair in pad_width]
    for pair in widths:
        for w in pair:
            if isinstance(w, Sym) and w.ndim:
                raise TraceError(what)
            if isinstance(w, Sym):
                raise_where(ufunc("less", w, 0), ValueError, "index can't contain negative values")
            elif w < 0:
                raise ValueError("index can't contain negative values")
    padded = [ax for ax, pair in enumerate(widths)
              if builtins.any(isinstance(w, Sym) or w for w in pair)]
    order = padded + [ax for ax in range(ndim) if ax not in padded]
    if len(padded) > 2 or (ndim == 3 and not isinstance(array.node.shape[order[2]], int)):
        raise TraceError(what)
    if array.dtype.kind not in "biuf" or array.dtype == np.float16:
        raise TraceError(f"np.pad with per-sample widths of {array.dtype} values")
    x = array.transpose(order)._checked()
    (b0, a0), (b1, a1) = ([_dim(w) for w in widths[ax]] for ax in order[:2])
    fill = canvas_fill(value, array.dtype, x.shape[2] if ndim == 3 else None)
    node = padded_slice(x, _dop("subtract", 0, b0), _dop("subtract", 0, b1),
                        _dop("add", _dop("add", x.shape[0], b0), a0),
                        _dop("add", _dop("add", x.shape[1], b1), a1), fill)
    back = [order.index(ax) for ax in range(ndim)]
    return Sym(node).transpose(back)


def _np_round(a: Any, decimals: int = 0, out: Any = None) -> Any:
    if decimals != 0 or out is not None:
        raise TraceError("np.round with decimals or out")
    return ufunc("rint", a)


def _axes_moved(name: str) -> Callable[..., Any]:
    """``np.rollaxis`` / ``np.moveaxis`` of a traced array: a transpose, whose order numpy
    itself computes (with its own checks of the axes) on a stand-in of the array's rank whose
    sides, 2, 3, 4..., name the axes (a broadcast view: no memory)."""
    def f(a: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(a, Sym):
            raise TraceError(f"np.{name} of a constant")
        probe = np.broadcast_to(np.empty(()), tuple(range(2, 2 + a.ndim)))
        moved = getattr(np, name)(probe, *args, **kwargs).shape
        return a.transpose([d - 2 for d in moved])
    return f


def _refuse(construct: str) -> Any:
    raise TraceError(construct)


def _method(name: str) -> Callable[..., Any]:
    def f(a: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(a, Sym):
            raise TraceError(f"np.{name} of a constant")
        return getattr(a, name)(*args, **kwargs)
    return f


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "clip": lambda a, *args, **kwargs: _np_clip(a, *args, **kwargs),
    "where": lambda c, *ab: _where(c, *ab) if len(ab) == 2 else _refuse("np.where(cond)"),
    "concatenate": _np_concatenate,
    "stack": _np_stack,
    "dstack": lambda arrays: _np_concatenate(
        [x if x.ndim == 3 else x[..., None] for x in arrays], axis=2),
    "repeat": _np_repeat,
    "rot90": _np_rot90,
    "flip": _np_flip,
    "fliplr": lambda m: _np_flip(m, 1),
    "flipud": lambda m: _np_flip(m, 0),
    "transpose": lambda a, axes=None: a.transpose(axes) if axes is not None else a.transpose(),
    "swapaxes": lambda a, b, c: a.swapaxes(b, c),
    "rollaxis": _axes_moved("rollaxis"),
    "moveaxis": _axes_moved("moveaxis"),
    "expand_dims": _np_expand_dims,
    "copy": lambda a, order="K", **kw: a.copy(order=order),
    "ascontiguousarray": lambda a, dtype=None, **kw: np_ascontiguousarray(a, dtype, **kw),
    "astype": lambda a, dtype, **kw: a.astype(dtype, **kw),
    "full_like": _np_full_like,
    "zeros_like": lambda a, dtype=None: _np_full_like(a, 0, dtype),
    "ones_like": lambda a, dtype=None: _np_full_like(a, 1, dtype),
    # numpy leaves an empty array's values unspecified; the traced one holds zeros.
    "empty_like": lambda a, dtype=None: _np_full_like(a, 0, dtype),
    "pad": _np_pad,
    "round": _np_round,
    "around": _np_round,
    "any": lambda a, *args, **kwargs: _any_all("any", a, *args, **kwargs),
    "all": lambda a, *args, **kwargs: _any_all("all", a, *args, **kwargs),
    "sum": _method("sum"),
    "mean": _method("mean"),
    "max": _method("max"),
    "min": _method("min"),
    "prod": _np_prod,
    "var": lambda a, *args, **kwargs: _variance("var", a, *args, **kwargs),
    "std": lambda a, *args, **kwargs: _variance("std", a, *args, **kwargs),
    "amax": _method("max"),
    "amin": _method("min"),
    "dot": lambda a, b, out=None: a.dot(b, out) if isinstance(a, Sym) else _matmul(a, b),
    "matmul": lambda a, b: _matmul(a, b, "matmul"),
    "Sym.dot": lambda a, b: _matmul(a, b),
    "shape": lambda a: a.shape,
    "ndim": lambda a: a.ndim,
}
for _name, _builder in _FUNCTIONS.items():
    implements(_name)(_builder)
