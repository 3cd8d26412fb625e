"""The symbolic array (:class:`Sym`) an op's function receives while traced, and numpy's
elementwise rules on it (:func:`ufunc`, :func:`cast_node`), with the result dtypes numpy itself
gives (NEP 50).

numpy functions, indexing and reductions are graph builders in
:mod:`augment_ops.trace.numpy_api`, which registers them in :data:`HANDLERS`; :class:`Sym`
looks them up there (NEP 18's ``HANDLED_FUNCTIONS`` pattern), so this module never imports them.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.checks import add_guard
from augment_ops.trace.facts import _nonneg, _same, upper
from augment_ops.trace.ir import (
    _TRACING,
    Dim,
    Node,
    TraceError,
    _is_const,
    _new,
    const,
)


# -- dtype rules, asked of numpy ---------------------------------------------------------------
def _rep(x: Any) -> Any:
    """A representative value numpy can compute the result type from."""
    if isinstance(x, Sym):
        n = x.node
        if n.weak:
            return {"b": True, "i": 1, "u": 1, "f": 1.0}[n.dtype.kind]
        return n.dtype.type(1) if n.ndim == 0 else np.ones(1, n.dtype)
    return x


def _is_weak(x: Any) -> bool:
    if isinstance(x, Sym):
        return x.node.weak
    return type(x) in (int, float, bool)


def _weak_dtype(v: Any) -> np.dtype:
    return np.dtype({bool: np.bool_, int: np.int64, float: np.float64}[type(v)])


_PY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "divide": operator.truediv, "floor_divide": operator.floordiv, "remainder": operator.mod,
    "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
    "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
    "minimum": builtins.min, "maximum": builtins.max,
}
_COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
_BINARY = set(_PY_OPS)
_UNARY = {"negative", "positive", "absolute", "floor", "ceil", "rint", "trunc", "sqrt", "exp",
          "log", "sin", "cos", "logical_not", "invert", "square"}


def _to_node(x: Any, dtype: np.dtype) -> Node:
    """``x`` (a Sym or a constant) as a node of ``dtype``, converting as numpy does."""
    if isinstance(x, Sym):
        return cast_node(x.node, dtype)
    return const(np.asarray(x).astype(dtype) if isinstance(x, np.ndarray) else
                 np.array(x, dtype=dtype))


def _shape_of(x: Any) -> tuple:
    if isinstance(x, Sym):
        return x.node.shape
    return np.shape(x)


def _broadcast(*shapes: tuple) -> tuple:
    nd = builtins.max(len(s) for s in shapes)
    out = []
    for k in range(nd):
        dims = [s[len(s) - nd + k] for s in shapes if len(s) - nd + k >= 0]
        real = [d for d in dims if not (isinstance(d, int) and d == 1)]
        if not real:
            out.append(1)
            continue
        ints = {d for d in real if isinstance(d, int)}
        if len(ints) > 1:
            raise TraceError(f"operands with incompatible shapes {list(shapes)}")
        distinct: list[Dim] = []
        for d in real:
            if not builtins.any(d is e or (isinstance(d, Node) and isinstance(e, Node)
                                           and _same(d, e)) for e in distinct):
                distinct.append(d)
        if len(distinct) == 1:
            out.append(distinct[0])
            continue
        # Sizes that may differ per sample: numpy broadcasts a size of 1 and raises where two
        # others differ; so does the traced op, naming the sample (DALI broadcasts alike).
        first = next(iter(ints)) if ints else distinct[0]
        for d in distinct:
            if d is not first:
                bad = ufunc("bitwise_and", ufunc("not_equal", _dim_sym(d), _dim_sym(first)),
                            ufunc("bitwise_and", ufunc("not_equal", _dim_sym(d), 1),
                                  ufunc("not_equal", _dim_sym(first), 1)))
                raise_where(bad, ValueError, "operands could not be broadcast together (their "
                            f"sizes differ on axis {k})")
        size = first
        if not ints:
            for d in distinct[1:]:
                size = _dop("maximum", size, d)
        out.append(size)
    return tuple(out)


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


def ufunc(name: str, *inputs: Any) -> Any:
    """Apply numpy ufunc ``name`` to Syms and constants, with numpy's result dtype."""
    if not any(isinstance(x, Sym) for x in inputs):
        return getattr(np, name)(*inputs)
    for x in inputs:
        if not isinstance(x, (Sym, int, float, bool, np.ndarray, np.generic)):
            raise TraceError(f"np.{name} on a {type(x).__name__}")
    python = builtins.all(_is_weak(x) for x in inputs)
    reps = [_rep(x) for x in inputs]
    if python and name in ("divide", "floor_divide", "remainder"):
        # Python numbers (an image's sides, int() and float() of values) raise on a zero
        # divisor where numpy's give 0, inf or NaN.
        try:
            _PY_OPS[name](reps[0], type(reps[1])(0))
        except ZeroDivisionError as e:
            raise_where(inputs[1] == 0, ZeroDivisionError, str(e))
    try:
        with np.errstate(all="ignore"):
            if python:
                res = _PY_OPS[name](*reps) if name in _PY_OPS else getattr(np, name)(*reps)
            else:
                res = getattr(np, name)(*reps)
    except ZeroDivisionError:
        res = _PY_OPS[name](reps[0], 1)
    except Exception as e:
        raise TraceError(f"np.{name} raises for these operand types ({e})") from None
    weak = python and type(res) in (int, float, bool)
    rdt = _weak_dtype(res) if weak else np.result_type(res)
    shape = _broadcast(*(_shape_of(x) for x in inputs))
    if name in _BINARY:
        a, b = inputs
        if name in _COMPARISONS:
            try:
                cdt = np.result_type(*(_weak_dtype(r) if python else r for r in reps))
            except Exception:
                cdt = np.dtype(np.float64 if any(np.asarray(r).dtype.kind == "f" for r in reps)
                               else np.int64)
        else:
            cdt = rdt
        if cdt.kind == "b" and name not in _COMPARISONS and not name.startswith("bitwise"):
            raise TraceError(f"np.{name} on boolean values")
        if cdt.kind == "f" and name in ("floor_divide", "remainder"):
            raise TraceError(f"np.{name} of floating-point values")
        if name == "divide" and cdt.kind != "f":
            cdt = rdt
        na, nb = _to_node(a, cdt), _to_node(b, cdt)
        attrs: tuple = (name,)
        if name in ("floor_divide", "remainder") and _nonneg(na) and _nonneg(nb):
            attrs = (name, "nonneg")  # truncating division is flooring division here
        out = _new("bin", (na, nb), attrs, cdt if name not in _COMPARISONS else np.bool_, shape,
                   weak)
        return Sym(cast_node(out, rdt, weak))
    (x,) = inputs
    if name == "positive":
        return x
    if name == "square":
        return ufunc("multiply", x, x)
    cdt = rdt if name not in ("logical_not",) else x.node.dtype
    if name in ("floor", "ceil", "rint", "trunc") and cdt.kind != "f":
        return Sym(cast_node(x.node, rdt, weak))
    nx = _to_node(x, cdt)
    attrs: tuple = (name,)
    if name in ("rint", "trunc") and _nonneg(nx):
        up = upper(nx)
        if name == "trunc" or (up is not None and up < 2.0 ** (23 if cdt == np.float32 else 52)):
            attrs = (name, "nonneg")  # no sign or magnitude cases to handle
    return Sym(_new("un", (nx,), attrs, rdt, shape, weak))


