"""Facts about per-sample values, proved from how a node was computed: bounds
(:func:`lower`, :func:`upper`) and order (:func:`_at_most`: ``a <= b`` for every sample).

Each fact is memoised on its node (:func:`_fact`) and counted against the trace's budget
(:data:`MAX_FACT_STEPS`). The tracer uses them to spare run-time clamps and checks; the DALI
lowering (:mod:`augment_ops.trace.lower_dali`) uses the bounds to choose exact operators.
"""

from __future__ import annotations

import builtins
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.ir import _TRACING, Dim, Node, TraceError

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
            if session.steps > session.max_steps:
                raise TraceError(f"integer arithmetic on sizes and draws too deep to bound (more "
                                 f"than {session.max_steps} facts about its values)")
        got = facts[key] = fn(d, *others)
        return got

    memo.__name__, memo.__qualname__, memo.__doc__ = name, fn.__qualname__, fn.__doc__
    memo.__wrapped__ = fn  # type: ignore[attr-defined]
    return memo


def _table_bound(v: np.ndarray, which: Callable[..., Any]) -> float | None:
    """The least (``min``) or greatest (``max``) value of constant array ``v``, or None where it
    has none or holds NaN (which no bound bounds)."""
    if not v.size or v.dtype.kind not in "iuf" or (v.dtype.kind == "f" and np.isnan(v).any()):
        return None
    return float(v.min() if which is min else v.max())


@_fact
def lower(d: Dim) -> float | None:
    """A lower bound of a per-sample value known from how it was computed (sizes are >= 1,
    draws >= 0, h - min(size, h) >= 0, ...), or None."""
    if isinstance(d, int):
        return d
    if d.dtype.kind == "b":
        known = truth(d)
        return 0 if known is None else int(known)
    if d.op in ("const", "lut"):  # a table's entries bound what is read from it
        return _table_bound(d.value, min)
    if d.op == "in_dim":
        return 1  # a decoded image has at least one pixel
    if d.op == "input":
        return 0
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        los = [lower(a) for a in _element_sources(d)]
        return None if not los or None in los else builtins.min(los)
    if d.op == "uniform":
        return 0
    if d.op == "npsum":  # numpy's float sum of values >= 0 (it may reach inf, not below 0)
        lo = lower(d.args[0])
        return 0 if lo is not None and lo >= 0 and sound(d.args[0]) else None
    if d.op == "cast":
        return _cast_bounds(d)[0]
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc"):
        lo = lower(d.args[0])
        return None if lo is None else math.floor(lo)
    if d.op == "un" and (d.attrs[0] in _INCREASING or d.attrs[0] in _WITHIN_ONE):
        got = _float_function_bounds(d)
        return None if got is None else got[0]
    if d.op == "bin":
        a, b = d.args
        name = d.attrs[0]
        la, lb = lower(a), lower(b)
        if name == "subtract":
            known = [0] if _at_most(b, a) else []
            if la is not None and b.op == "const":
                known.append(la - float(b.value.max()))
            elif la is not None and upper(b) is not None:
                # 1 - u of a draw (float rounding is monotonic); h - w of two sizes (integers:
                # exact, and sound() tells whether a step can wrap around)
                known.append(la - upper(b))
            sa = _same_value(a)
            if d.dtype.kind in "iu" and sa.op == "bin" and sa.attrs[0] == "add" and \
                    sa.dtype == d.dtype:
                # (y + n) - y is n in wrapping integer arithmetic: a crop's size.
                p, q = sa.args
                rest = q if _same(p, b) else p if _same(q, b) else None
                low = None if rest is None else lower(rest)
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
        if name == "multiply" and d.dtype.kind in "iu":
            corners = _int_products(a, b)
            return None if corners is None else builtins.min(corners)
        if name == "multiply" and d.dtype.kind == "f":
            products = _products(a, b, d.dtype)
            return None if products is None else builtins.min(products)
        if name == "floor_divide" and la >= 0 and b.op == "const" and lb >= 1:
            return la // float(b.value.max())
        if name == "floor_divide" and la < 0 and b.op == "const" and lb >= 1 and \
                d.dtype.kind in "iu":  # the least quotient of a negative: by the least divisor
            return math.floor(la / float(b.value.min()))
        if name == "remainder" and ((la >= 0 and lb >= 0) or (
                b.op == "const" and lb >= 1 and d.dtype.kind in "iu")):
            return 0  # numpy's modulo by c >= 1 is >= 0
    if d.op == "where":
        la, lb = lower(d.args[1]), lower(d.args[2])
        return None if la is None or lb is None else builtins.min(la, lb)
    return None


