"""Patterns in a traced graph that the DALI lowering emits with fewer operators: lanes computed
alike (:func:`_lane_key`), clamps (:func:`_clamp_bounds`), slice and fill bounds whose clamps
DALI's operators already make (:func:`_unclamped_start`, :func:`_unclamped_stop`), differences
known at trace time; and the graph rewritten before emission (:func:`rewritten_for_dali`):
selects among flips and transposes made one ``turn``, selects that a fill's emptiness decides
dropped, integer ``where(c, a, 0)`` made ``a * c``. Pure functions of the nodes; nothing here
imports DALI."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.dali_ops import _divisor_risks
from augment_ops.trace.facts import _no_nan, lower, sound, upper
from augment_ops.trace.ir import Node, Traced

_ROUNDING = ("floor", "ceil", "rint", "trunc")


#: Scalar operators :meth:`augment_ops.trace.emitter._Vectors.vector` applies to all lanes at once.
_LANEWISE = ("cast", "bin", "un", "where")


def _lane_key(n: Node) -> tuple:
    """What the lowering of ``n`` decides from, besides its arguments' values: lanes with equal
    keys are lowered by the same operators (constant arguments, argument kinds, and which
    arguments are the same node, as in the clamp ``where(x < y, x, y)``)."""
    args: list[Any] = []
    # An integer minimum or maximum is one operator whatever its constant: lanes with other
    # constants (min(5, h) and min(7, w)) take a vector of them.
    any_constant = n.op == "bin" and n.attrs in (("minimum",), ("maximum",)) and \
        n.dtype.kind in "iu" and n.ndim == 0
    for a in n.args:
        if not isinstance(a, Node):
            args.append(("int", a))
        elif a.op == "const" and any_constant and a.ndim == 0:
            args.append(("const", a.dtype.str))
        elif a.op == "const":
            args.append(("const", a.dtype.str, a.value.shape, a.value.tobytes()))
        else:
            same = next(j for j, b in enumerate(n.args) if b is a)
            name = a.attrs[0] if a.op in ("un", "bin") else None
            args.append((a.op, name, a.dtype.str, a.ndim, same,
                         _exact_float64_of_int(a) is not None))
    if n.op == "where" and isinstance(n.args[0], Node) and n.args[0].op == "bin":
        args.append(tuple(x is y for x in n.args[1:] for y in n.args[0].args))
    args.append(("divisor", _divisor_risks(n)))
    if n.op == "cast":  # the conversion _cast picks from the bounds of what it converts
        args.append(tuple(_cast_choices(x, n.dtype)
                          for x in (n.args[0], _exact_cast_source(n)) if isinstance(x, Node)))
    return (n.op, n.attrs, n.dtype.str, tuple(args))


def _cast_choices(x: Node, dst: np.dtype) -> tuple:
    """What the lowering of ``x.astype(dst)`` decides from ``x``'s bounds."""
    sat = _saturating_source(x, dst) if x.dtype.kind in "iu" and dst.kind in "iu" else None
    return (sat is None, sat is x, _may_wrap(x, dst), _finite_bounds(x),
            _saturating_float_source(x, dst) is not None)


def _free(n: Node) -> bool:
    """Whether lowering ``n`` takes no operator of its own (a cast to its own dtype, ``+ 0``, a
    minimum known to be its first operand)."""
    if n.op == "cast":
        return n.dtype == n.args[0].dtype
    if n.op == "bin":
        a, b = n.args
        return n.attrs[1:] == ("first",) or _times_one(n) is not None or (
            n.dtype.kind in "iu" and n.attrs[0] in ("add", "subtract") and _is_zero(b)) or (
            n.dtype.kind in "iu" and n.attrs[0] == "add" and _is_zero(a))
    return False


def _difference(hi: Any, lo: Any) -> Any:
    """``hi - lo`` as a node or int where it needs no operator (``(y + ch) - y`` is ``ch``),
    else None."""
    d = _constant_difference(hi, lo)
    if d is not None:
        return d
    if _is_zero_dim(lo):
        return hi
    h = _strip_same(hi)
    if isinstance(h, Node) and h.op == "bin" and h.attrs[0] == "add" and h.dtype == np.int64:
        a, b = h.args
        if _strip_same(a) is _strip_same(lo):
            return b
        if _strip_same(b) is _strip_same(lo):
            return a
    return None


