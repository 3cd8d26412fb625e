"""The methods of numpy's ndarray that the traced array has (:class:`NdarrayMethods`, a base of
:class:`augment_ops.trace.sym.Sym`), each the traced counterpart of numpy's, most of them through
the handler table (:mod:`augment_ops.trace.handlers`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.handlers import HANDLERS, cast_node
from augment_ops.trace.ir import Node, TraceError

__all__ = ["NdarrayMethods"]


class NdarrayMethods:
    """The methods of numpy's ndarray that :class:`~augment_ops.trace.sym.Sym` has, each the
    traced counterpart of numpy's (most through the handler table); Sym holds the proxy's
    protocol (operators, views, writes, numpy's dispatch). They return Syms."""

    # What Sym provides: its node, its rank and dtype, the node checked against in-place
    # writes since it was taken, and a view of another node sharing its buffer.
    node: Node
    ndim: int
    dtype: np.dtype
    _checked: Callable[[], Node]
    _view: Callable[[Node], Any]

    def copy(self, order: str = "C") -> Any:
        from augment_ops.trace.pairwise import copied

        return type(self)(copied(self._checked(), order, True, "ndarray.copy"))

    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> Any:
        if kwargs:
            raise TraceError(f"astype with {sorted(kwargs)}=")
        if not copy and np.dtype(dtype) == self.dtype:
            return self  # numpy's same array, read-only where it is (the input image)
        return type(self)(cast_node(self._checked(), dtype))

    def transpose(self, *axes: Any) -> Any:
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(range(self.ndim))[::-1] if not axes or axes == (None,) else tuple(
            a % self.ndim for a in axes)
        return self._view(HANDLERS["Sym.transpose"](self._checked(), perm), ("transpose", perm))

    def swapaxes(self, a: int, b: int) -> Any:
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(perm)

    def clip(self, min: Any = None, max: Any = None, out: Any = None, **kwargs: Any) -> Any:
        return HANDLERS["clip"](self, min, max, out, **kwargs)

    def reshape(self, *shape: Any, order: str = "C", copy: Any = None) -> Any:
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = tuple(shape[0])
        return HANDLERS["reshape"](self, shape, order=order, copy=copy)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return HANDLERS["Sym.reduce"]("sum", self, axis, dtype, keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return HANDLERS["Sym.reduce"]("mean", self, axis, dtype, keepdims)

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
            keepdims: bool = False, **kw: Any) -> Any:
        return HANDLERS["Sym.variance"]("var", self, axis, dtype, out, ddof, keepdims, **kw)

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
            keepdims: bool = False, **kw: Any) -> Any:
        return HANDLERS["Sym.variance"]("std", self, axis, dtype, out, ddof, keepdims, **kw)

    def max(self, axis: Any = None, keepdims: bool = False) -> Any:
        return HANDLERS["Sym.reduce"]("max", self, axis, None, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Any:
        return HANDLERS["Sym.reduce"]("min", self, axis, None, keepdims)

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return HANDLERS["Sym.truth_reduce"]("any", self, axis, out, keepdims, **kw)

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        return HANDLERS["Sym.truth_reduce"]("all", self, axis, out, keepdims, **kw)

    def item(self) -> Any:
        if self.ndim != 0:
            raise TraceError("item() of an array")
        kind = self.dtype.kind
        return type(self)(cast_node(self.node, np.bool_ if kind == "b" else np.int64 if kind in "iu"
                                        else np.float64, weak=True))

    def tolist(self) -> Any:
        raise TraceError("tolist()")

    def dot(self, b: Any, out: Any = None) -> Any:
        if out is not None:
            raise TraceError("ndarray.dot with out=")
        return HANDLERS["Sym.dot"](self, b)
