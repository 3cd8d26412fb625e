"""Trace an op's numpy function into a small graph (the IR) that DALI's operators can run.

At loader build the op's function runs once (or once per branch, see below) on symbolic proxies:
an image of per-sample height and width (HWC ``uint8``, 3 channels), per-sample scalars (its
shape values and the arithmetic on them) and, for a random op, a symbolic ``rng``. Each proxy
records what is done to it as a :class:`Node`; :mod:`augment_ops.lower_dali` turns the nodes into
DALI operators. Nothing here imports DALI.

Result types follow numpy 2 (NEP 50) exactly: every operation asks numpy itself for the result
dtype on representative values, and the graph casts explicitly, so integer wrap-around and
float32/float64 promotion are numpy's. A Python ``if`` on a per-sample scalar (``if rng.random()
< p:``, ``if h > w:``) runs the function once per outcome (at most :data:`MAX_PATHS` paths) and
the outputs are merged per sample. Anything else (control flow on pixel values, a function numpy
cannot dispatch to the proxies, cv2/scipy, global ``np.random``, ...) raises :class:`TraceError`
naming the construct and the user's source line; the op then runs on the numpy path.
"""

from __future__ import annotations

import builtins
import linecache
import math
import operator
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from augment_ops.trace_cache import CACHE, PER_OP, clear_trace_cache, op_key

__all__ = [
    "MAX_PATHS",
    "DrawRng",
    "Guard",
    "Node",
    "TraceError",
    "Traced",
    "clear_trace_cache",
    "explain",
    "trace_op",
]

#: The most branch outcomes (paths through the function) a traced op may have.
MAX_PATHS = 16
#: Channel count of the symbolic image (decoded images are RGB).
CHANNELS = 3

_THIS_FILE = os.path.abspath(__file__)
_REGISTRY_FILE = os.path.join(os.path.dirname(_THIS_FILE), "registry.py")
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))


# -- errors ------------------------------------------------------------------------------------
class TraceError(ValueError):
    """The op's function does something the tracer cannot lower to DALI operators.

    ``construct`` names it (``"np.fft.fft"``, ``"if on pixel values"``), ``location`` is
    ``file:line: code`` of the user's source line (empty when unknown).
    """

    def __init__(self, construct: str, location: str | None = None) -> None:
        if location is None:
            location, inner = _user_location()
            if inner and inner != location:
                construct = f"{construct}, inside {inner}"
        self.construct = construct
        self.location = location
        super().__init__(f"{construct} at {self.location}" if self.location else construct)


def _is_internal(filename: str) -> bool:
    f = os.path.abspath(filename)
    return f == _THIS_FILE or f.startswith(_NUMPY_DIR) or f.startswith("<frozen")


def _describe(filename: str, lineno: int) -> str:
    code = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}: {code}" if code else f"{filename}:{lineno}"


def _user_location(tb: types.TracebackType | None = None) -> tuple[str, str]:
    """``file:line: code`` of the user's line, and of the innermost frame outside this module and
    numpy (where it went wrong, maybe in a library the op called).

    Only frames inside the op's call count (from the op's function inward: never its caller's,
    such as the line that built the loader). The user's line is the innermost of them in user
    code: the op's own function, a function it calls or that wraps it (a decorator), a lambda,
    code from ``exec`` or a notebook cell; not numpy, this package's tracer and registry, nor
    installed libraries. Walks ``tb``, or else the current stack.
    """
    from augment_ops.state import library_file

    frames: list[tuple[Any, int]] = []
    if tb is not None:
        while tb is not None:
            frames.append((tb.tb_frame.f_code, tb.tb_lineno))
            tb = tb.tb_next
    else:
        frame = sys._getframe(1)
        while frame is not None:
            frames.append((frame.f_code, frame.f_lineno))
            frame = frame.f_back
        frames.reverse()
    session = _TRACING.active
    code = session.user_code if session is not None else None
    start = next((i for i, (c, _) in enumerate(frames) if c is code), None)
    if start is None:  # found after the op returned (its outputs): the op's def line
        first = session.user_def if session is not None else None
        return (_describe(first.co_filename, first.co_firstlineno) if first else ""), ""
    outside = [(c, n) for c, n in frames[start:] if not _is_internal(c.co_filename)
               and os.path.abspath(c.co_filename) != _REGISTRY_FILE]
    own = [(c, n) for c, n in outside if not library_file(c.co_filename)]
    inner = _describe(outside[-1][0].co_filename, outside[-1][1]) if outside else ""
    return (_describe(own[-1][0].co_filename, own[-1][1]) if own else inner), inner


# -- the IR ------------------------------------------------------------------------------------
Dim = Any  # int | Node (an int64 per-sample scalar)


class Node:
    """One value of the traced graph: an array or a per-sample scalar (``shape == ()``).

    ``op`` and ``attrs`` say how it is computed from ``args`` (Nodes, ints or None). ``weak``
    marks a Python scalar (``int``/``float``/``bool``), which numpy promotes weakly (NEP 50).
    ``pixel`` says whether the value depends on pixel values (control flow on those is refused).
    ``value`` holds a constant's numpy value. ``facts`` memoises what the tracer proved about
    the value (bounds, ``<=`` another value): a pure function of the node and its arguments.
    """

    __slots__ = ("__weakref__", "args", "attrs", "dtype", "facts", "op", "pixel", "shape",
                 "value", "weak")

    def __init__(self, op: str, args: tuple, attrs: tuple, dtype: np.dtype, shape: tuple,
                 weak: bool = False, value: np.ndarray | None = None) -> None:
        self.op, self.args, self.attrs = op, args, attrs
        self.dtype, self.shape, self.weak, self.value = np.dtype(dtype), shape, weak, value
        self.pixel = op == "input" or any(isinstance(a, Node) and a.pixel for a in args)
        self.facts: dict[tuple, Any] = {}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Node({self.op}{list(self.attrs)}, {self.dtype}, ndim={self.ndim})"

    # A node travels to the source's reader processes without its facts (rebuilt on demand).
    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("__weakref__", "facts")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self.facts = {}


def _new(op: str, args: tuple, attrs: tuple, dtype: Any, shape: tuple, weak: bool = False,
         value: np.ndarray | None = None) -> Node:
    """A node, shared with an identical earlier one (hash-consing): the same computation on every
    path gives the same node, so branch conditions of different runs can be matched, and a
    sub-expression written twice is one node whose facts are derived once. Arguments that are
    not nodes are keyed with their type (``1``, ``True`` and ``1.0`` are equal in Python)."""
    dtype = np.dtype(dtype)
    vkey = None if value is None else (value.dtype.str, value.shape, value.tobytes())
    key = (op, tuple(a if isinstance(a, Node) else ("v", type(a), a) for a in args), attrs,
           dtype.str, tuple(d if isinstance(d, Node) else ("v", type(d), d) for d in shape), weak,
           vkey)
    table = _TRACING.active.table if _TRACING.active is not None else {}
    node = table.get(key)
    if node is None:
        node = Node(op, args, attrs, dtype, shape, weak, value)
        table[key] = node
    return node


def const(value: Any, dtype: Any = None, weak: bool = False) -> Node:
    arr = np.asarray(value, dtype=dtype)
    return _new("const", (), (), arr.dtype, arr.shape, weak, value=arr)


def _is_const(x: Any) -> bool:
    return isinstance(x, Node) and x.op == "const"


@dataclass(frozen=True)
class Guard:
    """Where the numpy function raises for some samples: ``bad`` (a per-sample bool scalar) is
    true for a sample on which the function raises ``error`` (a built-in exception's name) with
    ``message``, from the user's line ``location``. The branch a guard was met on is part of
    ``bad``, so a sample that takes another branch never raises it."""

    bad: Node
    error: str
    message: str
    location: str