def _is_zero_dim(d: Any) -> bool:
    return (not isinstance(d, Node) and d == 0) or (isinstance(d, Node) and _is_zero(d))


def _strip_same(d: Any) -> Any:
    """``d`` without casts to its own dtype (weak to strong)."""
    while isinstance(d, Node) and d.op == "cast" and d.dtype == d.args[0].dtype:
        d = d.args[0]
    return d


def _exact_float64_of_int(a: Node) -> Node | None:
    """``x`` where ``a`` is ``float64(x)`` of an int64 ``x`` the tracer bounds by 2**53 (so
    the conversion is exact), else None."""
    while a.op == "cast" and a.dtype == a.args[0].dtype:  # weak to strong float64
        a = a.args[0]
    if not (a.op == "cast" and a.dtype == np.float64 and a.args[0].dtype == np.int64):
        return None
    x = a.args[0]
    lo, up = lower(x), upper(x)
    if lo is None or up is None or lo < -(2**53) or up > 2**53:
        return None
    return x


def _exact_float_source(a: Node, dt: np.dtype,
                        stop: Callable[[Node], bool] = lambda m: False) -> Node | None:
    """``x`` where ``a`` is the float32 or float64 ``dt`` of an integer or float ``x`` whose
    every value ``dt`` holds exactly (uint8 or int16 in float32, int32 or float32 in float64,
    an int64 the tracer bounds by 2**24 or 2**53), else None. DALI's arithmetic operators take
    such an ``x`` with a ``dt`` operand as ``dt``, converting it as numpy's cast does there.
    Steps that keep every value are looked through: a cast to the same dtype (weak to strong),
    ``* 1``, a float32 widened to float64; but none for which ``stop`` is true (a value given
    from outside the graph, whose arguments DALI does not compute)."""
    dt = np.dtype(dt)
    while True:
        if stop(a):
            return None
        one = _times_one(a)
        if a.op == "cast" and a.dtype == a.args[0].dtype:
            a = a.args[0]
        elif one is not None:
            a = one
        else:
            break
    if not (a.op == "cast" and a.dtype == dt and dt in _MANTISSA):
        return None
    x = a.args[0]
    if x.dtype.kind == "f" and x.dtype.itemsize < dt.itemsize and x.dtype in _MANTISSA:
        # exact in float32, so in float64; else the float32 itself, which float64 holds
        return _exact_float_source(x, x.dtype, stop) or x
    if x.dtype.kind not in "iu":
        return None
    bits = _MANTISSA[dt]
    if x.dtype.itemsize * 8 - (x.dtype.kind == "i") <= bits:
        return x
    lo, up = lower(x), upper(x)
    if lo is None or up is None or lo < -(2**bits) or up > 2**bits:
        return None
    return x


#: The integers a float holds exactly: those of magnitude up to 2**bits.
_MANTISSA = {np.dtype(np.float32): 24, np.dtype(np.float64): 53}


def _is_zero(n: Node) -> bool:
    return n.op == "const" and n.value.ndim == 0 and n.value.item() == 0


