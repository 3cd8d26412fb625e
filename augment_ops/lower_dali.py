"""Emit a traced op (:mod:`augment_ops.trace`) as DALI operators on the image's DataNode.

The operators run on whichever device the image is on. Per-sample scalars (sizes, slice bounds,
branch conditions) are DALI CPU operators on ``image.shape()``, copied to the GPU only where an
elementwise operator mixes them with GPU pixels; those that depend on a random op's draws alone
are computed by numpy in the source's reader processes (:class:`SampleScalars`) and enter the
graph as external-source outputs. No Python runs per batch in the graph (an op's ``min_size``
check calls Python only for a batch holding a too-small image, to raise). Facts the tracer knows
(sizes are >= 1, ``(h - ch) // 2 + ch <= h``) spare the clamps of slice bounds, so a crop's
bounds take a few operators. numpy's semantics are kept where DALI's differ:

- casts: DALI saturates and rounds to nearest, numpy wraps between integer types and truncates
  floats toward zero, so integer narrowing masks the bits first and float-to-int truncates first
  (floats outside the target range: numpy's result is undefined, DALI's saturates);
- ``//`` and ``%`` on signed integers: DALI truncates toward zero, numpy floors;
- ``np.rint`` (half to even) through the add-and-subtract 2**23 (2**52) rounding identity;
- ``np.where`` as a bitwise select, exact for every value (NaN and inf included);
- a branch on a per-sample scalar: both outcomes are computed for the whole batch and merged
  per sample with DALI's conditional split/merge, so outputs may differ in shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace import Node, Traced

__all__ = ["SampleScalars", "emit", "sample_scalar_nodes"]


def _dali_type(dt: np.dtype) -> Any:
    from nvidia.dali import types

    return {
        "b": types.BOOL, "u1": types.UINT8, "u2": types.UINT16, "u4": types.UINT32,
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
    def _cast(self, n: Node) -> Any:
        (x,) = n.args
        if x.op == "un" and x.attrs[0] in _ROUNDING and n.dtype.kind in "iu":
            # Already integral: nothing to truncate before the conversion.
            from nvidia.dali import fn

            return fn.cast(self.value(x), dtype=_dali_type(n.dtype))
        return cast(self.value(x), x.dtype, n.dtype, nonneg=n.attrs[1:] == ("nonneg",))

    def _bin(self, n: Node) -> Any:
        a, b = n.args
        if n.dtype.kind in "iu" and n.attrs[0] in ("add", "subtract") and _is_zero(b):
            return self.value(a)  # integer bounds such as h - 0, y + 0: no operator
        if n.dtype.kind in "iu" and n.attrs[0] == "add" and _is_zero(a):
            return self.value(b)
        sign = None if b.op != "const" else (bool(b.value < 0) if b.value.ndim == 0 else None)
        if n.attrs[1:] == ("nonneg",):  # both operands >= 0: DALI's truncation is numpy's floor
            return binary(n.attrs[0], self.value(a), self.value(b), np.dtype(np.uint64))
        return binary(n.attrs[0], self.value(a), self.value(b), a.dtype, b_negative=sign)

    def _un(self, n: Node) -> Any:
        (x,) = n.args
        return unary(n.attrs[0], self.value(x), x.dtype, nonneg=n.attrs[1:] == ("nonneg",))

    def _where(self, n: Node) -> Any:
        c, a, b = n.args
        if n.ndim == 0 and n.dtype.kind in "iu" and c.op == "bin" and c.attrs[0] == "less":
            # The clamps of sizes and bounds: one operator instead of a bitwise select.
            import nvidia.dali.math as dmath

            x, y = c.args
            if a is x and b is y:
                return dmath.min(*_on_device(self.value(a), self.value(b)))
            if a is y and b is x:
                return dmath.max(*_on_device(self.value(a), self.value(b)))
        return where(self.value(c), self.value(a), self.value(b), n.dtype,
                     a.value if a.op == "const" else None, b.value if b.op == "const" else None)

    def _full(self, n: Node) -> Any:
        from nvidia.dali import fn

        a, v = n.args
        zeros = fn.zeros_like(self.value(a), dtype=_dali_type(n.dtype))
        return binary("add", *_on_device(zeros, self.value(v)), n.dtype)

    # -- layout
    def _slice(self, n: Node) -> Any:
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
        size = [_sub(self.value(y1), self.value(y0)), _sub(self.value(x1), self.value(x0))]
        lo = [self.value(y0), self.value(x0)]
        axes = [0, 1]
        if n.attrs:
            c0, c1 = n.attrs
            lo.append(c0)
            size.append(c1 - c0)
            axes.append(2)
        data = self.value(x)
        exact_fill = n.dtype in (np.uint8, np.int8, np.uint16, np.int16, np.float32)
        if v.op == "const" and exact_fill:
            return fn.erase(data, anchor=_f32_vec(lo), shape=_f32_vec(size), axes=axes,
                            fill_value=float(v.value))
        if exact_fill:
            return fn.erase(data, anchor=_f32_vec(lo), shape=_f32_vec(size), axes=axes,
                            fill_value=fn.cast(self.value(v), dtype=types.FLOAT))
        # Values float32 cannot hold exactly: erase a mask, then select.
        mask = fn.erase(fn.zeros_like(data, dtype=types.UINT8), anchor=_f32_vec(lo),
                        shape=_f32_vec(size), axes=axes, fill_value=1)
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


_ROUNDING = ("floor", "ceil", "rint", "trunc")


def _is_zero(n: Node) -> bool:
    return n.op == "const" and n.value.ndim == 0 and n.value.item() == 0


def _sub(a: Any, b: Any) -> Any:
    return a - b


def _f32_vec(items: list[Any]) -> Any:
    from nvidia.dali import fn, types

    if all(isinstance(v, int) for v in items):
        return [float(v) for v in items]
    return fn.stack(*[fn.cast(v, dtype=types.FLOAT) if _is_dn(v) else
                      fn.constant(fdata=[float(v)], shape=[]) for v in items])


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
    (:class:`extsrc.source.ReaderValues`): the numbers arrive in the graph as external-source
    outputs, with numpy's own semantics and no Python call in the pipeline.
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
    stack = list(traced.outputs)
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


def emit(traced: Traced, image: Any, *, sample_values: Sequence[Any] = (), info: Any = None,
         check: Callable[[list[np.ndarray], list[np.ndarray]], Any] | None = None,
         min_size: int = 1) -> list[Any]:
    """The traced op's outputs as DALI DataNodes, computed from ``image`` (an HWC uint8 DataNode).

    Every per-sample scalar is a DALI CPU operator on ``image.shape()``, except those of
    :func:`sample_scalar_nodes`, which a random op must pass as ``sample_values`` (DataNodes of
    per-sample scalars in that order, made by :class:`SampleScalars`).

    ``check`` (with ``min_size`` > 1 and ``info``, the pipeline's per-sample manifest index,
    epoch and pad flag): images smaller than ``min_size`` on either side are split off and
    ``check(shapes, infos)`` is called on them alone, to raise; DALI does not call it for a batch
    without such images, so the common case costs no Python call. The op's input depends on the
    check, so it runs before any operator of the op could fail on a too-small image.
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
    if check is not None and min_size > 1:
        if info is None:
            raise ValueError("a check needs the pipeline's info; pass info=")
        import nvidia.dali.math as dmath

        ok = dmath.min(em.dim(0), em.dim(1)) >= _constant(min_size, np.int64)
        shape_ok, shape_small = fn._conditional.split(em.shape, predicate=ok)
        _, info_small = fn._conditional.split(info, predicate=ok)
        checked = fn.python_function(shape_small, info_small, function=check,
                                     batch_processing=True, num_outputs=1)
        shape = fn._conditional.merge(shape_ok, checked, predicate=ok)
        # A reshape to its own shape shares the image's memory; it orders the check first.
        em.image = fn.reshape(image, shape=shape)
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