@dataclass(frozen=True)
class Traced:
    """A traced op: its output nodes, how many uniform draws (slots) a sample takes, and the
    run-time checks (:class:`Guard`) under which numpy raises, in the order numpy meets them."""

    outputs: tuple[Node, ...]
    num_draws: int
    num_paths: int
    guards: tuple[Guard, ...] = ()

    def nodes(self) -> Iterator[Node]:
        """Every node the outputs depend on, each once (outputs first, then their arguments)."""
        seen: set[int] = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            yield n
            stack.extend(a for a in n.args if isinstance(a, Node))


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
        up = _upper(nx)
        if name == "trunc" or (up is not None and up < 2.0 ** (23 if cdt == np.float32 else 52)):
            attrs = (name, "nonneg")  # no sign or magnitude cases to handle
    return Sym(_new("un", (nx,), attrs, rdt, shape, weak))


# -- the symbolic array/scalar -----------------------------------------------------------------
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
        return _matmul(self, other)

    def dot(self, b: Any, out: Any = None) -> Sym:
        if out is not None:
            raise TraceError("ndarray.dot with out=")
        return _matmul(self, b)

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
            return _matmul(*inputs)
        if name in ("logical_and", "logical_or", "logical_xor"):
            inputs = tuple(ufunc("not_equal", x, 0) if _dtype_kind(x) != "b" else x
                           for x in inputs)
            name = "bitwise_" + name.split("_")[1]
        if name not in _BINARY and name not in _UNARY:
            raise TraceError(f"np.{name}")
        return ufunc(name, *inputs)

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        handler = _FUNCTIONS.get(func.__name__)
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
        return self._view(_transpose(self._checked(), perm))

    def swapaxes(self, a: int, b: int) -> Sym:
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(perm)

    def clip(self, min: Any = None, max: Any = None, out: Any = None, **kwargs: Any) -> Any:
        return _np_clip(self, min, max, out, **kwargs)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Sym:
        return _reduce("sum", self, axis, dtype, keepdims)

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Sym:
        return _reduce("mean", self, axis, dtype, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Sym:
        return _reduce("max", self, axis, None, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Sym:
        return _reduce("min", self, axis, None, keepdims)

    def __getitem__(self, key: Any) -> Sym:
        n = self._checked()
        if isinstance(key, Sym) and key.dtype.kind == "b":
            raise TraceError("boolean-mask indexing (its result size depends on pixel values)")
        return self._view(_getitem(n, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        n = self._checked()
        if not self._writable:
            raise TraceError("a write into the input image or a view of it (numpy refuses: "
                             "the input is read-only; write into img.copy())")
        if isinstance(key, Sym) and key.dtype.kind == "b":
            v = np.asarray(value) if not isinstance(value, Sym) else value
            self._write(_where(_mask_of(key, n), _setitem_value(n.dtype, v), self).node)
            return
        self._write(_fill_region(n, key, value))


def _mask_of(key: Sym, n: Node) -> Sym:
    """A boolean index ``key`` of ``a[key] = v`` as a mask of ``a``'s shape: numpy's ``key``
    covers ``a``'s leading axes and selects whole subarrays along the rest (an HxW mask on an
    HWC image selects pixels, all channels)."""
    kn = key._checked()
    if kn.ndim > n.ndim:
        raise TraceError(f"a boolean index of rank {kn.ndim} into an array of rank {n.ndim}")
    for k, (dk, dn) in enumerate(zip(kn.shape, n.shape[:kn.ndim], strict=True)):
        if not (dk is dn or (isinstance(dk, int) and isinstance(dn, int) and dk == dn)
                or (isinstance(dk, Node) and isinstance(dn, Node) and _same(dk, dn))):
            raise TraceError(f"a boolean index whose axis {k} may differ in length from the "
                             "array's")
    node = kn
    for ax in range(kn.ndim, n.ndim):
        node = _new("expand", (node,), (ax,), node.dtype, (*node.shape, 1))
    return Sym(node)


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
    return _dim(_where(c, _dim_sym(a), _dim_sym(b)))


def _dlt(a: Dim, b: Dim) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return ufunc("less", _dim_sym(a), _dim_sym(b))


# -- facts about per-sample values ----------------------------------------------------------------
#: The most facts (bounds, ``a <= b``) one trace may evaluate. Each fact is memoised on its node,
#: so a trace evaluates about as many as its graph has nodes (times the few values compared with
#: each); an op beyond this runs on the numpy path instead of keeping the loader waiting.
MAX_FACT_STEPS = 200_000


class _Steps(threading.local):
    """Fact evaluations in this thread (memo misses): the tracer's unit of work."""

    count = 0


_STEPS = _Steps()


def fact_steps() -> int:
    """How many facts the tracer has evaluated in this thread so far (memo hits not counted)."""
    return _STEPS.count


def _fact(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Memoise fact ``fn(node, *others)`` on the node, keyed by the other values' identity.

    The graph is a DAG whose nodes share arguments: without the memo a fact about a deep value
    re-derives the facts of the shared sub-values once per path to them, exponentially often."""
    name = fn.__name__

    def memo(d: Any, *others: Any) -> Any:
        if not isinstance(d, Node):
            return fn(d, *others)
        key = (name, *(o if isinstance(o, Node) else (type(o), o) for o in others))
        facts = d.facts
        if key in facts:
            return facts[key]
        _STEPS.count += 1
        session = _TRACING.active
        if session is not None:
            session.steps += 1
            if session.steps > MAX_FACT_STEPS:
                raise TraceError(f"integer arithmetic on sizes and draws too deep to bound (more "
                                 f"than {MAX_FACT_STEPS} facts about its values)")
        got = facts[key] = fn(d, *others)
        return got

    memo.__name__, memo.__qualname__, memo.__doc__ = name, fn.__qualname__, fn.__doc__
    memo.__wrapped__ = fn  # type: ignore[attr-defined]
    return memo


@_fact
def _lower(d: Dim) -> float | None:
    """A lower bound of a per-sample value known from how it was computed (sizes are >= 1,
    draws >= 0, h - min(size, h) >= 0, ...), or None."""
    if isinstance(d, int):
        return d
    if d.op == "const":
        return float(d.value.min()) if d.value.size and d.dtype.kind in "iuf" else None
    if d.op == "in_dim":
        return 1  # a decoded image has at least one pixel
    if d.op == "input":
        return 0
    if d.op in _LAYOUT_OPS:
        los = [_lower(a) for a in d.args if isinstance(a, Node) and a.ndim == d.ndim]
        los += [_lower(a) for a in d.args[:1] if d.op == "take"]
        return None if not los or None in los else builtins.min(los)
    if d.op == "uniform":
        return 0
    if d.op == "cast":
        return _cast_bounds(d)[0]
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc"):
        lo = _lower(d.args[0])
        return None if lo is None else math.floor(lo)
    if d.op == "bin":
        a, b = d.args
        name = d.attrs[0]
        la, lb = _lower(a), _lower(b)
        if name == "subtract":
            known = [0] if _at_most(b, a) else []
            if la is not None and b.op == "const":
                known.append(la - float(b.value.max()))
            sa = _same_value(a)
            if d.dtype.kind in "iu" and sa.op == "bin" and sa.attrs[0] == "add" and \
                    sa.dtype == d.dtype:
                # (y + n) - y is n in wrapping integer arithmetic: a crop's size.
                p, q = sa.args
                rest = q if _same(p, b) else p if _same(q, b) else None
                low = None if rest is None else _lower(rest)
                if low is not None:
                    known.append(low)
            return builtins.max(known) if known else None
        if la is None or lb is None:
            return la if name == "maximum" and la is not None else (
                lb if name == "maximum" else None)
        if name == "add":
            return la + lb
        if name == "minimum":
            return builtins.min(la, lb)
        if name == "maximum":
            return builtins.max(la, lb)
        if name in ("multiply", "divide") and la >= 0 and lb >= 0:
            return 0 if name == "divide" else la * lb
        if name == "floor_divide" and la >= 0 and b.op == "const" and lb >= 1:
            return la // float(b.value.max())
        if name == "remainder" and la >= 0 and lb >= 0:
            return 0
    if d.op == "where":
        la, lb = _lower(d.args[1]), _lower(d.args[2])
        return None if la is None or lb is None else builtins.min(la, lb)
    return None


_LAYOUT_OPS = {"slice", "flip", "transpose", "take", "expand", "cat", "stack", "select"}


@_fact
def _cast_bounds(d: Node) -> tuple[float | None, float | None]:
    """Bounds of a cast's result: the source's where they fit the target type (a narrowing
    integer cast wraps around), else the target type's range."""
    src, dst = d.args[0], d.dtype
    if src.dtype.kind == "b":
        lo, up = 0.0, 1.0
    else:
        lo, up = _lower(src), _upper(src)
        if src.dtype.kind in "iu":
            # Python ints, not floats: float(int64 max) rounds up to 2**63, beyond the range.
            info = np.iinfo(src.dtype)
            lo = int(info.min) if lo is None else lo
            up = int(info.max) if up is None else up
    if dst.kind in "iu":
        info = np.iinfo(dst)
        if lo is None or up is None or lo < info.min or up > info.max:
            return float(info.min), float(info.max)
        return math.floor(lo), math.floor(up)
    return lo, up


#: An upper bound of an image side: one of 2**40 pixels would take terabytes.
_MAX_SIDE = 2**40


@_fact
def _upper(d: Dim) -> float | None:
    """An upper bound of every element of a value, known from how it was computed, or None."""
    if isinstance(d, int):
        return d
    if d.op == "const":
        return float(d.value.max()) if d.value.size and d.dtype.kind in "iuf" else None
    if d.op == "input":
        return 255
    if d.op == "in_dim":
        return _MAX_SIDE
    if d.op == "uniform":
        return 1
    if d.op == "cast":
        return _cast_bounds(d)[1]
    if d.op in _LAYOUT_OPS:
        ups = [_upper(a) for a in d.args if isinstance(a, Node) and a.ndim == d.ndim]
        ups += [_upper(a) for a in d.args[:1] if d.op == "take"]
        return None if not ups or None in ups else builtins.max(ups)
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc"):
        up = _upper(d.args[0])
        return None if up is None else math.ceil(up)
    if d.op == "bin":
        a, b = d.args
        ua, ub = _upper(a), _upper(b)
        name = d.attrs[0]
        if name == "minimum":
            known = [u for u in (ua, ub) if u is not None]
            return builtins.min(known) if known else None
        if name == "subtract":
            lb = _lower(b)
            return None if ua is None or lb is None else ua - lb
        if ua is None or ub is None:
            return None
        if name == "add":
            return ua + ub
        if name == "maximum":
            return builtins.max(ua, ub)
        if name == "multiply" and _nonneg(a) and _nonneg(b):
            return ua * ub
    if d.op == "where":
        ua, ub = _upper(d.args[1]), _upper(d.args[2])
        return None if ua is None or ub is None else builtins.max(ua, ub)
    return None


def _nonneg(d: Dim) -> bool:
    """Whether an int dim is >= 0 for every sample."""
    lo = _lower(d)
    return lo is not None and lo >= 0


@_fact
def _same_value(d: Node) -> Node:
    """``d`` without the casts that keep every value (int64 of a size, a widening) and without
    integer ``+ 0`` and ``- 0``."""
    while True:
        if d.op == "cast" and np.can_cast(d.args[0].dtype, d.dtype):
            d = d.args[0]
        elif d.op == "bin" and d.dtype.kind in "iu" and d.attrs[0] in ("add", "subtract") \
                and _is_zero(d.args[1]):
            d = d.args[0]
        elif d.op == "bin" and d.dtype.kind in "iu" and d.attrs[0] == "add" \
                and _is_zero(d.args[0]):
            d = d.args[1]
        else:
            return d


def _is_zero(d: Dim) -> bool:
    return (isinstance(d, int) and d == 0) or (
        isinstance(d, Node) and d.op == "const" and d.value.size == 1 and d.value.item() == 0)


def _same(x: Any, y: Any) -> bool:
    return isinstance(x, Node) and isinstance(y, Node) and _same_value(x) is _same_value(y)


@_fact
def _keeps_values(d: Node) -> bool:
    """Whether integer cast ``d`` keeps every value its source can take."""
    src = d.args[0]
    if np.can_cast(src.dtype, d.dtype):
        return True
    lo, up = _lower(src), _upper(src)
    info = np.iinfo(d.dtype)
    return lo is not None and up is not None and lo >= info.min and up <= info.max


def _min_operands(d: Node) -> tuple[Node, Node] | None:
    """``(x, y)`` when ``d`` is ``min(x, y)``, as ``np.minimum`` or as a clamp
    ``np.where(x < y, x, y)``."""
    if d.op == "bin" and d.attrs[0] == "minimum":
        return d.args
    if d.op == "where" and d.args[0].op == "bin" and d.args[0].attrs[0] == "less":
        x, y = d.args[0].args
        if d.args[1] is x and d.args[2] is y:
            return x, y
    return None


@_fact
def _at_most_minus(p: Node, n: Dim, q: Node) -> bool:
    """Whether ``p <= n - q`` for every sample, from how ``p`` was computed: ``n - q`` itself,
    ``(n - q) // k``, ``min(n - q, ...)``, ``((n - q) + c) - c``, as offsets and crops write
    them."""
    p = _same_value(p)
    if p.op != "bin":
        return False
    x, y = p.args
    name = p.attrs[0]
    if name == "subtract" and _same(x, n):
        lo, up = _lower(y), _upper(q)
        if _same(y, q) or (lo is not None and up is not None and lo >= up):
            return True  # n - r <= n - q for r >= q
    if name == "floor_divide" and _nonneg(x) and y.op == "const" and (y.value >= 1).all():
        return _at_most_minus(x, n, q)
    if name == "minimum":
        return _at_most_minus(x, n, q) or _at_most_minus(y, n, q)
    if name == "add" and _is_zero(x):
        return _at_most_minus(y, n, q)
    if name == "subtract" and y.op == "const" and y.value.size == 1:
        inner = _same_value(x)
        if inner.op == "bin" and inner.attrs[0] == "add" and inner.args[1].op == "const" \
                and inner.args[1].value.size == 1 \
                and inner.args[1].value.item() <= y.value.item():
            return _at_most_minus(inner.args[0], n, q)  # (d + c1) - c2 <= d for c1 <= c2
    return False


@_fact
def _at_most(a: Dim, b: Dim) -> bool:
    """Whether ``a <= b`` for every sample, ``b`` a size (>= 0)."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    if a is b or _same(a, b):
        return True
    if isinstance(a, int) and a <= 0 and _nonneg(b):
        return True
    if not isinstance(a, Node):
        return False
    if a.op == "const" and a.value.size == 1 and a.dtype.kind in "iu" \
            and a.value.item() <= 0 and _nonneg(b):
        return True
    if a.op == "cast" and a.dtype.kind in "iu" and a.args[0].dtype.kind in "iu" \
            and _keeps_values(a) and _at_most(a.args[0], b):
        return True
    if a.op == "bin":
        x, y = a.args
        name = a.attrs[0]
        if name == "minimum" and (_at_most(x, b) or _at_most(y, b)):
            return True
        if name == "maximum" and _at_most(x, b) and _at_most(y, b):
            return True
        if name == "floor_divide" and _nonneg(x) and y.op == "const" and \
                (y.value >= 1).all() and _at_most(x, b):
            return True
        if name == "subtract" and _nonneg(y) and _at_most(x, b):
            return True
        if name == "add" and ((_is_zero(x) and _at_most(y, b)) or (_is_zero(y) and _at_most(x, b))):
            return True
        if name == "add" and (_at_most_minus(x, b, y) or _at_most_minus(y, b, x)):
            return True  # (n - q) // 2 + q <= n
    if a.op == "where" and _at_most(a.args[1], b) and _at_most(a.args[2], b):
        return True
    if isinstance(b, Node):
        bb = _same_value(b)
        if bb.op == "bin" and bb.attrs[0] == "add" and (
                (_same(bb.args[0], a) and _nonneg(bb.args[1]))
                or (_same(bb.args[1], a) and _nonneg(bb.args[0]))):
            return True  # a <= a + (something >= 0)
        pair = _min_operands(bb)
        if pair is not None and _at_most(a, pair[0]) and _at_most(a, pair[1]):
            return True
    return False


def _normalize_slice(s: slice, n: Dim) -> tuple[Dim, Dim, bool]:
    """numpy's bounds for ``s`` on an axis of length ``n``: ``(lo, hi, reversed)`` with
    ``0 <= lo <= hi <= n``, the slice taking ``lo..hi-1`` (reversed when the step is -1)."""
    step = s.step
    if isinstance(step, Sym):
        raise TraceError("a per-sample slice step")
    if step is None:
        step = 1
    if step not in (1, -1):
        raise TraceError(f"a slice step of {step} (only 1 and -1 are lowered)")
    if s.start is None and s.stop is None:
        return 0, n, step == -1

    def bound(b: Any, default: Dim, lo_clamp: Dim, hi_clamp: Dim) -> Dim:
        if b is None:
            return default
        if isinstance(b, Sym) and b.dtype.kind not in "iu":
            raise TraceError(f"a slice bound of dtype {b.dtype}")
        if isinstance(b, (np.integer,)):
            b = int(b)
        if not isinstance(b, (int, Sym)):
            raise TraceError(f"a slice bound of type {type(b).__name__}")
        b = _dim(b)
        # Facts known at trace time (a size, h // 2, min(size, h)) spare the run-time clamps.
        if not _nonneg(b):
            neg = _dlt(b, 0)
            b = _dwhere(neg, _dop("add", b, n), b)
            b = _dwhere(_dlt(b, lo_clamp), lo_clamp, b)
        if not _at_most(b, hi_clamp):
            b = _dwhere(_dlt(hi_clamp, b), hi_clamp, b)
        return b

    if step == 1:
        lo = bound(s.start, 0, 0, n)
        hi = bound(s.stop, n, 0, n)
        if not _at_most(lo, hi):
            hi = _dwhere(_dlt(hi, lo), lo, hi)
        return lo, hi, False
    last = _dop("subtract", n, 1)
    start = bound(s.start, last, -1, last)
    stop = bound(s.stop, -1, -1, last)
    lo, hi = _dop("add", stop, 1), _dop("add", start, 1)
    hi = _dwhere(_dlt(hi, lo), lo, hi)
    return lo, hi, True


def _getitem(n: Node, key: Any) -> Node:
    key = key if isinstance(key, tuple) else (key,)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise TraceError("more than one ... in an index")
    explicit = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if explicit > n.ndim:
        raise TraceError(f"too many indices ({explicit}) for an array of rank {n.ndim}")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (n.ndim - explicit) + key[i + 1:]
    else:
        key = key + (slice(None),) * (n.ndim - explicit)
    bounds: list[Any] = []
    takes: list[tuple[int, Any]] = []
    newaxes: list[int] = []
    axis = 0
    out_axis = 0
    for k in key:
        if k is None:
            newaxes.append(out_axis)
            out_axis += 1
            continue
        dim = n.shape[axis]
        if isinstance(k, slice):
            if k == slice(None):
                bounds.append(None)
            else:
                bounds.append(_normalize_slice(k, dim))
            out_axis += 1
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            bounds.append(None)
            if isinstance(dim, int):
                if not -dim <= k < dim:
                    raise TraceError(f"index {k} out of bounds for an axis of length {dim}")
                takes.append((axis, k % dim))
            else:
                # A per-sample length: numpy raises IndexError out of bounds, for the sample.
                size = Sym(dim)
                raise_where(size <= k if k >= 0 else size < -k, IndexError,
                            f"index {k} is out of bounds for axis {axis}")
                takes.append((axis, k if k >= 0 else _dop("add", dim, k)))
        elif isinstance(k, (list, tuple, np.ndarray)) and not isinstance(dim, Node):
            arr = np.asarray(k)
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise TraceError("fancy indexing other than a list of ints on one axis")
            bounds.append(("pick", tuple(int(i) % dim for i in arr)))
            out_axis += 1
        elif isinstance(k, Sym):
            raise TraceError("indexing with a per-sample value (use a slice x[i:i+1])")
        else:
            raise TraceError(f"indexing with {type(k).__name__}")
        axis += 1
    out = n
    # Slices (and picks) first, then integer takes from the last axis back, then new axes.
    # All ranges in one slice (one copy), then the reversals.
    ranges = [(ax, b[0], b[1]) for ax, b in enumerate(bounds)
              if b is not None and b[0] != "pick"]
    out = _slice(out, ranges)
    for ax, b in enumerate(bounds):
        if b is not None and b[0] != "pick" and b[2]:
            out = _flip(out, ax)
    for ax, b in enumerate(bounds):
        if b is not None and b[0] == "pick":
            parts = [_slice(out, [(ax, i, i + 1)]) for i in b[1]]
            out = _concat(parts, ax) if len(parts) != 1 else parts[0]
    for ax, i in sorted(takes, reverse=True):
        shape = out.shape[:ax] + out.shape[ax + 1:]
        out = _new("take", (out, i), (ax,), out.dtype, shape)
    for ax in newaxes:
        shape = (*out.shape[:ax], 1, *out.shape[ax:])
        out = _new("expand", (out,), (ax,), out.dtype, shape)
    return out


def _slice(n: Node, ranges: list[tuple[int, Dim, Dim]]) -> Node:
    """``n`` restricted to ``lo:hi`` on each listed axis (normalized bounds); one node."""
    args: list[Any] = [n]
    axes = []
    shape = list(n.shape)
    for axis, lo, hi in ranges:
        if isinstance(lo, int) and lo == 0 and (hi is n.shape[axis] or hi == n.shape[axis]):
            continue  # the whole axis
        axes.append(axis)
        args += [lo, hi]
        shape[axis] = _dop("subtract", hi, lo)
    if not axes:
        return n
    return _new("slice", tuple(args), tuple(axes), n.dtype, tuple(shape))


def _flip(n: Node, axis: int) -> Node:
    if n.op == "flip" and n.attrs == (axis,):
        return n.args[0]
    if n.ndim not in (2, 3):
        raise TraceError(f"a reversal (step -1) of a rank-{n.ndim} array")
    return _new("flip", (n,), (axis,), n.dtype, n.shape)


def _transpose(n: Node, perm: tuple[int, ...]) -> Node:
    if len(perm) != n.ndim or sorted(perm) != list(range(n.ndim)):
        raise TraceError(f"transpose with axes {perm} for an array of rank {n.ndim}")
    if perm == tuple(range(n.ndim)):
        return n
    return _new("transpose", (n,), (perm,), n.dtype, tuple(n.shape[p] for p in perm))


def _setitem_value(dtype: np.dtype, value: Any) -> Any:
    """The value numpy stores for ``a[...] = value`` into an array of ``dtype``."""
    if isinstance(value, Sym):
        if value.ndim != 0:
            raise TraceError("assigning an array into a region (only a scalar fill is lowered)")
        return Sym(cast_node(value.node, dtype))
    tmp = np.zeros(1, dtype)
    try:
        tmp[0] = value
    except Exception as e:
        raise TraceError(f"an assignment numpy refuses ({e})") from None
    if np.ndim(value) != 0:
        raise TraceError("assigning an array into a region (only a scalar fill is lowered)")
    return tmp[0]


def _fill_region(n: Node, key: Any, value: Any) -> Node:
    key = key if isinstance(key, tuple) else (key,)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (n.ndim - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (n.ndim - len(key))
    if len(key) != n.ndim or not builtins.all(isinstance(k, slice) for k in key[:2]):
        raise TraceError("an assignment other than out[y0:y1, x0:x1(, c)] = scalar")
    region: list[Dim] = []
    for ax in (0, 1):
        lo, hi, _ = _normalize_slice(slice(key[ax].start, key[ax].stop, key[ax].step or 1),
                                     n.shape[ax])
        region += [lo, hi]
    chans: tuple = ()
    if n.ndim == 3:
        k = key[2]
        c = n.shape[2]
        if isinstance(k, slice):
            if k != slice(None):
                lo, hi, _ = _normalize_slice(slice(k.start, k.stop, k.step or 1), c)
                chans = (lo, hi)
        elif isinstance(k, (int, np.integer)):
            chans = (int(k) % c, int(k) % c + 1)
        else:
            raise TraceError("an assignment with a channel index other than an int or slice")
    v = _setitem_value(n.dtype, value)
    vnode = v.node if isinstance(v, Sym) else const(v)
    return _new("fill", (n, *region, vnode), chans, n.dtype, n.shape)


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
    shape = _broadcast(cn.shape, na.shape, nb.shape)
    return Sym(_new("where", (cn, na, nb), (), rdt, shape))


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
        # use a clamp for np.clip only (augment_ops.lower_dali._clamp_bounds).
        n = out.node
        out = Sym(_new("bin", n.args, ("minimum", "clip"), n.dtype, n.shape, n.weak))
    return out


def _np_clip(a: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
             min: Any = None, max: Any = None, **kwargs: Any) -> Any:
    """``np.clip`` and ``ndarray.clip`` with numpy 2's keywords: ``min=``/``max=`` are the
    bounds; ``out=`` and ufunc keywords (``dtype=``, ``casting=``, ``where=``) are refused, so
    the op falls back instead of being traced without them."""
    if out is not None or kwargs:
        names = ["out"] * (out is not None) + sorted(kwargs)
        raise TraceError(f"np.clip with {', '.join(n + '=' for n in names)}")
    if (min is not None or max is not None) and (a_min is not None or a_max is not None):
        raise TraceError("np.clip with both a_min/a_max and min/max")
    lo, hi = (min, max) if min is not None or max is not None else (a_min, a_max)
    return _clip(a, lo, hi)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim for a in axis))
    return (int(axis) % ndim,)


def _reduce(kind: str, x: Sym, axis: Any, dtype: Any, keepdims: bool) -> Sym:
    n = x._checked()
    if dtype is not None:
        raise TraceError(f"{kind}(dtype=)")
    axes = _axes(axis, n.ndim)
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
        if kind in ("sum", "mean") and n.dtype.kind == "f":
            raise TraceError(f"np.{kind} of floating-point values over the image (numpy sums "
                             "pairwise; cast to an integer type or reduce over the channels)")
        shape = tuple(d for i, d in enumerate(n.shape) if i not in axes)
        if kind in ("sum", "mean"):
            acc_dt = np.dtype(np.uint64 if n.dtype.kind in "u" else np.int64)
            s = Sym(_new("reduce", (cast_node(n, acc_dt) if n.dtype.kind == "b" else n,),
                         ("sum", axes), acc_dt, shape))
            if kind == "mean":
                count: Dim = 1
                for a in axes:
                    count = _dop("multiply", count, n.shape[a])
                out = ufunc("divide", Sym(cast_node(s.node, np.float64)),
                            Sym(cast_node(_dim_sym(count).node, np.float64))
                            if isinstance(count, Node) else np.float64(count))
            else:
                out = s
            out = Sym(cast_node(out.node, rdt))
        else:
            out = Sym(_new("reduce", (n,), (kind, axes), n.dtype, shape))
    if keepdims:
        node = out.node
        for a in axes:
            node = _new("expand", (node,), (a,), node.dtype,
                        (*node.shape[:a], 1, *node.shape[a:]))
        out = Sym(node)
    return Sym(out.node)


#: The most multiplications a traced matrix product may take per pixel (channels x columns).
MAX_PRODUCT_TERMS = 64


def _matmul(a: Any, b: Any) -> Sym:
    """``image @ w`` with a constant vector ``w`` (C,) or matrix ``w`` (C, K): the weighted sum of
    the channels written out, ``(x0*w0 + x1*w1) + x2*w2 ...``, each step rounded in the result
    dtype, the same on every machine. numpy's ``@`` on floats calls the host's BLAS, which may
    sum in another order or fuse multiply-adds: the two then differ by a few units in the last
    place (README, "What traces"); integer products wrap around identically in any order."""
    what = "matrix products other than image @ constant vector or (channels, k) matrix"
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
        return Sym(cast_node(acc.node, rdt))

    if w.ndim == 1:
        return weighted(wc)
    return _np_stack([weighted(wc[:, k]) for k in range(wc.shape[1])], axis=-1)


def _concat(nodes: Sequence[Node], axis: int) -> Node:
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
    nodes = _arrays(arrays, "np.stack")
    axis = axis % (nodes[0].ndim + 1)
    shape = (*nodes[0].shape[:axis], len(nodes), *nodes[0].shape[axis:])
    return Sym(_new("stack", tuple(nodes), (axis,), nodes[0].dtype, shape))


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
    for ax in _axes(axis, m.ndim):
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


def _np_round(a: Any, decimals: int = 0, out: Any = None) -> Any:
    if decimals != 0 or out is not None:
        raise TraceError("np.round with decimals or out")
    return ufunc("rint", a)


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
    "expand_dims": _np_expand_dims,
    "copy": lambda a, **kw: a.copy(),
    "ascontiguousarray": lambda a, dtype=None: a.astype(dtype) if dtype is not None else a,
    "astype": lambda a, dtype, **kw: a.astype(dtype, **kw),
    "full_like": _np_full_like,
    "zeros_like": lambda a, dtype=None: _np_full_like(a, 0, dtype),
    "ones_like": lambda a, dtype=None: _np_full_like(a, 1, dtype),
    "round": _np_round,
    "around": _np_round,
    "sum": _method("sum"),
    "mean": _method("mean"),
    "max": _method("max"),
    "min": _method("min"),
    "amax": _method("max"),
    "amin": _method("min"),
    "dot": lambda a, b, out=None: a.dot(b, out) if isinstance(a, Sym) else _matmul(a, b),
    "matmul": lambda a, b: _matmul(a, b),
    "shape": lambda a: a.shape,
    "ndim": lambda a: a.ndim,
}


# -- randomness ---------------------------------------------------------------------------------
def _floor_int(x: Any) -> Any:
    if isinstance(x, Sym):
        return Sym(cast_node(ufunc("floor", x).node, np.int64))
    return np.int64(np.floor(x))


def _as_float(x: Any) -> Any:
    if isinstance(x, Sym):
        return Sym(cast_node(x.node, np.float64, weak=True))
    return float(x)


def _math(name: str, x: Any) -> Any:
    return ufunc(name, x) if isinstance(x, Sym) else getattr(np, name)(np.float64(x))


def _floor_below(span: Any) -> bool:
    """Whether ``floor(u * float(span)) <= span - 1`` for every float64 ``u`` in [0, 1), so that
    the clamp of ``rng.integers`` changes no value.

    Proof, for an integer ``1 <= span <= 2**53`` (exact as a float64): ``u <= 1 - 2**-53``, the
    largest float64 below 1, so the exact product is at most ``span - e`` with
    ``e = span * 2**-53``. Let ``2**j <= span < 2**(j+1)``. For ``span == 2**j`` that product is
    a float64 itself, below ``span``. Otherwise the float64s next to ``span`` are ``2**(j-52)``
    apart and ``e > 2**(j-53)``, half that gap: the product is more than half a gap below
    ``span`` and rounds to at most ``span - 2**(j-52)``. Rounding is monotonic, so every
    ``fl(u * span) < span``, whose floor is at most ``span - 1``."""
    if isinstance(span, Sym):
        if span.dtype.kind not in "iu":
            return False
        lo, up = _lower(span.node), _upper(span.node)
        return lo is not None and up is not None and lo >= 1 and up <= 2**53
    return isinstance(span, (int, np.integer)) and 1 <= int(span) <= 2**53


def _noop_minimum(n: Node) -> Node:
    """``n``, a ``np.minimum(a, b)`` known to equal ``a``, marked so: the tracer keeps its facts
    (``<= b``) and the DALI lowering emits no operator for it."""
    if n.op != "bin" or n.attrs != ("minimum",):
        return n
    return _new("bin", n.args, ("minimum", "first"), n.dtype, n.shape, n.weak)


def _integers_checks(low: Any, high: Any, dtype: np.dtype, endpoint: bool) -> None:
    """numpy's checks of ``rng.integers(low, high, dtype=, endpoint=)``, with its messages."""
    if dtype.kind not in "iu":
        raise TraceError(f"rng.integers(dtype={dtype})")
    info = np.iinfo(dtype)
    top = int(info.max) + (not endpoint)  # the largest high numpy takes

    def fits(b: Any) -> bool:
        """Whether every value of a per-sample bound lies in ``info.min..top``."""
        return isinstance(b, Sym) and np.iinfo(b.dtype).min >= info.min and \
            np.iinfo(b.dtype).max <= top
    if not fits(low):
        raise_where(low < int(info.min), ValueError, f"low is out of bounds for {dtype}")
    if not fits(high):
        raise_where(high > top, ValueError, f"high is out of bounds for {dtype}")
    zero = isinstance(low, (int, np.integer)) and int(low) == 0
    if endpoint:
        raise_where(low > high, ValueError, "high < 0" if zero else "low > high")
    else:
        raise_where(low >= high, ValueError, "high <= 0" if zero else "low >= high")


class DrawRng:
    """The generator a traced random op sees: ``np.random.Generator``'s scalar methods, each
    built from uniform draws ``uniform(slot)`` in [0, 1).

    On the traced path ``uniform`` gives symbolic per-sample draws (a counter-based hash of seed,
    epoch, sample and op, :func:`extsrc.ops_runtime.seeding.counter_uniform`); given that numpy
    function it replays on numpy exactly what the traced path computes. Draws differ from
    ``np.random.Generator``'s; their distributions are the same.
    """

    def __init__(self, uniform: Callable[[int], Any]) -> None:
        self._uniform = uniform
        self._slot = 0

    @property
    def slots_used(self) -> int:
        return self._slot

    def _next(self) -> Any:
        k = self._slot
        self._slot += 1
        return self._uniform(k)

    @staticmethod
    def _scalar_only(size: Any, what: str) -> None:
        if size is not None:
            raise TraceError(f"rng.{what}(size=...) (only scalar draws are lowered)")

    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        """``[0, 1)``, a Python float."""
        self._scalar_only(size, "random")
        if np.dtype(dtype) != np.float64:
            raise TraceError(f"rng.random(dtype={np.dtype(dtype)}) (only float64 is lowered)")
        return _as_float(self._next())

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """``low + (high - low) * u``, numpy's formula, a Python float; raises as numpy does
        for a range that is not finite or below 0."""
        self._scalar_only(size, "uniform")
        span = _as_float(high) - _as_float(low)
        if _dtype_kind(low) == "f" or _dtype_kind(high) == "f":  # integers make finite spans
            raise_where((span - span) != 0, OverflowError,  # inf or NaN
                        "high - low range exceeds valid bounds")
        raise_where(span < 0, ValueError, "high - low < 0")
        u = self._next()
        return _as_float(_as_float(low) + span * u)

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        """``low + floor(u * (high - low))`` (below ``high``), an ``np.int64``; raises as numpy
        does for an empty range or bounds outside ``dtype``."""
        self._scalar_only(size, "integers")
        if high is None:
            low, high = 0, low
        if builtins.any(isinstance(b, Sym) and b.dtype.kind not in "iu" for b in (low, high)):
            raise TraceError("rng.integers with per-sample bounds that are not integers")
        _integers_checks(low, high, np.dtype(dtype), endpoint)
        if endpoint:
            high = high + 1
        span = high - low
        u = self._next()
        k = _floor_int(u * _as_float(span))
        last = span - 1
        if isinstance(k, Sym):
            k = ufunc("minimum", k, last)
            if _floor_below(span):
                k = Sym(_noop_minimum(k.node))
            low = Sym(cast_node(low.node, np.int64)) if isinstance(low, Sym) else np.int64(low)
            out = ufunc("add", low, k)
        else:
            out = np.int64(low) + np.minimum(k, np.int64(last))
        if np.dtype(dtype) != np.int64:
            out = out.astype(dtype) if isinstance(out, Sym) else np.dtype(dtype).type(out)
        return out

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        """Box-Muller from two draws, ``loc + scale * z``, a Python float; raises as numpy does
        for ``scale < 0``."""
        self._scalar_only(size, "normal")
        raise_where(_as_float(scale) < 0, ValueError, "scale < 0")
        u1, u2 = self._next(), self._next()
        r = _math("sqrt", -2.0 * _math("log", 1.0 - _as_float(u1)))
        z = r * _math("cos", 2.0 * math.pi * _as_float(u2))
        return _as_float(_as_float(loc) + _as_float(scale) * z)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
        """One element of ``a`` (a constant sequence, or ``range(a)`` for an int)."""
        self._scalar_only(size, "choice")
        if isinstance(a, Sym) or isinstance(p, Sym):
            raise TraceError("rng.choice over something other than a constant 1-D sequence")
        # The arguments are constants: numpy's own checks of them (an empty sequence, p of
        # another size or not summing to 1) raise here as they do on the numpy path.
        np.random.default_rng(0).choice(a, replace=replace, p=p)
        values = np.arange(a) if isinstance(a, (int, np.integer)) else np.asarray(a)
        if values.ndim != 1:
            raise TraceError("rng.choice over something other than a constant 1-D sequence")
        if p is None:
            idx = self.integers(0, len(values))
        else:
            cum = np.cumsum(np.asarray(p, dtype=np.float64))
            u = self._next()
            idx = np.int64(0)
            for c in cum[:-1]:
                hit = u >= c
                idx = idx + (Sym(cast_node(hit.node, np.int64)) if isinstance(hit, Sym)
                             else np.int64(hit))
        if not isinstance(idx, Sym):
            return values[int(idx)]
        out: Any = values[0]
        for i in range(1, len(values)):
            out = _where(ufunc("equal", idx, i), values[i], out)
        return Sym(cast_node(out.node, values.dtype)) if isinstance(out, Sym) else out

    def __getattr__(self, name: str) -> Any:
        raise TraceError(f"rng.{name} (lowered: random, uniform, integers, normal, choice)")


# -- running the function on proxies -------------------------------------------------------------
class _Session:
    """One trace: the node table shared by all runs, and the branch decisions of the current run."""

    def __init__(self) -> None:
        self.table: dict[Any, Node] = {}
        self.steps = 0  # facts evaluated (see MAX_FACT_STEPS)
        self.user_code: types.CodeType | None = None
        self.user_def: types.CodeType | None = None  # of the function a decorator wraps
        self.prefix: tuple[bool, ...] = ()
        self.conds: list[Node] = []
        self.decisions: list[bool] = []
        self.guards: list[Guard] = []

    def start(self, prefix: tuple[bool, ...]) -> None:
        self.prefix, self.conds, self.decisions = prefix, [], []

    def decide(self, cond: Node) -> bool:
        i = len(self.decisions)
        choice = self.prefix[i] if i < len(self.prefix) else True
        self.conds.append(cond)
        self.decisions.append(choice)
        return choice


class _Tracing(threading.local):
    active: _Session | None = None


_TRACING = _Tracing()


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
    session = _TRACING.active
    if session is None:  # pragma: no cover - Syms exist only while tracing
        raise TraceError("a per-sample value outside a trace")
    node = bad.node if bad.dtype == np.bool_ else cast_node(bad.node, np.bool_)
    if _never(node):  # rng.integers(0, h): the bounds the tracer knows rule it out
        return
    if node.pixel:
        raise TraceError(f"a check numpy makes ({error.__name__}: {message}) on a value computed "
                         "from pixel values")
    for cond, decision in zip(session.conds, session.decisions, strict=True):
        on_path = cond if decision else _new("un", (cond,), ("logical_not",), np.bool_, ())
        node = _new("bin", (node, on_path), ("bitwise_and",), np.bool_, ())
    if _is_const(node):
        if bool(node.value):
            raise error(message)
        return
    if not builtins.any(g.bad is node and g.message == message for g in session.guards):
        session.guards.append(Guard(node, error.__name__, message, _user_location()[0]))


def _never(n: Node) -> bool:
    """Whether comparison ``n`` is false for every sample, by the bounds the tracer knows."""
    if n.op != "bin" or n.attrs[0] not in ("less", "less_equal", "greater", "greater_equal"):
        return False
    x, y = n.args
    if n.attrs[0] in ("greater", "greater_equal"):
        x, y = y, x  # x > y is y < x
    lo, up = _lower(x), _upper(y)
    if lo is None or up is None:
        return False
    return lo >= up if n.attrs[0] in ("less", "greater") else lo > up


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


class _IntMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, builtins.int)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _py_int(*args, **kwargs) if len(args) == 1 and not kwargs else builtins.int(
            *args, **kwargs)


class _FloatMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, builtins.float)

    def __call__(cls, *args: Any) -> Any:
        return _py_float(*args) if args else 0.0


class _Int(metaclass=_IntMeta):
    """``int`` inside a traced function: ``int(per-sample value)`` stays symbolic."""


class _Float(metaclass=_FloatMeta):
    """``float`` inside a traced function."""


def _py_minmax(name: str) -> Callable[..., Any]:
    real = getattr(builtins, name)

    def f(*args: Any, **kwargs: Any) -> Any:
        items = list(args[0]) if len(args) == 1 else list(args)
        if kwargs or not builtins.any(isinstance(v, Sym) for v in items):
            return real(*args, **kwargs)
        out = items[0]
        for v in items[1:]:
            out = ufunc("minimum" if name == "min" else "maximum", out, v)
        return out
    return f


def _py_len(x: Any) -> Any:
    if isinstance(x, Sym) and x.ndim and isinstance(x.node.shape[0], Node):
        return Sym(x.node.shape[0])
    return builtins.len(x)


class _Forbidden(types.ModuleType):
    """A module stand-in whose attributes (global random generators) cannot be traced."""

    def __init__(self, what: str, why: str = "global random state; draw from the op's rng"
                 ) -> None:
        super().__init__(what)
        self._what, self._why = what, why

    def __getattr__(self, name: str) -> Any:
        raise TraceError(f"{self._what}.{name} ({self._why})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError(f"{self._what}() ({self._why})")


class _ScalarTypeMeta(type):
    """numpy scalar types (``np.uint8(x)``) that convert per-sample values symbolically and
    otherwise behave as the real type (as a dtype, in ``isinstance``)."""

    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, cls.real)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], Sym):
            if args[0].ndim != 0:
                raise TraceError(f"np.{cls.real.__name__}() of an array")
            return Sym(cast_node(args[0].node, cls.real))
        return cls.real(*args, **kwargs)


_SCALAR_TYPES: dict[type, type] = {}


def _scalar_type(real: type) -> type:
    if real not in _SCALAR_TYPES:
        _SCALAR_TYPES[real] = _ScalarTypeMeta(real.__name__, (), {"real": real,
                                                                 "dtype": np.dtype(real)})
    return _SCALAR_TYPES[real]


class _NumpyProxy(types.ModuleType):
    """``numpy`` as the traced function sees it: all of numpy except the global ``np.random``,
    with scalar types that accept per-sample values."""

    def __init__(self) -> None:
        super().__init__("numpy")

    def __getattr__(self, name: str) -> Any:
        if name == "random":
            return _Forbidden("np.random")
        v = getattr(np, name)
        if isinstance(v, type) and issubclass(v, np.generic) and v is not np.generic and \
                v.__module__ == "numpy" and np.dtype(v).kind in "biuf":
            return _scalar_type(v)
        return v


#: Functions of ``os`` that end or replace the process, refused where the op names them.
_ENDS_PROCESS = ("_exit", "abort", "kill", "killpg", "fork", "forkpty", "system", "execv",
                 "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe")


class _OsProxy(types.ModuleType):
    """``os`` as the traced function sees it: all of ``os`` except what ends the process."""

    def __init__(self) -> None:
        super().__init__("os")

    def __getattr__(self, name: str) -> Any:
        if name in _ENDS_PROCESS:
            raise TraceError(f"os.{name} (it would end or replace the process at loader build)")
        return getattr(os, name)


def _patched_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    import random as py_random

    ends = {id(getattr(os, n)): n for n in _ENDS_PROCESS if hasattr(os, n)}
    g = dict(fn.__globals__)
    for k, v in list(g.items()):
        if v is np:
            g[k] = _NumpyProxy()
        elif v is os:
            g[k] = _OsProxy()
        elif id(v) in ends and v is getattr(os, ends[id(v)]):
            g[k] = _Forbidden(f"os.{ends[id(v)]}", "it would end or replace the process at "
                              "loader build")
        elif v is np.random or v is py_random:
            g[k] = _Forbidden(k)
        elif callable(v) and not isinstance(v, type) and (
                (getattr(v, "__module__", None) or "").startswith("numpy.random")
                or getattr(v, "__module__", None) == "random"
                or isinstance(getattr(v, "__self__", None),
                              (py_random.Random, np.random.RandomState))):
            g[k] = _Forbidden(f"{k}")
    b = dict(vars(builtins))
    b.update(int=_Int, float=_Float, min=_py_minmax("min"), max=_py_minmax("max"),
             len=_py_len)
    g["__builtins__"] = b
    return g


def _rebind(fn: Callable[..., Any]) -> Callable[..., Any]:
    if not isinstance(fn, types.FunctionType):
        raise TraceError(f"the op is a {type(fn).__name__}, not a Python function")
    f = types.FunctionType(fn.__code__, _patched_globals(fn), fn.__name__, fn.__defaults__,
                           fn.__closure__)
    f.__kwdefaults__ = fn.__kwdefaults__
    return f


def _merge(paths: list[tuple[list[Node], list[bool], tuple[Node, ...]]], depth: int,
           nout: int) -> tuple[Node, ...]:
    if len(paths) == 1:
        return paths[0][2]
    cond = paths[0][0][depth]
    taken = [p for p in paths if p[1][depth]]
    other = [p for p in paths if not p[1][depth]]
    if not taken or not other:
        return _merge(paths, depth + 1, nout)
    a, b = _merge(taken, depth + 1, nout), _merge(other, depth + 1, nout)
    out = []
    for x, y in zip(a, b, strict=True):
        if x is y:
            out.append(x)
            continue
        if x.dtype != y.dtype or x.ndim != y.ndim:
            raise TraceError("branches that return outputs of different dtype or rank")
        shape = tuple(dx if dx is dy else _dwhere(Sym(cond), dx, dy)
                      for dx, dy in zip(x.shape, y.shape, strict=True))
        out.append(_new("select", (cond, x, y), (), x.dtype, shape))
    return tuple(out)


#: Seconds one trace may run. Tracing runs the op's Python code once per branch outcome; an op
#: that loops forever, or a Python loop over pixels that builds a huge graph, is stopped and
#: refused (it runs on the numpy path, where ``op_timeout`` can limit it) instead of keeping
#: ``Loader(...)`` waiting. Enforced in the main thread, with ``SIGALRM``, when no other alarm or
#: ``SIGALRM`` handler is set.
MAX_TRACE_SECONDS = 20.0


class _TraceTimeout(BaseException):
    """The trace's time is up: a ``BaseException``, so that an op's ``except Exception`` does
    not swallow it."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_TraceTimeout` into the code running after ``seconds`` (main thread only;
    an alarm or ``SIGALRM`` handler someone else set is left alone, and then there is no limit)."""
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN)):
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise _TraceTimeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _too_long(location: str = "") -> TraceError:
    return TraceError(f"tracing took longer than {MAX_TRACE_SECONDS:g} s (an endless loop, or a "
                      "Python loop over the image's pixels?)", location)