def _strip(d: Any) -> Any:
    """``d`` without the casts that keep every value (int64 of a weak int64, a widening)."""
    while isinstance(d, Node) and d.op == "cast" and np.can_cast(d.args[0].dtype, d.dtype):
        d = d.args[0]
    return d


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same per-sample value, up to casts that keep every
    value."""
    a, b = _strip(a), _strip(b)
    return a is b if isinstance(a, Node) else (not isinstance(b, Node) and a == b)


def _scalar_const(d: Any) -> float | int | None:
    """The value of a scalar constant node that is not NaN, else ``None``."""
    if not isinstance(d, Node) or d.op != "const" or d.value is None or d.value.ndim != 0:
        return None
    v = d.value.item()
    return None if v != v else v


def _clamp_bounds(n: Node) -> tuple[Node, Any, Any] | None:
    """``(x, lo, hi)`` when the array node ``n`` is ``np.clip(x, lo, hi)`` with constant bounds
    and ``lo <= hi`` (the tracer marks a clip's ``minimum``): one ``math.clamp`` then replaces
    two full-image passes. The clamp keeps ``x`` where it equals a bound, as ``np.clip`` does
    (``np.minimum``/``np.maximum`` written out give their second operand, which differs for
    -0.0 and 0.0, so they keep their own operators). NaN stays NaN on the CPU and becomes
    ``lo`` on the GPU (DALI 2.4's ``clamp``; DALI's ``max`` drops it on both devices)."""
    if n.op != "bin" or n.attrs != ("minimum", "clip") or n.ndim == 0:
        return None
    x, bound = n.args
    hi = _scalar_const(bound)
    if hi is None or not isinstance(x, Node) or x.op != "bin" or x.attrs != ("maximum",) or \
            x.dtype != n.dtype:
        return None
    y, other = x.args
    lo = _scalar_const(other)
    if lo is None or not isinstance(y, Node):
        return None
    return (y, lo, hi) if lo <= hi else None


def _clamp_operands(d: Any) -> tuple[str, Node, Node] | None:
    """``("min" | "max", x, y)`` when ``d`` is ``np.minimum(x, y)`` / ``np.maximum(x, y)`` or
    the tracer's clamp ``np.where(x < y, x, y)`` / ``np.where(x < y, y, x)``, maybe under casts
    that keep every value."""
    d = _strip(d)
    if not isinstance(d, Node) or d.ndim != 0:
        return None
    if d.op == "bin" and d.attrs[0] in ("minimum", "maximum"):
        return ("min" if d.attrs[0] == "minimum" else "max", *d.args)
    if d.op == "where" and d.args[0].op == "bin" and d.args[0].attrs[0] == "less":
        c, a, b = d.args
        x, y = c.args
        if a is x and b is y:
            return ("min", x, y)
        if a is y and b is x:
            return ("max", x, y)
    return None


#: The most negative start a rectangle fill passes to ``fn.erase`` unclamped: float32 holds
#: every integer from -2**23 to 2**24, so anchor, size and their sum stay exact for sides up to
#: 2**23 (the fill clamps a start it cannot bound so).
_MIN_START = -(2**23)


def _unclamped_start(lo: Any) -> Any:
    """A rectangle's start without its clamps at 0 (``max(0, s)``), which a clipping fill does
    itself: the region ``[max(0, s), e)`` within ``0..n`` is ``[s, e)`` within ``0..n``."""
    while (got := _clamp_operands(lo)) is not None and got[0] == "max" and (
            _is_zero(got[1]) or _is_zero(got[2])):
        s = got[2] if _is_zero(got[1]) else got[1]
        low = lower(s)
        if low is None or low < _MIN_START:
            break
        lo = s
    return lo


def _unclamped_stop(hi: Any, n: Any, lo: Any) -> Any:
    """A rectangle's stop without its clamps at the axis's size ``n`` (``min(n, e)``) and at its
    start (``max(e, lo)``, which makes an empty region of a negative size): ``[s, min(n, e))``
    and ``[s, max(e, s))`` within ``0..n`` are ``[s, e)`` within ``0..n``.

    The stops peeled so are >= 0 (numpy's bounds, clamped at 0 or known >= 0 by the tracer, are
    what these clamps enclose), so a size ``e - s`` cannot wrap around, and one above float32's
    exact range still reaches past ``n``."""
    while (got := _clamp_operands(hi)) is not None:
        kind, a, b = got
        if kind == "min" and (_same(a, n) or _same(b, n)):
            e = b if _same(a, n) else a
        elif kind == "max" and (_same(a, lo) or _same(b, lo)):
            e = b if _same(a, lo) else a
        else:
            break
        if not _at_least_zero(e):
            break
        hi = e
    return hi


def _base_and_offset(d: Any) -> tuple[Node | None, int]:
    """``(base, c)`` with ``d == base + c`` in int64 arithmetic (``base`` None: ``d`` is ``c``),
    through additions and subtractions of constants."""
    offset = 0
    while True:
        if not isinstance(d, Node):
            return None, offset + int(d)
        while d.op == "cast" and d.dtype == d.args[0].dtype:
            d = d.args[0]
        if d.op == "const" and d.dtype.kind in "iu" and d.value.ndim == 0:
            return None, offset + int(d.value)
        if d.op != "bin" or d.dtype != np.int64 or d.attrs[0] not in ("add", "subtract"):
            return d, offset
        a, b = d.args
        if b.op == "const" and b.value.ndim == 0:
            offset += int(b.value) if d.attrs[0] == "add" else -int(b.value)
            d = a
        elif a.op == "const" and a.value.ndim == 0 and d.attrs[0] == "add":
            offset += int(a.value)
            d = b
        else:
            return d, offset


def _constant_difference(hi: Any, lo: Any) -> int | None:
    """``hi - lo`` where it is the same for every sample (``(y + 32) - (y - 32)``), as int64
    arithmetic wraps it, else None."""
    if hi is None or lo is None:
        return None
    (bh, ch), (bl, cl) = _base_and_offset(hi), _base_and_offset(lo)
    if bh is not bl:
        return None
    return (ch - cl + 2**63) % 2**64 - 2**63


def _at_least_zero(d: Any) -> bool:
    """Whether ``d >= 0`` for every sample: known to the tracer, or a clamp ``max(0, x)``."""
    if not isinstance(d, Node):
        return d >= 0
    low = lower(d)
    got = _clamp_operands(d)
    return (low is not None and low >= 0) or (
        got is not None and got[0] == "max" and (_is_zero(got[1]) or _is_zero(got[2])))


def _fill_constant(a: Any) -> Any:
    """The value of ``a`` where it is an array filled with one constant of its own dtype
    (``np.full_like(img, 255)``, ``np.zeros_like(img) + 255``, a cast of one), as a 0-d numpy
    array, else None. Arithmetic on fills is evaluated by numpy on one element: ufuncs are
    elementwise, so that is the value of every element, with numpy's own rounding and
    wrap-around."""
    if not isinstance(a, Node) or a.ndim == 0:
        return None
    if a.op == "full":
        v = a.args[1]
        if not isinstance(v, Node) or v.op != "const" or v.value.ndim != 0 or \
                v.dtype != a.dtype:
            return None
        return v.value
    if a.op == "cast":
        x = a.args[0]
        f = _fill_constant(x) if isinstance(x, Node) and x.shape == a.shape else None
        if f is None:
            return None
        with np.errstate(all="ignore"):
            return np.asarray(np.asarray(f).reshape(1).astype(a.dtype)[0])
    if a.op != "bin" or len(a.attrs) != 1 or not hasattr(np, a.attrs[0]):
        return None
    operands = []
    for x in a.args:
        if not isinstance(x, Node):
            return None
        if x.op == "const" and x.value.ndim == 0:
            operands.append(x.value.item() if x.weak else x.value)
        elif x.shape == a.shape and (f := _fill_constant(x)) is not None:
            operands.append(np.asarray(f).reshape(1))
        else:
            return None
    if not any(isinstance(o, np.ndarray) and o.ndim == 1 for o in operands):
        return None
    with np.errstate(all="ignore"):
        got = getattr(np, a.attrs[0])(*operands)
    if not isinstance(got, np.ndarray) or got.dtype != a.dtype:
        return None
    return np.asarray(got[0])


def _folded_fills(n: Node, consts: dict[int, Node]) -> Node:
    """``n``, or where an elementwise ``n`` (arithmetic, comparison, ``np.where``'s two values)
    takes an array filled with a constant, ``n`` on that constant as a 0-d array of the fill's
    dtype: ``np.full_like(img, 255) - img`` is ``np.uint8(255) - img``, one operator where the
    fill takes its own passes over the image. The constant broadcasts to the same values, so this
    holds whenever another argument, left as it is, has ``n``'s whole shape. ``consts`` keeps
    one constant node per fill (``is`` tests of the patterns see one node)."""
    if n.op not in ("bin", "where") or n.ndim == 0:
        return n
    # A condition stays an array: the select's bitwise mask is made from it.
    fills = [None if n.op == "where" and k == 0 else _fill_constant(a)
             for k, a in enumerate(n.args)]
    if all(f is None for f in fills) or not any(
            f is None and isinstance(a, Node) and a.shape == n.shape
            for a, f in zip(n.args, fills, strict=True)):
        return n
    args = []
    for a, f in zip(n.args, fills, strict=True):
        if f is not None:
            if id(a) not in consts:
                consts[id(a)] = Node("const", (), (), a.dtype, (), value=np.asarray(f, a.dtype))
            a = consts[id(a)]
        args.append(a)
    return Node(n.op, tuple(args), n.attrs, n.dtype, n.shape, n.weak, n.value)


def _times_one(n: Node) -> Node | None:
    """``x`` where ``n`` is ``x * 1`` or ``1 * x`` in ``x``'s own dtype (bit for bit ``x``, NaN
    and -0.0 included), else None."""
    if n.op != "bin" or n.attrs[0] != "multiply" or n.dtype.kind not in "iuf":
        return None
    a, b = n.args
    for one, x in ((b, a), (a, b)):
        if isinstance(one, Node) and isinstance(x, Node) and one.op == "const" and \
                one.value.ndim == 0 and one.dtype.kind in "iuf" and one.value.item() == 1 and \
                x.dtype == n.dtype and x.shape == n.shape:
            return x
    return None


def _exact_cast_source(n: Node) -> Node | None:
    """``x`` where ``n`` casts ``x`` twice and the first cast keeps every value of ``x``'s dtype
    (``img.astype(np.float32).astype(np.float64)``): numpy's casts are functions of the value,
    so one cast from ``x`` gives the same result, else None."""
    if n.op != "cast":
        return None
    (y,) = n.args
    if not isinstance(y, Node) or y.op != "cast" or y.dtype == n.dtype:
        return None
    (x,) = y.args
    if not isinstance(x, Node) or x.dtype == y.dtype or \
            not np.can_cast(x.dtype, y.dtype, casting="safe"):
        return None
    return x


def _float32_exact_float64(value: Any, dt: np.dtype) -> bool:
    """Whether ``value`` of dtype ``dt`` is a float64 scalar that float32 holds exactly (not
    -0.0 nor NaN, whose bits a float32 constant may not keep)."""
    arr = np.asarray(value)
    if np.dtype(dt) != np.float64 or arr.ndim != 0:
        return False
    v = float(arr)
    with np.errstate(over="ignore"):  # beyond float32's range: inf, not equal
        return v == v and not (v == 0 and np.signbit(v)) and float(np.float32(v)) == v


def _summed_lanes(n: Node) -> tuple[Node, int] | None:
    """``(x, axis)`` where the array node ``n`` adds up, in any order, ``x[..., k]`` cast to
    ``n``'s dtype for every index ``k`` of ``x``'s static ``axis`` exactly once, as numpy's
    ``img.mean(axis=-1)`` or ``r + g + b`` does: one sum over the axis then gives the same
    values. Only for uint8 ``x`` (what DALI's sum takes into uint64) and where
    every partial sum is exact in ``n``'s dtype (integers below float's mantissa, no integer
    overflow), so that the order of the additions cannot matter."""
    if n.op != "bin" or n.attrs != ("add",) or n.ndim == 0:
        return None
    leaves: list[Any] = []
    stack: list[Any] = [n]
    while stack:
        d = stack.pop()
        if isinstance(d, Node) and d.op == "bin" and d.attrs == ("add",) and \
                d.dtype == n.dtype and d.shape == n.shape:
            stack.extend(d.args)
        else:
            leaves.append(d)
    x, axis, ks = None, None, []
    for leaf in leaves:
        if not (isinstance(leaf, Node) and leaf.op == "cast" and leaf.dtype == n.dtype):
            return None
        t = leaf.args[0]
        if not (isinstance(t, Node) and t.op == "take" and isinstance(t.args[1], int)):
            return None
        if x is None:
            x, axis = t.args[0], t.attrs[0]
        if t.args[0] is not x or t.attrs[0] != axis:
            return None
        ks.append(t.args[1])
    if not isinstance(x, Node) or x.dtype != np.uint8 or axis is None or \
            not isinstance(x.shape[axis], int) or sorted(ks) != list(range(x.shape[axis])):
        return None
    bound = len(ks) * 255
    if n.dtype.kind == "f":
        return (x, axis) if bound <= 2 ** (np.finfo(n.dtype).nmant + 1) else None
    if n.dtype.kind in "iu":
        return (x, axis) if bound <= np.iinfo(n.dtype).max else None
    return None


# -- flips and transposes chosen per sample -----------------------------------------------------
def _dihedral(n: Node) -> tuple[Node, tuple[bool, bool, bool]]:
    """``(x, (t, v, h))`` with ``n`` equal to ``x`` with its rows flipped if ``v``, its columns
    if ``h``, then its rows and columns swapped if ``t``, where ``n`` is made from ``x`` by flips
    and transposes of the first two axes of an HWC array (``x`` itself: no bit set)."""
    if n.ndim == 3 and n.op == "flip" and n.attrs[0] in (0, 1):
        x, (t, v, h) = _dihedral(n.args[0])
        # Flipping the rows of the transposed value flips the columns of the one under it.
        rows = (n.attrs[0] == 0) != t
        return x, (t, v != rows, h != (not rows))
    if n.ndim == 3 and n.op == "transpose" and n.attrs[0] == (1, 0, 2):
        x, (t, v, h) = _dihedral(n.args[0])
        return x, (not t, v, h)
    return n, (False, False, False)


def _turns_of(n: Node) -> tuple[Node, Any] | None:
    """``(x, tree)`` where select ``n`` chooses per sample among flips and transposes of one HWC
    array ``x`` (``np.rot90(img, k)`` of a drawn ``k``, a random flip): ``tree`` is
    ``(condition, tree, tree)`` for a select and the leaf's ``(t, v, h)`` of :func:`_dihedral`
    for a leaf, else None."""
    base: list[Node] = []

    def walk(m: Node) -> Any:
        if m.op == "select" and m.ndim == 3 and m.args[0].ndim == 0:
            c, a, b = m.args
            ta, tb = walk(a), walk(b)
            return None if ta is None or tb is None else (c, ta, tb)
        x, bits = _dihedral(m)
        if base and x is not base[0]:
            return None
        base.append(x)
        return bits

    if n.op != "select" or n.ndim != 3 or not isinstance(n.shape[2], int):
        return None
    tree = walk(n)
    return None if tree is None else (base[0], tree)


def _flag(tree: Any, bit: int) -> Node:
    """Bit ``bit`` of the leaves of select tree ``tree`` (:func:`_turns_of`) per sample: a bool
    scalar, a constant where every leaf has the same bit."""
    if not isinstance(tree[0], Node):
        return Node("const", (), (), np.dtype(np.bool_), (), value=np.array(tree[bit]))
    c, a, b = tree
    fa, fb = _flag(a, bit), _flag(b, bit)
    ka = bool(fa.value) if fa.op == "const" else None
    kb = bool(fb.value) if fb.op == "const" else None
    if ka is not None and ka == kb:
        return fa

    def op(name: str, *args: Node) -> Node:
        return Node("un" if len(args) == 1 else "bin", args, (name,), np.dtype(np.bool_), ())
    # One operator a select, on bools: True > False is the only pair greater.
    if ka is not None and kb is not None:
        return c if ka else op("logical_not", c)
    if ka is not None:
        return op("bitwise_or", c, fb) if ka else op("greater", fb, c)  # fb and not c
    if kb is not None:
        return op("greater_equal", fa, c) if kb else op("bitwise_and", fa, c)  # fa or not c
    return Node("where", (c, fa, fb), (), np.dtype(np.bool_), ())


def _int32(f: Node) -> Node:
    """Bool scalar ``f`` as the int32 that ``fn.flip``'s per-sample flags take."""
    i32 = np.dtype(np.int32)
    if f.op == "const":
        return Node("const", (), (), i32, (), value=np.asarray(f.value, i32))
    return Node("cast", (f,), (i32.str,), i32, ())


def _kept_fill(c: Node, filled: Node, other: Node) -> bool:
    """Whether ``select(c, filled, other)`` is ``filled`` for every sample: ``filled`` writes one
    rectangle into ``other`` (a fill, or one per channel) and ``c`` is that its rows (or
    columns) are not empty, ``y1 > y0`` (imgaug's ``if x2 > x1 and y2 > y1:`` before the
    write). Where ``c`` is false the rectangle is empty, so the fill leaves ``other`` as it is."""
    if filled.op != "fill":
        return False
    region = filled.args[1:5]
    x = filled
    while x.op == "fill" and all(a is b for a, b in zip(x.args[1:5], region, strict=True)):
        x = x.args[0]
    if x is not other or c.op != "bin" or c.attrs[0] not in ("greater", "less"):
        return False
    hi, lo = c.args if c.attrs[0] == "greater" else c.args[::-1]
    y0, y1, x0, x1 = region
    return (_same(hi, y1) and _same(lo, y0)) or (_same(hi, x1) and _same(lo, x0))


def _masked(n: Node) -> Node | None:
    """``a * c`` (``c`` made an integer) where ``n`` is the integer scalar ``np.where(c, a, 0)``
    (a channel's rows ``h`` or none, as a fill of drawn channels has): 0 or ``a`` alike, in one
    operator where the bitwise select takes five, and none more where ``c`` depends on the draws
    alone (its integer is then computed with them). Not for the clamp ``where(a < 0, a, 0)``,
    which is one operator already."""
    if n.op != "where" or n.ndim or n.dtype.kind not in "iu":
        return None
    c, a, zero = n.args
    if not _is_zero(zero) or a.dtype != n.dtype or a.ndim or c.ndim or (
            c.op == "bin" and c.attrs[0] == "less" and {id(x) for x in c.args} <= {id(a),
                                                                                 id(zero)}):
        return None
    flag = Node("cast", (c,), (n.dtype.str,), n.dtype, ())
    return Node("bin", (a, flag), ("multiply",), n.dtype, (), n.weak)


def _known_difference(n: Node) -> Node | None:
    """The node ``n`` equals where it is an int64 difference known without an operator:
    ``(y + h) - y`` is ``h`` (:func:`_difference`; int64 wraps alike both ways). The scalars
    it leaves unread (``y`` there) are then not computed for it."""
    if n.op != "bin" or n.attrs != ("subtract",) or n.dtype != np.int64 or n.ndim:
        return None
    d = _difference(*n.args)
    return d if isinstance(d, Node) and d.dtype == np.int64 and not d.ndim else None


def rewritten_for_dali(traced: Traced) -> Traced:
    """``traced`` with each select among flips and transposes of one HWC array (a tree of them:
    ``np.rot90(img, k)`` of a drawn ``k`` is three) replaced by one ``turn`` node: ``x`` with
    its rows flipped, its columns flipped and then transposed as three per-sample flags say
    (``turn(x, transposed, rows, cols)``, the flags scalars of the branch conditions). The
    DALI lowering takes one ``fn.flip`` with per-sample arguments and one transpose of the
    samples that take it, where each leaf would take its own operators and each select a split
    and merge; the flags depend on what the conditions depend on, so for draws numpy computes
    them beside the draws. A select between a fill and the array it fills, on whether the
    fill's region is empty, is the fill (:func:`_kept_fill`); an integer ``where(c, a, 0)`` is
    ``a * c`` (:func:`_masked`); ``(y + h) - y`` is ``h`` (:func:`_known_difference`). The
    same graph where there is nothing of these."""
    done: dict[int, Any] = {}

    turns: dict[int, Any] = {}

    def get(d: Any) -> Any:
        return done.get(id(d), d) if isinstance(d, Node) else d

    def visit(root: Any) -> Any:
        # Iterative: a graph may be thousands of nodes deep (arithmetic on draws in a loop).
        stack = [root]
        while stack:
            n = stack[-1]
            if not isinstance(n, Node) or n.op == "const" or id(n) in done:
                stack.pop()
                continue
            if id(n) not in turns:
                turns[id(n)] = _turns_of(n)
            turned = turns[id(n)]
            deps = [turned[0], *n.shape] if turned is not None else [*n.args, *n.shape]
            pending = [d for d in deps if isinstance(d, Node) and d.op != "const"
                       and id(d) not in done]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            shape = tuple(get(d) for d in n.shape)
            if turned is not None:
                x, tree = turned
                t, v, h = (_flag(tree, bit) for bit in range(3))
                got = Node("turn", (get(x), t, _int32(v), _int32(h)), (), n.dtype, shape,
                           n.weak)
            else:
                args = tuple(get(a) for a in n.args)
                got = n if all(a is b for a, b in zip(args + shape, n.args + n.shape,
                                                      strict=True)) else Node(
                    n.op, args, n.attrs, n.dtype, shape, n.weak, n.value)
                if got.op == "select" and _kept_fill(*args):
                    got = args[1]
                got = _masked(got) or _known_difference(got) or got
            if got is not n and not got.facts:
                # Every node made here has the values of the one it replaces: it takes its
                # facts, which the trace derived step by step (derived anew, a deep graph's
                # would recurse as deep).
                got.facts = n.facts
            done[id(n)] = got
        return get(root)

    outputs = tuple(visit(n) for n in traced.outputs)
    guards = tuple(dataclasses.replace(g, bad=visit(g.bad)) for g in traced.guards)
    if all(a is b for a, b in zip(outputs, traced.outputs, strict=True)) and \
            all(g.bad is h.bad for g, h in zip(guards, traced.guards, strict=True)):
        return traced
    return dataclasses.replace(traced, outputs=outputs, guards=guards)


def _finite_bounds(x: Node) -> bool:
    """Whether the tracer bounds every element of float ``x`` by finite values (none is
    infinite; NaN may be)."""
    if x.dtype.kind != "f":
        return False
    lo, up = lower(x), upper(x)
    return lo is not None and up is not None and math.isfinite(lo) and math.isfinite(up) and \
        sound(x)


def _may_wrap(x: Node, dst: np.dtype) -> bool:
    """Whether float ``x`` converted to integer type ``dst`` may fall outside its range, where
    numpy wraps around (:data:`augment_ops.trace.dali_ops.WRAPPING_FLOAT_CASTS`)."""
    if x.dtype.kind != "f" or dst.kind not in "iu":
        return False
    info = np.iinfo(dst)
    lo, up = lower(x), upper(x)
    return lo is None or up is None or lo <= int(info.min) - 1 or up >= int(info.max) + 1


def _saturating_source(x: Node, dst: np.dtype) -> Node | None:
    """The node whose conversion by DALI (which saturates) to integer type ``dst`` is numpy's
    ``x.astype(dst)`` (which keeps the low bits), for integer ``x``: ``x`` where every value of
    it lies in ``dst``'s range, so there is nothing to saturate or wrap; ``y`` where ``x`` is
    ``np.clip(y, dst_min, dst_max)`` of an integer ``y`` (the saturation is the clip); else
    None."""
    info = np.iinfo(dst)
    bounds = _clamp_bounds(x)
    if bounds is not None:  # a clip by constants bounds x whatever its operand computes
        y, lo, hi = bounds
        if y.dtype.kind in "iu" and lo == info.min and hi == info.max:
            return y
        return x if info.min <= lo and hi <= info.max else None
    lo, up = lower(x), upper(x)
    if lo is None or up is None or not sound(x):
        return None
    return x if info.min <= lo and up <= info.max else None


def _saturating_float_source(x: Node, dst: np.dtype) -> Node | None:
    """``y`` where ``x`` is ``np.clip(y, 0, dst_max)`` of a float ``y`` that is never NaN and
    ``dst`` an unsigned integer type (``np.clip(v, 0, 255).astype(np.uint8)``, the end of most
    pixel arithmetic): numpy truncates the clipped value, which is ``floor(y)`` converted by
    DALI, which saturates (``floor`` is monotonic and the bounds are integers; a negative
    ``y`` floors below 0 and saturates to 0, as numpy's clip makes it 0). One pass over the
    image fewer than the clip, the floor and the cast. uint8 and uint16 only. Else None."""
    if dst.kind != "u" or dst.itemsize > 2:  # (NaN converts to 0 on both sides there too)
        return None
    bounds = _clamp_bounds(x)
    if bounds is None:
        return None
    y, lo, hi = bounds
    if y.dtype.kind != "f" or lo != 0 or hi != np.iinfo(dst).max or not _no_nan(y):
        return None
    return y
