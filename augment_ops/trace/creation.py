"""Arrays made from traced values: ``np.array``, ``np.asarray``, ``np.ascontiguousarray``,
``np.require`` and ``np.zeros``/``ones``/``empty``/``full`` (:data:`CREATION`), and numpy's checks
when it stores a Python number into an integer array.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace.facts import lower, upper
from augment_ops.trace.ir import _TRACING, Dim, Node, TraceError, _new, const
from augment_ops.trace.pairwise import copied
from augment_ops.trace.sym import (
    Sym,
    _as_numpy_scalar,
    _rep,
    _to_node,
    implements,
    raise_where,
    ufunc,
)


def _python_int_checks(value: Sym, dtype: np.dtype) -> None:
    """numpy's checks when it stores a Python number (``int()`` of a draw, a size) into an
    integer array: a float is truncated, NaN raises ValueError, a value outside the dtype's
    range OverflowError (where numpy would wrap a numpy integer around)."""
    t = value
    if value.dtype.kind == "f":
        raise_where(ufunc("not_equal", value, value), ValueError,
                    "cannot convert float NaN to integer")
        t = ufunc("trunc", value)
    info = np.iinfo(dtype)
    lo, hi = lower(t.node), upper(t.node)
    message = f"Python integer out of bounds for {dtype}"
    # (a traced integer is int64: a bound of int64 or uint64 it cannot pass is not checked)
    wide = np.iinfo(np.int64) if t.dtype.kind in "iu" else None
    if (lo is None or lo < int(info.min)) and (wide is None or info.min > wide.min):
        raise_where(ufunc("less", t, int(info.min)), OverflowError, message)
    if (hi is None or hi > int(info.max)) and (wide is None or info.max < wide.max):
        raise_where(ufunc("greater", t, int(info.max)), OverflowError, message)


# -- array creation from traced values ----------------------------------------------------------
# np.array, np.asarray, np.ascontiguousarray and np.require do not dispatch through
# __array_function__ on their argument (only on like=): the traced function's ``np`` hands them
# to these builders, which keep numpy's rules (a copy or the same array, the dtype numpy would
# pick for a list of scalars) and call numpy itself when nothing traced is involved.
def _holds_sym(x: Any) -> bool:
    if isinstance(x, Sym):
        return True
    return isinstance(x, (list, tuple)) and builtins.any(_holds_sym(v) for v in x)


def _from_sequence(seq: Sequence[Any], dtype: Any) -> Sym:
    """``np.array([a, b, ...])`` with traced elements of one shape: numpy's dtype for the list
    (Python numbers by their kind, numpy values by their dtype), then a stack on a new axis."""
    items = [_from_sequence(v, None) if isinstance(v, (list, tuple)) else v for v in seq]
    if not items:
        raise TraceError("np.array of an empty sequence holding traced values")
    reps = []
    for v in items:
        if isinstance(v, Sym):
            reps.append(_rep(v) if v.node.weak else v.dtype.type(1))
        elif isinstance(v, np.ndarray):
            reps.append(v.dtype.type(1))
        else:
            reps.append(v)
    rdt = np.dtype(dtype) if dtype is not None else np.array(reps).dtype
    if rdt.kind not in "biuf":
        raise TraceError(f"np.array of traced values as dtype {rdt}")
    shapes = {tuple(_shape_key(d) for d in _node_or_const(v).shape) for v in items}
    if len(shapes) != 1:
        raise TraceError("np.array of traced values of different shapes")
    nodes = []
    for v in items:
        if isinstance(v, Sym):
            if v.node.weak and rdt.kind in "iu" and v.dtype.kind in "iuf":
                _python_int_checks(v, rdt)  # np.array([300], np.uint8) raises as a store does
            nodes.append(_to_node(v, rdt))
        else:
            nodes.append(const(np.array(v, dtype=rdt)))  # numpy's own conversion and errors
    shape = (len(nodes), *nodes[0].shape)
    return Sym(_new("stack", tuple(nodes), (0,), rdt, shape))


def _shape_key(d: Dim) -> Any:
    return d if isinstance(d, int) else id(d)


def _node_or_const(v: Any) -> Node:
    return v._checked() if isinstance(v, Sym) else const(np.asarray(v))


def np_array(obj: Any, dtype: Any = None, *, copy: Any = True, order: Any = "K",
             subok: bool = False, ndmin: int = 0, like: Any = None,
             what: str = "np.array") -> Any:
    """``np.array`` in a traced function (``what``: the call, as a refusal names it)."""
    if not _holds_sym(obj):
        return np.array(obj, dtype, copy=copy, order=order, subok=subok, ndmin=ndmin,
                        **({} if like is None else {"like": like}))
    if ndmin or like is not None:
        raise TraceError("np.array of a traced value with ndmin= or like=")
    if isinstance(obj, Sym):
        obj = _as_numpy_scalar(obj)  # np.array(f) of a Python float is a float64 array
        dt = np.dtype(dtype) if dtype is not None else obj.dtype
        if copy is False and dt != obj.dtype:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        made = copy is True or dt != obj.dtype
        out = (obj.astype(dt) if dt != obj.dtype else obj.copy(order="K")) if made else obj
        # numpy lays the result out as ``order`` asks (copying where it must): the tracer
        # follows the layout for numpy's float sums (augment_ops.trace.pairwise)
        laid = copied(out._checked(), order, True if made else copy, what)
        return out if laid is out._checked() else Sym(laid)
    return _from_sequence(obj, dtype)


@implements("np.asarray")
def np_asarray(a: Any, dtype: Any = None, order: Any = None, **kwargs: Any) -> Any:
    """``np.asarray`` / ``np.asanyarray`` in a traced function: the same array where its dtype
    already fits."""
    if not _holds_sym(a):
        return np.asarray(a, dtype, order, **kwargs)
    copy = kwargs.pop("copy", None)
    if kwargs:
        raise TraceError(f"np.asarray of a traced value with {sorted(kwargs)}=")
    return np_array(a, dtype, copy=copy, order=order, what="np.asarray")


def np_ascontiguousarray(a: Any, dtype: Any = None, **kwargs: Any) -> Any:
    """``np.ascontiguousarray`` in a traced function (a traced array has no memory layout: its
    values are those of the array, converted to ``dtype``)."""
    if not _holds_sym(a):
        return np.ascontiguousarray(a, dtype, **kwargs)
    if kwargs:
        raise TraceError(f"np.ascontiguousarray of a traced value with {sorted(kwargs)}=")
    out = np_array(a, dtype, copy=None, order="C", what="np.ascontiguousarray")
    if isinstance(out, Sym) and out.ndim == 0:
        out = out[None]
    return out


def np_require(a: Any, dtype: Any = None, requirements: Any = None, **kwargs: Any) -> Any:
    """``np.require`` in a traced function, copying where numpy copies."""
    if not _holds_sym(a):
        return np.require(a, dtype, requirements, **kwargs)
    if kwargs:
        raise TraceError(f"np.require of a traced value with {sorted(kwargs)}=")
    if isinstance(requirements, str):
        requirements = [requirements]
    names = {"C_CONTIGUOUS": "C", "CONTIGUOUS": "C", "F_CONTIGUOUS": "F", "FORTRAN": "F",
             "ALIGNED": "A", "WRITEABLE": "W", "OWNDATA": "O", "ENSUREARRAY": "E"}
    req = {names.get(str(r).upper(), str(r).upper()) for r in (requirements or ())}
    unknown = req - set("ACFWOE")
    if unknown:
        raise KeyError(sorted(unknown)[0])
    if "F" in req and np.ndim(a) > 1:
        raise TraceError("np.require(requirements='F') of a traced array (a Fortran-ordered "
                         "copy; the traced graph has no memory layout)")
    order = "C" if "C" in req else "A"
    out = np_array(a, dtype, copy=None, order=order, what="np.require")
    # numpy copies a read-only array for "W" and a view for "O"; otherwise it returns the same
    # array, which later writes then change for every name bound to it.
    if isinstance(a, Sym) and out is a and (("W" in req and not a._writable)
                                            or ("O" in req and not a._base)):
        out = a.copy(order=order)
    return out


def _new_array(name: str) -> Callable[..., Any]:
    """``np.zeros`` / ``ones`` / ``empty`` / ``full`` in a traced function: numpy's own for a
    constant shape; a per-sample shape (``np.zeros((h + 2 * p, w + 2 * p, c))``) is a canvas
    (:func:`canvas`) of the value numpy fills it with."""
    real = getattr(np, name)

    def build(shape: Any, *args: Any, **kwargs: Any) -> Any:
        if builtins.any(_holds_sym(v) or isinstance(v, Sym) for v in (*args, *kwargs.values())):
            raise TraceError(f"np.{name} with a per-sample {'value' if name == 'full' else 'dtype'}"
                             " (only a constant fill of a new array is lowered)")
        if not (_holds_sym(shape) or isinstance(shape, Sym)):
            return _small_new(real(shape, *args, **kwargs), name)
        if name == "full":
            return _full_canvas(shape, *args, **kwargs)
        return _full_canvas(shape, 1 if name == "ones" else 0, *args, default=np.float64,
                            **kwargs)
    return build


#: The most elements of a new array of a constant shape (``np.empty``, ``zeros``, ``ones``,
#: ``full``, ``eye``) that may be traced: a small array of coordinates or coefficients the op
#: fills with per-sample values; larger ones stay numpy's.
MAX_SMALL_NEW = 64


def _small_new(made: np.ndarray, name: str) -> Any:
    """A small new array ``made`` by ``np.<name>``: numpy's own, unless a per-sample value was
    written into one made at the same line in an earlier attempt of this trace (mmcv's
    ``bbox_clip``: ``cmin = np.empty(4); cmin[0::2] = w - 1``; YOLOv5's ``C = np.eye(3);
    C[0, 2] = -w / 2``): then a traced array of the same values (zeros for ``np.empty``,
    whose values numpy leaves unset). An array only ever filled with constants stays a
    concrete array, which libraries (``cv2.warpAffine``'s matrix, ``np.linalg``) and Python
    (``tolist``, ``int``) take as they are."""
    session = _TRACING.active
    if session is None or made.size > MAX_SMALL_NEW or made.dtype.kind not in "biuf" or \
            not made.flags.c_contiguous:
        return made
    frame = sys._getframe(2)  # the caller of np.<name>
    site = (frame.f_code.co_filename, frame.f_lineno)
    if site in session.traced_small:
        return Sym(const(np.zeros(made.shape, made.dtype) if name == "empty" else made.copy()))
    session.concrete_small[id(made)] = (site, made)
    return made


def _np_eye(*args: Any, **kwargs: Any) -> Any:
    """``np.eye``: numpy's own, traced where a per-sample value is written into it
    (:func:`_small_new`)."""
    return _small_new(np.eye(*args, **kwargs), "eye")


def _full_canvas(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C", *,
                 like: Any = None, device: Any = None, default: Any = None) -> Sym:
    if like is not None or device not in (None, "cpu") or order != "C":
        raise TraceError("np.zeros/ones/empty/full of a per-sample shape with like=, device= or "
                         "an order other than 'C'")
    dt = np.dtype(dtype) if dtype is not None else np.dtype(default) if default is not None \
        else np.asarray(fill_value).dtype
    return canvas(shape, fill_value, dt)


def canvas(shape: Any, fill_value: Any, dtype: np.dtype) -> Sym:
    """A new array of a per-sample ``shape`` (rank 2, or 3 with a constant channel count) filled
    with the constant ``fill_value`` (a scalar, or a value per channel) as numpy stores it: a
    ``canvas`` node, which a write of an array into a region makes a padded slice of that array
    (:func:`augment_ops.trace.indexing._write_canvas`), and a slice of it a smaller canvas or
    padded slice. numpy raises ValueError for a negative size, and so does the traced op."""
    dims = checked_dims(shape, "a new array")
    if dtype.kind not in "biuf" or dtype.itemsize > 8 or dtype == np.float16:
        raise TraceError(f"a new array of dtype {dtype}")
    fill = canvas_fill(fill_value, dtype, dims[2] if len(dims) == 3 else None)
    return Sym(_new("canvas", (*dims, const(fill)), (), dtype, tuple(dims)))


def checked_dims(shape: Any, what: str) -> list[Node | int]:
    """A per-sample ``shape`` (rank 2, or 3 with a constant channel count) as dimension nodes
    and ints, numpy's ValueError for a negative size raised at run time, as numpy raises it."""
    from augment_ops.trace.facts import _nonneg
    from augment_ops.trace.sym import _dim

    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    for d in dims:
        if isinstance(d, Sym) and (d.ndim or d.dtype.kind not in "iu"):
            raise TypeError(f"'{d.dtype}' object cannot be interpreted as an integer")
    dims = [_dim(d) for d in dims]
    if len(dims) not in (2, 3) or (len(dims) == 3 and not isinstance(dims[2], int)):
        raise TraceError(f"{what} of a per-sample shape of rank {len(dims)} (rank 2, or 3 "
                         "with a constant channel count, is lowered)")
    for d in dims:
        if not _nonneg(d):
            raise_where(ufunc("less", Sym(d), 0), ValueError,
                        "negative dimensions are not allowed")
    return dims


def canvas_fill(value: Any, dtype: np.dtype, channels: int | None) -> np.ndarray:
    """The value numpy stores in each pixel of a canvas for ``a[...] = value``: one per channel
    (``channels``), or one value for a 2-D canvas; numpy's own conversion and errors."""
    if isinstance(value, Sym) or _holds_sym(value):
        raise TraceError("a per-sample value written into a whole new array (only constants "
                         "are lowered)")
    out = np.zeros((channels,) if channels is not None else (), dtype)
    v = np.asarray(value)
    if v.ndim > out.ndim and set(v.shape[:v.ndim - out.ndim]) == {1}:
        value = v.reshape(v.shape[v.ndim - out.ndim:])  # numpy broadcasts leading axes of 1
    try:
        with np.errstate(all="ignore"):
            out[...] = value
    except (TypeError, ValueError, OverflowError) as e:
        if channels is None and np.ndim(value):
            raise TraceError("a value per column written into a whole 2-D new array (only one "
                             "value is lowered)") from None
        raise type(e)(str(e)) from None
    return out


#: The builders the traced function's ``np`` returns instead of numpy's own functions.
CREATION: dict[str, Callable[..., Any]] = {
    "zeros": _new_array("zeros"),
    "ones": _new_array("ones"),
    "empty": _new_array("empty"),
    "full": _new_array("full"),
    "eye": _np_eye,
    "array": np_array,
    "asarray": np_asarray,
    "asanyarray": np_asarray,
    "ascontiguousarray": np_ascontiguousarray,
    "require": np_require,
}
