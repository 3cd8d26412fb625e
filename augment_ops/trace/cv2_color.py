"""OpenCV's 8-bit HSV conversions (``cv2.cvtColor`` with ``COLOR_BGR2HSV``, ``COLOR_RGB2HSV``,
their ``_FULL`` forms, ``COLOR_HSV2BGR`` and ``COLOR_HSV2RGB``) as traced arithmetic that gives
OpenCV's bytes.

To HSV, OpenCV computes in integers: ``s = (diff * sdiv[v] + 2**11) >> 12`` and ``h = (h' *
hdiv[diff] + 2**11) >> 12`` with ``sdiv[i] = round(255 * 2**12 / i)`` and ``hdiv[i] = round(180 *
2**12 / (6 i))`` (256 for ``_FULL``); its vector and scalar code compute the same. The tables
become DALI lookup tables, the rest integer operators.

From HSV, OpenCV converts to float32 and back: ``s = S * (1/255)``, ``v = V * (1/255)``, ``h = H
* (6/180)``, the sector ``floor(h)`` modulo 6, and ``v * (1 - s * f)`` where the product and the
difference are one fused multiply-add (one rounding; computed here in float64, where the product of
two float32 values is exact, then rounded to float32). Its vector code truncates ``x * 255`` to
bytes, its scalar code (the pixels of each row after the last whole block of vector lanes) rounds
half to even: which pixels of a row are which depends on the SIMD width the installed OpenCV
dispatches to, found once by converting probe rows with OpenCV itself (:func:`vector_block`).

Both directions equal OpenCV on every one of the 2**24 input triples (checked in
``tests/test_trace_cv2.py``); nothing here imports cv2 at import time.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from augment_ops.trace.combine import _np_stack, _where
from augment_ops.trace.ir import TraceError
from augment_ops.trace.lookup import lookup
from augment_ops.trace.numpy_api import _np_full_like
from augment_ops.trace.sym import Sym, cast_node, ufunc

__all__ = ["HSV_SHIFT", "YUV_SHIFT", "bgr_from_hsv_u8", "bgr_from_yuv_u8", "hsv_from_bgr_u8",
           "hsv_tables", "vector_block", "yuv_from_bgr_u8"]

#: OpenCV's fixed-point shift of its 8-bit HSV conversion.
HSV_SHIFT = 12

#: Which of ``(v, v(1-s), v(1-s f), v(1-s(1-f)))`` is blue, green and red, per sector.
_SECTORS = ((1, 3, 0), (1, 0, 2), (3, 0, 1), (0, 2, 1), (0, 1, 3), (2, 1, 0))


def hsv_tables(hrange: int) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's ``sdiv_table`` and ``hdiv_table`` (hue range 180 or 256), int32: its
    ``saturate_cast<int>`` of a double rounds half to even, as ``np.rint`` does."""
    i = np.arange(1, 256, dtype=np.float64)
    sdiv = np.concatenate([[0], np.rint((255 << HSV_SHIFT) / i)]).astype(np.int32)
    hdiv = np.concatenate([[0], np.rint((hrange << HSV_SHIFT) / (6.0 * i))]).astype(np.int32)
    return sdiv, hdiv


def _channels(x: Sym, name: str) -> list[Sym]:
    if x.ndim != 3 or x.node.shape[2] != 3:
        raise TraceError(f"cv2.cvtColor {name} of an array that is not HxWx3")
    return [x[..., c] for c in range(3)]


def _i32(x: Sym) -> Sym:
    return Sym(cast_node(x._checked(), np.int32))