_LAYOUT_OPS = {"slice", "flip", "transpose", "take", "expand", "cat", "stack", "select", "turn"}


def _keeps_elements(d: Node) -> bool:
    """Whether every element of ``d`` is an element of its sources (:func:`_element_sources`)
    beyond the layout operators: a fill's value, the least or greatest element of an array
    (numpy raises for an empty one, so a value exists wherever one is computed), an array
    reshaped or repeated (``np.broadcast_to``)."""
    return d.op in ("full", "reshape", "broadcast", "laid") or (
        d.op == "reduce" and d.attrs[0] in ("max", "min"))


def _element_sources(d: Node) -> list[Node]:
    """The values whose elements make up those of layout operator or fill ``d``."""
    if d.op == "full":
        return [d.args[1]]
    if d.op in ("reshape", "broadcast", "expand"):  # (expand: np.newaxis, one more axis)
        return [d.args[0]]
    if d.op == "reduce":
        return [d.args[0]]
    if d.op == "select" and d.ndim == 0:
        return list(d.args[1:])
    found = [a for a in d.args if isinstance(a, Node) and (a.ndim == d.ndim or d.op == "stack")]
    return found + [a for a in d.args[:1] if d.op == "take"]


@_fact
def _cast_bounds(d: Node) -> tuple[float | None, float | None]:
    """Bounds of a cast's result: the source's where they fit the target type (a narrowing
    integer cast wraps around), else the target type's range."""
    src, dst = d.args[0], d.dtype
    lo, up = lower(src), upper(src)
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


#: The greatest uniform draw: draws are k * 2**-53 for k below 2**53
#: (:func:`extsrc.ops_runtime.seeding.counter_uniform`), all below 1.
_MAX_DRAW = 1 - 2.0**-53

#: The float functions bounded through their bounds where monotonic (``log(1 - u)`` of a
#: draw for a normal draw), and the bounded ones.
_INCREASING = {"log": math.log, "sqrt": math.sqrt, "exp": math.exp}
_WITHIN_ONE = ("sin", "cos")


def _float_function_bounds(d: Node) -> tuple[float, float] | None:
    """Bounds of float function ``d`` (``np.log``, ``np.sqrt``, ``np.exp``, ``np.sin``,
    ``np.cos``) of an argument with known bounds, widened by a few units in the last place of
    ``d``'s dtype (numpy's results are within one of the exact value), else None."""
    name = d.attrs[0]
    if name in _WITHIN_ONE:
        return -1.0, 1.0
    f = _INCREASING.get(name)
    x = d.args[0]
    lo, up = lower(x), upper(x)
    if name == "sqrt" and lo is not None:
        lo = max(lo, 0.0)  # NaN below 0, which bounds do not cover
    if f is None or d.dtype.kind != "f" or lo is None or up is None or \
            not (math.isfinite(lo) and math.isfinite(up)) or lo > up or \
            (name == "log" and lo <= 0):
        return None
    eps = 4 * float(np.finfo(d.dtype).eps)
    try:
        a, b = f(lo), f(up)
    except OverflowError:
        return None
    return a - abs(a) * eps - 1e-300, b + abs(b) * eps + 1e-300


#: An upper bound of an image side: an image of 2**30 pixels a side would take exabytes (one
#: pixel high, gigabytes), and below it an image's int64 element count ``h * w * c`` (c <= 4)
#: has bounds that do not wrap around, so ``img.size == 0`` is known false.
_MAX_SIDE = 2**30


