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
from augment_ops.trace.facts import _nonneg, _same, linear_form, no_negative_zero, truth, upper

# The graph builders import the table and casts from here, beside Sym.
from augment_ops.trace.handlers import HANDLERS, cast_node, implements  # noqa: F401
from augment_ops.trace.ir import (
    _TRACING,
    MAX_PIXEL_BRANCHES,
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


#: Rewrites that lower, for numpy functions and methods the tracer does not lower.
_REWRITES = {
    "ndarray.ravel": "x.reshape(-1)", "np.ravel": "x.reshape(-1)",
    "ndarray.flatten": "x.reshape(-1).copy()",
    "ndarray.round": "np.rint(x) (floats rounded to integers, with no decimals)",
    "np.tile": "np.repeat(g[..., None], 3, axis=2) (one channel made three) or "
               "np.concatenate([x] * n, axis=...)",
    "ndarray.repeat": "np.repeat(x, n, axis=a) where axis a has length 1 (the repeat the "
                      "tracer lowers: one channel made three)",
    "np.ptp": "x.max(axis=a) - x.min(axis=a), with ptp's own axis",
    "ndarray.fill": "x[...] = value",
    "ndarray.item": "x[index] (a traced value), or a branch on it",
}


def not_lowered(name: str) -> str:
    """The refusal of numpy function or method ``name``, with a rewrite that lowers where one is
    known."""
    rewrite = _REWRITES.get(name)
    tail = f"; written as {rewrite}, the step lowers" if rewrite else ""
    return f"{name} (not among the numpy functions and methods the tracer lowers{tail})"


def _as_numpy_scalar(x: Any) -> Any:
    """``x`` as a numpy function takes it: a traced Python number (an ``int()``, a
    ``float()`` of a draw) becomes a numpy scalar of its type, which numpy 2 promotes as any
    other (NEP 50: ``np.clip(f, 0.6, 1.4)`` of a Python float ``f`` is a float64 that makes
    a float32 array float64, where ``f`` would have left it float32); anything else as it is."""
    if isinstance(x, Sym) and x.node.weak:
        return Sym(cast_node(x.node, x.dtype, weak=False))
    return x


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


def _fold_canvas(name: str, inputs: tuple) -> Sym | None:
    """ufunc ``name`` of one new array of a per-sample shape holding one value per channel (a
    ``canvas``: ``np.ones((h, w, 3))``) and constants that do not widen it
    (``np.array(fill) * np.ones(shape)``, ``canvas *= fill``): again such an array, its value
    per channel computed by numpy on one pixel of it, with the same dtypes, so exactly the value
    every pixel of numpy's array holds. None for other operands."""
    canvases = [x for x in inputs if isinstance(x, Sym)]
    if len(canvases) != 1 or canvases[0].node.op != "canvas" or canvases[0].node.weak:
        return None
    c = canvases[0].node
    fill = c.args[-1].value
    pixel = np.broadcast_to(fill, (1,) * (c.ndim - fill.ndim) + fill.shape).astype(c.dtype)
    args = [pixel if isinstance(x, Sym) else x for x in inputs]
    if builtins.any(np.ndim(x) > c.ndim for x in args):
        return None
    try:
        with np.errstate(all="ignore"):
            out = getattr(np, name)(*args)
    except Exception:
        return None  # numpy's error (if any) is the general path's to raise
    if not isinstance(out, np.ndarray) or out.shape != pixel.shape or out.dtype.kind not in \
            "biuf" or out.dtype.itemsize > 8 or out.dtype == np.float16:
        return None
    return Sym(_new("canvas", (*c.args[:-1], const(out.reshape(fill.shape))), (), out.dtype,
                    c.shape))


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


def _broadcast(*shapes: tuple, cuts: dict[int, Dim] | None = None) -> tuple:
    """numpy's broadcast shape of ``shapes``. Where per-sample sizes may differ, numpy raises
    for the samples where they do (a check here), and ``cuts`` gets, by axis counted from the
    end, the size each operand is cut to (:func:`cut_to`): the broadcast size where numpy does
    not raise, and one DALI can compute where it does (DALI computes a branch for the whole
    batch, the samples of the other outcome included)."""
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
            if not builtins.any(d is e or (isinstance(d, Node) and isinstance(e, Node) and (
                    _same(d, e) or linear_form(d) == linear_form(e) is not None))
                                for e in distinct):
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
        if cuts is not None:
            if not ints:
                # the least size other than 1 (1 where all are): the broadcast size where
                # numpy does not raise
                big = 1 << 62
                least: Dim = big
                for d in distinct:
                    least = _dop("minimum", least, _dwhere(ufunc("equal", _dim_sym(d), 1),
                                                           big, d))
                size = _dwhere(ufunc("equal", _dim_sym(least), big), 1, least)
            cuts[nd - k] = size
        out.append(size)
    return tuple(out)


def cut_to(n: Node, cuts: dict[int, Dim]) -> Node:
    """``n`` sliced to ``cuts``' sizes (axes counted from the end), where its size there may
    differ: ``min(size, cut)``, which keeps a size of 1 (numpy repeats it)."""
    shape = list(n.shape)
    args: list[Any] = [n]
    axes = []
    for back, cut in cuts.items():
        ax = n.ndim - back
        if ax < 0 or (isinstance(shape[ax], int) and shape[ax] == 1) or shape[ax] is cut:
            continue
        hi = _dop("minimum", shape[ax], cut)
        axes.append(ax)
        args += [0, hi]
        shape[ax] = hi
    if not axes:
        return n
    return _new("slice", tuple(args), tuple(axes), n.dtype, tuple(shape))


def ufunc(name: str, *inputs: Any) -> Any:
    """Apply numpy ufunc ``name`` to Syms and constants, with numpy's result dtype."""
    if not any(isinstance(x, Sym) for x in inputs):
        return getattr(np, name)(*inputs)
    if name in _SHIFTS:
        return HANDLERS["Sym.shift"](name, *inputs)
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
    folded = _fold_canvas(name, inputs)
    if folded is not None:
        return folded
    cuts: dict[int, Dim] = {}
    shape = _broadcast(*(_shape_of(x) for x in inputs), cuts=cuts)
    if name in _BINARY:
        a, b = inputs
        if name in _COMPARISONS:
            try:
                cdt = np.result_type(*(_weak_dtype(r) if python else r for r in reps))
            except Exception:
                cdt = np.dtype(np.float64 if any(np.asarray(r).dtype.kind == "f" for r in reps)
                               else np.int64)
            if cdt.kind in "iu" and builtins.any(
                    type(x) is int and not np.iinfo(cdt).min <= x <= np.iinfo(cdt).max
                    for x in inputs) and cdt != np.uint64:
                # uint8 against a Python int out of its range (img > -1): numpy 2 compares the
                # values themselves, as int64 holds them both
                cdt = np.dtype(np.int64)
        else:
            cdt = rdt
        if cdt.kind == "b" and name not in _COMPARISONS and not name.startswith("bitwise"):
            raise TraceError(f"np.{name} on boolean values")
        if cdt.kind == "f" and name in ("floor_divide", "remainder"):
            return Sym(cast_node(HANDLERS["Sym.float_mod"](name, a, b, cdt).node, rdt, weak))
        if name == "divide" and cdt.kind != "f":
            cdt = rdt
        na, nb = _to_node(a, cdt), _to_node(b, cdt)
        if cuts:
            na, nb = cut_to(na, cuts), cut_to(nb, cuts)
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
        if name == "trunc" or (up is not None and up < 2.0 ** (23 if cdt == np.float32 else 52)
                               and no_negative_zero(nx)):
            attrs = (name, "nonneg")  # no sign or magnitude cases to handle
    return Sym(_new("un", (nx,), attrs, rdt, shape, weak))


class _Buffer:
    """Memory that in-place writes change; views made before a write may no longer be used."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        self.version = 0


class _Operators:
    """Python's operators on a traced value (``+``, ``//``, ``>>``, comparisons, ``**``, unary
    ones, ``round``), each numpy's ufunc of the same name; a base of :class:`Sym`."""

    _checked: Callable[[], Node]

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
        return HANDLERS["Sym.power"](self, other, "**")

    def __rpow__(self, other: Any) -> Any:
        return HANDLERS["Sym.power"](other, self, "**")

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