def hsv_from_bgr_u8(x: Sym, blue: int, hrange: int) -> Sym:
    """OpenCV's BGR (``blue`` 0) or RGB (``blue`` 2) to HSV for a uint8 HxWx3 image."""
    chans = _channels(x, "to HSV")
    b8, g8, r8 = chans[blue], chans[1], chans[2 - blue]
    v8 = ufunc("maximum", ufunc("maximum", b8, g8), r8)
    diff8 = ufunc("subtract", v8, ufunc("minimum", ufunc("minimum", b8, g8), r8))
    sdiv, hdiv = hsv_tables(hrange)
    b, g, r, v, diff = (_i32(c) for c in (b8, g8, r8, v8, diff8))
    half = 1 << (HSV_SHIFT - 1)
    s = ufunc("floor_divide", ufunc("add", ufunc("multiply", diff, lookup(sdiv, v8)), half),
              1 << HSV_SHIFT)
    h = _where(ufunc("equal", v, r), ufunc("subtract", g, b),
               _where(ufunc("equal", v, g),
                      ufunc("add", ufunc("subtract", b, r), ufunc("multiply", diff, 2)),
                      ufunc("add", ufunc("subtract", r, g), ufunc("multiply", diff, 4))))
    h = ufunc("floor_divide", ufunc("add", ufunc("multiply", h, lookup(hdiv, diff8)), half),
              1 << HSV_SHIFT)
    h = ufunc("add", h, _where(ufunc("less", h, 0), np.int32(hrange), np.int32(0)))
    h = ufunc("minimum", h, 255)  # saturate_cast<uchar>: a hue of 256 in the _FULL range
    return _np_stack([Sym(cast_node(c.node, np.uint8)) for c in (h, s, v8)], axis=-1)


@functools.cache
def vector_block() -> int | None:
    """How many pixels one pass of OpenCV's vector code converts from HSV to BGR (uint8) on
    this machine: the pixels of a row of width ``w`` before ``w - w % block`` are truncated,
    the rest rounded. Found by converting rows of every width up to 256 of the pixel (0, 1, 1),
    whose blue 0.996 truncates to 0 and rounds to 1; None when every pixel is rounded (no vector
    code). Raises :class:`TraceError` when no block explains what OpenCV did."""
    import cv2

    starts = []
    for w in range(1, 257):
        row = np.zeros((1, w, 3), np.uint8)
        row[..., 1:] = 1
        blue = cv2.cvtColor(row, cv2.COLOR_HSV2BGR)[0, :, 0]
        rounded = np.flatnonzero(blue == 1)
        if not np.array_equal(rounded, np.arange(w - len(rounded), w)):
            starts = None
            break
        starts.append(w - len(rounded))
    if starts is not None and not any(starts):
        return None
    for block in (2 ** k for k in range(1, 9)):
        if starts == [w - w % block for w in range(1, 257)]:
            return block
    raise TraceError("cv2.cvtColor from HSV (this OpenCV neither truncates its vector "
                     "lanes' pixels nor rounds its remaining pixels in whole blocks, which the "
                     "tracer reproduces; the op runs on the numpy path)")


def _fused_one_minus(s: Sym, f: Sym) -> Sym:
    """``1 - s * f`` for float32 ``s`` and ``f`` rounded once to float32, as a fused
    multiply-add does: the float64 product of two float32 values is exact."""
    prod = ufunc("multiply", Sym(cast_node(s.node, np.float64)),
                 Sym(cast_node(f.node, np.float64)))
    return Sym(cast_node(ufunc("subtract", np.float64(1.0), prod).node, np.float32))


