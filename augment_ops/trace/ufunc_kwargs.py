"""numpy ufuncs' keyword arguments on traced arrays: ``dtype=`` (the inputs cast to that dtype
under ``casting=``, the loop computed in it), ``out=`` (the result written into a traced
writable array or a view of one, cast under ``casting=``), ``where=`` with ``out=`` (the result
where it holds, ``out``'s values elsewhere), and ``np.clip``'s ``out=``. numpy's own errors (a
cast ``casting=`` forbids, a Python int out of the dtype's range, no loop for the dtype) are
raised as numpy raises them, from numpy itself run on one element of each operand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.combine import _where
from augment_ops.trace.ir import TraceError, const
from augment_ops.trace.sym import _BINARY, _SHIFTS, _UNARY, Sym, _rep, cast_node, implements

__all__ = ["ufunc_with_kwargs", "write_out"]

_KEYWORDS = frozenset({"out", "dtype", "casting", "where"})

#: Ufuncs whose loops take and give one dtype, so ``dtype=`` names the dtype of the inputs, of
#: the computation and of the result (numpy's comparisons give bool whatever ``dtype=`` says).
_HOMOGENEOUS = (_BINARY | _UNARY | _SHIFTS) - {
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_not"}


def _reps(inputs: tuple) -> list[Any]:
    """One element of each operand, of its dtype (a Python number stays a Python number: numpy
    2 converts it to the other operand's dtype, and refuses one out of that dtype's range)."""
    return [_rep(x) if isinstance(x, Sym) else
            (x.reshape(-1)[:1] if isinstance(x, np.ndarray) and x.ndim else x) for x in inputs]


def _out_operand(name: str, out: Any) -> Sym | None:
    if isinstance(out, tuple):
        if len(out) != 1:
            raise TraceError(f"np.{name} with several out= arrays")
        out = out[0]
    if out is None:
        return None
    if not isinstance(out, Sym):
        raise TraceError(f"np.{name} with out= a concrete array (it cannot hold per-sample "
                         "values; write into a traced array)")
    out._checked()
    if out.ndim == 0:
        raise TraceError(f"np.{name} with out= a 0-d array")
    if not out._writable:
        raise TraceError(f"np.{name} with out= the input image or a view of it (numpy refuses: "
                         "the input is read-only; write into img.copy())")
    return out


def write_out(out: Sym, result: Any, where: Any, what: str) -> Sym:
    """``result`` written into ``out`` (cast to its dtype) where ``where`` holds, as a ufunc's
    ``out=`` and ``where=`` do; ``out`` itself, as numpy returns it."""
    if where is not True:
        if not isinstance(where, Sym):
            where = np.asarray(where)
        if where.dtype != np.bool_:  # numpy's words for it
            raise TypeError(f"Cannot cast array data from dtype('{where.dtype}') to "
                            "dtype('bool') according to the rule 'safe'")
        res = result if isinstance(result, Sym) else Sym(const(np.asarray(result)))
        result = _where(where, Sym(cast_node(res.node, out.dtype)), out)
    out._store(result, what)
    return out


@implements("Sym.ufunc_kwargs")
def ufunc_with_kwargs(uf: Callable[..., Any], name: str, inputs: tuple,
                      kwargs: dict[str, Any]) -> Any:
    """``np.<name>(*inputs, **kwargs)`` with numpy's ``out=``, ``dtype=``, ``casting=`` and
    ``where=`` (only with ``out=``: numpy leaves the rest of a new array uninitialized)."""
    unknown = sorted(set(kwargs) - _KEYWORDS)
    if unknown:
        raise TraceError(f"np.{name} with {unknown}=")
    out = _out_operand(name, kwargs.get("out"))
    dtype = kwargs.get("dtype")
    where = kwargs.get("where", True)
    if where is not True and out is None:
        raise TraceError(f"np.{name} with where= and no out= (numpy leaves the array's other "
                         "elements uninitialized)")
    if dtype is not None and name not in _HOMOGENEOUS:
        raise TraceError(f"np.{name} with dtype=")
    check: dict[str, Any] = {k: kwargs[k] for k in ("dtype", "casting") if k in kwargs}
    if out is not None:
        check["out"] = np.ones(1, out.dtype)
    with np.errstate(all="ignore"):
        uf(*_reps(inputs), **check)  # numpy's TypeError/OverflowError, as numpy raises it
    if dtype is not None:
        dt = np.dtype(dtype)
        inputs = tuple(Sym(cast_node(x._checked(), dt)) if isinstance(x, Sym) else
                       np.asarray(x).astype(dt) for x in inputs)
    result = uf(*inputs)
    if out is None:
        return result
    return write_out(out, result, where, f"np.{name} with out=")
