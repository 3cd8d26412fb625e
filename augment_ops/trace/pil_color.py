"""Pillow's RGB <-> HSV conversions (``Image.convert("HSV")`` of an RGB image and back) as traced
arithmetic that gives Pillow's bytes.

Pillow (``libImaging/Convert.c``, after Python's ``colorsys``) computes to HSV with float32
divisions ``cr / max`` and ``(max - c) / cr``, the hue's offsets ``2.0 + rc - bc`` in float64
stored as float32, ``fmod(h / 6 + 1, 1)`` in float64 stored as float32, and truncates ``x *
255.0``; from HSV it computes ``h * 6 / 255`` in float64, its fraction and ``s / 255`` stored as
float32, and rounds ``v * (1 - s f)`` half away from zero. The same steps here equal Pillow on all
2**24 inputs of each direction (``tests/test_trace_cv2.py``); grey pixels (max = min, S = 0) take
Pillow's own branch.
"""

from __future__ import annotations

import numpy as np

from augment_ops.trace.combine import _np_stack, _where
from augment_ops.trace.sym import Sym, cast_node, ufunc

__all__ = ["hsv_from_rgb_pil", "rgb_from_hsv_pil"]


def _as(x: Sym, dt: type) -> Sym:
    return Sym(cast_node(x._checked(), dt))


def _u8(x: Sym) -> Sym:
    return Sym(cast_node(x._checked(), np.uint8))


def hsv_from_rgb_pil(x: Sym) -> Sym:
    """Pillow's RGB to HSV of a uint8 HxWx3 array."""
    r, g, b = (x[..., c] for c in range(3))
    mx = ufunc("maximum", ufunc("maximum", r, g), b)
    mn = ufunc("minimum", ufunc("minimum", r, g), b)
    grey = ufunc("equal", mx, mn)
    f32, f64 = np.float32, np.float64
    # Grey pixels divide by 1 instead of 0 (Pillow does not divide there; the select below
    # gives its zeros): no NaN or infinity goes through the casts.
    cr = _as(_where(grey, np.uint8(1), ufunc("subtract", mx, mn)), f32)
    s = ufunc("divide", cr, _as(_where(grey, np.uint8(1), mx), f32))
    rc, gc, bc = (ufunc("divide", _as(ufunc("subtract", mx, c), f32), cr) for c in (r, g, b))

    def offset(base: float, p: Sym, q: Sym) -> Sym:  # float64 arithmetic stored as float32
        return _as(ufunc("subtract", ufunc("add", f64(base), _as(p, f64)), _as(q, f64)), f32)
    h = _where(ufunc("equal", r, mx), ufunc("subtract", bc, gc),
               _where(ufunc("equal", g, mx), offset(2.0, rc, bc), offset(4.0, gc, rc)))
    turn = ufunc("add", ufunc("divide", _as(h, f64), f64(6.0)), f64(1.0))
    h = _as(ufunc("subtract", turn, ufunc("floor", turn)), f32)  # fmod(turn, 1), turn > 0

    def byte(v: Sym) -> Sym:  # (int)(v * 255.0) of a value in 0..1
        return _u8(ufunc("floor", ufunc("multiply", _as(v, f64), f64(255.0))))
    zero = np.uint8(0)
    return _np_stack([_where(grey, zero, byte(h)), _where(grey, zero, byte(s)), mx], axis=-1)


def rgb_from_hsv_pil(x: Sym) -> Sym:
    """Pillow's HSV to RGB of a uint8 HxWx3 array."""
    f32, f64 = np.float32, np.float64
    hh, ss, vv = (x[..., c] for c in range(3))
    h = ufunc("divide", ufunc("multiply", _as(hh, f64), f64(6.0)), f64(255.0))
    i = ufunc("floor", h)
    f = _as(_as(ufunc("subtract", h, i), f32), f64)
    fs = _as(_as(ufunc("divide", _as(ss, f64), f64(255.0)), f32), f64)
    v = _as(vv, f64)

    def rounded(scale: Sym) -> Sym:  # C's round(v * scale): half away from zero, v * scale >= 0
        y = ufunc("multiply", v, scale)
        down = ufunc("floor", y)
        up = ufunc("greater_equal", ufunc("subtract", y, down), f64(0.5))
        return ufunc("minimum", ufunc("add", down, _as(up, f64)), f64(255.0))
    one = f64(1.0)
    p = rounded(ufunc("subtract", one, fs))
    q = rounded(ufunc("subtract", one, ufunc("multiply", fs, f)))
    t = rounded(ufunc("subtract", one, ufunc("multiply", fs, ufunc("subtract", one, f))))
    tab = (v, q, p, t)
    # Red, green and blue per sector i % 6 (i is 6 only for a hue of 255, sector 0).
    order = ((0, 3, 2), (1, 0, 2), (2, 0, 3), (2, 1, 0), (3, 2, 0), (0, 2, 1))
    sector = ufunc("subtract", i, ufunc("multiply", ufunc("floor", ufunc(
        "divide", i, f64(6.0))), f64(6.0)))
    flat = ufunc("equal", ss, np.uint8(0))
    out = []
    for c in range(3):
        val = tab[order[5][c]]
        for sec in range(4, -1, -1):
            val = _where(ufunc("equal", sector, f64(sec)), tab[order[sec][c]], val)
        out.append(_where(flat, vv, _u8(val)))
    return _np_stack(out, axis=-1)