@_fact
def upper(d: Dim) -> float | None:
    """An upper bound of every element of a value, known from how it was computed, or None."""
    if isinstance(d, int):
        return d
    if d.dtype.kind == "b":
        known = truth(d)
        return 1 if known is None else int(known)
    if d.op in ("const", "lut"):  # a table's entries bound what is read from it
        return _table_bound(d.value, max)
    if d.op == "input":
        return 255
    if d.op == "in_dim":
        return _MAX_SIDE
    if d.op == "uniform":
        return _MAX_DRAW
    if d.op == "cast":
        return _cast_bounds(d)[1]
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        ups = [upper(a) for a in _element_sources(d)]
        return None if not ups or None in ups else builtins.max(ups)
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc"):
        up = upper(d.args[0])
        return None if up is None else math.ceil(up)
    if d.op == "un" and (d.attrs[0] in _INCREASING or d.attrs[0] in _WITHIN_ONE):
        got = _float_function_bounds(d)
        return None if got is None else got[1]
    if d.op == "bin":
        a, b = d.args
        ua, ub = upper(a), upper(b)
        name = d.attrs[0]
        if name == "minimum":
            known = [u for u in (ua, ub) if u is not None]
            return builtins.min(known) if known else None
        if name == "subtract":
            lb = lower(b)
            return None if ua is None or lb is None else ua - lb
        if name in ("floor_divide", "remainder") and d.dtype.kind in "iu" and \
                b.op == "const" and b.value.size and (b.value >= 1).all():
            if name == "remainder":  # numpy's modulo by c >= 1 is within 0..c-1
                return float(b.value.max()) - 1
            if ua is not None:  # the largest quotient: by the least divisor, or for a
                # negative dividend by the greatest
                return math.floor(ua / float(b.value.min() if ua >= 0 else b.value.max()))
        if ua is None or ub is None:
            return None
        if name == "add":
            return ua + ub
        if name == "maximum":
            return builtins.max(ua, ub)
        if name == "multiply" and _nonneg(a) and _nonneg(b):
            return ua * ub
        if name == "multiply" and d.dtype.kind in "iu":
            corners = _int_products(a, b)
            return None if corners is None else builtins.max(corners)
        if name == "multiply" and d.dtype.kind == "f":
            products = _products(a, b, d.dtype)
            return None if products is None else builtins.max(products)
    if d.op == "where":
        ua, ub = upper(d.args[1]), upper(d.args[2])
        return None if ua is None or ub is None else builtins.max(ua, ub)
    return None


def _products(a: Node, b: Node, dt: np.dtype) -> list[float] | None:
    """The products of the bounds of float operands ``a`` and ``b``, widened by one rounding
    of ``dt`` (interval multiplication: rounding is monotonic, so the product of any two values
    in ``dt`` lies between the least and the greatest of them rounded in ``dt``; Python's are
    float64's), or None where a bound is unknown."""
    bounds = [lower(a), upper(a), lower(b), upper(b)]
    if None in bounds or not all(math.isfinite(v) for v in bounds):
        return None
    la, ua, lb, ub = bounds
    eps = 0.0 if dt == np.float64 else float(np.finfo(dt).eps)
    return [p + sign * abs(p) * eps for p in (la * lb, la * ub, ua * lb, ua * ub)
            for sign in (-1, 1)]


def _int_products(a: Node, b: Node) -> list[float] | None:
    """The products of the bounds of integers ``a`` and ``b`` (exact arithmetic: the extremes
    of ``a * b`` are among them), or None where a bound is unknown. Whether the product wraps
    around its type is :func:`sound`'s and :func:`_no_wrap`'s question."""
    la, ua, lb, ub = lower(a), upper(a), lower(b), upper(b)
    if None in (la, ua, lb, ub):
        return None
    return [la * lb, la * ub, ua * lb, ua * ub]


def _nonneg(d: Dim) -> bool:
    """Whether ``d`` is >= 0 for every sample: its lower bound, where no integer step on the
    way wraps around (``img.astype(np.int16) * 200`` is negative for some pixels)."""
    lo = lower(d)
    return lo is not None and lo >= 0 and _no_wrap(d)


@_fact
def _no_wrap(d: Dim) -> bool:
    """Whether no integer arithmetic step of ``d`` wraps around: none whose bounds, taken as
    exact arithmetic, leave its type, nor one of a type narrower than 64 bits whose bounds are
    unknown (64-bit sums and quotients of sizes and draws stay far inside theirs). Float
    rounding is monotonic and keeps a bound of 0, so float steps do not matter here."""
    if not isinstance(d, Node) or d.op in ("const", "input", "in_dim", "uniform"):
        return True
    if not builtins.all(_no_wrap(a) for a in d.args if isinstance(a, Node)):
        return False
    if d.op == "bin" and d.dtype.kind in "iu" and d.attrs[0] in (
            "add", "subtract", "multiply", "floor_divide", "remainder", "left_shift"):
        info = np.iinfo(d.dtype)
        lo, up = lower(d), upper(d)
        if (lo is not None and lo < info.min) or (up is not None and up > info.max):
            return False
        # (sums and quotients of sizes and draws, not of pixel values, stay far inside 64 bits)
        return (d.dtype.itemsize >= 8 and not d.pixel) or (lo is not None and up is not None)
    return True


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
    lo, up = lower(src), upper(src)
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


