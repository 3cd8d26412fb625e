"""numpy's semantics on DALI operators: casts that wrap around and truncate, flooring ``//`` and
``%`` (and numpy's results for a divisor of 0 or -1), ``np.rint``, ``np.where`` as a bitwise
select, typed constants, and the device moves elementwise operators need.

Imports DALI when called, not at import."""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.facts import lower, upper
from augment_ops.trace.ir import Node

#: numpy converts a float to an integer type of at most this many bytes through a 32-bit
#: integer (the C conversion on x86-64 and ARM64): a value outside the type's range but within
#: +-2**31 wraps around (-1.5 -> 255, 300.7 -> 44 as uint8), as the traced cast does; beyond
#: that, and for wider types, numpy's result depends on the processor and the traced cast
#: saturates.
WRAPPING_FLOAT_CASTS = 2


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
    lo, up = lower(b), upper(b)
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


# -- numpy semantics on DALI operators ----------------------------------------------------------
def _truncated(x: Any, src: np.dtype, nonneg: bool, finite: bool) -> Any:
    """Float ``x`` truncated toward zero, for a conversion to an integer type: on the CPU,
    ``x - x % 1`` where ``x`` is finite (DALI 2.4's float ``%`` on the CPU is C's ``fmod``,
    exact, with ``x``'s sign, so the difference is exact too; only the sign of a zero differs,
    which no integer keeps; NaN stays NaN), two operators where the select between ``ceil`` and
    ``floor`` takes ten. Not on the GPU: DALI's GPU ``%`` was IEEE ``remainder`` (the nearest
    quotient, not the truncated one) in the sources read, and no GPU here checked 2.4's."""
    if finite and not nonneg and getattr(x, "device", "cpu") == "cpu":
        from nvidia.dali import types

        return x - (x % types.Constant(1.0, dtype=_dali_type(src)))
    return unary("trunc", x, src, nonneg=nonneg)


def cast(x: Any, src: np.dtype, dst: np.dtype, nonneg: bool = False, wrap: bool = False,
         finite: bool = False) -> Any:
    """``x.astype(dst)`` as numpy does it (see the module docstring for out-of-range floats);
    ``nonneg``: the tracer knows ``x >= 0``; ``wrap``: floats to an integer type of 8 or 16
    bits that may fall outside its range wrap around (see :data:`WRAPPING_FLOAT_CASTS`);
    ``finite``: the tracer knows no element of float ``x`` is infinite."""
    from nvidia.dali import fn, types

    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return x
    if dst.kind == "b":
        return binary("not_equal", x, _constant(0, src), src)
    if src.kind == "b" or dst.kind == "f" or (src.kind in "iu" and np.can_cast(src, dst)):
        return fn.cast(x, dtype=_dali_type(dst))
    if src.kind == "f" and wrap and dst.itemsize <= WRAPPING_FLOAT_CASTS:
        wide = fn.cast(_truncated(x, src, nonneg, finite), dtype=types.INT64)
        return cast(wide, np.dtype(np.int64), dst)
    if src.kind == "f":
        return fn.cast(_truncated(x, src, nonneg, finite), dtype=_dali_type(dst))
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
        if dt.kind == "f":  # the sign bit cleared, as numpy's: |-0.0| is 0.0, NaN's sign too
            from nvidia.dali import fn

            ut = np.dtype(f"u{dt.itemsize}")
            mask = _constant(np.array(np.iinfo(ut).max >> 1, ut), ut)
            bits = fn.reinterpret(x, dtype=_dali_type(ut))
            return fn.reinterpret(bits & mask, dtype=_dali_type(dt))
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
        # values that large are already integers. A negative value is rounded as its magnitude
        # and negated, so that one that rounds to zero is -0.0 (numpy's rint(-0.3)); zeros,
        # NaN and large values are x itself (rint(-0.0) is -0.0).
        m = _constant(2.0 ** (23 if dt == np.float32 else 52), dt)
        zero = _constant(0, dt)
        rounded = where(x >= zero, (x + m) - m, -((m - x) - m), dt)
        return where((dmath.abs(x) < m) & (x != zero), rounded, x, dt)
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