def trace_function(fn: Callable[..., Any], *, params: dict[str, Any], random: bool,
                   num_outputs: int, dtype: Any, ndim: int) -> Traced:
    """Trace ``fn(img, [rng=], **params)``; raise :class:`TraceError` where it cannot be lowered."""
    session = _Session()
    f = _rebind(fn)
    session.user_code = fn.__code__
    inner_fn = fn
    while isinstance(getattr(inner_fn, "__wrapped__", None), types.FunctionType):
        inner_fn = inner_fn.__wrapped__
    session.user_def = inner_fn.__code__
    pending: list[tuple[bool, ...]] = [()]
    done: list[tuple[list[Node], list[bool], tuple[Node, ...]]] = []
    draws = 0
    previous, _TRACING.active = _TRACING.active, session
    try:
        while pending:
            prefix = pending.pop()
            session.start(prefix)
            img_node = _new("input", (), (), np.uint8,
                            (_new("in_dim", (), (0,), np.int64, (), weak=True),
                             _new("in_dim", (), (1,), np.int64, (), weak=True), CHANNELS))
            img = Sym(img_node, writable=False)
            kwargs = dict(params)
            rng = None
            if random:
                rng = DrawRng(lambda k: Sym(_new("uniform", (), (k,), np.float64, (), weak=True)))
                kwargs["rng"] = rng
            try:
                out = f(img, **kwargs)
            except TraceError:
                raise
            except Exception as e:
                location, inner = _user_location(e.__traceback__)
                where = f", inside {inner}" if inner and inner != location else ""
                raise TraceError(f"{type(e).__name__}: {e}{where}", location) from e
            except _TraceTimeout as e:
                raise _too_long(_user_location(e.__traceback__)[0]) from None
            except KeyboardInterrupt:
                raise  # indistinguishable from Ctrl-C, which must stop the program
            except BaseException as e:  # SystemExit, GeneratorExit: the op must not end the
                # program at loader build; it is refused and runs on the numpy path instead
                location, inner = _user_location(e.__traceback__)
                where = f", inside {inner}" if inner and inner != location else ""
                raised = f"{type(e).__name__}({', '.join(map(repr, e.args))})"
                raise TraceError(f"the op raised {raised} (tracing runs the op at loader build, "
                                 f"where it must not end the program){where}", location) from e
            outs = _check_outputs(out, num_outputs, np.dtype(dtype), ndim)
            if rng is not None:
                draws = builtins.max(draws, rng.slots_used)
            for i in range(len(prefix), len(session.decisions)):
                pending.append((*tuple(session.decisions[:i]), not session.decisions[i]))
            done.append((list(session.conds), list(session.decisions), outs))
            if len(done) + len(pending) > MAX_PATHS:
                raise TraceError(f"more than {MAX_PATHS} branch outcomes (if on per-sample "
                                 "values)", "")
        merged = _merge(done, 0, num_outputs)
    finally:
        _TRACING.active = previous
    return Traced(outputs=merged, num_draws=draws, num_paths=len(done),
                  guards=tuple(session.guards))