def _draw_below(p: Node) -> Node | None:
    """``m`` where ``p`` is ``floor(u * m)`` (or its truncation) made an integer, ``u`` a
    uniform draw in [0, 1) and ``m`` an integer the tracer bounds by ``1 <= m <= 2**53``
    (``int((h - ch + 1) * rng.random())``): then ``p <= m - 1`` for every sample, as
    :func:`augment_ops.trace.rng._floor_below` proves. Else None."""
    p = _same_value(p)
    if p.op != "cast" or p.dtype.kind not in "iu" or p.args[0].op != "un" or \
            p.args[0].attrs[0] not in ("floor", "trunc"):
        return None
    x = _float64_of(p.args[0].args[0])
    if x.op != "bin" or x.attrs[0] != "multiply" or x.dtype != np.float64:
        return None
    for u, f in (x.args, x.args[::-1]):
        u, f = _float64_of(u), _float64_of(f)
        if u.op != "uniform" or f.op != "cast" or f.args[0].dtype.kind not in "iu":
            continue
        m = f.args[0]
        lo, up = lower(m), upper(m)
        if lo is not None and up is not None and lo >= 1 and up <= 2**53:
            return m
    return None


def _float64_of(d: Node) -> Node:
    """``d`` without casts from float64 to float64 (weak to strong)."""
    while d.op == "cast" and d.dtype == np.float64 and d.args[0].dtype == np.float64:
        d = d.args[0]
    return d


def _below_draw_bound(p: Node, within: Callable[[Node], bool]) -> bool:
    """Whether ``p`` is a draw below ``m`` (:func:`_draw_below`) with ``m - 1`` within the
    bound ``within`` checks: ``m`` itself within it, or ``m`` is ``x + c`` (a constant
    ``c <= 1``, so ``m - 1 <= x``) with ``x`` within it."""
    m = _draw_below(p)
    if m is None:
        return False
    if within(m):
        return True
    m = _same_value(m)
    if m.op == "bin" and m.attrs[0] == "add" and m.dtype.kind in "iu":
        for x, c in (m.args, m.args[::-1]):
            if c.op == "const" and c.value.size == 1 and c.value.item() <= 1 and within(x):
                return True
    return False


@_fact
def _at_most_minus(p: Node, n: Dim, q: Node) -> bool:
    """Whether ``p <= n - q`` for every sample, from how ``p`` was computed: ``n - q`` itself,
    ``(n - q) // k``, ``min(n - q, ...)``, ``((n - q) + c) - c``, as offsets and crops write
    them."""
    if _below_draw_bound(p, lambda m: _at_most_minus(m, n, q)):
        return True  # int((n - q + 1) * u) <= n - q: a crop's start
    p = _same_value(p)
    if p.op != "bin":
        return False
    x, y = p.args
    name = p.attrs[0]
    if name == "maximum" and p.attrs[1:] == ("first",):
        # rng.integers' checked span: its first operand on every sample that does not raise
        return _at_most_minus(x, n, q)
    if name == "subtract" and _same(x, n):
        lo, up = lower(y), upper(q)
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
        low = lower(b)
        return isinstance(a, int) and low is not None and a <= low  # 1 <= h + 2
    if a.op == "const" and a.value.size == 1 and a.dtype.kind in "iu":
        low = lower(b)  # 1 <= max(h - 4, 1), as a checked span of rng.integers is
        if low is not None and a.value.item() <= low:
            return True
    if a.op == "cast" and a.dtype.kind in "iu" and a.args[0].dtype.kind in "iu" \
            and _keeps_values(a) and _at_most(a.args[0], b):
        return True
    if _below_draw_bound(a, lambda m: _at_most(m, b)):
        return True  # int((h - ch + 1) * u) <= h
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
    if isinstance(b, Node) and b.op == "bin" and b.attrs[0] == "maximum" and \
            b.dtype.kind in "iu" and (_at_most(a, b.args[0]) or _at_most(a, b.args[1])):
        return True  # min(r, g, b) <= max(r, g, b): OpenCV's HSV, v - min(r, g, b)
    if isinstance(b, Node):
        bb = _same_value(b)
        if bb.op == "bin" and bb.attrs[0] == "add" and (
                (_same(bb.args[0], a) and _nonneg(bb.args[1]))
                or (_same(bb.args[1], a) and _nonneg(bb.args[0]))):
            return True  # a <= a + (something >= 0)
        pair = _min_operands(bb)
        if pair is not None and _at_most(a, pair[0]) and _at_most(a, pair[1]):
            return True
    # h + 1 <= h + 2: the same per-sample terms, a smaller constant; y + h <= h + 6 for a y
    # at most 6: the terms apart bounded (and no int64 wrap-around)
    la, lb = _linear_terms(a), _linear_terms(b)
    if la is None or lb is None:
        return False
    excess = la[0] - lb[0]  # an upper bound of a - b
    for key in la[1].keys() | lb[1].keys():
        atom, k = la[1].get(key, lb[1].get(key))[0], la[1].get(key, [0, 0])[1] - \
            lb[1].get(key, [0, 0])[1]
        if k:
            bound = upper(atom) if k > 0 else lower(atom)
            if bound is None or not -2.0**62 < bound < 2.0**62:
                return False
            excess += k * bound
    if excess > 0:
        return False
    lo, up = lower(a), upper(b)
    return lo is not None and up is not None and -2.0**62 < lo and up < 2.0**62


