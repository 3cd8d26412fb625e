"""numpy's arithmetic that takes more than one DALI operator to reproduce exactly: float floor
division and remainder by a constant, integer shifts, and powers (by constants exactly; of
pixel values, and by a drawn exponent, as lookup tables numpy computes, constant or per sample:
:mod:`augment_ops.trace.tables`, :mod:`augment_ops.trace.gather`).
:class:`~augment_ops.trace.sym.Sym` reaches them through the handler table."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from augment_ops.trace.facts import lower, upper
from augment_ops.trace.handlers import HANDLERS, cast_node, implements
from augment_ops.trace.ir import TraceError, _is_const, _new, const
from augment_ops.trace.sym import (
    Sym,
    _broadcast,
    _inexact,
    _is_weak,
    _rep,
    _shape_of,
    _to_node,
    _weak_dtype,
    cut_to,
    ufunc,
)


@implements("Sym.float_mod")
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


@implements("Sym.shift")
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


@implements("Sym.power")
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
        # differs from both in the last bit for about 1 value in 18. So numpy computes it: in
        # a per-sample table (np.arange(256) ** gamma, (img / 255) ** gamma of a uint8 image),
        # or the op is refused with this reason (augment_ops.trace.tables).
        return _pixel_power(base, exponent, f"{what} with a per-sample exponent, where numpy "
                            "does not compute it (numpy's pow, its own SIMD routine on AVX-512 "
                            "processors, and DALI's, the C library's on the CPU and CUDA's on "
                            "the GPU, differ in the last bit for some values; numpy computes, "
                            "for each sample, an array of the op's draws and constants: a "
                            "table of np.arange(256) or of one uint8 array, or a small array of "
                            "draws; not a single number, which the numpy path raises with the "
                            "C library's pow, nor values computed from the image such as "
                            "img.min())", name,
                            integer=f"{what} of integers by a per-sample exponent (numpy raises "
                            "for a negative one; not lowered: multiply it out, or use a float "
                            "base)")
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
    if rdt.kind == "f" and base.ndim:
        # of pixel values: a lookup table; of an array of draws: numpy's in the readers
        return _pixel_power(base, exponent, message, name)
    raise TraceError(message)


def _pixel_power(base: Any, exponent: Any, message: str, name: str,
                 integer: str | None = None) -> Sym:
    """``base ** exponent`` with a float result, as numpy's ``np.power`` with both operands in
    the result dtype: a node only a lookup table lowers, constant or per sample (``message``
    says why where none can; ``integer``, why an integer result is not lowered)."""
    with np.errstate(all="ignore"):
        try:
            res = np.power(_rep(base), _rep(exponent))
        except Exception as e:
            raise TraceError(f"np.power raises for these operand types ({e})") from None
    rdt = np.result_type(res)
    if rdt.kind != "f":
        raise TraceError(integer or message)
    cuts: dict = {}
    shape = _broadcast(_shape_of(base), _shape_of(exponent), cuts=cuts)
    nb, ne = _to_node(base, rdt), _to_node(exponent, rdt)
    if cuts:
        nb, ne = cut_to(nb, cuts), cut_to(ne, cuts)
    node = _new("bin", (nb, ne), (name,), rdt, shape)
    return Sym(_inexact(node, message))


def _ones_of(x: Sym, one: Any) -> Any:
    """Ones of ``x``'s shape and dtype (``x ** 0`` is 1 for every value, NaN included)."""
    if x.ndim == 0:
        return Sym(cast_node(const(np.array(one)), x.dtype, x.node.weak))
    return HANDLERS["full_like"](x, one)