def _check_outputs(out: Any, num_outputs: int, dtype: np.dtype, ndim: int) -> tuple[Node, ...]:
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != num_outputs:
        raise TraceError(f"the function returns {len(outs)} output(s), the op declares "
                         f"{num_outputs}", "")
    nodes = []
    for k, o in enumerate(outs):
        if not isinstance(o, Sym):
            raise TraceError(f"output {k} is a {type(o).__name__} that does not depend on the "
                             "image", "")
        n = o._checked()
        if builtins.any(_upper(d) == 0 for d in n.shape):
            raise TraceError(f"output {k} is empty for every image (an image output needs at "
                             "least one pixel)", "")
        if n.dtype != dtype or n.ndim != ndim:
            raise TraceError(f"output {k} is {n.dtype} of rank {n.ndim}, the op declares "
                             f"{dtype} of rank {ndim}", "")
        nodes.append(n)
    return tuple(nodes)


# -- ops ---------------------------------------------------------------------------------------
_CACHE = PER_OP  # per op object: ops reading a value without a key (trace_cache)


def trace_op(op: Any) -> Traced:
    """The traced graph of a registered op; raises :class:`TraceError`, also for an op that
    reads or writes state outside its call (:mod:`augment_ops.state`), which is refused without
    running it.

    Traced once per process for the same code, values and parameters (another op object, a
    notebook cell run again): see :mod:`augment_ops.trace_cache` and
    :func:`augment_ops.clear_trace_cache`."""
    got: Traced | TraceError | None = _CACHE.get(op)
    if got is None and getattr(op, "on_clips", False):
        got = TraceError("an op on whole video clips (ndim=4) runs on the numpy path only")
        _CACHE[op] = got
    if got is None:
        from augment_ops.state import outside_state

        # Before running the op: tracing an op that reads or writes state outside its call
        # would freeze that state into the graph (and run the op's side effects). Checked at
        # every call until refused: a graph cached by content cannot know what else in the
        # module writes the values it read.
        found = outside_state(op.fn, dict(op.params))
        if found is not None:
            got = TraceError(*found)
            _CACHE[op] = got
    key = op_key(op, (MAX_PATHS, MAX_FACT_STEPS, MAX_TRACE_SECONDS)) if got is None else None
    if got is None and key is not None:
        got = CACHE.get(key, lambda v: isinstance(v, TraceError))
    if got is None:
        try:
            with _time_limit(MAX_TRACE_SECONDS):
                got = trace_function(op.fn, params=dict(op.params), random=op.random,
                                     num_outputs=op.num_outputs, dtype=op.dtype, ndim=op.ndim)
        except TraceError as e:
            got = e
        except _TraceTimeout:  # outside the op's own code (merging its branches)
            got = _too_long()
        if key is None:
            _CACHE[op] = got
        else:
            CACHE.put(key, got)
    if isinstance(got, TraceError):
        raise got
    return got


def traces(op: Any) -> bool:
    """Whether the op's numpy function lowers to DALI operators."""
    try:
        trace_op(op)
    except TraceError:
        return False
    return True


def explain(name_or_op: Any) -> str:
    """How the op's native path comes about, or why it has none.

    ``"native (hand-written)"``, ``"native (traced)"``, or ``"numpy: <construct> at
    <file:line: code>"`` naming what kept the function from being traced, and the innermost line
    of user code inside the op or a function it calls where it happened (the op's own ``def``
    line for what only its outputs show); never the line that called the op.
    """
    from augment_ops.registry import get

    op = get(name_or_op)
    if op.on_clips:
        return "numpy: an op on whole video clips (ndim=4) runs on the numpy path only"
    if "native" in op.impls:
        return "native (hand-written)"
    try:
        trace_op(op)
    except TraceError as e:
        return f"numpy: {e}"
    return "native (traced)"
