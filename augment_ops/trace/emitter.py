"""The walk that turns a traced graph's nodes into DALI operators (:class:`_Emitter`), one node
at a time (:class:`_Scalars`), per-sample scalars computed alike as vectors (:class:`_Vectors`),
and the array and branch operators. :func:`augment_ops.trace.lower_dali.emit` drives it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace.dali_ops import (
    _constant,
    _constant_node,
    _dali_type,
    _division,
    _divisor_risks,
    _on_device,
    _zeros_like,
    binary,
    cast,
    unary,
    where,
)
from augment_ops.trace.facts import lower, upper
from augment_ops.trace.ir import Node
from augment_ops.trace.lower_patterns import (
    _LANEWISE,
    _ROUNDING,
    _at_least_zero,
    _clamp_bounds,
    _constant_difference,
    _difference,
    _exact_cast_source,
    _exact_float64_of_int,
    _exact_float_source,
    _finite_bounds,
    _float32_exact_float64,
    _folded_fills,
    _free,
    _is_zero,
    _is_zero_dim,
    _lane_key,
    _may_wrap,
    _saturating_float_source,
    _saturating_source,
    _summed_lanes,
    _times_one,
    _unclamped_start,
    _unclamped_stop,
)
from augment_ops.trace.scalar_stage import ScalarStage


def _operand_constant(value: Any, dt: np.dtype) -> Any:
    """A constant operand of an arithmetic operator: a float64 scalar that float32 holds
    exactly as a typed constant (DALI keeps a real constant as float32 and types it as
    declared: one operand, where the bit pattern takes two operators), else
    :func:`_constant`."""
    if _float32_exact_float64(value, dt):
        from nvidia.dali import types

        return types.Constant(float(value), dtype=types.FLOAT64)
    return _constant(value, dt)


#: The float operators whose array operand _bin may give DALI before its exact conversion
#: (_exact_float_source).
_FLOAT_ARITHMETIC = (("add",), ("subtract",), ("multiply",), ("divide",))


def _lean_operand(n: Node) -> Node | None:
    """The operand of elementwise ``n`` that is an array broadcast to ``n``'s shape, where the
    other operand has that shape already: DALI broadcasts it, with no copy of its own."""
    if n.ndim == 0 or len(n.attrs) != 1 or n.attrs[0] in ("floor_divide", "remainder"):
        return None  # a plain operator (not a clamp, nor a division numpy and DALI differ on)
    a, b = n.args
    for m, other in ((a, b), (b, a)):
        if m.op == "broadcast" and other.op != "broadcast" and other.ndim == n.ndim and all(
                d is e or (isinstance(d, int) and isinstance(e, int) and d == e)
                for d, e in zip(other.shape, n.shape, strict=True)):
            return m
    return None


def _integral_float(n: Any) -> Node | None:
    """``r`` where ``n`` is an integer cast of ``r = np.floor(y)`` (or ``ceil``, ``rint``,
    ``trunc``) that keeps its value (the tracer bounds ``r`` within the integer type), else
    None: a float made of ``n`` is then the same made of ``r``."""
    while isinstance(n, Node) and _free(n) and n.op in ("cast", "bin"):
        # Steps that take no operator (a cast to its own dtype, 0 + k, a minimum known to be
        # its first operand) keep the value.
        if n.op == "bin" and n.attrs[0] == "add" and _is_zero(n.args[0]):
            n = n.args[1]
        else:
            n = n.args[0]
    if not isinstance(n, Node) or n.op != "cast" or n.dtype.kind not in "iu":
        return None
    r = n.args[0]
    if r.op != "un" or r.attrs[0] not in _ROUNDING or _may_wrap(r, n.dtype):
        return None
    info = np.iinfo(n.dtype)
    lo, up = lower(r), upper(r)
    return r if lo is not None and up is not None and info.min <= lo and up <= info.max else None


class _Scalars:
    """The DALI value of each node of a traced graph (memoised): the leaves (the image, its
    sizes, constants) and the elementwise operators, one DALI operator per node."""

    def __init__(self, image: Any) -> None:
        self.image = image
        self.shape: Any = None
        self.dims: dict[int, Any] = {}
        self.memo: dict[int, Any] = {}
        self.vmemo: dict[tuple, Any] = {}
        #: The constant standing for each array filled with one (:func:`_folded_fills`).
        self.fill_consts: dict[int, Node] = {}
        #: Nodes whose values come from outside the graph (``sample_values``).
        self.given: set[int] = set()
        #: Noise nodes drawn on the CPU, as per-sample scalars are read from them.
        self.cpu_noise: set[int] = set()
        #: Per-sample scalars of pixel values read on the CPU (copied there from a GPU image).
        self.cpu_scalars: set[int] = set()
        #: Computes the per-sample scalars by numpy in one operator, for an op whose scalars
        #: would take many (:mod:`augment_ops.trace.scalar_stage`); None: DALI operators.
        self.stage: ScalarStage | None = None

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
        if got is None and self.stage is not None and n.op not in ("const", "in_dim") and \
                self.stage.takes(n):
            got = self.stage.scalar(n)
            self.memo[id(n)] = got
        if got is None:
            m = _folded_fills(n, self.fill_consts)
            got = getattr(self, "_" + m.op)(m)
            if id(n) in self.cpu_scalars and getattr(got, "device", "cpu") == "gpu":
                got = got.cpu()
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
        return _operand_constant(n.value, n.dtype)

    # -- elementwise
    # The scalar operators take ``val``, the DALI value of an argument: ``self.value`` for one
    # node, or the vector of the argument across lanes (:meth:`vector`).
    def _cast(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        val = val or self.value
        (x,) = n.args
        inner = _exact_cast_source(n)
        if inner is not None:  # uint8 -> float32 -> float64: one conversion of the same values
            if inner.dtype == n.dtype:  # a round trip: the values themselves
                return val(inner)
            return cast(val(inner), inner.dtype, n.dtype, nonneg=n.attrs[1:] == ("nonneg",),
                        wrap=_may_wrap(inner, n.dtype), finite=_finite_bounds(inner))
        if x.dtype.kind == "f":
            y = _saturating_float_source(x, n.dtype)
            if y is not None:  # np.clip(y, 0, 255).astype(np.uint8): floor, DALI saturates
                from nvidia.dali import fn

                return fn.cast(unary("floor", val(y), y.dtype), dtype=_dali_type(n.dtype))
        if x.dtype.kind in "iu" and n.dtype.kind in "iu" and x.dtype != n.dtype:
            src = _saturating_source(x, n.dtype)
            if src is not None:  # values in range: no bits to keep, DALI converts them as numpy
                from nvidia.dali import fn

                return fn.cast(val(src), dtype=_dali_type(n.dtype))
        if x.op == "un" and x.attrs[0] in _ROUNDING and n.dtype.kind in "iu" and \
                not _may_wrap(x, n.dtype):
            # Already integral: nothing to truncate before the conversion.
            from nvidia.dali import fn

            return fn.cast(val(x), dtype=_dali_type(n.dtype))
        return cast(val(x), x.dtype, n.dtype, nonneg=n.attrs[1:] == ("nonneg",),
                    wrap=_may_wrap(x, n.dtype), finite=_finite_bounds(x))

    def _bin(self, n: Node, val: Callable[[Any], Any] | None = None) -> Any:
        lean = _lean_operand(n) if val is None else None
        if lean is not None:
            return binary(n.attrs[0], *(self._lean(m) if m is lean else self.value(m)
                                        for m in n.args), n.args[0].dtype)
        val = val or self.value
        a, b = n.args
        if n.attrs[1:] == ("first",):
            # A minimum the tracer proved equal to its first operand, or a maximum equal to it
            # on every sample that does not raise (rng.integers' span).
            return val(a)
        lanes = _summed_lanes(n)
        if lanes is not None:  # r + g + b: one sum over the channels, exact in any order
            from nvidia.dali import fn, types

            # uint8 into uint64: the sum np.sum makes, which the lowering of a reduction uses
            # on both devices.
            x, axis = lanes
            total = fn.reductions.sum(val(x), axes=[axis], dtype=types.UINT64)
            return cast(total, np.dtype(np.uint64), n.dtype, nonneg=True)
        if n.dtype.kind in "iu" and n.attrs[0] in ("add", "subtract") and _is_zero(b):
            return val(a)  # integer bounds such as h - 0, y + 0: no operator
        if n.dtype.kind in "iu" and n.attrs[0] == "add" and _is_zero(a):
            return val(b)
        one = _times_one(n)
        if one is not None:  # x * 1 is x, bit for bit, in every dtype
            return val(one)
        sign = None if b.op != "const" else (bool(b.value < 0) if b.value.ndim == 0 else None)
        if n.attrs[0] in ("add", "subtract", "multiply") and n.dtype == np.float64:
            # (a value given by the readers, a draw converted there, is read as it is given)
            ia, ib = (None if id(m) in self.given else _exact_float64_of_int(m) for m in (a, b))
            if (ia is None) != (ib is None):
                # int64 with float64 is float64 in DALI as in numpy, the int64 converted exactly
                # (|x| <= 2**53): the cast takes no operator of its own.
                return binary(n.attrs[0], val(a if ia is None else ia),
                              val(b if ib is None else ib), n.dtype)
        if n.attrs in _FLOAT_ARITHMETIC and n.dtype.kind == "f" and n.ndim > 0:
            given = lambda m: id(m) in self.given  # noqa: E731
            ia, ib = _exact_float_source(a, n.dtype, given), _exact_float_source(b, n.dtype, given)
            if ia is not None or ib is not None:
                # An integer or float32 array with a float operand is that float in DALI as in
                # numpy, and it converts exactly: a cast fewer, a pass over the image where it
                # is the image. (One side only: two integers stay integers.)
                return binary(n.attrs[0], val(a if ia is None else ia),
                              val(b if ia is not None or ib is None else ib), n.dtype)
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
            return dmath.clamp(val(x), _operand_constant(lo, n.dtype),
                               _operand_constant(hi, n.dtype))
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



class _Vectors(_Scalars):
    """Per-sample scalars computed alike (a rectangle's y and x bounds) as one per-sample vector:
    one operator per step for all lanes, where each scalar would take one of its own."""

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
        if self.stage is not None and self.stage.accepts(lanes) and \
                not all(n is not None and n.op == "in_dim" for n in nodes):
            return self.stage.vector(lanes)
        if all(n is not None and n.op == "in_dim" for n in nodes):
            axes = [n.attrs[0] for n in nodes]
            if axes == list(range(axes[0], axes[0] + len(axes))):
                self.dim(axes[0])  # the shape operator
                return self.shape[axes[0]:axes[0] + len(axes)]
        first = nodes[0]
        # (one node in every lane would make each operand one value, and the result one value,
        # not a vector of them: the stack below repeats it)
        if first is not None and first.op in _LANEWISE and first.ndim == 0 and \
                all(n is not None and id(n) not in self.given for n in nodes) and \
                len({_lane_key(n) for n in nodes}) == 1 and len({id(n) for n in nodes}) > 1:
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
        return fn.stack(*_on_device(*[self.value(v) if isinstance(v, Node) and v.op != "const"
                                      else _constant_node(v.value if isinstance(v, Node) else v,
                                                          dt) for v in lanes]))

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



class _Emitter(_Vectors):
    """Emits a traced graph as DALI operators: the array operators (fills, slices, flips,
    transposes, concatenation, reductions) and the per-sample merge of branches, on top of the
    scalar and vector operators of its bases."""

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
        if nd == 3 and axis in (0, 1):
            # Flips of rows and columns in a row (np.flip(img, (0, 1))): one fn.flip, one pass.
            turns, m = [0, 0], n
            while m.op == "flip" and m.attrs[0] in (0, 1):
                turns[m.attrs[0]] ^= 1
                m = m.args[0]
            if m is not n.args[0]:
                if turns == [0, 0]:  # the flips' own layout, whatever m's (a channel flip's)
                    return fn.reshape(self.value(m), layout="HWC")
                return fn.flip(fn.reshape(self.value(m), layout="HWC"), vertical=turns[0],
                               horizontal=turns[1], depthwise=0)
        x = self.value(n.args[0])
        if nd == 2:  # fn.flip takes images with channels: flip (H, W, 1) instead
            x = fn.expand_dims(x, axes=[2])
        elif nd != 3:
            raise ValueError(f"no DALI lowering of a flip of a rank-{nd} array")
        layout, arg = {0: ("HWC", "vertical"), 1: ("HWC", "horizontal"),
                       2: ("CHW", "horizontal")}[axis]
        flags = {"horizontal": 0, "vertical": 0, "depthwise": 0, arg: 1}
        out = fn.flip(fn.reshape(x, layout=layout), **flags)
        if nd == 2:
            return out[:, :, 0]
        # Back to the image's layout: arithmetic with an HWC operand refuses another.
        return out if layout == "HWC" else fn.reshape(out, layout="HWC")

    def _take(self, n: Node) -> Any:
        axis = n.attrs[0]
        return self.value(n.args[0])[(slice(None),) * axis + (self.value(n.args[1]),)]

    def _expand(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.expand_dims(self.value(n.args[0]), axes=[n.attrs[0]])

    def _transpose(self, n: Node) -> Any:
        from nvidia.dali import fn

        # The input's layout kept, not its letters permuted (WHC): the tracer's rank-3 arrays
        # are rows, columns, channels whatever they hold, and arithmetic refuses operands laid
        # out otherwise (the transposed image beside a flip of it).
        return fn.transpose(self.value(n.args[0]), perm=list(n.attrs[0]),
                            transpose_layout=False)

    def _cat(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.cat(*_on_device(*map(self._array_operand, n.args)), axis=n.attrs[0])

    def _array_operand(self, a: Node) -> Any:
        """``a``'s value as an input of an operator other than arithmetic: a constant as a
        node of its dtype (an arithmetic operand's typed scalar is promoted by DALI through
        ``fn.constant``, which takes no float64)."""
        return _constant_node(a.value, a.dtype) if a.op == "const" else self.value(a)

    def _stack(self, n: Node) -> Any:
        from nvidia.dali import fn

        return fn.stack(*_on_device(*map(self._array_operand, n.args)), axis=n.attrs[0])

    def _reduce(self, n: Node) -> Any:
        from nvidia.dali import fn

        kind, axes = n.attrs
        x = self.value(n.args[0])
        if kind == "sum":
            return fn.reductions.sum(x, axes=list(axes), dtype=_dali_type(n.dtype))
        return getattr(fn.reductions, kind)(x, axes=list(axes))

    def _laid(self, n: Node) -> Any:
        """Values in another memory layout (:mod:`augment_ops.trace.pairwise`): the same."""
        return self.value(n.args[0])

    def _npsum(self, n: Node) -> Any:
        """numpy's own pairwise float sum (:mod:`augment_ops.trace.pairwise`): one Python call
        per batch, torch's on the GPU for a sum of the whole array, numpy's on the CPU
        otherwise (a GPU array copied there first)."""
        from nvidia.dali import fn

        from augment_ops.trace.pairwise import NumpySum, gpu_sums

        x = self.value(n.args[0])
        if getattr(x, "device", "cpu") == "gpu":
            from augment_ops.trace.pairwise_torch import GpuNumpySum, model_holds

            if gpu_sums(n) and model_holds():
                return fn.dl_tensor_python_function(x, function=GpuNumpySum(n.attrs[1]),
                                                    batch_processing=True, device="gpu",
                                                    num_outputs=1)
            x = x.cpu()
        return fn.python_function(x, function=NumpySum(*n.attrs), batch_processing=True,
                                  num_outputs=1)

    def _fill(self, n: Node) -> Any:
        from nvidia.dali import fn, types

        x, y0, y1, x0, x1, v = n.args
        merged = _channel_fills(n)
        if merged is not None:
            # One rectangle written channel by channel (``img[y0:y1, x0:x1] = (r, g, b)``):
            # one erase with a value per channel, where each channel would take its own pass.
            x, values = merged
            if all(u.op == "const" for u in values):
                fill: Any = [float(u.value) for u in values]
            elif self.stage is not None and self.stage.accepts(values):
                fill = self.stage.vector(values, np.float32)
            else:
                fill = fn.cast(self.vector(values), dtype=types.FLOAT)
            anchor, shape = self._rectangle(x, y0, y1, x0, x1)
            return fn.erase(self.value(x), anchor=anchor, shape=shape, axes=[0, 1],
                            fill_value=fill)
        # fn.erase clips its region to the image (a part outside is not written, a shape <= 0
        # writes nothing), so the clamps that put numpy's bounds into 0..size need no operator.
        anchor, shape = self._rectangle(x, y0, y1, x0, x1)
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

    def _rectangle(self, x: Node, y0: Any, y1: Any, x0: Any, x1: Any) -> tuple[Any, Any]:
        """``fn.erase``'s anchor and shape (float32, y then x) of the region ``y0:y1, x0:x1``
        of ``x``."""
        from nvidia.dali import fn, types

        # fn.erase clips its region to the image (a part outside is not written, a shape <= 0
        # writes nothing), so the clamps that put numpy's bounds into 0..size need no operator.
        lo = [_unclamped_start(y0), _unclamped_start(x0)]
        hi = [_unclamped_stop(y1, x.shape[0], y0), _unclamped_stop(x1, x.shape[1], x0)]
        if self.stage is not None and self.stage.accepts(lo + hi):
            # numpy computes the sizes as DALI would, int64 differences made float32.
            i64 = np.dtype(np.int64)
            size = [Node("bin", (b, a), ("subtract",), i64, ()) for a, b in zip(lo, hi,
                                                                                strict=True)]
            f32 = np.dtype(np.float32)
            return self.stage.vector(lo, f32), self.stage.vector(size, f32)
        sizes = [_constant_difference(b, a) for a, b in zip(lo, hi, strict=True)]
        integral = [_integral_float(b) for b in lo]
        if all(isinstance(b, int) for b in lo):
            anchor: Any = [float(b) for b in lo]
        elif all(b is not None for b in integral):
            # int64(floor(y)) made float32 is float32(floor(y)): the same integer rounded once.
            anchor = fn.cast(self.vector(integral), dtype=types.FLOAT)
        else:
            anchor = fn.cast(self.vector(lo), dtype=types.FLOAT)
        if all(d is not None for d in sizes):  # y + c1 - (y - c0): no operator
            shape: Any = [float(d) for d in sizes]
        elif all(_is_zero_dim(b) for b in lo):  # rows and columns from 0: the stops
            shape = fn.cast(self.vector(hi), dtype=types.FLOAT)
        else:
            shape = fn.cast(binary("subtract", self.vector(hi), self.vector(lo),
                                   np.dtype(np.int64)), dtype=types.FLOAT)
        return anchor, shape

    def _shape_vector(self, dims: Sequence[Node | int]) -> Any:
        """Per-sample sizes as a 1-D int64 tensor (one lane is computed as a scalar)."""
        from nvidia.dali import fn

        v = self.vector(list(dims))
        return fn.reshape(v, shape=[1]) if len(dims) == 1 else v

    def _shape_arg(self, dims: Sequence[Node | int]) -> Any:
        """A ``shape=`` argument of sizes ``dims``: the list when all are constants, else the
        per-sample int32 vector."""
        from nvidia.dali import fn, types

        if all(isinstance(d, int) for d in dims):
            return list(dims)
        return fn.cast(self._shape_vector(dims), dtype=types.INT32)

    def _reshape(self, n: Node) -> Any:
        from nvidia.dali import fn

        x = self.value(n.args[0])
        if all(isinstance(d, int) for d in n.shape):
            return fn.reshape(x, shape=list(n.shape), layout="")
        return fn.reshape(x, shape=self._shape_vector(n.shape), layout="")

    def _broadcast(self, n: Node) -> Any:
        """``x`` repeated to ``n``'s shape: ``x`` plus an array of ``n``'s shape that changes no
        value (-0.0 for floats: ``v + -0.0`` is ``v`` for every ``v``, -0.0 and NaN included;
        0 for integers; False or'ed for booleans). An elementwise operator whose other operand
        has ``n``'s shape takes ``x`` as it is (:meth:`_lean`): DALI broadcasts it alike."""
        from nvidia.dali import fn

        x = self._lean(n)
        shape = self._shape_arg(n.shape)
        zero = np.array(-0.0 if n.dtype.kind == "f" else 0, n.dtype)
        pad = fn.full(_constant_node(zero, n.dtype), shape=shape)  # a CPU operator
        if self.image.device == "gpu":  # beside the image, for the operators that use it
            pad = pad.gpu()
        x, pad = _on_device(x, pad)
        return (x | pad) if n.dtype.kind == "b" else x + pad

    def _lean(self, n: Node) -> Any:
        """The array broadcast node ``n`` repeats, with ``n``'s rank."""
        from nvidia.dali import fn

        x = n.args[0]
        v = self.value(x)
        extra = n.ndim - x.ndim
        return fn.expand_dims(v, axes=list(range(extra))) if extra else v

    def _canvas(self, n: Node) -> Any:
        """A new array of a per-sample shape filled with a constant (per channel)."""
        from nvidia.dali import fn, types

        *dims, fill = n.args
        shape = self._shape_vector(dims)
        if not all(_at_least_zero(d) for d in dims):
            # A sample with a negative size raises in the check (emit), which fn.full, reading
            # no pixel, does not wait for: it gets an empty array instead of failing first.
            import nvidia.dali.math as dmath

            shape = dmath.max(shape, _constant(0, np.dtype(np.int64)))
        shape = fn.cast(shape, dtype=types.INT32)
        out = fn.full(_constant_node(fill.value, n.dtype), shape=shape)  # a CPU operator
        return out.gpu() if self.image.device == "gpu" else out

    def _noise(self, n: Node) -> Any:
        """An array of independent draws (:meth:`augment_ops.trace.rng.DrawRng._noise`) from
        DALI's own generator, on the image's device: float64 standard normal or in [0, 1)."""
        from nvidia.dali import fn, types

        draw = fn.random.normal if n.attrs[0] == "normal" else fn.random.uniform
        kw = {} if n.attrs[0] == "normal" else {"range": [0.0, 1.0]}
        # On the CPU where a per-sample scalar is read from it (lower_dali's cpu_noise).
        device = "cpu" if id(n) in self.cpu_noise else self.image.device
        if device == self.image.device and _image_shaped(n.shape):
            # Noise the image's shape takes its shape from the image: no CPU operators that
            # build a shape vector from the image's sizes (4 of them, each dispatched per sample).
            return draw(self.image, device=device, dtype=types.FLOAT64, **kw)
        return draw(device=device, shape=self._shape_arg(n.shape), dtype=types.FLOAT64, **kw)

    def _pad(self, n: Node) -> Any:
        """``x`` read at per-sample rows and columns, the fill outside it: ``fn.slice`` that
        pads (the values are float32, which the tracer checked hold the fill exactly)."""
        from nvidia.dali import fn

        x, y0, x0, height, width, fill = n.args
        data = self.value(x)
        values = [float(v) for v in np.asarray(fill.value).reshape(-1)]
        if len({np.float32(v).tobytes() for v in values}) == 1:  # -0.0 is not 0.0 here
            values = values[:1]
        elif x.ndim == 3:  # a value per channel: fn.slice finds the channels by the layout
            data = fn.reshape(data, layout="HWC")
        return fn.slice(data, self.vector([y0, x0]), self.vector([height, width]), axes=[0, 1],
                        out_of_bounds_policy="pad", fill_values=values)

    def _lut(self, n: Node) -> Any:
        """A constant table read at positions (:mod:`augment_ops.trace.lookup`): its values are
        exactly float32 values, which ``fn.lookup_table`` holds."""
        from nvidia.dali import fn

        table = n.value
        return fn.lookup_table(self.value(n.args[0]), keys=list(range(len(table))),
                               values=[float(v) for v in table.astype(np.float32)],
                               dtype=_dali_type(n.dtype))

    def _gather(self, n: Node) -> Any:
        """A per-sample table (:mod:`augment_ops.trace.gather`, computed by numpy with the
        draws) read at per-pixel positions: one Python call per batch, numpy's take on the CPU,
        torch's on the GPU."""
        from nvidia.dali import fn, types

        from augment_ops.trace.gather import GpuTableRead, TableRead

        table, pos = self.value(n.args[0]), self.value(n.args[1])
        unsigned = n.dtype.kind == "u" and n.dtype.itemsize > 1
        if unsigned:  # torch's take has no unsigned types wider than a byte: the same bits
            table = fn.reinterpret(table, dtype=_dali_type(np.dtype(f"i{n.dtype.itemsize}")))
        if getattr(pos, "device", "cpu") == "gpu":
            if n.args[1].dtype != np.uint8:  # torch widens uint8 positions, not uint16
                pos = fn.cast(pos, dtype=types.INT32)
            out = fn.dl_tensor_python_function(table.gpu(), pos, function=GpuTableRead(),
                                               batch_processing=True, device="gpu",
                                               num_outputs=1)
        else:
            out = fn.python_function(table, pos, function=TableRead(), batch_processing=True,
                                     num_outputs=1)
        return fn.reinterpret(out, dtype=_dali_type(n.dtype)) if unsigned else out

    def _equalize(self, n: Node) -> Any:
        """PIL's equalize (:mod:`augment_ops.trace.pil_equalize`): one Python call per batch,
        numpy on the CPU, torch on the GPU."""
        from nvidia.dali import fn

        from augment_ops.trace.pil_equalize import CpuEqualize, GpuEqualize

        x = self.value(n.args[0])
        if getattr(x, "device", "cpu") == "gpu":
            return fn.dl_tensor_python_function(x, function=GpuEqualize(), batch_processing=True,
                                                device="gpu", num_outputs=1)
        return fn.python_function(x, function=CpuEqualize(), batch_processing=True,
                                  num_outputs=1)

    # -- branches
    def _select(self, n: Node) -> Any:
        from nvidia.dali import fn

        c, a, b = n.args
        pred = self.value(c)
        va, vb = self.value(a), self.value(b)
        if n.ndim and not (_input_layout(a) and _input_layout(b)):
            # The merge takes one layout for the whole batch, and the branches' may differ (a
            # transpose gives "WHC", an elementwise operator none): both are cleared, and emit
            # gives the op's outputs their layout afterwards.
            va, vb = fn.reshape(va, layout=""), fn.reshape(vb, layout="")
        if getattr(pred, "device", "cpu") == "gpu":
            # A predicate of pixel values on the GPU, between outcomes of one shape
            # (lower_dali._same_shapes): selected there, with no copy to the CPU.
            return where(pred, va, vb, n.dtype)
        true, _ = fn._conditional.split(va, predicate=pred)
        _, false = fn._conditional.split(vb, predicate=pred)
        return fn._conditional.merge(true, false, predicate=pred)


    def _turn(self, n: Node) -> Any:
        """``x`` flipped and transposed per sample (a ``turn`` node of
        :func:`augment_ops.trace.lower_patterns.rewritten_for_dali`): one ``fn.flip`` with
        per-sample flags, then the transpose on the samples that take it."""
        from nvidia.dali import fn

        x, transposed, rows, cols = n.args
        data = self.value(x)

        def flag(f: Node) -> Any:
            return int(f.value) if f.op == "const" else self.value(f)
        if not all(f.op == "const" and not f.value for f in (rows, cols)):
            if not _input_layout(x):  # fn.flip finds its axes by the layout
                data = fn.reshape(data, layout="HWC")
            data = fn.flip(data, vertical=flag(rows), horizontal=flag(cols))
        if transposed.op == "const":
            return fn.transpose(data, perm=[1, 0, 2]) if transposed.value else data
        pred = self.value(transposed)
        data = fn.reshape(data, layout="")  # the merge takes one layout: "WHC" and "HWC" differ
        yes, no = fn._conditional.split(data, predicate=pred)
        return fn._conditional.merge(fn.transpose(yes, perm=[1, 0, 2]), no, predicate=pred)


def _channel_fills(n: Node) -> tuple[Node, list[Node]] | None:
    """``(x, [v0, v1, ...])`` where ``n`` fills one rectangle of ``x`` channel by channel, channel
    ``k`` with ``v_k``, every channel once (as ``img[y0:y1, x0:x1] = (r, g, b)`` traces), each
    value one that ``fn.erase`` holds exactly (float32 holds every value of these dtypes), else
    None. Later fills win in numpy, so a channel written twice is not merged."""
    if n.dtype not in (np.uint8, np.int8, np.uint16, np.int16, np.float32):
        return None
    c = n.shape[2] if n.ndim == 3 else None
    if not isinstance(c, int) or c < 2:
        return None
    region = n.args[1:5]
    values: dict[int, Node] = {}
    x = n
    while x.op == "fill" and len(x.attrs) == 2 and x.attrs[1] == x.attrs[0] + 1 and \
            all(a is b for a, b in zip(x.args[1:5], region, strict=True)) and \
            x.attrs[0] not in values and len(values) < c:
        values[x.attrs[0]] = x.args[5]
        x = x.args[0]
    if sorted(values) != list(range(c)) or any(v.ndim for v in values.values()):
        return None
    return x, [values[k] for k in range(c)]


def _input_layout(n: Node) -> bool:
    """Whether DALI gives ``n`` the input's HWC layout (slices and rectangle fills of it)."""
    while n.op in ("slice", "fill") and n.ndim == 3:
        n = n.args[0]
    return n.op == "input"


def _image_shaped(dims: Sequence[Node | int]) -> bool:
    """Whether ``dims`` are the traced image's own sizes, (h, w, 3) as its input node has them."""
    return len(dims) == 3 and isinstance(dims[2], int) and dims[2] == 3 and all(
        isinstance(d, Node) and d.op == "in_dim" and d.attrs[0] == k
        for k, d in enumerate(dims[:2]))