def linear_form(d: Dim) -> tuple[int, frozenset] | None:
    """Integer size ``d`` as ``c + sum(k * atom)`` (a constant, and each per-sample value it
    adds or subtracts a constant number of times), where it is made by ``+``, ``-`` and ``*``
    by a constant: ``(p + 1 + w) - (p + 1)`` is ``w``. None for anything else."""
    got = _linear_terms(d)
    if got is None:
        return None
    c, terms = got
    return c, frozenset((i, k) for i, (_, k) in terms.items() if k)


def _linear_terms(d: Dim) -> tuple[int, dict[int, list]] | None:
    """:func:`linear_form` of ``d`` with its atoms: ``(c, {id(atom): [atom, k]})``."""
    terms: dict[int, list] = {}

    def walk(x: Dim, k: int) -> int | None:
        if isinstance(x, int):
            return k * x
        x = _same_value(x)
        if x.op == "const" and x.ndim == 0 and x.dtype.kind in "iu":
            return k * int(x.value)
        if x.op == "bin" and x.attrs in (("add",), ("subtract",), ("multiply",)) and \
                x.dtype.kind in "iu":
            a, b = x.args
            if x.attrs[0] == "multiply":
                for m, other in ((a, b), (b, a)):
                    if isinstance(other, Node) and other.op == "const" and other.ndim == 0:
                        return walk(m, k * int(other.value))
            else:
                ca = walk(a, k)
                cb = walk(b, k if x.attrs[0] == "add" else -k)
                return None if ca is None or cb is None else ca + cb
        terms.setdefault(id(x), [x, 0])[1] += k
        return 0

    c = walk(d, 1)
    if c is None:
        return None
    return c, terms


def _never(n: Node) -> bool:
    """Whether comparison ``n`` is false for every sample, by the bounds the tracer knows."""
    if n.op == "bin" and n.attrs[0] == "equal":  # x == y never where their ranges are apart
        x, y = n.args
        return _apart(x, y) or _apart(y, x)
    if n.op == "bin" and n.attrs[0] == "not_equal":  # x != x of a NaN-free x (numpy's NaN check)
        return truth(n) is False
    if n.op != "bin" or n.attrs[0] not in ("less", "less_equal", "greater", "greater_equal"):
        return False
    x, y = n.args
    if n.attrs[0] in ("greater", "greater_equal"):
        x, y = y, x  # x > y is y < x
    lo, up = lower(x), upper(y)
    if lo is None or up is None or not (sound(x) and sound(y)):  # bounds past a wrap-around
        return False
    return lo >= up if n.attrs[0] in ("less", "greater") else lo > up


def _apart(x: Dim, y: Dim) -> bool:
    """Whether ``x > y`` for every sample, by the bounds the tracer knows."""
    lo, up = lower(x), upper(y)
    return lo is not None and up is not None and lo > up and sound(x) and sound(y)