def bgr_from_hsv_u8(x: Sym, blue: int, hrange: int) -> Sym:
    """OpenCV's HSV to BGR (``blue`` 0) or RGB (``blue`` 2) for a uint8 HxWx3 image."""
    block = vector_block()
    f32 = np.float32
    hh, ss, vv = (Sym(cast_node(c._checked(), np.float32)) for c in _channels(x, "from HSV"))
    inv255 = f32(1.0) / f32(255.0)
    s = ufunc("multiply", ss, inv255)
    v = ufunc("multiply", vv, inv255)
    h = ufunc("multiply", hh, f32(6.0) / f32(hrange))
    pre = ufunc("floor", h)
    frac = ufunc("subtract", h, pre)
    sector = ufunc("subtract", pre, ufunc("multiply", ufunc("floor", ufunc(
        "multiply", pre, f32(1.0) / f32(6.0))), f32(6.0)))
    tab = [v, ufunc("multiply", v, ufunc("subtract", f32(1.0), s)),
           ufunc("multiply", v, _fused_one_minus(s, frac)),
           ufunc("multiply", v, _fused_one_minus(s, ufunc("subtract", f32(1.0), frac)))]
    tail = None
    if block is not None:
        # 1 on the pixels OpenCV's scalar code converts: columns from w - w % block on.
        w = x.shape[1]
        mask = _np_full_like(x[..., 0], 0)
        mask[:, ufunc("subtract", w, ufunc("remainder", w, block)):] = 1
        tail = ufunc("equal", mask, 1)
    out: list[Any] = [None] * 3
    for c, k in ((0, blue), (1, 1), (2, 2 - blue)):
        picks = [row[c] for row in _SECTORS]
        val = tab[picks[5]]
        for sec in range(4, -1, -1):
            val = _where(ufunc("equal", sector, f32(sec)), tab[picks[sec]], val)
        scaled = ufunc("multiply", val, f32(255.0))
        rounded = ufunc("minimum", ufunc("rint", scaled), f32(255.0))
        out[k] = rounded if tail is None else _where(
            tail, rounded, ufunc("minimum", ufunc("floor", scaled), f32(255.0)))
        out[k] = Sym(cast_node(out[k].node, np.uint8))
    return _np_stack(out, axis=-1)


#: OpenCV's fixed-point shift and BT.601 weights of its 8-bit YUV conversions.
YUV_SHIFT = 14
_TO_Y = (4899, 9617, 1868)  # R, G, B
_TO_UV = (8061, 14369)  # (B - Y) to U, (R - Y) to V
_FROM_UV = (33292, -6472, -9519, 18678)  # U to B, U to G, V to G, V to R


def _descale(x: Sym) -> Sym:
    """OpenCV's ``CV_DESCALE(x, 14)``: ``(x + 2**13) >> 14``, flooring as its shift does."""
    return ufunc("floor_divide", ufunc("add", x, 1 << (YUV_SHIFT - 1)), 1 << YUV_SHIFT)


def _bytes(chans: list[Sym]) -> Sym:
    """OpenCV's ``saturate_cast<uchar>`` of int32 channels, stacked."""
    return _np_stack([Sym(cast_node(ufunc("minimum", ufunc("maximum", c, 0), 255).node,
                                    np.uint8)) for c in chans], axis=-1)


def yuv_from_bgr_u8(x: Sym, blue: int) -> Sym:
    """OpenCV's BGR (``blue`` 0) or RGB (``blue`` 2) to YUV for a uint8 HxWx3 image (its
    integer code, which its vector and scalar code share)."""
    chans = [_i32(c) for c in _channels(x, "to YUV")]
    b, g, r = chans[blue], chans[1], chans[2 - blue]
    y = _descale(ufunc("add", ufunc("add", ufunc("multiply", r, _TO_Y[0]),
                                    ufunc("multiply", g, _TO_Y[1])),
                       ufunc("multiply", b, _TO_Y[2])))
    half = 128 << YUV_SHIFT
    u = _descale(ufunc("add", ufunc("multiply", ufunc("subtract", b, y), _TO_UV[0]), half))
    v = _descale(ufunc("add", ufunc("multiply", ufunc("subtract", r, y), _TO_UV[1]), half))
    return _bytes([y, u, v])


def bgr_from_yuv_u8(x: Sym, blue: int) -> Sym:
    """OpenCV's YUV to BGR (``blue`` 0) or RGB (``blue`` 2) for a uint8 HxWx3 image."""
    y, u, v = (_i32(c) for c in _channels(x, "from YUV"))
    u, v = ufunc("subtract", u, 128), ufunc("subtract", v, 128)
    b = ufunc("add", y, _descale(ufunc("multiply", u, _FROM_UV[0])))
    g = ufunc("add", y, _descale(ufunc("add", ufunc("multiply", u, _FROM_UV[1]),
                                       ufunc("multiply", v, _FROM_UV[2]))))
    r = ufunc("add", y, _descale(ufunc("multiply", v, _FROM_UV[3])))
    out = [b, g, r] if blue == 0 else [r, g, b]
    return _bytes(out)