# -- the symbolic array/scalar -----------------------------------------------------------------
#: Graph builders by name: numpy functions (``Sym.__array_function__`` looks a function up by its
#: ``__name__``) and the array operations Sym's methods delegate (``"Sym.getitem"``,
#: ``"Sym.setitem"``, ``"Sym.transpose"``, ``"Sym.reduce"``). Filled by
#: :mod:`augment_ops.trace.numpy_api` through :func:`implements`.
HANDLERS: dict[str, Callable[..., Any]] = {}


def implements(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function in :data:`HANDLERS` under ``names``."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


class _Buffer:
    """Memory that in-place writes change; views made before a write may no longer be used."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        self.version = 0


class Sym:
    """A symbolic numpy array or scalar. Operations on it record nodes of the IR."""

    __array_priority__ = 1000

    def __init__(self, node: Node, buffer: _Buffer | None = None, version: int = 0,
                 writable: bool = True, base: bool = True) -> None:
        self.node = node
        self._buffer = buffer if buffer is not None else _Buffer()
        self._version = version if buffer is not None else 0
        # The input image is read-only (as on the numpy path); a view writes through to its base,
        # which the graph does not model, so only a base array may be written.
        self._writable = writable
        self._base = base

    # -- basic attributes
    def _checked(self) -> Node:
        if self._version != self._buffer.version:
            raise TraceError("use of a view of an array that was written in place afterwards")
        return self.node

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return self.node.ndim

    @property
    def shape(self) -> tuple:
        return tuple(Sym(d) if isinstance(d, Node) else d for d in self.node.shape)

    @property
    def T(self) -> Sym:
        return self.transpose()

    @property
    def size(self) -> Any:
        """The number of elements (a per-sample value when a side is)."""
        total: Dim = 1
        for d in self.node.shape:
            total = _dop("multiply", total, d)
        return _dim_sym(total)

    @property
    def flags(self) -> _Flags:
        """What code that checks memory before a copy (cv2 wrappers) asks: a traced array owns
        its data unless it is a view, is writable unless it is the input image or a view of it,
        and is reported C-contiguous (a numpy view may not be: such code then copies it, which
        changes no pixel)."""
        return _Flags(C_CONTIGUOUS=True, F_CONTIGUOUS=self.ndim <= 1, OWNDATA=self._base,
                      WRITEABLE=self._writable, ALIGNED=True)

    def __repr__(self) -> str:
        return f"<traced {self.node}>"

    __hash__ = object.__hash__

    def _view(self, node: Node) -> Sym:
        return Sym(node, self._buffer, self._version, self._writable, base=False)

    # -- conversions Python needs concrete values for
    def __bool__(self) -> bool:
        n = self._checked()
        if _is_const(n):
            return bool(n.value)
        if n.ndim != 0:
            raise TraceError("truth value of an array (if/and/or/while on an array)")
        if n.pixel:
            raise TraceError("Python control flow (if/while/and/or) on pixel values")
        return _TRACING.active.decide(cast_node(n, np.bool_) if n.dtype != np.bool_ else n)

    def __index__(self) -> int:
        raise TraceError("a per-sample value used where Python needs a concrete int "
                         "(range(), a list index, a shape argument, ...)")

    def __int__(self) -> int:
        raise TraceError("int() of a per-sample value outside the op's own function")

    def __float__(self) -> float:
        raise TraceError("float() of a per-sample value outside the op's own function")

    def __len__(self) -> int:
        d = self.node.shape[0] if self.node.shape else None
        if isinstance(d, int):
            return d
        raise TraceError("len() of an array whose length is per-sample outside the op's function")

    def __iter__(self) -> Any:
        raise TraceError("iteration over an array")

    def __array__(self, *a: Any, **k: Any) -> Any:
        raise TraceError("conversion to a concrete numpy array (np.asarray, a library outside "
                         "numpy such as cv2, PIL or scipy, or a numpy function without "
                         "__array_function__ dispatch)")

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes Sym does not define: ndarray methods outside the subset.
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"ndarray.{name}")

    def item(self) -> Sym:
        if self.ndim != 0:
            raise TraceError("item() of an array")
        kind = self.dtype.kind
        return Sym(cast_node(self.node, np.bool_ if kind == "b" else np.int64 if kind in "iu"
                             else np.float64, weak=True))

    def tolist(self) -> Any:
        raise TraceError("tolist()")

    # -- arithmetic
    def _bin(name: str, reflected: bool = False) -> Callable[..., Any]:
        def f(self: Sym, other: Any) -> Any:
            if not isinstance(other, (Sym, int, float, bool, np.ndarray, np.generic)):
                return NotImplemented
            self._checked()
            return ufunc(name, other, self) if reflected else ufunc(name, self, other)
        return f

    __add__, __radd__ = _bin("add"), _bin("add", True)
    __sub__, __rsub__ = _bin("subtract"), _bin("subtract", True)
    __mul__, __rmul__ = _bin("multiply"), _bin("multiply", True)
    __truediv__, __rtruediv__ = _bin("divide"), _bin("divide", True)
    __floordiv__, __rfloordiv__ = _bin("floor_divide"), _bin("floor_divide", True)
    __mod__, __rmod__ = _bin("remainder"), _bin("remainder", True)
    __and__, __rand__ = _bin("bitwise_and"), _bin("bitwise_and", True)
    __or__, __ror__ = _bin("bitwise_or"), _bin("bitwise_or", True)
    __xor__, __rxor__ = _bin("bitwise_xor"), _bin("bitwise_xor", True)
    __eq__, __ne__ = _bin("equal"), _bin("not_equal")  # type: ignore[assignment]
    __lt__, __le__ = _bin("less"), _bin("less_equal")
    __gt__, __ge__ = _bin("greater"), _bin("greater_equal")
    del _bin

    def __matmul__(self, other: Any) -> Sym:
        return HANDLERS["matmul"](self, other)

    def dot(self, b: Any, out: Any = None) -> Sym:
        if out is not None:
            raise TraceError("ndarray.dot with out=")
        return HANDLERS["matmul"](self, b)

    def __pow__(self, other: Any) -> Any:
        if isinstance(other, int) and other == 2:
            return ufunc("multiply", self, self)
        raise TraceError("the power operator (**) other than x ** 2")

    def __neg__(self) -> Any:
        return ufunc("negative", self)

    def __pos__(self) -> Any:
        return self

    def __abs__(self) -> Any:
        return ufunc("absolute", self)

    def __invert__(self) -> Any:
        if self.dtype.kind == "b":
            return ufunc("logical_not", self)
        return ufunc("invert", self)

    def __round__(self, ndigits: int | None = None) -> Any:
        if ndigits is not None:
            raise TraceError("round(x, ndigits)")
        if self.dtype.kind in "iub":
            return _py_int(self)
        return Sym(cast_node(ufunc("rint", self).node, np.int64, weak=True))

    def _inplace(name: str) -> Callable[..., Any]:
        def f(self: Sym, other: Any) -> Any:
            self._checked()
            if self.ndim == 0:  # scalars are immutable: x += 1 rebinds x
                return ufunc(name, self, other)
            if not self._writable:
                raise TraceError(f"in-place {name} on the input image or a view of it "
                                 "(numpy refuses: the input is read-only; use img.copy())")
            try:
                with np.errstate(all="ignore"):
                    getattr(np, name)(np.ones(1, self.dtype), _rep(other),
                                      out=np.ones(1, self.dtype))
            except Exception as e:
                raise TraceError(f"in-place np.{name} that numpy refuses ({e})") from None
            res = ufunc(name, self, other)
            self._write(cast_node(res.node, self.dtype))
            return self
        return f

    __iadd__, __isub__ = _inplace("add"), _inplace("subtract")
    __imul__, __itruediv__ = _inplace("multiply"), _inplace("divide")
    __ifloordiv__ = _inplace("floor_divide")
    del _inplace

    def _write(self, node: Node) -> None:
        if not self._base:
            raise TraceError("a write through a view (a slice, flip or transpose) of an array; "
                             "write into the array itself")
        if node.ndim != self.node.ndim:
            raise TraceError("an in-place write that changes the array's rank")
        self.node = node
        self._buffer.version += 1
        self._version = self._buffer.version

    # -- numpy protocols
    def __array_ufunc__(self, uf: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        name = "divide" if uf.__name__ == "true_divide" else uf.__name__
        if method != "__call__":
            raise TraceError(f"np.{name}.{method}")
        if kwargs:
            raise TraceError(f"np.{name} with {sorted(kwargs)}=")
        for x in inputs:
            if isinstance(x, Sym):
                x._checked()
        if name == "matmul":
            return HANDLERS["matmul"](*inputs)
        if name in ("logical_and", "logical_or", "logical_xor"):
            inputs = tuple(ufunc("not_equal", x, 0) if _dtype_kind(x) != "b" else x
                           for x in inputs)
            name = "bitwise_" + name.split("_")[1]
        if name not in _BINARY and name not in _UNARY:
            raise TraceError(f"np.{name}")
        return ufunc(name, *inputs)

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        handler = HANDLERS.get(func.__name__)
        if handler is None or getattr(np, func.__name__, None) is not func:
            mod = func.__module__ or "numpy"
            public = [p for p in mod.split(".")[1:] if not p.startswith("_")]
            if mod.split(".")[0] == "numpy":  # numpy.fft -> np.fft, numpy._core.x -> np
                mod = ".".join(["np", *public[:1]]) if mod.startswith("numpy.") and public and \
                    not mod.split(".")[1].startswith("_") else "np"
            raise TraceError(f"{mod}.{func.__name__}")
        return handler(*args, **kwargs)

    # -- methods numpy arrays have
    def copy(self, order: str = "C") -> Sym:
        return Sym(self._checked())

    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> Sym:
        if kwargs:
            raise TraceError(f"astype with {sorted(kwargs)}=")
        return Sym(cast_node(self._checked(), dtype))

    def transpose(self, *axes: Any) -> Sym:
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(range(self.ndim))[::-1] if not axes or axes == (None,) else tuple(
            a % self.ndim for a in axes)
        return self._view(HANDLERS["Sym.transpose"](self._checked(), perm))

    def swapaxes(self, a: int, b: int) -> Sym:
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(perm)

    def clip(self, min: Any = None, max: Any = None, out: Any = None, **kwargs: Any) -> Any:
        return HANDLERS["clip"](self, min, max, out, **kwargs)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Sym:
        return HANDLERS["Sym.reduce"]("sum", self, axis, dtype, keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Sym:
        return HANDLERS["Sym.reduce"]("mean", self, axis, dtype, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Sym:
        return HANDLERS["Sym.reduce"]("max", self, axis, None, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Sym:
        return HANDLERS["Sym.reduce"]("min", self, axis, None, keepdims)

    def __getitem__(self, key: Any) -> Sym:
        n = self._checked()
        if isinstance(key, Sym) and key.dtype.kind == "b":
            raise TraceError("boolean-mask indexing (its result size depends on pixel values)")
        if isinstance(key, Sym) and key.ndim > 0:  # a lookup table: table[img]
            return HANDLERS["Sym.lookup"](self, key)
        return self._view(HANDLERS["Sym.getitem"](n, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        HANDLERS["Sym.setitem"](self, key, value)


class _Flags(dict):
    """``ndarray.flags`` of a traced array: ``flags["OWNDATA"]`` and ``flags.owndata``."""

    def __getitem__(self, key: str) -> bool:
        if key not in self:
            raise TraceError(f"ndarray.flags[{key!r}]")
        return dict.__getitem__(self, key)

    def __getattr__(self, name: str) -> bool:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name.upper()]


def _dtype_kind(x: Any) -> str:
    if isinstance(x, (Sym, np.ndarray, np.generic)):
        return x.dtype.kind
    return np.asarray(x).dtype.kind


# -- shape arithmetic on dims (int | Node) ------------------------------------------------------
def _dim_sym(d: Dim) -> Any:
    return Sym(d) if isinstance(d, Node) else d


def _dim(x: Any) -> Dim:
    """A Sym/int back to a dim (int or int64 Node)."""
    if isinstance(x, Sym):
        return cast_node(x.node, np.int64, weak=True)
    return int(x)


def _dop(name: str, a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return int(_PY_OPS[name](a, b))
    if name in ("add", "subtract") and isinstance(b, int) and b == 0:
        return a
    if name == "add" and isinstance(a, int) and a == 0:
        return b
    return _dim(ufunc(name, _dim_sym(a), _dim_sym(b)))


def _dwhere(c: Any, a: Dim, b: Dim) -> Dim:
    if not isinstance(c, Sym):
        return a if c else b
    if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
        return a
    return _dim(HANDLERS["where"](c, _dim_sym(a), _dim_sym(b)))


def _dlt(a: Dim, b: Dim) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return ufunc("less", _dim_sym(a), _dim_sym(b))


def raise_where(bad: Any, error: type[Exception], message: str) -> None:
    """Raise ``error(message)`` where ``bad`` holds, as the numpy function would.

    A concrete ``bad`` (a constant while tracing, or any value when :class:`DrawRng` replays on
    numpy) raises now; while tracing, an op that raises on every sample then runs on the numpy
    path, which raises it for the sample. A per-sample ``bad`` becomes a :class:`Guard` of the
    trace, restricted to the branch being traced: the native path raises it for the sample at
    run time, naming the op, the manifest line and the path."""
    if not isinstance(bad, Sym):
        if bool(bad):
            raise error(message)
        return
    add_guard(bad.node if bad.dtype == np.bool_ else cast_node(bad.node, np.bool_), error,
              message)


def _py_int(x: Any) -> Any:
    if isinstance(x, Sym):
        if x.ndim != 0:
            raise TraceError("int() of an array")
        n = x.node
        if n.dtype.kind == "f":
            n = ufunc("trunc", Sym(n)).node
        return Sym(cast_node(n, np.int64, weak=True))
    return builtins.int(x)


def _py_float(x: Any) -> Any:
    if isinstance(x, Sym):
        if x.ndim != 0:
            raise TraceError("float() of an array")
        return Sym(cast_node(x.node, np.float64, weak=True))
    return builtins.float(x)