# -- conditions the bounds decide ---------------------------------------------------------------
#: The comparison with its operands swapped: ``x > y`` is ``y < x``.
_SWAPPED = {"greater": "less", "greater_equal": "less_equal", "less": "less",
            "less_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}


@_fact
def truth(d: Node) -> bool | None:
    """What every element of boolean value ``d`` is for every possible input image (any size,
    any pixels), as numpy computes it, or None where that depends on the sample: ``img < 0``
    is False, ``np.clip(x, 0, 1) <= 1`` is True, ``x == x`` is True only where ``x`` cannot be
    NaN (comparisons with NaN are False, ``!=`` True)."""
    if d.op == "const":
        if not d.value.size:
            return None
        return True if d.value.all() else False if not d.value.any() else None
    if d.op == "bin" and d.attrs[0] in _SWAPPED:
        x, y = d.args
        name = d.attrs[0]
        if name != _SWAPPED[name]:
            x, y, name = y, x, _SWAPPED[name]
        return _compared(name, x, y)
    if d.op == "bin" and d.attrs[0] in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        tx, ty = truth(d.args[0]), truth(d.args[1])
        if d.attrs[0] == "bitwise_and":
            return False if False in (tx, ty) else True if tx and ty else None
        if d.attrs[0] == "bitwise_or":
            return True if True in (tx, ty) else False if tx is False and ty is False else None
        return None if tx is None or ty is None else tx != ty
    if d.op == "un" and d.attrs[0] in ("logical_not", "invert"):
        known = truth(d.args[0])
        return None if known is None else not known
    if d.op == "cast":
        src = d.args[0]
        if src.dtype.kind == "b":
            return truth(src)
        if not sound(src):
            return None
        lo, up = lower(src), upper(src)
        if (lo is not None and lo > 0) or (up is not None and up < 0):
            return True  # and NaN, which numpy takes for True
        if lo == 0 and up == 0 and _no_nan(src):
            return False
        return None
    if d.op in ("where", "select"):
        c, a, b = d.args
        known = truth(c)
        if known is not None:
            return truth(a if known else b)
        ta = truth(a)
        return ta if ta is not None and ta == truth(b) else None
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        found = {truth(a) for a in _element_sources(d)}
        return found.pop() if len(found) == 1 else None
    return None


def _compared(name: str, x: Node, y: Node) -> bool | None:
    """:func:`truth` of ``x <name> y`` (``less``, ``less_equal``, ``equal``, ``not_equal``)."""
    if (x is y or _same(x, y)) and _no_nan(x):  # (x != x of a NaN-free x: never)
        return name != "less" and name != "not_equal"
    if not (sound(x) and sound(y)):
        return None
    lx, ux, ly, uy = lower(x), upper(x), lower(y), upper(y)
    # apart: x > y (every pair), x >= y, y > x (never equal, so != holds, NaN included)
    above = lx is not None and uy is not None and lx > uy
    at_least = lx is not None and uy is not None and lx >= uy
    below = ux is not None and ly is not None and ux < ly
    if name == "less" and at_least:
        return False
    if name in ("less_equal", "equal") and above:
        return False
    if name == "equal" and below:
        return False
    if name == "not_equal" and (above or below):
        return True
    # true for every pair of values: only where neither can be NaN
    if not (_no_nan(x) and _no_nan(y)):
        return None
    if name == "less" and below:
        return True
    if name == "less_equal" and ux is not None and ly is not None and ux <= ly:
        return True
    if name in ("equal", "not_equal") and None not in (lx, ux, ly, uy) and lx == ux == ly == uy:
        return name == "equal"
    return None


@_fact
def sound(d: Dim) -> bool:
    """Whether :func:`lower` and :func:`upper` of ``d`` bound every element numpy computes: no
    integer step on the way wraps around (its bounds, taken as exact arithmetic, leave its
    dtype's range), no float32 step rounds past them (Python's bounds are float64's: rounding
    is monotonic, so float64 steps keep them), no float is cast to an integer below 0 (numpy
    truncates toward zero there, not down). Bounds the tracer does not know (None) bound
    nothing, so an operator it has none for is sound."""
    if not isinstance(d, Node) or d.op in ("const", "input", "in_dim", "uniform"):
        return True
    if not builtins.all(sound(a) for a in d.args if isinstance(a, Node)):
        return False
    if d.dtype.kind == "b":
        return True  # its bounds come from truth(), which asks its operands
    lo, up = lower(d), upper(d)
    if d.op == "cast":
        src = d.args[0]
        if d.dtype.kind in "iu" and src.dtype.kind == "f":
            low = lower(src)
            return low is not None and low >= 0 and _no_nan(src)
        if d.dtype.kind == "f":
            return builtins.all(b is None or math.isinf(b) or float(d.dtype.type(b)) == b
                                for b in (lo, up))
        return True
    if d.op == "bin" and d.attrs[0] in ("add", "subtract", "multiply", "floor_divide",
                                        "remainder", "divide"):
        if d.dtype.kind in "iu":
            info = np.iinfo(d.dtype)
            return lo is not None and up is not None and info.min <= lo and up <= info.max
        return d.dtype == np.float64 or (d.attrs[0] == "multiply" and _products(
            *d.args, d.dtype) is not None) or d.attrs[0] == "divide"
    return True


@_fact
def no_negative_zero(d: Dim) -> bool:
    """Whether no element of float ``d`` can be -0.0, for any input image: integers converted,
    draws, and sums and products of such values that cannot be negative (a sum is -0.0 only
    where both terms are; a product or quotient of values >= 0 is never negative)."""
    if not isinstance(d, Node) or d.dtype.kind != "f":
        return True
    if d.op == "const":
        v = np.asarray(d.value)
        return not bool(((v == 0) & np.signbit(v)).any())
    if d.op == "uniform":
        return True
    if d.op == "cast":
        src = d.args[0]
        if src.dtype.kind in "biu":
            return True
        if src.dtype.itemsize > d.dtype.itemsize:  # a tiny negative float64 is float32's -0.0
            low = lower(src)
            return no_negative_zero(src) and low is not None and low >= 0 and sound(src)
        return no_negative_zero(src)
    if d.op == "where":
        return no_negative_zero(d.args[1]) and no_negative_zero(d.args[2])
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        return builtins.all(no_negative_zero(a) for a in _element_sources(d))
    if d.op == "un" and d.attrs[0] == "absolute":
        return True
    if d.op == "npsum":  # a sum is -0.0 only where every term is (no term: +0.0)
        return no_negative_zero(d.args[0])
    if _sign_clear(d):
        return True
    if d.op == "bin":
        a, b = d.args
        name = d.attrs[0]
        if name == "add":
            return no_negative_zero(a) or no_negative_zero(b)
        if name == "subtract":  # -0.0 - x is -0.0 only for x = +0.0
            return no_negative_zero(a)
        if name in ("multiply", "divide", "maximum", "minimum"):
            return builtins.all(no_negative_zero(x) and (lower(x) is not None and lower(x) >= 0
                                                         and sound(x)) for x in (a, b))
    return False


@_fact
def _sign_clear(d: Dim) -> bool:
    """Whether no element of float ``d`` is negative or -0.0, for any input image (NaN aside):
    values made of non-negative integers, constants and draws by additions, products,
    quotients, square roots and roundings, each of which keeps the sign bit of non-negative
    operands clear whatever it rounds (a float32 sum of a uint8 image, whose bounds rounding
    makes unsound, included)."""
    if not isinstance(d, Node):
        return isinstance(d, (int, float, np.number)) and not math.copysign(1.0, float(d)) < 0
    if d.dtype.kind in "biu":
        low = lower(d)
        return low is not None and low >= 0 and sound(d)
    if d.op == "const":
        v = np.asarray(d.value)
        return bool(v.size) and not bool(np.signbit(v).any())
    if d.op == "uniform":
        low = lower(d)
        return low is not None and low >= 0
    if d.op == "cast":
        return _sign_clear(d.args[0])
    if d.op == "where":
        return _sign_clear(d.args[1]) and _sign_clear(d.args[2])
    if d.op in _LAYOUT_OPS or _keeps_elements(d) or d.op == "npsum":
        sources = _element_sources(d) if d.op != "npsum" else [d.args[0]]
        return bool(sources) and builtins.all(_sign_clear(a) for a in sources)
    if d.op == "un" and d.attrs[0] == "absolute":
        return True
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc", "sqrt"):
        return _sign_clear(d.args[0])
    if d.op == "bin" and d.attrs[0] in ("add", "multiply", "divide"):
        return _sign_clear(d.args[0]) and _sign_clear(d.args[1])
    return False


def _no_nan(d: Dim) -> bool:
    """Whether no element of ``d`` can be NaN, for any input image."""
    if not isinstance(d, Node) or d.dtype.kind != "f":
        return True
    if d.op == "const":
        return not bool(np.isnan(d.value).any())
    if d.op == "uniform":
        return True
    if d.op == "cast":
        return _no_nan(d.args[0])
    if d.op == "where":
        return _no_nan(d.args[1]) and _no_nan(d.args[2])
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        return builtins.all(_no_nan(a) for a in _element_sources(d))
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc", "negative", "absolute"):
        return _no_nan(d.args[0])
    if d.op == "bin" and d.attrs[0] in ("minimum", "maximum"):
        return _no_nan(d.args[0]) and _no_nan(d.args[1])
    if d.op == "bin" and d.attrs[0] in ("add", "subtract", "multiply", "divide"):
        # finite operands: inf - inf, 0 * inf and 0 / 0 (or inf / inf) are the NaNs
        a, b = d.args
        if not (_finite(a) and _finite(b)):
            return False
        return d.attrs[0] != "divide" or _away_from_zero(b)
    return False


def _away_from_zero(d: Dim) -> bool:
    """Whether no element of ``d`` is 0 for any input image: sound bounds on one side of 0, and
    for floats far enough from it that no rounding on the way (a float32 product of tiny
    factors underflows) reaches 0."""
    if not isinstance(d, Node):
        return isinstance(d, (int, float, np.number)) and float(d) != 0
    lo, up = lower(d), upper(d)
    if not sound(d):
        return False
    least = float(np.finfo(d.dtype).tiny) * 2.0 ** 24 if d.dtype.kind == "f" else 0.0
    return (lo is not None and lo > least) or (up is not None and up < -least)


def _finite(d: Node) -> bool:
    """Whether every element numpy computes for ``d`` is a finite number: no infinity (see
    :func:`_magnitude`) and no NaN."""
    return _magnitude(d) is not None and _no_nan(d)


#: How far inside its type's range a float value's bound must stay for :func:`_magnitude`: a
#: rounding step moves a value by a relative 2**-24 at most, which takes no value from a
#: quarter of the largest float to infinity.
_MAGNITUDE_MARGIN = 4.0


@_fact
def _magnitude(d: Dim) -> float | None:
    """A bound on ``|x|`` for every element ``x`` numpy computes for ``d``, where every float
    value on the way to it (``d`` included) stays within ``1 / _MAGNITUDE_MARGIN`` of its type's
    largest number, so that none overflows to infinity; else ``None``.

    Unlike :func:`lower` and :func:`upper` with :func:`sound`, this asks for no exact bound, only
    one far from overflow: a float32 step may round past the bounds of exact arithmetic, but not
    by enough to overflow. An integer value is bounded by its type's range (the sum of a uint8
    image of any size is below 2**64), which even a wrapped value stays in."""
    if not isinstance(d, Node):
        m = abs(float(d)) if isinstance(d, (int, float, np.number)) else None
        return m if m is not None and math.isfinite(m) else None
    if d.dtype.kind in "biu":
        if d.dtype.kind == "b":
            return 1.0
        info = np.iinfo(d.dtype)
        return float(max(-int(info.min), int(info.max)))
    m = _unchecked_magnitude(d)
    if m is None or not math.isfinite(m) or m > float(np.finfo(d.dtype).max) / _MAGNITUDE_MARGIN:
        return None
    return m


def _unchecked_magnitude(d: Node) -> float | None:
    """:func:`_magnitude` of float ``d`` from its operands', before the check of its range."""
    if d.op == "const":
        v = np.abs(np.asarray(d.value, dtype=np.float64))
        return float(v.max()) if v.size else 0.0
    if d.op == "uniform":
        lo, up = lower(d), upper(d)
        return None if lo is None or up is None else max(abs(lo), abs(up))
    if d.op == "cast":
        # Rounding to a float type moves a value by a relative 2**-24 at most, which the margin
        # covers; every integer type's range fits every float type but float16's, which the
        # check of the range refuses.
        return _magnitude(d.args[0])
    if d.op == "where":
        return _largest(_magnitude(d.args[1]), _magnitude(d.args[2]))
    if d.op in _LAYOUT_OPS or _keeps_elements(d):
        return _largest(*(_magnitude(a) for a in _element_sources(d)))
    if d.op == "un" and d.attrs[0] in ("floor", "ceil", "rint", "trunc"):
        m = _magnitude(d.args[0])
        return None if m is None else m + 1.0
    if d.op == "un" and d.attrs[0] in ("negative", "absolute"):
        return _magnitude(d.args[0])
    if d.op != "bin":
        return None
    a, b = (_magnitude(x) for x in d.args[:2])
    if a is None or b is None:
        return None
    name = d.attrs[0]
    if name in ("minimum", "maximum"):
        return max(a, b)
    if name in ("add", "subtract"):
        return a + b
    if name == "multiply":
        return a * b
    if name == "divide":
        # |a / b| <= |a| where every computed |b| >= 1 (sound bounds: those of the values
        # computed, roundings included), also once rounded: |a| is a float, rounding monotonic.
        den = d.args[1]
        lo, up = lower(den), upper(den)
        away = (lo is not None and lo >= 1) or (up is not None and up <= -1)
        return a if away and sound(den) else None  # (sound: bounds of the rounded values)
    return None


def _largest(*ms: float | None) -> float | None:
    return None if not ms or any(m is None for m in ms) else max(ms)  # type: ignore[type-var]
