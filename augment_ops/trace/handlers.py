"""The table through which the traced array (:class:`augment_ops.trace.sym.Sym`) reaches the
graph builders of numpy's functions and of its own methods (NEP 18's ``HANDLED_FUNCTIONS``
pattern: the builders register themselves, so the modules that define Sym and its methods never
import them), and numpy's casts as graph nodes, which both sides use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.facts import _nonneg
from augment_ops.trace.ir import Node, TraceError, _is_const, _new, const

__all__ = ["HANDLERS", "cast_node", "implements"]

#: Graph builders by name: numpy functions (``Sym.__array_function__`` looks a function up by its
#: ``__name__``) and the array operations Sym's methods delegate (``"Sym.getitem"``,
#: ``"Sym.setitem"``, ``"Sym.transpose"``, ``"Sym.reduce"``). Filled by
#: :mod:`augment_ops.trace.numpy_api` and the modules it imports through :func:`implements`.
HANDLERS: dict[str, Callable[..., Any]] = {}


def implements(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function in :data:`HANDLERS` under ``names``."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


def cast_node(n: Node, dtype: Any, weak: bool = False) -> Node:
    """``n.astype(dtype)`` (numpy's unsafe cast: wrap-around between integers, truncation of
    floats toward zero)."""
    dtype = np.dtype(dtype)
    if n.dtype == dtype and n.weak == weak:
        return n
    if _is_const(n):
        with np.errstate(all="ignore"):
            return const(n.value.astype(dtype), weak=weak)
    if dtype.kind not in "biuf" or dtype.itemsize > 8 or dtype == np.float16:
        raise TraceError(f"conversion to dtype {dtype}")
    attrs: tuple = (dtype.str,)
    if n.dtype.kind == "f" and dtype.kind in "iu" and _nonneg(n):
        attrs = (dtype.str, "nonneg")  # truncation is floor
    return _new("cast", (n,), attrs, dtype, n.shape, weak)
