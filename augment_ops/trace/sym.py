"""The symbolic array (:class:`Sym`) an op's function receives while traced, and numpy's
elementwise rules on it (:func:`ufunc`, :func:`cast_node`), with the result dtypes numpy itself
gives (NEP 50).

numpy functions, indexing and reductions are graph builders in
:mod:`augment_ops.trace.numpy_api` and the modules it imports (:mod:`~augment_ops.trace.indexing`,
:mod:`~augment_ops.trace.combine`, :mod:`~augment_ops.trace.creation`), which register them in
:data:`HANDLERS`; :class:`Sym`
looks them up there (NEP 18's ``HANDLED_FUNCTIONS`` pattern), so this module never imports them.
"""

from __future__ import annotations

import builtins
import operator
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.checks import _holds, _ruled_out, add_guard
from augment_ops.trace.facts import _nonneg, _same, lower, truth, upper

# The graph builders import the table and casts from here, beside Sym.
from augment_ops.trace.handlers import HANDLERS, cast_node, implements  # noqa: F401
from augment_ops.trace.ir import (
    _TRACING,
    Dim,
    Node,
    TraceError,
    _is_const,
    _new,
    const,
)
from augment_ops.trace.methods import NdarrayMethods

#: Code under this folder (the tracer, the registry) sees a traced value as a :class:`Sym`.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def value_class(x: Sym) -> type:
    """The class of the value numpy computes where the trace has ``x``."""
    n = x.node
    if n.ndim:
        return np.ndarray
    if n.weak:
        return {"b": bool, "f": float, "c": complex}.get(n.dtype.kind, int)
    return n.dtype.type


def is_instance(x: Any, cls: Any) -> bool:
    """``isinstance(x, cls)`` as the op's code sees it (:func:`value_class` for a traced value)."""
    if type(x) is Sym:
        return builtins.isinstance(value_class(x), type) and builtins.issubclass(
            value_class(x), cls)
    return builtins.isinstance(x, cls)


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
_SHIFTS = {"right_shift", "left_shift"}
_UNARY = {"negative", "positive", "absolute", "floor", "ceil", "rint", "trunc", "sqrt", "exp",
          "log", "sin", "cos", "logical_not", "invert", "square"}
#: Float functions whose numpy results (its own SIMD routines, or the C library's) DALI's
#: operators do not reproduce bit for bit. Of pixel values they make nodes that only a lookup
#: table computed by numpy lowers (:mod:`augment_ops.trace.tables`); of per-sample scalars
#: (sizes, draws) numpy computes them in the graph (:mod:`augment_ops.trace.scalar_stage`).
_INEXACT = {"exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "exp2", "expm1", "log2",
            "log10", "log1p", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh",
            "cbrt"}


def inexact_unary(node: Node) -> Node:
    """``node``, a ufunc of :data:`_INEXACT` of pixel values, recorded as inexact."""
    name = node.attrs[0]
    return _inexact(node, f"np.{name} of pixel values (numpy's {name} and DALI's differ in the "
                    "last bit for some values; of one uint8 array and constants it lowers as a "
                    "lookup table)")


def _inexact(node: Node, construct: str) -> Node:
    """``node``, recorded with why DALI cannot compute it exactly: the trace's end replaces it by
    a lookup table where it is a function of one uint8 array and constants, and refuses the op
    with this reason where it is not."""
    session = _TRACING.active
    if session is not None and node not in session.inexact:
        session.inexact[node] = TraceError(construct)
    return node


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


