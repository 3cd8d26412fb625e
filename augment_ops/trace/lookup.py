"""Lookup tables: ``table[img]``, ``np.take(table, img)`` (and ``cv2.LUT``, through
:mod:`augment_ops.trace.cv2_api`) with an integer image as the index.

A table is a 1-D array of ``N`` entries. One built elementwise from positions (``np.arange(256)``
and arithmetic on it and on per-sample draws: gamma, solarize, add or multiply with clipping) is
not materialised: the same elementwise expression is applied to the image instead, with each
position vector replaced by the pixel values. Exact by construction: the table's entry ``v`` IS
the expression at position ``v``. A constant vector that is not a position (``np.arange(0, 1,
1/255)``, any fixed table) is recognised as ``start + v * step`` when numpy's values are exactly
that, and otherwise becomes DALI's ``fn.lookup_table``, which holds its values as float32: used
only when every value converts to float32 and back unchanged, refused otherwise.

numpy raises ``IndexError`` for an index ``>= N`` or ``< -N``; a table that does not cover every
value of the index's dtype is refused (the op runs on the numpy path, where numpy raises), and a
negative index of a signed dtype counts from the table's end, as in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import augment_ops.trace.numpy_api  # noqa: F401  (registers the handlers Sym dispatches to)
from augment_ops.trace.creation import CREATION
from augment_ops.trace.gather import ELEMENTWISE, gather
from augment_ops.trace.ir import Node, TraceError, _new, const
from augment_ops.trace.sym import _INEXACT, Sym, cast_node, implements, inexact_unary, ufunc

#: Elementwise node kinds a table may be built with (their result at a position depends only on
#: their arguments at that position).
_ELEMENTWISE = ELEMENTWISE

#: Output dtypes of a constant table DALI's ``fn.lookup_table`` can give (its values are float32).
_LOOKUP_DTYPES = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16,
                                                  np.uint32, np.int32, np.uint64, np.int64,
                                                  np.float32, np.float64))

#: The most entries a table may have (DALI's lookup keys are 0..65535).
MAX_ENTRIES = 65536


def _positions(index: Node, entries: int) -> Node:
    """The table position each index value reads (numpy's: a negative index counts from the end),
    as uint8 or uint16; raises :class:`TraceError` where numpy may raise IndexError."""
    dt = index.dtype
    if dt.kind == "b":
        raise TraceError("a lookup table indexed by a boolean array (numpy takes it as a mask)")
    if dt.kind not in "iu":
        raise TraceError(f"a lookup table indexed by {dt} values (numpy needs integers)")
    info = np.iinfo(dt)
    if int(info.max) >= entries or (dt.kind == "i" and -int(info.min) > entries):
        raise TraceError(
            f"a lookup table of {entries} entries indexed by {dt} values: numpy raises "
            f"IndexError for a value outside -{entries}..{entries - 1}, which the tracer cannot "
            f"rule out; give the table {int(info.max) + 1} entries (one per {dt} value) or "
            f"index it with a uint8 image")
    if entries > MAX_ENTRIES:
        raise TraceError(f"a lookup table of more than {MAX_ENTRIES} entries")
    if dt.kind == "u" and dt.itemsize <= 2:
        return index  # DALI's lookup_table takes it as it is
    pos = Sym(index)
    if dt.kind == "i":
        wide = Sym(cast_node(index, np.int64))
        pos = Sym(_new("where", (ufunc("less", wide, 0).node,
                                 ufunc("add", wide, entries).node, wide.node), (),
                       np.int64, index.shape))
    return cast_node(pos.node, np.uint16)


def _affine(v: np.ndarray) -> tuple[Any, Any] | None:
    """``(start, step)`` when the float vector ``v`` is exactly ``start + arange(N) * step`` in
    its dtype (how ``np.arange`` and ``np.linspace`` fill floats), else None."""
    if v.dtype.kind != "f" or len(v) < 2:
        return None
    start, step = v[0], v[1] - v[0]
    with np.errstate(all="ignore"):
        again = start + np.arange(len(v)).astype(v.dtype) * step
    return (start, step) if again.tobytes() == v.tobytes() else None


def _float32_parts(v: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Three float32-exact float64 vectors whose sum ``(hi + mid) + lo``, computed in float64,
    is exactly ``v`` (checked), or None (values beyond float32's range). An infinity or NaN is
    all in ``hi`` (float32 holds it), its ``mid`` and ``lo`` zero (``log`` of 0 beside finite
    logarithms)."""
    finite = np.isfinite(v)
    with np.errstate(all="ignore"):
        hi = v.astype(np.float32).astype(np.float64)
        mid = np.where(finite, v - hi, 0.0).astype(np.float32).astype(np.float64)
        lo = np.where(finite, v - hi - mid, 0.0).astype(np.float32).astype(np.float64)
        again = (hi + mid) + lo
    if again.tobytes() != v.tobytes():
        return None
    return hi, mid, lo


def _constant_at(v: np.ndarray, pos: Node) -> Node:
    """The constant vector ``v`` read at positions ``pos``."""
    with np.errstate(all="ignore"):
        positions = np.arange(len(v)).astype(v.dtype)
    if positions.tobytes() == v.tobytes():
        return cast_node(pos, v.dtype)
    found = _affine(v)
    if found is not None:
        start, step = found
        return ufunc("add", start, ufunc("multiply", Sym(cast_node(pos, v.dtype)), step)).node
    if v.dtype not in _LOOKUP_DTYPES:
        raise TraceError(f"a lookup table of {v.dtype} values")
    with np.errstate(all="ignore"):
        back = v.astype(np.float32).astype(v.dtype)
    if back.tobytes() != v.tobytes() and v.dtype == np.float64:
        parts = _float32_parts(v)
        if parts is not None:
            hi, mid, lo = (_new("lut", (pos,), (), np.float64, pos.shape, value=p)
                           for p in parts)
            return ufunc("add", ufunc("add", Sym(hi), Sym(mid)), Sym(lo)).node
    if back.tobytes() != v.tobytes():
        raise TraceError(
            f"a lookup table of {v.dtype} values that float32 does not hold exactly (DALI's "
            "lookup_table keeps its values as float32); build the table from np.arange and "
            "arithmetic on it, or round it to float32 values")
    return _new("lut", (pos,), (), v.dtype, pos.shape, value=v)


def _at(n: Node, pos: Node, entries: int, memo: dict[int, Node]) -> Node:
    """Table node ``n`` (``entries`` long, or a scalar) evaluated at positions ``pos``."""
    got = memo.get(id(n))
    if got is not None:
        return got
    if n.ndim == 0:
        got = n
    elif n.shape == (1,) and entries != 1:
        # an array of one value (imgaug's draw of size (1,)) broadcasts against the table's
        # entries as its one value does
        got = _new("take", (n, 0), (0,), n.dtype, ())
    elif n.shape != (entries,):
        raise TraceError(f"a lookup table built from arrays of shape {list(n.shape)}")
    elif n.op == "const":
        got = _constant_at(n.value, pos)
    elif n.op in _ELEMENTWISE:
        args = tuple(_at(a, pos, entries, memo) if isinstance(a, Node) else a for a in n.args)
        got = _new(n.op, args, n.attrs, n.dtype, pos.shape, n.weak)
        if n.op == "un" and n.attrs[0] in _INEXACT:  # np.exp of np.arange and a draw
            inexact_unary(got)
    else:
        raise TraceError(f"a lookup table built with {n.op} (only elementwise arithmetic on "
                         "np.arange, constants and per-sample values is lowered)")
    memo[id(n)] = got
    return got


def lookup(table: Any, index: Sym) -> Sym:
    """``table[index]`` for a 1-D ``table`` (a traced array or a constant) and an integer image
    ``index``: the table's expression evaluated on the pixel values."""
    if isinstance(table, Sym):
        tn = table._checked()
    else:
        arr = np.asarray(table)
        if arr.dtype.kind not in "biuf":
            raise TraceError(f"a lookup table of {arr.dtype} values")
        tn = const(arr)
    if tn.ndim != 1 or not isinstance(tn.shape[0], int):
        raise TraceError(f"a lookup table of rank {tn.ndim} or per-sample length (only a 1-D "
                         "table of a fixed length is lowered)")
    entries = tn.shape[0]
    pos = _positions(index._checked(), entries)
    if _needs_numpy(tn):
        # np.exp, ** by a draw: numpy computes the table for each sample, read at the pixels
        return Sym(gather(tn, pos, "a lookup table built with float math DALI does not "
                          "reproduce bit for bit"))
    return Sym(_at(tn, pos, entries, {}))


def _needs_numpy(table: Node) -> bool:
    """Whether ``table`` holds float math DALI computes otherwise than numpy (``np.exp``, a
    power by a draw): pushed onto the pixels it would be inexact, so numpy computes it."""
    from augment_ops.trace.ir import _TRACING

    session = _TRACING.active
    inexact = session.inexact if session is not None else {}
    stack, seen = [table], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n in inexact or (n.op == "un" and n.attrs[0] in _INEXACT):
            return True
        stack.extend(a for a in n.args if isinstance(a, Node))
    return False


@implements("Sym.lookup")
def _sym_lookup(table: Sym, index: Sym) -> Sym:
    return lookup(table, index)


@implements("take")
def _np_take(a: Any, indices: Any, axis: Any = None, out: Any = None,
             mode: str = "raise") -> Sym:
    if out is not None or mode != "raise":
        raise TraceError("np.take with out= or mode=")
    if isinstance(a, Sym) and a.ndim >= 2 and axis is not None:
        # A gather along an axis (a channel order, constant or drawn): numpy's indexing.
        return a[(slice(None),) * (int(axis) % a.ndim) + (
            indices if isinstance(indices, Sym) else np.asarray(indices).tolist(),)]
    if not isinstance(indices, Sym) or indices.ndim == 0:
        raise TraceError("np.take other than of a lookup table at an integer image")
    if axis not in (None, 0):
        raise TraceError(f"np.take with axis={axis}")
    return lookup(a, indices)


class TableArray(np.ndarray):
    """A constant array the traced function made (``np.arange``, ``np.array``, ``np.linspace``
    and arithmetic on them): indexing it with a traced integer image, ``table[img]``, is a
    lookup table, indexing it with a per-sample integer picks a row (``sizes[rng.integers(3)]``),
    and ``constant.dot(traced)`` is ``np.dot``; otherwise it is a numpy array."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Sym) and key.ndim > 0:
            return lookup(self.view(np.ndarray), key)
        if isinstance(key, Sym):  # values[i] with a per-sample i: a pick among the rows
            return Sym(const(np.array(self.view(np.ndarray))), writable=False)[key]
        return super().__getitem__(key)

    def dot(self, b: Any, out: Any = None) -> Any:
        """``constant.dot(traced)`` as ``np.dot(constant, traced)`` (ndarray's own method
        converts its argument to a concrete array instead of dispatching to it)."""
        if isinstance(b, Sym):
            if out is not None:
                raise TraceError("ndarray.dot with out=")
            return np.dot(self.view(np.ndarray), b)
        return super().dot(b, out)


def table_view(v: Any) -> Any:
    """A read-only 1-D numpy array the op reads (a module constant ``LUT``) as a
    :class:`TableArray`, so that ``LUT[img]`` traces; None for anything else."""
    if type(v) is np.ndarray and v.ndim == 1 and not v.flags.writeable and \
            v.dtype.kind in "biuf" and 0 < len(v) <= MAX_ENTRIES:
        return v.view(TableArray)
    return None


def _making_tables(real: Any) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        return out.view(TableArray) if type(out) is np.ndarray else out
    f.__name__ = f.__qualname__ = real.__name__
    f.__doc__ = real.__doc__
    return f


def _take_call(a: Any, indices: Any, axis: Any = None, out: Any = None,
               mode: str = "raise") -> Any:
    # numpy dispatches np.take on its first argument only: a constant table at a traced image
    # never reaches __array_function__.
    if isinstance(indices, Sym) and not isinstance(a, Sym):
        return _np_take(a, indices, axis, out, mode)
    return np.take(a, indices, axis=axis, out=out, mode=mode)


#: numpy functions as the traced function sees them (:mod:`augment_ops.trace.runs`'s
#: numpy proxy), where numpy's own dispatch cannot see a traced argument.
NUMPY_CALLS: dict[str, Any] = {
    "take": _take_call,
    **{name: _making_tables(getattr(np, name)) for name in ("arange", "linspace")},
    # np.array of traced values (numpy_api's) or of constants, a constant becoming a table
    "array": _making_tables(CREATION["array"]),
}


def _no_histogram(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TraceError(
            f"np.{name} of pixel values (a histogram, or a lookup table built from one as in "
            "histogram equalisation and auto-contrast, has no DALI equivalent: DALI has no "
            "histogram or cumulative-sum operator, and its fn.equalize computes OpenCV's "
            "cv2.equalizeHist formula, not this one; for the mean of the pixels, np.mean "
            "traces)")
    return refuse


for _name in ("histogram", "bincount", "cumsum", "unique"):
    implements(_name)(_no_histogram(_name))
