"""Emit a traced op (:mod:`augment_ops.trace`) as DALI operators on the image's DataNode.

The operators run on whichever device the image is on. Per-sample scalars (sizes, slice bounds,
branch conditions) are DALI CPU operators on ``image.shape()``, copied to the GPU only where an
elementwise operator mixes them with GPU pixels; those that depend on a random op's draws alone
are computed by numpy in the source's reader processes (:class:`SampleScalars`) and enter the
graph as external-source outputs. No Python runs per batch in the graph (an op's ``min_size``
check calls Python only for a batch holding a too-small image, to raise). Facts the tracer knows
(sizes are >= 1, ``(h - ch) // 2 + ch <= h``) spare the clamps of slice bounds, so a crop's
bounds take a few operators. Each DALI operator costs about the same per batch whatever its work
(it is dispatched per sample), so scalars computed alike along several axes (a rectangle's y and
x bounds) are computed together, as per-sample vectors (:meth:`_Emitter.vector`): a crop whose
starts are computed alike is one ``fn.slice`` on vectors of starts and sizes, and a rectangle
fill's anchor and size are vectors too, the clamps of its bounds at 0 and at the image's size
left to ``fn.erase``, which clips its region to the image. numpy's semantics are kept where
DALI's differ:

- casts: DALI saturates and rounds to nearest, numpy wraps between integer types and truncates
  floats toward zero, so integer narrowing masks the bits first and float-to-int truncates first
  (floats outside the target range: numpy's result is undefined, DALI's saturates);
- ``//`` and ``%`` on signed integers: DALI truncates toward zero, numpy floors; by 0 DALI
  raises and numpy gives 0, and the most negative int32 or int64 by -1 traps in DALI where
  numpy wraps around, so a divisor that may be either is replaced by 1 and the result fixed;
- ``np.rint`` (half to even) through the add-and-subtract 2**23 (2**52) rounding identity;
- ``np.where`` as a bitwise select, exact for every value (NaN and inf included);
- a branch on a per-sample scalar: both outcomes are computed for the whole batch and merged
  per sample with DALI's conditional split/merge, so outputs may differ in shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from augment_ops.trace import Node, Traced, _lower, _upper

__all__ = ["CheckLayout", "SampleScalars", "check_layout", "emit", "sample_scalar_nodes"]


def _dali_type(dt: np.dtype) -> Any:
    from nvidia.dali import types

    return {
        "b1": types.BOOL, "u1": types.UINT8, "u2": types.UINT16, "u4": types.UINT32,
        "u8": types.UINT64, "i1": types.INT8, "i2": types.INT16, "i4": types.INT32,
        "i8": types.INT64, "f4": types.FLOAT, "f8": types.FLOAT64,
    }[np.dtype(dt).str.lstrip("<>|=")]


def _constant(value: Any, dt: np.dtype) -> Any:
    """A typed DALI constant; uint64 values above int64's range go through a reinterpret (DALI
    stores integer constants as int64)."""
    from nvidia.dali import fn, types

    dt = np.dtype(dt)
    arr = np.asarray(value, dtype=dt)
    if (dt == np.uint64 and (arr > np.iinfo(np.int64).max).any()) or dt == np.float64:
        # Arithmetic operators keep real constants as float32; bring float64 values (and uint64
        # ones above int64's range) in exactly, by their bit pattern.
        bits = arr.reshape(-1).view(np.int64)
        return fn.reinterpret(
            fn.constant(idata=[int(b) for b in bits], dtype=types.INT64, shape=list(arr.shape)),
            dtype=_dali_type(dt))
    if arr.ndim == 0:
        return types.Constant(arr.item(), dtype=_dali_type(dt))
    return types.Constant(arr, dtype=_dali_type(dt))


def _is_dn(x: Any) -> bool:
    from nvidia.dali.data_node import DataNode

    return isinstance(x, DataNode)


def _on_device(*xs: Any) -> list[Any]:
    """Elementwise operators need their tensor inputs on one device: copy CPU scalars to the GPU
    when a GPU tensor takes part."""
    gpu = any(_is_dn(x) and x.device == "gpu" for x in xs)
    return [x.gpu() if gpu and _is_dn(x) and x.device == "cpu" else x for x in xs]


class _Emitter:
    def __init__(self, image: Any) -> None:
        self.image = image
        self.shape: Any = None
        self.dims: dict[int, Any] = {}
        self.memo: dict[int, Any] = {}
        self.vmemo: dict[tuple, Any] = {}
        #: Nodes whose values come from outside the graph (``sample_values``).
        self.given: set[int] = set()

    def dim(self, axis: int) -> Any:
        """The input's size along ``axis``, a per-sample int64 scalar (one operator per axis)."""
        if axis not in self.dims:
            if self.shape is None:
                self.shape = self.image.shape()
            self.dims[axis] = self.shape[axis]
        return self.dims[axis]

    def value(self, n: Node | int) -> Any:
        if not isinstance(n, Node):
            return n
        got = self.memo.get(id(n))
        if got is None:
            got = getattr(self, "_" + n.op)(n)
            self.memo[id(n)] = got
        return got

    # -- leaves
    def _input(self, n: Node) -> Any:
        return self.image

    def _in_dim(self, n: Node) -> Any:
        return self.dim(n.attrs[0])

    def _uniform(self, n: Node) -> Any:
        raise ValueError("a random traced op takes its draws from SampleScalars; pass "
                         "sample_values= to emit")

    def _const(self, n: Node) -> Any:
        return _constant(n.value, n.dtype)

    # -- elementwise
    # The scalar operators take ``val``, the DALI value of an argument: ``self.value`` for one
    # node, or the vector of the argument across lanes (:meth:`vector`).
    def _cast(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        val = val or self.value
        (x,) = n.args
        if x.op == "un" and x.attrs[0] in _ROUNDING and n.dtype.kind in "iu":
            # Already integral: nothing to truncate before the conversion.
            from nvidia.dali import fn

            return fn.cast(val(x), dtype=_dali_type(n.dtype))
        return cast(val(x), x.dtype, n.dtype, nonneg=n.attrs[1:] == ("nonneg",))

    def _bin(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        val = val or self.value
        a, b = n.args
        if n.attrs[1:] == ("first",):  # a minimum the tracer proved equal to its first operand
            return val(a)
        if n.dtype.kind in "iu" and n.attrs[0] in ("add", "subtract") and _is_zero(b):
            return val(a)  # integer bounds such as h - 0, y + 0: no operator
        if n.dtype.kind in "iu" and n.attrs[0] == "add" and _is_zero(a):
            return val(b)
        sign = None if b.op != "const" else (bool(b.value < 0) if b.value.ndim == 0 else None)
        if n.attrs[0] in ("add", "subtract", "multiply") and n.dtype == np.float64:
            ia, ib = _exact_float64_of_int(a), _exact_float64_of_int(b)
            if (ia is None) != (ib is None):
                # int64 with float64 is float64 in DALI as in numpy, the int64 converted exactly
                # (|x| <= 2**53): the cast takes no operator of its own.
                return binary(n.attrs[0], val(a if ia is None else ia),
                              val(b if ib is None else ib), n.dtype)
        risks = _divisor_risks(n)
        if risks:
            return _division(n.attrs[0], val(a), val(b), n.dtype, b, risks,
                             nonneg=n.attrs[1:] == ("nonneg",), b_negative=sign)
        if n.attrs[1:] == ("nonneg",):  # both operands >= 0: DALI's truncation is numpy's floor
            return binary(n.attrs[0], val(a), val(b), np.dtype(np.uint64))
        bounds = _clamp_bounds(n)
        if bounds is not None:
            import nvidia.dali.math as dmath

            x, lo, hi = bounds
            return dmath.clamp(val(x), _constant(lo, n.dtype), _constant(hi, n.dtype))
        return binary(n.attrs[0], val(a), val(b), a.dtype, b_negative=sign)

    def _un(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        val = val or self.value
        (x,) = n.args
        return unary(n.attrs[0], val(x), x.dtype, nonneg=n.attrs[1:] == ("nonneg",))

    def _where(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        val = val or self.value
        c, a, b = n.args
        if n.ndim == 0 and n.dtype.kind in "iu" and c.op == "bin" and c.attrs[0] == "less":
            # The clamps of sizes and bounds: one operator instead of a bitwise select.
            import nvidia.dali.math as dmath

            x, y = c.args
            if a is x and b is y:
                return dmath.min(*_on_device(val(a), val(b)))
            if a is y and b is x:
                return dmath.max(*_on_device(val(a), val(b)))
        return where(val(c), val(a), val(b), n.dtype,
                     a.value if a.op == "const" else None, b.value if b.op == "const" else None)

    # -- vectors of scalars
    def vector(self, lanes: Sequence[Node | int]) -> Any:
        """The per-sample scalars ``lanes`` (of one dtype) as one per-sample 1-D tensor.

        Lanes computed alike (the same operator and attributes on arguments that are themselves
        alike, as the y and x bounds of a rectangle are) take one operator for all lanes at each
        step of the computation, where each scalar would take one of its own; sizes along
        consecutive axes are one subscript of the image's shape. Lanes that differ are computed
        apart and stacked."""
        key = tuple(id(v) if isinstance(v, Node) else ("v", v) for v in lanes)
        got = self.vmemo.get(key)
        if got is None:
            got = self._vector(list(lanes))
            self.vmemo[key] = got
        return got

    def _vector(self, lanes: list[Node | int]) -> Any:
        from nvidia.dali import fn

        nodes = [v if isinstance(v, Node) else None for v in lanes]
        if all(n is not None and n.op == "const" for n in nodes) or not any(nodes):
            values = [v.value if isinstance(v, Node) else v for v in lanes]
            dt = nodes[0].dtype if nodes[0] is not None else np.dtype(np.int64)
            return _constant_node(np.array(values, dtype=dt), dt)
        if all(n is not None and n.op == "in_dim" for n in nodes):
            axes = [n.attrs[0] for n in nodes]
            if axes == list(range(axes[0], axes[0] + len(axes))):
                self.dim(axes[0])  # the shape operator
                return self.shape[axes[0]:axes[0] + len(axes)]
        first = nodes[0]
        if first is not None and first.op in _LANEWISE and first.ndim == 0 and \
                all(n is not None and id(n) not in self.given for n in nodes) and \
                len({_lane_key(n) for n in nodes}) == 1:
            # The lanes of each argument of the first lane (and of the int64 under an exact
            # float64 cast, which _bin may take instead), made into operands when used.
            lanes_of: dict[int, list[Node]] = {}
            for k, a in enumerate(first.args):
                if isinstance(a, Node):
                    lanes_of.setdefault(id(a), [n.args[k] for n in nodes])
                    inner = _exact_float64_of_int(a)
                    if inner is not None:
                        lanes_of.setdefault(id(inner),
                                            [_exact_float64_of_int(n.args[k]) for n in nodes])
            return getattr(self, "_" + first.op)(
                first, val=lambda a: self._operand(lanes_of[id(a)]))
        dt = next(n.dtype for n in nodes if n is not None)
        return fn.stack(*[self.value(v) if isinstance(v, Node) and v.op != "const" else
                          _constant_node(v.value if isinstance(v, Node) else v, dt)
                          for v in lanes])

    def _alike(self, lanes: Sequence[Any]) -> bool:
        """Whether :meth:`vector` computes ``lanes`` with operators shared by all lanes (not by
        stacking scalars), none of them a constant."""
        nodes = [v for v in lanes if isinstance(v, Node)]
        if len(nodes) != len(lanes) or any(n.op == "const" or id(n) in self.given
                                           for n in nodes):
            return False
        if all(n.op == "in_dim" for n in nodes):
            return True
        return nodes[0].op in _LANEWISE and len({_lane_key(n) for n in nodes}) == 1

    def _scalar_cost(self, roots: Sequence[Any]) -> int:
        """About how many operators the scalars ``roots`` take that are not made yet."""
        seen: set[int] = set()

        def visit(d: Any) -> int:
            if not isinstance(d, Node) or id(d) in seen or id(d) in self.memo or d.op == "const":
                return 0
            seen.add(id(d))
            own = 0 if _free(d) else 1
            return own + sum(visit(a) for a in d.args)
        return sum(visit(d) for d in roots)

    def _vector_cost(self, lanes: Sequence[Any], seen: set) -> int:
        """About how many operators :meth:`vector` takes for ``lanes`` that are not made yet."""
        key = tuple(id(v) if isinstance(v, Node) else ("v", v) for v in lanes)
        if key in self.vmemo or key in seen:
            return 0
        seen.add(key)
        nodes = [v for v in lanes if isinstance(v, Node)]
        if all(v.op == "const" for v in nodes):
            return 1
        if len(nodes) == len(lanes) and all(v.op == "in_dim" for v in nodes):
            return 1
        if not self._alike(lanes):
            return 1 + self._scalar_cost(lanes)
        first = nodes[0]
        cost = 0 if _free(first) else 1
        done: set[int] = set()
        for k, a in enumerate(first.args):
            if isinstance(a, Node) and id(a) not in done:
                done.add(id(a))
                sub = [n.args[k] for n in nodes]
                cost += (self._scalar_cost([a]) if all(v is a for v in sub)
                         else self._vector_cost(sub, seen))
        return cost

    def _operand(self, lanes: list[Node]) -> Any:
        """An argument of a lanewise operator: the scalar itself where every lane has the same
        one (DALI broadcasts it), else the vector of the lanes."""
        if all(v is lanes[0] for v in lanes):
            return self.value(lanes[0])
        return self.vector(lanes)

    def _full(self, n: Node) -> Any:

        a, v = n.args
        zeros = _zeros_like(self.value(a), _dali_type(n.dtype))
        return binary("add", *_on_device(zeros, self.value(v)), n.dtype)

    # -- layout
    def _slice(self, n: Node) -> Any:
        axes = list(n.attrs)
        los = [n.args[1 + 2 * k] for k in range(len(axes))]
        his = [n.args[2 + 2 * k] for k in range(len(axes))]
        if len(axes) > 1 and self._alike(los):
            # Starts computed alike on every axis (a crop's y and x): one fn.slice takes them and
            # the sizes as vectors, where the cheaper.
            sizes = [_difference(hi, lo) for lo, hi in zip(los, his, strict=True)]
            seen: set = set()
            cost = self._vector_cost(los, seen) + (
                self._vector_cost(sizes, seen) if None not in sizes else
                self._vector_cost(his, seen) + 1)
            if cost < self._scalar_cost(los + his):
                from nvidia.dali import fn

                start = self.vector(los)
                size = self.vector(sizes) if None not in sizes else binary(
                    "subtract", self.vector(his), start, np.dtype(np.int64))
                return fn.slice(self.value(n.args[0]), start, size, axes=axes)
        key: list[slice] = [slice(None)] * (max(n.attrs) + 1)
        for k, axis in enumerate(n.attrs):
            key[axis] = slice(self.value(n.args[1 + 2 * k]), self.value(n.args[2 + 2 * k]))
        return self.value(n.args[0])[tuple(key)]

    def _flip(self, n: Node) -> Any:
        from nvidia.dali import fn

        # fn.flip finds its axes by layout letters; subscripts with step -1 are not used because
        # DALI 2.4 gives wrong rows for them on the outer axis of larger images.
        axis, nd = n.attrs[0], n.ndim
        x = self.value(n.args[0])
        if nd == 2:  # fn.flip takes images with channels: flip (H, W, 1) instead
            x = fn.expand_dims(x, axes=[2])
        elif nd != 3:
            raise ValueError(f"no DALI lowering of a flip of a rank-{nd} array")
        layout, arg = {0: ("HWC", "vertical"), 1: ("HWC", "horizontal"),
                       2: ("CHW", "horizontal")}[axis]
        flags = {"horizontal": 0, "vertical": 0, "depthwise": 0, arg: 1}
        out = fn.flip(fn.reshape(x, layout=layout), **flags)
        return out[:, :, 0] if nd == 2 else out

    def _take(self, n: Node) -> Any:
        axis = n.attrs[0]
        return self.value(n.args[0])[(slice(None),) * axis + (self.value(n.args[1]),)]

    def _expand(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.expand_dims(self.value(n.args[0]), axes=[n.attrs[0]])

    def _transpose(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.transpose(self.value(n.args[0]), perm=list(n.attrs[0]))

    def _cat(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.cat(*[self.value(a) for a in n.args], axis=n.attrs[0])

    def _stack(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.stack(*[self.value(a) for a in n.args], axis=n.attrs[0])

    def _reduce(self, n: Node) -> Any:
        from nvidia.dali import fn

        kind, axes = n.attrs
        x = self.value(n.args[0])
        if kind == "sum":
            return fn.reductions.sum(x, axes=list(axes), dtype=_dali_type(n.dtype))
        return getattr(fn.reductions, kind)(x, axes=list(axes))

    def _fill(self, n: Node) -> Any:
        from nvidia.dali import fn, types

        x, y0, y1, x0, x1, v = n.args
        # fn.erase clips its region to the image (a part outside is not written, a shape <= 0
        # writes nothing), so the clamps that put numpy's bounds into 0..size need no operator.
        lo = [_unclamped_start(y0), _unclamped_start(x0)]
        hi = [_unclamped_stop(y1, x.shape[0], y0), _unclamped_stop(x1, x.shape[1], x0)]
        sizes = [_constant_difference(b, a) for a, b in zip(lo, hi, strict=True)]
        if all(isinstance(b, int) for b in lo):
            anchor: Any = [float(b) for b in lo]
        else:
            anchor = fn.cast(self.vector(lo), dtype=types.FLOAT)
        if all(d is not None for d in sizes):  # y + c1 - (y - c0): no operator
            shape: Any = [float(d) for d in sizes]
        else:
            shape = fn.cast(binary("subtract", self.vector(hi), self.vector(lo),
                                   np.dtype(np.int64)), dtype=types.FLOAT)
        axes = [0, 1]
        if n.attrs:
            c0, c1 = n.attrs
            axes.append(2)
            anchor = [*anchor, float(c0)] if isinstance(anchor, list) else fn.cat(
                anchor, _constant_node([c0], np.dtype(np.float32)))
            shape = [*shape, float(c1 - c0)] if isinstance(shape, list) else fn.cat(
                shape, _constant_node([c1 - c0], np.dtype(np.float32)))
        data = self.value(x)
        exact_fill = n.dtype in (np.uint8, np.int8, np.uint16, np.int16, np.float32)
        if v.op == "const" and exact_fill:
            return fn.erase(data, anchor=anchor, shape=shape, axes=axes,
                            fill_value=float(v.value))
        if exact_fill:
            return fn.erase(data, anchor=anchor, shape=shape, axes=axes,
                            fill_value=fn.cast(self.value(v), dtype=types.FLOAT))
        # Values float32 cannot hold exactly: erase a mask, then select.
        mask = fn.erase(_zeros_like(data, types.UINT8), anchor=anchor, shape=shape,
                        axes=axes, fill_value=1)
        return where(mask, self.value(v), data, n.dtype, v.value if v.op == "const" else None)

    # -- branches
    def _select(self, n: Node) -> Any:
        from nvidia.dali import fn

        c, a, b = n.args
        pred = self.value(c)
        va, vb = self.value(a), self.value(b)
        true, _ = fn._conditional.split(va, predicate=pred)
        _, false = fn._conditional.split(vb, predicate=pred)
        return fn._conditional.merge(true, false, predicate=pred)


def _divisor_risks(n: Node) -> tuple[int, ...]:
    """The divisors among 0 and -1 that integer ``//`` or ``%`` node ``n`` may meet and DALI
    cannot divide by as numpy does: DALI raises on 0 (numpy gives 0), and the processor traps
    on the most negative int32 or int64 divided by -1 (numpy wraps around)."""
    if n.op != "bin" or n.attrs[0] not in ("floor_divide", "remainder") or \
            n.dtype.kind not in "iu":
        return ()
    b = n.args[1]
    candidates = (0, -1) if n.dtype.kind == "i" and n.dtype.itemsize >= 4 else (0,)
    if b.op == "const":
        return tuple(v for v in candidates if (b.value == v).any())
    lo, up = _lower(b), _upper(b)
    return tuple(v for v in candidates
                 if (lo is None or lo <= v) and (up is None or up >= v))


def _division(name: str, a: Any, b: Any, dt: np.dtype, b_node: Node, risks: tuple[int, ...],
              nonneg: bool, b_negative: bool | None) -> Any:
    """Integer ``a // b`` or ``a % b`` as numpy computes it where ``b`` may be 0 (numpy: 0 for
    both) or -1 (numpy: ``-a`` wrapping around, and 0): DALI divides by 1 there instead, which
    gives ``a`` and 0, and the quotient is then multiplied by 0 or -1."""
    dt = np.dtype(dt)
    floor_dt = np.dtype(np.uint64) if nonneg else dt  # both >= 0: truncation is floor
    if b_node.op == "const":
        bv = b_node.value
        fix = (bv == 0) | (bv == -1)
        safe = _constant(np.where(fix, 1, bv).astype(dt), dt)
        out = binary(name, a, safe, floor_dt, b_negative=b_negative)
        if name == "remainder":
            return out
        factor = np.where(bv == 0, 0, np.where(bv == -1, -1, 1)).astype(dt)
        return out * _constant(factor, dt)
    a, b = _on_device(a, b)
    one = _constant(1, dt)
    zero = cast(binary("equal", b, _constant(0, dt), dt), np.dtype(np.bool_), dt)
    minus1 = (cast(binary("equal", b, _constant(-1, dt), dt), np.dtype(np.bool_), dt)
              if -1 in risks else None)
    fix = zero if minus1 is None else zero + minus1
    safe = b + fix * (one - b)  # 1 where fixed, else b
    out = binary(name, a, safe, floor_dt)
    if name == "remainder":
        return out
    factor = one - zero if minus1 is None else one - zero - minus1 - minus1
    return out * factor


_ROUNDING = ("floor", "ceil", "rint", "trunc")
#: Scalar operators :meth:`_Emitter.vector` applies to all lanes at once.
_LANEWISE = ("cast", "bin", "un", "where")


def _lane_key(n: Node) -> tuple:
    """What the lowering of ``n`` decides from, besides its arguments' values: lanes with equal
    keys are lowered by the same operators (constant arguments, argument kinds, and which
    arguments are the same node, as in the clamp ``where(x < y, x, y)``)."""
    args: list[Any] = []
    for a in n.args:
        if not isinstance(a, Node):
            args.append(("int", a))
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
    return (n.op, n.attrs, n.dtype.str, tuple(args))


def _free(n: Node) -> bool:
    """Whether lowering ``n`` takes no operator of its own (a cast to its own dtype, ``+ 0``, a
    minimum known to be its first operand)."""
    if n.op == "cast":
        return n.dtype == n.args[0].dtype
    if n.op == "bin":
        a, b = n.args
        return n.attrs[1:] == ("first",) or (
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
    lo, up = _lower(x), _upper(x)
    if lo is None or up is None or lo < -(2**53) or up > 2**53:
        return None
    return x


def _zeros_like(data: Any, dtype: Any) -> Any:
    """Zeros of ``data``'s shape, on ``data``'s device: DALI 2.4's ``fn.zeros_like`` runs on
    the CPU only. ``(x == x) & (x != x)`` is false for every ``x``, NaN included."""
    from nvidia.dali import fn

    return fn.cast((data == data) & (data != data), dtype=dtype)


def _constant_node(value: Any, dt: np.dtype) -> Any:
    """A constant (scalar or array) of dtype ``dt`` as a DataNode, exactly."""
    from nvidia.dali import fn

    dt = np.dtype(dt)
    arr = np.asarray(value, dtype=dt)
    if dt == np.float64 or (dt == np.uint64 and (arr > np.iinfo(np.int64).max).any()):
        return _constant(arr, dt)  # by the bit pattern
    flat = arr.reshape(-1).tolist()
    data = {"fdata": [float(v) for v in flat]} if dt.kind == "f" else {
        "idata": [int(v) for v in flat]}
    return fn.constant(**data, shape=list(arr.shape), dtype=_dali_type(dt))


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
        low = _lower(s)
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
    low = _lower(d)
    got = _clamp_operands(d)
    return (low is not None and low >= 0) or (
        got is not None and got[0] == "max" and (_is_zero(got[1]) or _is_zero(got[2])))


# -- numpy semantics on DALI operators ----------------------------------------------------------
def cast(x: Any, src: np.dtype, dst: np.dtype, nonneg: bool = False) -> Any:
    """``x.astype(dst)`` as numpy does it (see the module docstring for out-of-range floats);
    ``nonneg``: the tracer knows ``x >= 0``."""
    from nvidia.dali import fn, types

    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return x
    if dst.kind == "b":
        return binary("not_equal", x, _constant(0, src), src)
    if src.kind == "b" or dst.kind == "f" or (src.kind in "iu" and np.can_cast(src, dst)):
        return fn.cast(x, dtype=_dali_type(dst))
    if src.kind == "f":
        return fn.cast(unary("trunc", x, src, nonneg=nonneg), dtype=_dali_type(dst))
    # Integer narrowing or a sign change: keep the low bits, as numpy does.
    if src.itemsize == dst.itemsize == 8:
        return fn.reinterpret(x, dtype=_dali_type(dst))
    bits = dst.itemsize * 8
    if src == np.uint64:
        low = x & _constant((1 << bits) - 1, np.uint64)
        if dst.kind == "u":
            return fn.cast(low, dtype=_dali_type(dst))
        low = fn.cast(low, dtype=types.INT64)
    else:
        wide = x if src == np.int64 else fn.cast(x, dtype=types.INT64)
        if dst.itemsize == 8:  # int* -> uint64
            return fn.reinterpret(wide, dtype=types.UINT64)
        low = wide & _constant((1 << bits) - 1, np.int64)
    if dst.kind == "i":
        high = fn.cast(low >= _constant(1 << (bits - 1), np.int64), dtype=types.INT64)
        low = low - high * _constant(1 << bits, np.int64)
    return fn.cast(low, dtype=_dali_type(dst))


def binary(name: str, a: Any, b: Any, dt: np.dtype, b_negative: bool | None = None) -> Any:
    """numpy ufunc ``name`` on two operands already of dtype ``dt`` (``b_negative``: the sign of
    a constant ``b``, when known)."""
    import nvidia.dali.math as dmath

    a, b = _on_device(a, b)
    dt = np.dtype(dt)
    if name == "add":
        return a + b
    if name == "subtract":
        return a - b
    if name == "multiply":
        return a * b
    if name == "divide":
        return a / b
    if name == "minimum":
        return dmath.min(a, b)
    if name == "maximum":
        return dmath.max(a, b)
    if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        return {"equal": lambda: a == b, "not_equal": lambda: a != b, "less": lambda: a < b,
                "less_equal": lambda: a <= b, "greater": lambda: a > b,
                "greater_equal": lambda: a >= b}[name]()
    if name == "bitwise_and":
        return a & b
    if name == "bitwise_or":
        return a | b
    if name == "bitwise_xor":
        return a ^ b
    if name in ("floor_divide", "remainder"):
        q = a // b
        if dt.kind == "u" and name == "floor_divide":
            return q
        r = a - q * b
        if dt.kind == "u":
            return r
        # DALI truncates toward zero; numpy floors: adjust where the remainder's sign differs
        # from the divisor's.
        zero = _constant(0, dt)
        if b_negative is None:
            off = (r != zero) & ((r < zero) ^ (b < zero))
        else:
            off = (r > zero) if b_negative else (r < zero)
        adj = cast(off, np.dtype(np.bool_), dt)
        return q - adj if name == "floor_divide" else r + adj * b
    raise ValueError(f"no DALI lowering of np.{name}")


def unary(name: str, x: Any, dt: np.dtype, nonneg: bool = False) -> Any:
    """numpy ufunc ``name`` on ``x`` of dtype ``dt``; ``nonneg``: the tracer knows ``x >= 0``
    (and, for ``rint``, below 2**23 or 2**52)."""
    import nvidia.dali.math as dmath

    dt = np.dtype(dt)
    if name == "negative":
        return -x
    if name == "absolute":
        return dmath.abs(x)
    if name == "floor":
        return dmath.floor(x)
    if name == "ceil":
        return dmath.ceil(x)
    if name == "trunc" and nonneg:
        return dmath.floor(x)
    if name == "rint" and nonneg:
        m = _constant(2.0 ** (23 if dt == np.float32 else 52), dt)
        return (x + m) - m
    if name == "trunc":
        return where(x < _constant(0, dt), dmath.ceil(x), dmath.floor(x), dt)
    if name == "rint":
        # Adding and subtracting 2**(mantissa bits) rounds half to even in IEEE arithmetic;
        # values that large are already integers.
        m = _constant(2.0 ** (23 if dt == np.float32 else 52), dt)
        rounded = where(x >= _constant(0, dt), (x + m) - m, (x - m) + m, dt)
        return where(dmath.abs(x) < m, rounded, x, dt)
    if name in ("sqrt", "exp", "log", "sin", "cos"):
        return getattr(dmath, name)(x)
    if name == "logical_not":
        return x == _constant(0, dt)
    if name == "invert":
        return x ^ _constant(np.array(-1).astype(dt), dt)
    raise ValueError(f"no DALI lowering of np.{name}")


def where(c: Any, a: Any, b: Any, dt: np.dtype, a_const: Any = None, b_const: Any = None) -> Any:
    """``np.where(c, a, b)`` for ``a``, ``b`` of dtype ``dt``: ``b ^ ((a ^ b) & mask)`` on the
    values' bits, so every value (NaN, inf, -0.0) comes through unchanged."""
    from nvidia.dali import fn

    dt = np.dtype(dt)
    bits_dt = dt if dt.kind in "iu" else np.dtype(f"u{dt.itemsize}")

    def bits(v: Any, const_value: Any) -> Any:
        if const_value is not None:
            return _constant(np.asarray(const_value, dt).view(bits_dt), bits_dt)
        if bits_dt == dt:
            return v
        return fn.reinterpret(v, dtype=_dali_type(bits_dt))

    c, a, b = _on_device(c, a, b)
    mask = _constant(0, bits_dt) - fn.cast(c, dtype=_dali_type(bits_dt))
    if a_const is not None and b_const is not None:
        diff = _constant(np.asarray(a_const, dt).view(bits_dt) ^ np.asarray(b_const, dt)
                         .view(bits_dt), bits_dt)
    else:
        diff = bits(a, a_const) ^ bits(b, b_const)
    out = bits(b, b_const) ^ (diff & mask)
    return out if bits_dt == dt else fn.reinterpret(out, dtype=_dali_type(dt))


class SampleScalars:
    """The per-sample scalars of a traced op that depend on its random draws but not on the image
    (``rng.uniform(a, b)``, ``rng.random() < p``, the draw of ``rng.integers`` before it meets a
    size), evaluated by numpy for a batch of samples from their (manifest index, epoch).

    The loader runs it in the source's reader processes, beside the file bytes
    (:class:`extsrc.sources.images.ReaderValues`): the numbers arrive in the graph as
    external-source outputs, with numpy's own semantics and no Python call in the pipeline.
    ``uniform(index, epoch, slot)`` gives the draws (float64 arrays). Picklable.
    """

    def __init__(self, nodes: list[Node], uniform: Callable[..., np.ndarray]) -> None:
        self.nodes = nodes
        self.uniform = uniform

    def __call__(self, index: np.ndarray, epoch: np.ndarray) -> list[np.ndarray]:
        """One array of shape ``(len(index),)`` per node, of the node's dtype."""
        count = len(index)
        memo: dict[int, np.ndarray] = {}

        def ev(n: Node | int) -> Any:
            if not isinstance(n, Node):
                return np.int64(n)
            got = memo.get(id(n))
            if got is not None:
                return got
            if n.op == "const":
                got = n.value
            elif n.op == "uniform":
                got = self.uniform(index, epoch, n.attrs[0])
            elif n.op == "cast":
                got = np.asarray(ev(n.args[0])).astype(n.dtype)
            elif n.op == "bin":
                got = getattr(np, n.attrs[0])(ev(n.args[0]), ev(n.args[1]))
            elif n.op == "un":
                got = getattr(np, n.attrs[0])(ev(n.args[0]))
            elif n.op == "where":
                got = np.where(*(ev(a) for a in n.args))
            else:
                raise ValueError(f"not a scalar of the draws alone: {n}")
            got = np.broadcast_to(np.asarray(got, dtype=n.dtype), (count,))
            memo[id(n)] = got
            return got

        with np.errstate(all="ignore"):
            return [np.ascontiguousarray(ev(n)) for n in self.nodes]


def sample_scalar_nodes(traced: Traced) -> list[Node]:
    """The scalars of ``traced`` that :class:`SampleScalars` computes: those depending on draws
    and not on the image, which the graph's other nodes read, in a stable order (empty for an
    op without draws)."""
    if not traced.num_draws:
        return []
    on_image: dict[int, bool] = {}

    def image_dependent(n: Node) -> bool:
        got = on_image.get(id(n))
        if got is None:
            got = n.pixel or n.op == "in_dim" or any(
                isinstance(a, Node) and image_dependent(a) for a in n.args)
            on_image[id(n)] = got
        return got

    seen: set[int] = set()
    found: dict[int, Node] = {}
    layout = check_layout(traced)
    stack = [*traced.outputs, *(g.bad for g in traced.guards),
             *(d for k in layout.outputs for d in traced.outputs[k].shape
               if isinstance(d, Node))]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for a in n.args:
            if not isinstance(a, Node) or a.op == "const":
                continue
            if a.ndim == 0 and not image_dependent(a):
                found.setdefault(id(a), a)
            else:
                stack.append(a)
    return list(found.values())


@dataclass(frozen=True)
class CheckLayout:
    """What the per-sample check of a traced op (:func:`emit`'s ``check``) receives, one int64
    row per sample: the image's shape (3 values), then 1 or 0 per guard of ``traced.guards``
    (1: the numpy function raises it for the sample), then the shapes of the outputs listed in
    ``outputs`` (those the tracer cannot prove non-empty), one after the other."""

    guards: int
    outputs: tuple[int, ...]
    ranks: tuple[int, ...]

    def split(self, row: Sequence[int]) -> tuple[tuple[int, ...], list[bool],
                                                 list[tuple[int, tuple[int, ...]]]]:
        """``(image shape, guard flags, [(output index, output shape), ...])`` of a row."""
        row = [int(v) for v in row]
        shape, flags = tuple(row[:3]), [bool(v) for v in row[3:3 + self.guards]]
        outs, at = [], 3 + self.guards
        for k in self.outputs:
            outs.append((k, tuple(row[at:at + self.ranks[k]])))
            at += self.ranks[k]
        return shape, flags, outs


def check_layout(traced: Traced) -> CheckLayout:
    """The rows :func:`emit` gives its ``check`` for ``traced`` (see :class:`CheckLayout`)."""
    outputs = tuple(k for k, n in enumerate(traced.outputs)
                    if any(isinstance(d, Node) and (_lower(d) is None or _lower(d) < 1)
                           for d in n.shape))
    return CheckLayout(len(traced.guards), outputs, tuple(n.ndim for n in traced.outputs))


def emit(traced: Traced, image: Any, *, sample_values: Sequence[Any] = (), info: Any = None,
         check: Callable[[list[np.ndarray], list[np.ndarray]], Any] | None = None,
         min_size: int = 1) -> list[Any]:
    """The traced op's outputs as DALI DataNodes, computed from ``image`` (an HWC uint8 DataNode).

    Every per-sample scalar is a DALI CPU operator on ``image.shape()``, except those of
    :func:`sample_scalar_nodes`, which a random op must pass as ``sample_values`` (DataNodes of
    per-sample scalars in that order, made by :class:`SampleScalars`).

    ``check`` (with ``info``, the pipeline's per-sample manifest index, epoch and pad flag):
    the samples on which the numpy path raises are split off and ``check(rows, infos)`` is
    called on them alone, to raise, with a row per sample as :func:`check_layout` describes:
    images smaller than ``min_size`` on either side, samples that meet a guard of the trace
    (``rng.integers(0, h - size)`` on an image ``size`` high), samples whose outputs come out
    empty. DALI does not call it for a batch without such samples, so the common case costs no
    Python call, and an op without guards whose outputs are known non-empty and whose
    ``min_size`` is 1 takes no operator for it. The op's input depends on the check, so it runs
    before any operator of the op could fail on such a sample.
    """
    from nvidia.dali import fn

    em = _Emitter(image)
    em.shape = image.shape()
    nodes = sample_scalar_nodes(traced)
    if len(sample_values) != len(nodes):
        raise ValueError(
            f"the traced op needs {len(nodes)} per-sample value(s) made by SampleScalars from its "
            f"draws; got {len(sample_values)}")
    for n, value in zip(nodes, sample_values, strict=True):
        em.memo[id(n)] = value
        em.given.add(id(n))
    layout = check_layout(traced)
    if check is not None and (min_size > 1 or layout.guards or layout.outputs):
        if info is None:
            raise ValueError("a check needs the pipeline's info; pass info=")
        import nvidia.dali.math as dmath

        oks = []
        if min_size > 1:
            oks.append(dmath.min(em.dim(0), em.dim(1)) >= _constant(min_size, np.int64))
        flags = [em.value(g.bad) for g in traced.guards]
        oks += [f == _constant(False, np.dtype(np.bool_)) for f in flags]
        dims = [int(d.value) if isinstance(d, Node) and d.op == "const" else d
                for k in layout.outputs for d in traced.outputs[k].shape]
        oks += [em.value(d) >= _constant(1, np.int64) for d in dims if isinstance(d, Node)]
        ok = oks[0]
        for more in oks[1:]:
            ok = ok & more
        values = [fn.cast(f, dtype=_dali_type(np.dtype(np.int64))) for f in flags]
        values += [em.value(d) if isinstance(d, Node) else _constant_node(np.int64(d), np.int64)
                   for d in dims]
        rows = fn.cat(em.shape, fn.stack(*values)) if values else em.shape
        rows_ok, rows_bad = fn._conditional.split(rows, predicate=ok)
        _, info_bad = fn._conditional.split(info, predicate=ok)
        checked = fn.python_function(rows_bad, info_bad, function=check,
                                     batch_processing=True, num_outputs=1)
        rows = fn._conditional.merge(rows_ok, checked, predicate=ok)
        # A reshape to its own shape shares the image's memory; it orders the check first.
        em.image = fn.reshape(image, shape=rows[0:3])
    # Later stages (resize) read the layout, which elementwise operators may not keep; slices
    # and rectangle fills of the input keep it, and spare the operator.
    return [em.value(n) if _keeps_layout(n) else
            fn.reshape(em.value(n), layout={3: "HWC", 2: "HW"}.get(n.ndim, ""))
            for n in traced.outputs]


def _keeps_layout(n: Node) -> bool:
    """Whether DALI gives ``n`` the input's HWC layout: slices and rectangle fills of it do."""
    while n.op in ("slice", "fill") and n.ndim == 3:
        n = n.args[0]
    return n.op == "input"