def ufunc(name: str, *inputs: Any) -> Any:
    """Apply numpy ufunc ``name`` to Syms and constants, with numpy's result dtype."""
    if not any(isinstance(x, Sym) for x in inputs):
        return getattr(np, name)(*inputs)
    if name in _SHIFTS:
        return _shift(name, *inputs)
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
            return Sym(cast_node(_float_mod(name, a, b, cdt).node, rdt, weak))
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
    if name in _INEXACT:
        if nx.pixel:  # a scalar of pixel values too (np.exp(img.mean())): no table covers it
            return Sym(inexact_unary(_new("un", (nx,), attrs, rdt, shape, weak)))
        if name not in _UNARY:
            raise TraceError(f"np.{name}")
    if name in ("rint", "trunc") and _nonneg(nx):
        up = upper(nx)
        if name == "trunc" or (up is not None and up < 2.0 ** (23 if cdt == np.float32 else 52)):
            attrs = (name, "nonneg")  # no sign or magnitude cases to handle
    return Sym(_new("un", (nx,), attrs, rdt, shape, weak))


def _float_mod(name: str, a: Any, b: Any, dt: np.dtype) -> Sym:
    """numpy's float ``a // b`` for ``a >= 0``, or ``a % b`` (``(x * gain) % 180`` of a hue
    table) of a bounded ``a``, by a positive constant ``b``, exactly: ``k = floor(a / b)`` is
    the quotient or one more
    (the division rounds up to an integer at most, while every ``k * b`` is exact: the bounds
    of ``a`` keep ``k``'s bits and ``b``'s within the mantissa), ``a - k * b`` is then exact
    (Sterbenz), and a negative remainder takes ``b`` back (exactly: numpy's remainder, an
    fmod here, is representable). Anything else is refused."""
    what = f"np.{name} of floating-point values"
    bv = _rep(b)
    if isinstance(b, Sym) or not isinstance(a, Sym) or np.ndim(bv) != 0 or \
            dt not in (np.float32, np.float64):
        raise TraceError(f"{what} (only of a value >= 0 by a positive constant is lowered)")
    bv = float(bv)
    na = _to_node(a, dt)
    lo, up = lower(na), upper(na)
    bits = 53 if dt == np.float64 else 24
    if not (np.isfinite(bv) and bv > 0 and float(dt.type(bv)) == bv):
        raise TraceError(f"{what} by {bv!r} (only a positive divisor the dtype holds exactly "
                         "is lowered)")
    sig = int(np.float64(bv).view(np.int64)) & ((1 << 52) - 1) | (1 << 52)
    sig_bits = 53 - ((sig & -sig).bit_length() - 1)
    if sig_bits > bits - 9:
        raise TraceError(f"{what} by {bv!r}, whose {sig_bits} significant bits leave the "
                         "quotient's multiples of it inexact (a divisor with few significant "
                         "bits, such as 180, 0.5 or 7.5, is lowered)")
    # A remainder of a value that may be negative is numpy's fmod of its magnitude with its sign
    # (fmod is exact and odd), then, where negative, plus b, and +0.0 where it is 0 (numpy's
    # npy_divmod); a floor division of one is left to the numpy path.
    signed = name == "remainder" and lo is not None and lo < 0
    reach = builtins.max(-lo, up) if signed and up is not None else up
    if lo is None or (lo < 0 and not signed) or reach is None or not np.isfinite(reach) or \
            int(reach // bv + 2).bit_length() + sig_bits > bits:
        span = f"-{bv:g} * 2**{bits - sig_bits - 1}.." if name == "remainder" else "0.."
        raise TraceError(f"{what} of a value the tracer cannot bound within {span}{bv:g} * "
                         f"2**{bits - sig_bits - 1} (numpy's fmod is reproduced exactly only "
                         "there)")
    x = Sym(na) if not signed else ufunc("absolute", Sym(na))
    k = ufunc("floor", ufunc("divide", x, dt.type(bv)))
    r = ufunc("subtract", x, ufunc("multiply", k, dt.type(bv)))
    low = ufunc("less", r, dt.type(0)).node
    if name == "remainder" and signed:
        r0 = Sym(_new("where", (low, ufunc("add", r, dt.type(bv)).node, r.node), (), dt,
                      r.node.shape))
        neg = ufunc("less", Sym(na), dt.type(0)).node
        r = Sym(_new("where", (neg, ufunc("negative", r0).node, r0.node), (), dt, r.node.shape))
        below = ufunc("less", r, dt.type(0)).node
        zero = ufunc("equal", r, dt.type(0)).node
        kept = _new("where", (zero, const(dt.type(0)), r.node), (), dt, r.node.shape)
        out = _new("where", (below, ufunc("add", r, dt.type(bv)).node, kept), (), dt,
                   r.node.shape)
    elif name == "remainder":
        out = _new("where", (low, ufunc("add", r, dt.type(bv)).node, r.node), (), dt, r.node.shape)
    else:
        out = _new("where", (low, ufunc("subtract", k, dt.type(1)).node, k.node), (), dt,
                   k.node.shape)
    return Sym(out)


def _shift(name: str, a: Any, b: Any) -> Any:
    """``a >> b`` / ``a << b`` (``np.right_shift`` / ``np.left_shift``) by a constant count, with
    numpy's result dtype: a floor division or a (wrapping) multiplication by ``2**b``, which is
    exactly numpy's arithmetic shift; a count outside ``0..bits-1`` gives numpy's 0 (-1 for a
    negative value shifted right)."""
    op = ">>" if name == "right_shift" else "<<"
    if isinstance(b, Sym):
        if not _is_const(b.node):
            raise TraceError(f"np.{name} ({op}) by a per-sample count (shift by a constant, or "
                             "multiply or floor-divide by a power of two)")
        b = b.node.value
    if not isinstance(a, Sym):
        raise TraceError(f"np.{name} ({op}) of a constant by a per-sample count")
    if np.ndim(b) != 0 or not isinstance(b, (int, bool, np.integer, np.bool_, np.ndarray)):
        raise TraceError(f"np.{name} ({op}) by an array of counts (only one constant count is "
                         "lowered)")
    python = _is_weak(a) and _is_weak(b)
    try:
        with np.errstate(all="ignore"):
            res = getattr(np, name)(_rep(a), b)
    except Exception as e:
        raise TraceError(f"np.{name} ({op}) raises for these operands ({e})") from None
    s = int(b)
    if python and s < 0:
        raise ValueError("negative shift count")
    rdt = np.dtype(np.int64) if python else np.result_type(res)
    x = Sym(cast_node(a.node, rdt, python))
    bits = 8 * rdt.itemsize
    signed = rdt.kind == "i"
    zero = 0 if python else rdt.type(0)
    if name == "right_shift" and signed and (s < 0 or s >= bits - 1):
        return HANDLERS["where"](ufunc("less", x, zero), -1 if python else rdt.type(-1), zero)
    if s < 0 or s >= bits:
        return ufunc("multiply", x, zero)
    if python:
        power: Any = 1 << s
    else:
        with np.errstate(all="ignore"):
            power = np.left_shift(np.array(1, rdt), s)[()]
    return ufunc("floor_divide" if name == "right_shift" else "multiply", x, power)


def power(base: Any, exponent: Any, what: str, name: str = "power") -> Any:
    """``base ** exponent`` / ``np.power`` with numpy's result dtype, where exact: an integer
    result by a constant exponent >= 0 as repeated multiplication (which wraps around as
    numpy's does), a floating-point one by the exponents numpy's C library ``pow`` computes
    exactly (0, 1, 2 and -1: 1, x, x*x and 1/x, each one correctly rounded operation).
    ``name``: the ufunc, ``"power"`` or ``"float_power"`` (its own routine, which differs from
    those operations in the last bit: only a lookup table lowers it)."""
    if isinstance(exponent, Sym) and _is_const(exponent.node):
        exponent = exponent.node.value
    if isinstance(exponent, Sym) and exponent.node.pixel and exponent.ndim and \
            (not isinstance(base, Sym) or base.node.pixel):
        return _pixel_power(base, exponent, f"{what} of pixel values by pixel values (numpy "
                            "calls the C library's pow, which DALI does not reproduce bit for "
                            "bit; of one uint8 array and constants it lowers as a lookup table)",
                            name)
    if isinstance(exponent, Sym):
        # Measured: for x in [0, 1] and exponents in [0.8, 1.2], DALI's CPU pow equals the C
        # library's, and numpy 2's float64 pow (its own SIMD routine on AVX-512 processors)
        # differs from both in the last bit for about 1 value in 18.
        raise TraceError(f"{what} with a per-sample exponent (numpy's pow, its own SIMD routine "
                         "on AVX-512 processors, and DALI's, the C library's on the CPU and "
                         "CUDA's on the GPU, differ in the last bit for some values; a drawn "
                         "exponent of a lookup table, np.arange(256) ** gamma, needs a "
                         "per-sample table)")
    if not isinstance(base, Sym):
        raise TraceError(f"{what} of a constant by a per-sample exponent")
    if np.ndim(exponent) != 0 or not isinstance(exponent, (int, float, bool, np.generic,
                                                           np.ndarray)):
        raise TraceError(f"{what} with an array exponent (only one constant is lowered)")
    python = _is_weak(base) and _is_weak(exponent)
    with np.errstate(all="ignore"):  # numpy's own errors (a negative integer power) propagate
        res = (_rep(base) ** exponent if python else
               np.power(np.ones(1, base.dtype) if base.ndim else _rep(base), exponent))
    rdt = _weak_dtype(res) if python else np.result_type(res)
    x = Sym(cast_node(base.node, rdt, python))
    e = float(exponent)
    if rdt.kind in "iu" and e == int(e) and e >= 0:
        k = int(e)
        if k == 0:
            return _ones_of(x, 1 if python else rdt.type(1))
        out, sq = None, x
        while k:  # binary powering: the product's order does not matter modulo 2**bits
            if k & 1:
                out = sq if out is None else ufunc("multiply", out, sq)
            k >>= 1
            if k:
                sq = ufunc("multiply", sq, sq)
        return out
    if rdt.kind == "f" and name == "power":
        one = 1.0 if python else rdt.type(1)
        if e == 0:
            return _ones_of(x, one)
        if e == 1:
            return x
        if e == 2:
            return ufunc("multiply", x, x)
        if e == -1:
            return ufunc("divide", one, x)
    message = (f"{what} with exponent {exponent!r} on {rdt} values (numpy calls the C "
               "library's pow, which DALI does not reproduce bit for bit; exponents 0, 1, 2 and "
               "-1, integer powers of integers, and any constant power of one uint8 array, as a "
               "lookup table, are lowered)")
    if rdt.kind == "f" and base.node.pixel and base.ndim:
        return _pixel_power(base, exponent, message, name)
    raise TraceError(message)


def _pixel_power(base: Any, exponent: Any, message: str, name: str) -> Sym:
    """``base ** exponent`` of pixel values with a float result, as numpy's ``np.power`` with
    both operands in the result dtype: a node only a lookup table lowers (``message`` says why
    where none can)."""
    with np.errstate(all="ignore"):
        try:
            res = np.power(_rep(base), _rep(exponent))
        except Exception as e:
            raise TraceError(f"np.power raises for these operand types ({e})") from None
    rdt = np.result_type(res)
    if rdt.kind != "f":
        raise TraceError(message)
    shape = _broadcast(_shape_of(base), _shape_of(exponent))
    node = _new("bin", (_to_node(base, rdt), _to_node(exponent, rdt)), (name,), rdt, shape)
    return Sym(_inexact(node, message))


def _ones_of(x: Sym, one: Any) -> Any:
    """Ones of ``x``'s shape and dtype (``x ** 0`` is 1 for every value, NaN included)."""
    if x.ndim == 0:
        return Sym(cast_node(const(np.array(one)), x.dtype, x.node.weak))
    return HANDLERS["full_like"](x, one)


class _Buffer:
    """Memory that in-place writes change; views made before a write may no longer be used."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        self.version = 0


class Sym(NdarrayMethods):
    """A symbolic numpy array or scalar. Operations on it record nodes of the IR."""

    __array_priority__ = 1000

    def __init__(self, node: Node, buffer: _Buffer | None = None, version: int = 0,
                 writable: bool = True, base: bool = True,
                 origin: tuple[Sym, tuple] | None = None) -> None:
        self._buffer = buffer if buffer is not None else _Buffer()
        self._version = version if buffer is not None else 0
        # A view made by basic indexing or a transpose keeps its base array and the steps that
        # make it from the base: a write through it lands in the base, and after any write into
        # their memory it reads the base anew (numpy's views alias). Other views have none.
        self._origin = origin
        self._node = node
        # The input image is read-only (as on the numpy path), and so are its views.
        self._writable = writable
        self._base = base

    @property
    def node(self) -> Node:
        if self._version != self._buffer.version and self._origin is not None:
            root, steps = self._origin
            node = root.node
            for step in steps:
                node = HANDLERS["Sym.view_step"](node, step)
            self._node, self._version = node, self._buffer.version
        return self._node

    @node.setter
    def node(self, node: Node) -> None:
        self._node = node

    # -- basic attributes
    def _checked(self) -> Node:
        node = self.node
        if self._version != self._buffer.version:
            raise TraceError("use of a view (made by np.reshape, np.flip, np.rot90 or a "
                             "per-sample index) of an array that was written in place "
                             "afterwards")
        return node

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

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """The class ``isinstance`` sees: to the op's code and the libraries it calls, that of the
        value numpy computes (``np.ndarray`` for an array, ``int``/``float``/``bool`` for a Python
        scalar, the numpy scalar type of its dtype otherwise), so ``isinstance(draw,
        numbers.Real)`` or ``np.isscalar(draw)`` takes the branch numpy takes; to the tracer
        itself, :class:`Sym`."""
        if sys._getframe(1).f_code.co_filename.startswith(_PACKAGE_DIR):
            return Sym
        return value_class(self)

    __hash__ = object.__hash__

    def _view(self, node: Node, step: tuple | None = None) -> Sym:
        """A view of this array's memory made by ``step`` (``("getitem", key)`` of basic
        indexing or ``("transpose", perm)``: writable through), or by something else (None)."""
        origin = None
        if step is not None and (self._base or self._origin is not None):
            root, steps = (self, ()) if self._base else self._origin
            origin = (root, (*steps, step))
        return Sym(node, self._buffer, self._version, self._writable, base=False, origin=origin)

    # -- conversions Python needs concrete values for
    def __bool__(self) -> bool:
        n = self._checked()
        if _is_const(n):
            return bool(n.value)
        if n.ndim != 0:
            raise TraceError("truth value of an array (if/and/or/while on an array)")
        cond = cast_node(n, np.bool_) if n.dtype != np.bool_ else n
        known = truth(cond)
        if known is not None:  # ``if img.min() < 0:`` on a uint8 image: the same for every image
            return known
        if n.pixel:
            # Refused (the tracer's trace_function raises it) unless every other way out of
            # the branch raises: a guard for a ``raise`` or ``assert``, numpy's error for the
            # samples that take it.
            return _TRACING.active.decide(cond, TraceError(
                "Python control flow (if/while/and/or) on pixel values"))
        # a branch no sample takes (``if img.size == 0``: an image has a pixel) is not traced
        if _ruled_out(cond):
            return False
        if _ruled_out(_holds(cond, False)):
            return True
        return _TRACING.active.decide(cond)

    def __index__(self) -> int:
        raise TraceError("a per-sample value used where Python needs a concrete int (a list "
                         "or tuple index, a shape argument, ...; to pick from constants, index "
                         "a numpy array of them: np.array(values)[i])")

    def __int__(self) -> int:
        raise _needs_number("int")

    def __float__(self) -> float:
        raise _needs_number("float")

    def __len__(self) -> int:
        d = self.node.shape[0] if self.node.shape else None
        if isinstance(d, int):
            return d
        raise TraceError("len() of an array whose length is per-sample outside the op's function")

    def __iter__(self) -> Any:
        # Unpacking a short vector (w, h = sizes[i]): its elements, one per position.
        n = self._checked()
        if n.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        if not isinstance(n.shape[0], int) or n.shape[0] > 64:
            raise TraceError("iteration over an array longer than 64 or of a per-sample length")
        return iter([self[i] for i in range(n.shape[0])])

    def __array__(self, *a: Any, **k: Any) -> Any:
        raise TraceError("conversion to a concrete numpy array (np.asarray, a library outside "
                         "numpy such as cv2, PIL or scipy, or a numpy function without "
                         "__array_function__ dispatch)")

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes Sym does not define: ndarray methods outside the subset.
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"ndarray.{name}")

    # -- arithmetic
    def _bin(name: str, reflected: bool = False) -> Callable[..., Any]:
        def f(self: Sym, other: Any) -> Any:
            if isinstance(other, (list, tuple)):  # numpy makes an array of a sequence
                other = HANDLERS["np.asarray"](other)
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
    __rshift__, __rrshift__ = _bin("right_shift"), _bin("right_shift", True)
    __lshift__, __rlshift__ = _bin("left_shift"), _bin("left_shift", True)
    __eq__, __ne__ = _bin("equal"), _bin("not_equal")  # type: ignore[assignment]
    __lt__, __le__ = _bin("less"), _bin("less_equal")
    __gt__, __ge__ = _bin("greater"), _bin("greater_equal")
    del _bin

    def __matmul__(self, other: Any) -> Sym:
        return HANDLERS["matmul"](self, other)

    def __pow__(self, other: Any) -> Any:
        return power(self, other, "**")

    def __rpow__(self, other: Any) -> Any:
        return power(other, self, "**")

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
            # numpy's casting rule for the result into self's dtype, on one element of each.
            rep = other.dtype.type(1) if isinstance(other, np.ndarray) and other.ndim else \
                _rep(other)
            try:
                with np.errstate(all="ignore"):
                    getattr(np, name)(np.ones(1, self.dtype), rep, out=np.ones(1, self.dtype))
            except Exception as e:
                raise TraceError(f"in-place np.{name} that numpy refuses ({e})") from None
            self._store(ufunc(name, self, other), f"in-place np.{name}")
            return self
        return f

    __iadd__, __isub__ = _inplace("add"), _inplace("subtract")
    __imul__, __itruediv__ = _inplace("multiply"), _inplace("divide")
    __ifloordiv__ = _inplace("floor_divide")
    __irshift__, __ilshift__ = _inplace("right_shift"), _inplace("left_shift")
    del _inplace

    def _check_written_through(self) -> None:
        """Refuse a write into a view the tracer cannot write through into its base."""
        if not self._base and self._origin is None:
            raise TraceError("a write through a view made by np.reshape, np.flip, np.rot90 or a "
                             "per-sample index (views by slices, integer indices and "
                             "transposes are written through); write into the array itself")

    def _store(self, res: Any, what: str) -> None:
        """Write ``res`` (of this array's shape) into this array, cast to its dtype."""
        res = res if isinstance(res, Sym) else Sym(const(np.asarray(res)))
        for d, e in zip(res.node.shape, self.node.shape, strict=False):
            if not (d is e or (isinstance(d, int) and isinstance(e, int) and d == e)
                    or _same(d, e)) or res.ndim != self.ndim:
                raise TraceError(f"{what} whose result may differ in shape from the array it is "
                                 "written into (numpy refuses a larger one: non-broadcastable "
                                 "output operand; a smaller one is not lowered)")
        self._write(cast_node(res.node, self.dtype))

    def _write(self, node: Node) -> None:
        if node.ndim != self.node.ndim:
            raise TraceError("an in-place write that changes the array's rank")
        if not self._base:
            self._check_written_through()
            node = cast_node(node, self.dtype)  # the base's dtype: its parts concatenate
            if node is self.node:  # a[k] += 1 stores the view a[k] into itself: nothing to do
                return
            root, steps = self._origin
            root._write(HANDLERS["Sym.write_through"](root._checked(), steps, node))
            self.node, self._version = node, self._buffer.version
            return
        self.node = node
        self._buffer.version += 1
        self._version = self._buffer.version

    # -- numpy protocols
    def __array_ufunc__(self, uf: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        name = "divide" if uf.__name__ == "true_divide" else uf.__name__
        if method != "__call__":
            raise TraceError(f"np.{name}.{method}")
        if kwargs:
            return HANDLERS["Sym.ufunc_kwargs"](uf, name, inputs, kwargs)
        for x in inputs:
            if isinstance(x, Sym):
                x._checked()
        if name == "matmul":
            return HANDLERS["matmul"](*inputs)
        if name in ("power", "float_power") and len(inputs) == 2:
            if name == "float_power":
                inputs = tuple(Sym(cast_node(x.node, np.float64)) if isinstance(x, Sym)
                               else np.float64(x) for x in inputs)
            return power(inputs[0], inputs[1], "np.power (**)" if name == "power" else
                         f"np.{name}", name)
        if name in ("isnan", "isinf", "isfinite") and len(inputs) == 1:
            return _classified(name, inputs[0])
        if name in ("logical_and", "logical_or", "logical_xor"):
            inputs = tuple(ufunc("not_equal", x, 0) if _dtype_kind(x) != "b" else x
                           for x in inputs)
            name = "bitwise_" + name.split("_")[1]
        if name not in _BINARY and name not in _UNARY and name not in _SHIFTS and \
                name not in _INEXACT:
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

    def __getitem__(self, key: Any) -> Sym:
        n = self._checked()
        if isinstance(key, Sym) and key.dtype.kind == "b":
            raise TraceError("boolean-mask indexing (its result size depends on pixel values)")
        if isinstance(key, Sym) and key.ndim > 0:  # a lookup table: table[img]
            return HANDLERS["Sym.lookup"](self, key)
        node = HANDLERS["Sym.getitem"](n, key)
        parts = key if isinstance(key, tuple) else (key,)
        if builtins.any(isinstance(k, (list, tuple, np.ndarray)) for k in parts):
            return Sym(node)  # fancy indexing makes a copy, writable whatever its source
        if builtins.all(k is None or k is Ellipsis or isinstance(k, slice) or (
                isinstance(k, (int, np.integer)) and not isinstance(k, bool)) for k in parts):
            return self._view(node, ("getitem", key))
        return self._view(node)

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


def _classified(name: str, x: Sym) -> Any:
    """``np.isnan`` / ``isinf`` / ``isfinite`` of ``x`` as comparisons numpy and DALI compute
    alike: ``x != x`` is true exactly for NaN, ``|x| == inf`` for the infinities and
    ``|x| < inf`` for the rest; of integers, ``x != x`` and ``x == x`` (all False, all True),
    which the tracer's facts decide."""
    if x.dtype.kind != "f":
        return ufunc("equal" if name == "isfinite" else "not_equal", x, x)
    if name == "isnan":
        return ufunc("not_equal", x, x)
    return ufunc("equal" if name == "isinf" else "less", ufunc("absolute", x), np.inf)


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


def _needs_number(kind: str) -> TraceError:
    """The refusal of Python's ``int()``/``float()`` of a per-sample value where the traced
    ``int``/``float`` do not reach: in a C function (``core.fill``, ``math.exp`` called by name),
    or in code the tracer runs as it is (a method of a class, the standard library). Its words
    are chosen from the traceback (:func:`augment_ops.trace.refusals.outside_numpy`)."""
    e = TraceError(f"{kind}() of a per-sample value in code the tracer runs as it is")
    e.needs_number = kind  # type: ignore[attr-defined]
    return e


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