class Sym(_Operators, NdarrayMethods):
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
            # Traced both ways and merged per sample, as a branch on a draw is; the refusal
            # stands for a loop on pixel values, which would take branches without end.
            return _TRACING.active.decide(cond, TraceError(
                "Python control flow (if/while/and/or) on pixel values taken more than "
                f"{MAX_PIXEL_BRANCHES} times in one run (a loop whose count depends on pixel "
                "values: DALI computes every outcome of a branch for each sample, and cannot "
                "repeat a step until a condition on the pixels holds; a fixed number of steps, "
                "each applied where np.where says, would trace)"))
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
        from augment_ops.trace.frames import note_small_store

        note_small_store()  # a[0::2] = value into a small new array: traced in the next attempt
        raise TraceError("conversion to a concrete numpy array (np.asarray, a library outside "
                         "numpy such as cv2, PIL or scipy, or a numpy function without "
                         "__array_function__ dispatch)")

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes Sym does not define: ndarray methods outside the subset.
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(not_lowered(f"ndarray.{name}"))

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
                             "transposes are written through); write into the array itself, "
                             "or where a per-sample index chose the part, compute the whole "
                             "array instead (a drawn channel c: out = np.where(np.arange(3) == "
                             "c, out + d, out), which lowers)")

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
        from augment_ops.trace.pairwise import kept

        if node.ndim != self.node.ndim:
            raise TraceError("an in-place write that changes the array's rank")
        if not self._base:
            self._check_written_through()
            node = cast_node(node, self.dtype)  # the base's dtype: its parts concatenate
            if node is self.node:  # a[k] += 1 stores the view a[k] into itself: nothing to do
                return
            root, steps = self._origin
            root._write(HANDLERS["Sym.write_through"](root._checked(), steps, node))
            # the view's memory, and its layout, stay (d[...] = d.copy() of a transposed d)
            self.node, self._version = kept(self.node, node), self._buffer.version
            return
        self.node = kept(self.node, node)  # the array's memory, and its layout, stay
        self._buffer.version += 1
        self._version = self._buffer.version

    # -- numpy protocols
    def __array_ufunc__(self, uf: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        name = "divide" if uf.__name__ == "true_divide" else uf.__name__
        if method != "__call__":
            raise TraceError(f"np.{name}.{method}")
        # numpy's ufunc of Python numbers alone gives a numpy scalar (np.maximum(3, 2) is an
        # int64), not the Python number an operator gives: numpy's types and rules apply.
        if builtins.all(_is_weak(x) for x in inputs):
            inputs = tuple(_as_numpy_scalar(x) for x in inputs)
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
            what = "np.power (**)" if name == "power" else f"np.{name}"
            return HANDLERS["Sym.power"](inputs[0], inputs[1], what, name)
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
            raise TraceError(not_lowered(f"{mod}.{func.__name__}"))
        given = [*args, *kwargs.values()]
        if func.__name__ not in ("shape", "ndim") and not builtins.any(
                isinstance(a, (np.ndarray, np.generic)) or (isinstance(a, Sym) and not a.node.weak)
                for a in given):
            # Python numbers alone (np.clip(f, 0.6, 1.4)): numpy makes them numpy scalars. Beside
            # an array or a numpy scalar they stay Python numbers, promoted weakly (NEP 50).
            args = tuple(_as_numpy_scalar(a) for a in args)
            kwargs = {k: _as_numpy_scalar(v) for k, v in kwargs.items()}
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
    from augment_ops.trace.frames import note_small_store

    note_small_store()  # a[0] = value into a small new array: traced in the next attempt
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
