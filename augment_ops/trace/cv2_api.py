"""OpenCV (``cv2``) and library lookup-table helpers as a traced function sees them.

While an op's function runs on the proxies (:func:`cv2_installed`), every function of an
imported ``cv2`` is replaced: those of :data:`CV2_HANDLERS` build the graph of exactly what
OpenCV computes when given a traced array (``cvtColor`` between RGB, BGR and gray, to and from
HSV (:mod:`.cv2_color`) and YUV for ``uint8``, ``LUT``, ``flip``, ``merge``, ``split``,
``mixChannels``, ``addWeighted`` and ``transform`` (:mod:`.cv2_weighted`), ``add``,
``subtract``, ``multiply``, ``divide``, ``absdiff`` and ``convertScaleAbs``
(:mod:`.cv2_arith`), ``copyMakeBorder`` constant or replicated, ``warpAffine`` by a
whole-pixel translation (:mod:`.cv2_warp`)); any other given a traced array is refused naming
it and why, as are the methods of a CLAHE object; called on real arrays each is OpenCV's own.
This reaches cv2 calls in the op's helpers and in libraries too. :func:`library_handlers`
names library helpers the op's module imported by name (albucore's ``sz_lut``, a ``lut[img]``
through stringzilla), replaced in the op's globals. Nothing here imports cv2 or a library the
op's code did not import.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from augment_ops.trace.combine import _np_concatenate, _np_stack
from augment_ops.trace.cv2_arith import ARITH_OPS, arith, convert_scale_abs
from augment_ops.trace.cv2_color import (
    bgr_from_hsv_u8,
    bgr_from_yuv_u8,
    hsv_from_bgr_u8,
    yuv_from_bgr_u8,
)
from augment_ops.trace.cv2_warp import warp_affine
from augment_ops.trace.cv2_weighted import add_weighted, transform
from augment_ops.trace.facts import _nonneg, lower, upper
from augment_ops.trace.indexing import holds_in_float32, padded_slice
from augment_ops.trace.ir import TraceError, _new
from augment_ops.trace.lookup import lookup
from augment_ops.trace.numpy_api import _np_flip, _np_full_like
from augment_ops.trace.pairwise import made_new
from augment_ops.trace.pil_api import install_pil
from augment_ops.trace.sym import Sym, _dim, _dim_sym, _dop, cast_node, raise_where, ufunc

#: Why a cv2 function is not lowered, where there is more to say than "not implemented".
_WHY_NOT: dict[str, str] = {
    "resize": "OpenCV's interpolation arithmetic (fixed-point weights for uint8) differs from "
              "DALI's resize, so the pixels would not be OpenCV's",
    "warpPerspective": "OpenCV's fixed-point interpolation differs from DALI's warp_perspective",
    "createCLAHE": "CLAHE needs per-tile histograms, which DALI's operators cannot compute",
    "equalizeHist": "a histogram of the image's pixels, which DALI's operators cannot compute",
    "calcHist": "a histogram of the image's pixels, which DALI's operators cannot compute",
    "GaussianBlur": "OpenCV's fixed-point kernels for uint8 differ from DALI's gaussian_blur",
    **{name: "OpenCV's global generator: run while tracing, its draws would be frozen into "
             "the graph" for name in ("randu", "randShuffle", "theRNG")},
}


def _has_sym(args: tuple, kwargs: dict) -> bool:
    vals = [*args, *kwargs.values()]
    for v in vals:
        if isinstance(v, Sym):
            return True
        if isinstance(v, (list, tuple)) and any(isinstance(x, Sym) for x in v):
            return True
    return False


def _whole_array(dst: Sym) -> None:
    """Refuse a ``dst=`` that is a view: OpenCV writes into a view of whole rows' pixels but
    raises for a channel, a reversal or a transpose ("Layout of the output array is
    incompatible with cv::Mat"), which the tracer does not tell apart."""
    if not dst.flags["OWNDATA"]:
        raise TraceError("a cv2 dst= that is a view of an array (OpenCV refuses a channel, a "
                         "reversal or a transpose of one); pass the array itself")


def _into(dst: Any, out: Sym) -> Sym:
    """OpenCV's ``dst=`` argument: written in place when it matches the result (as OpenCV
    reuses it), the result returned either way."""
    if isinstance(dst, Sym) and dst.dtype == out.dtype and dst.ndim == out.ndim and \
            dst.node.shape == out.node.shape:
        if not dst._writable:
            raise TraceError("a cv2 dst= that is the input image or a view of it (numpy refuses "
                             "writes into the read-only input; pass img.copy())")
        _whole_array(dst)
        dst._write(out._checked())
        return dst
    if dst is not None and not isinstance(dst, Sym):
        raise TraceError("a cv2 dst= that is a constant array")
    return out


def _image(x: Any, name: str) -> Sym:
    if not isinstance(x, Sym):
        raise TraceError(f"cv2.{name} of a constant with a traced argument")
    return x


def _channels(x: Sym, name: str, count: int) -> list[Sym]:
    if x.ndim != 3 or x.node.shape[2] != count:
        raise TraceError(f"cv2.{name} of an array that is not HxWx{count}")
    return [x[..., c] for c in range(count)]


def _gray_u8(x: Sym, order: tuple[int, int, int]) -> Sym:
    """OpenCV's fixed-point RGB->gray for uint8: ``(9798 R + 19235 G + 3735 B + 2**14) >> 15``
    (checked against cv2 on every RGB triple)."""
    chans = [Sym(cast_node(c._checked(), np.int32)) for c in _channels(x, "cvtColor", 3)]
    r, g, b = (chans[i] for i in order)
    acc = ufunc("add", ufunc("add", ufunc("add", ufunc("multiply", r, 9798),
                                          ufunc("multiply", g, 19235)),
                             ufunc("multiply", b, 3735)), 1 << 14)
    return Sym(cast_node(ufunc("floor_divide", acc, 1 << 15).node, np.uint8))


def _cv_cvtColor(src: Any, code: int, dst: Any = None, dstCn: int = 0, **kw: Any) -> Sym:
    import cv2

    if kw or dstCn not in (0, None):
        raise TraceError(f"cv2.cvtColor with {sorted(kw) or ['dstCn']}=")
    hsv_codes = _hsv_codes()
    yuv_codes = {cv2.COLOR_BGR2YUV: (True, 0), cv2.COLOR_RGB2YUV: (True, 2),
                 cv2.COLOR_YUV2BGR: (False, 0), cv2.COLOR_YUV2RGB: (False, 2)}
    x = _image(src, "cvtColor")
    if x.dtype not in (np.uint8, np.uint16, np.float32):
        raise TraceError(f"cv2.cvtColor of {x.dtype} (OpenCV raises for this depth)")
    if code in (cv2.COLOR_RGB2BGR,):  # == COLOR_BGR2RGB: reverse the channels
        chans = _channels(x, "cvtColor", 3)
        out = _np_stack(chans[::-1], axis=-1)
    elif code in (cv2.COLOR_RGB2GRAY, cv2.COLOR_BGR2GRAY):
        if x.dtype != np.uint8:
            raise TraceError(f"cv2.cvtColor to gray of {x.dtype} (only OpenCV's integer "
                             "formula for uint8 is lowered: no order of its float32 weighted "
                             "sum gives OpenCV's bits on every pixel)")
        out = _gray_u8(x, (0, 1, 2) if code == cv2.COLOR_RGB2GRAY else (2, 1, 0))
    elif code in (cv2.COLOR_GRAY2RGB,):  # == COLOR_GRAY2BGR
        if x.ndim == 3 and x.node.shape[2] == 1:
            x = x[..., 0]
        if x.ndim != 2:
            raise TraceError("cv2.cvtColor GRAY2RGB of an array that is not HxW or HxWx1")
        out = _np_stack([x, x, x], axis=-1)
    elif code in yuv_codes:
        if x.dtype != np.uint8:
            raise TraceError(f"cv2.cvtColor between BGR/RGB and YUV of {x.dtype} (only "
                             "OpenCV's 8-bit integer arithmetic is lowered; convert a uint8 "
                             "image)")
        to_yuv, blue = yuv_codes[code]
        out = (yuv_from_bgr_u8 if to_yuv else bgr_from_yuv_u8)(x, blue)
    elif code in hsv_codes:
        if x.dtype != np.uint8:
            raise TraceError(f"cv2.cvtColor between BGR/RGB and HSV of {x.dtype} (only "
                             "OpenCV's 8-bit arithmetic is lowered: for float32 its vector "
                             "and scalar code compute differently, a float32 division and "
                             "fused multiply-adds against a float64 division, and no check "
                             "over every float32 input is possible; convert a uint8 image)")
        to_hsv, blue, hrange = hsv_codes[code]
        out = (hsv_from_bgr_u8 if to_hsv else bgr_from_hsv_u8)(x, blue, hrange)
    else:
        names = [k for k in dir(cv2) if k.startswith("COLOR_") and getattr(cv2, k) == code]
        raise TraceError(f"cv2.cvtColor with {names[0] if names else code} (only RGB<->BGR, "
                         "RGB/BGR->GRAY, BGR/RGB->HSV(_FULL), HSV->BGR/RGB and BGR/RGB<->YUV "
                         "for uint8 and GRAY->RGB are lowered exactly)")
    return _into(dst, out)


def _hsv_codes() -> dict[int, tuple[bool, int, int]]:
    """``{code: (to HSV, blue channel, hue range)}`` of the HSV conversions lowered."""
    import cv2

    return {cv2.COLOR_BGR2HSV: (True, 0, 180), cv2.COLOR_RGB2HSV: (True, 2, 180),
            cv2.COLOR_BGR2HSV_FULL: (True, 0, 256), cv2.COLOR_RGB2HSV_FULL: (True, 2, 256),
            cv2.COLOR_HSV2BGR: (False, 0, 180), cv2.COLOR_HSV2RGB: (False, 2, 180)}


def _lut_table(lut: Any) -> Any:
    """A ``cv2.LUT`` table as one 1-D table (256,) or one per channel."""
    if isinstance(lut, Sym):
        if lut.ndim == 1 and lut.node.shape == (256,):
            return lut
        raise TraceError("cv2.LUT with a traced table that is not 1-D of 256 entries")
    arr = np.asarray(lut)
    if arr.size == 256:
        return arr.reshape(256)
    if arr.ndim == 3 and arr.shape[:2] == (1, 256):
        return [arr[0, :, c] for c in range(arr.shape[2])]
    raise TraceError(f"cv2.LUT with a table of shape {list(arr.shape)} (OpenCV needs 256 "
                     "entries, one table or one per channel)")


def _cv_LUT(src: Any, lut: Any, dst: Any = None) -> Sym:
    x = _image(src, "LUT")
    if x.dtype != np.uint8:
        raise TraceError(f"cv2.LUT of {x.dtype} (OpenCV takes uint8 images; int8 is offset "
                         "by 128, not lowered)")
    table = _lut_table(lut)
    if isinstance(table, list):
        if x.ndim != 3 or x.node.shape[2] != len(table):
            raise TraceError("cv2.LUT with one table per channel for an image of another "
                             "channel count")
        out = _np_stack([lookup(t, x[..., c]) for c, t in enumerate(table)], axis=-1)
    else:
        out = lookup(table, x)
    return _into(dst, out)


def _cv_flip(src: Any, flipCode: int, dst: Any = None) -> Sym:
    x = _image(src, "flip")
    if isinstance(flipCode, Sym):
        raise TraceError("cv2.flip with a per-sample flipCode (use np.flip in an if)")
    axes = (0,) if flipCode == 0 else (1,) if flipCode > 0 else (0, 1)
    out = _np_flip(x, axes)
    return _into(dst, Sym(out._checked()))


def _cv_merge(mv: Any, dst: Any = None) -> Sym:
    parts = list(mv)
    if not parts or not all(isinstance(p, Sym) for p in parts):
        raise TraceError("cv2.merge of constants and traced arrays together")
    if len({p.dtype for p in parts}) != 1:
        raise TraceError("cv2.merge of arrays of different dtypes (OpenCV raises)")
    if all(p.ndim == 2 for p in parts):
        out = _np_stack(parts, axis=-1)
    elif all(p.ndim == 3 for p in parts):
        out = _np_concatenate(parts, axis=2)
    else:
        raise TraceError("cv2.merge of arrays of different ranks")
    return _into(dst, out)


def _cv_split(m: Any, mv: Any = None) -> tuple[Sym, ...]:
    x = _image(m, "split")
    if mv is not None:
        raise TraceError("cv2.split with mv=")
    if x.ndim == 2:
        return (Sym(x._checked()),)
    if x.ndim != 3 or not isinstance(x.node.shape[2], int):
        raise TraceError("cv2.split of an array that is not HxW or HxWxC")
    return tuple(Sym(x[..., c]._checked()) for c in range(x.node.shape[2]))


def _mix_channels(arrays: Any, what: str) -> list[Sym]:
    if not isinstance(arrays, (list, tuple)) or not all(isinstance(a, Sym) for a in arrays):
        raise TraceError(f"cv2.mixChannels with {what} that is not a list of traced arrays")
    for a in arrays:
        if a.ndim not in (2, 3) or (a.ndim == 3 and not isinstance(a.node.shape[2], int)):
            raise TraceError("cv2.mixChannels of an array that is not HxW or HxWxC")
    return list(arrays)


def _cv_mixChannels(src: Any, dst: Any, fromTo: Any) -> tuple[Sym, ...]:
    """OpenCV's channel gather: ``fromTo`` pairs ``(from, to)`` index the channels of the
    ``src`` arrays and of the ``dst`` arrays, each list's channels counted one after the other;
    a negative ``from`` writes zeros. A ``from`` may be a per-sample value (``rng.shuffle`` of
    the channel order): each written channel is then a select among the source channels. The
    ``dst`` arrays are written in place and returned, as OpenCV does."""
    srcs, dsts = _mix_channels(src, "src"), _mix_channels(dst, "dst")
    if len({a.dtype for a in srcs + dsts}) != 1:
        raise TraceError("cv2.mixChannels of arrays of different dtypes (OpenCV raises)")
    if any(d._buffer is a._buffer for d in dsts for a in srcs):
        raise TraceError("cv2.mixChannels writing into one of its sources (OpenCV's result "
                         "then depends on the order it copies in; write into a new array)")
    for d in dsts:
        if not d._writable:
            raise TraceError("cv2.mixChannels into the input image or a view of it (numpy "
                             "refuses writes into the read-only input; pass img.copy())")
        _whole_array(d)
    pairs = list(fromTo)
    if len(pairs) % 2:
        raise TraceError("cv2.mixChannels with an odd number of fromTo entries (OpenCV raises)")
    sources = [c for a in srcs for c in ([a] if a.ndim == 2 else
                                        [a[..., k] for k in range(a.node.shape[2])])]
    out = [[d] if d.ndim == 2 else [d[..., k] for k in range(d.node.shape[2])] for d in dsts]
    where = [(i, k) for i, chans in enumerate(out) for k in range(len(chans))]
    stacked = None
    for j, t in zip(pairs[::2], pairs[1::2], strict=True):
        if isinstance(t, Sym) or not isinstance(t, (int, np.integer)) or \
                not 0 <= t < len(where):
            raise TraceError("cv2.mixChannels with a per-sample or out-of-range destination "
                             "channel (only the source channel may be drawn)")
        i, k = where[int(t)]
        if isinstance(j, Sym):
            lo, up = lower(j._checked()), upper(j._checked())
            if lo is None or lo < 0 or up is None or up >= len(sources):
                raise TraceError("cv2.mixChannels with a per-sample source channel the tracer "
                                 f"cannot bound within 0..{len(sources) - 1} (OpenCV raises "
                                 "or writes zeros outside it)")
            if stacked is None:
                stacked = _np_stack(sources, axis=-1)
            value = stacked[..., j]
        elif not isinstance(j, (int, np.integer)) or j >= len(sources):
            raise TraceError("cv2.mixChannels with a source channel out of range (OpenCV "
                             "raises)")
        elif j < 0:
            value = _np_full_like(sources[0], 0)
        else:
            value = sources[int(j)]
        out[i][k] = value
    for d, chans in zip(dsts, out, strict=True):
        d._write((chans[0] if d.ndim == 2 else _np_stack(chans, axis=-1))._checked())
    return tuple(dsts)


def _cv_addWeighted(src1: Any, alpha: Any, src2: Any, beta: Any, gamma: Any, dst: Any = None,
                    dtype: int = -1) -> Sym:
    return _into(dst, add_weighted(src1, alpha, src2, beta, gamma, dtype))


def _cv_transform(src: Any, m: Any, dst: Any = None) -> Sym:
    return _into(dst, transform(src, m))


def _arith_handler(name: str) -> Callable[..., Any]:
    """``cv2.<name>(src1, src2, dst, ...)`` lowered by :func:`.cv2_arith.arith`."""
    # OpenCV's positional order after dst: mask, dtype for add/subtract; scale, dtype for
    # multiply/divide; nothing for absdiff.
    after = ("scale", "dtype") if ARITH_OPS[name] else ("mask", "dtype") \
        if name != "absdiff" else ()

    def handler(src1: Any, src2: Any, dst: Any = None, *args: Any, **kw: Any) -> Sym:
        if len(args) > len(after) or set(kw) - set(after):
            raise TraceError(f"cv2.{name} with arguments {sorted(set(kw) - set(after))} "
                             "(OpenCV takes " + ", ".join(("src1", "src2", "dst", *after)) + ")")
        kw.update(zip(after, args, strict=False))
        return _into(dst, arith(name, src1, src2, **kw))
    handler.__name__ = f"_cv_{name}"
    return handler


def _cv_convertScaleAbs(src: Any, dst: Any = None, alpha: Any = 1.0, beta: Any = 0.0) -> Sym:
    return _into(dst, convert_scale_abs(src, alpha, beta))


def _doubled(strip: Sym, count: int, axis: int) -> Sym:
    """``count`` copies of ``strip`` (1 long on ``axis``) side by side, in log2(count) steps."""
    out = strip
    have = 1
    while have < count:
        out = _np_concatenate([out, out], axis=axis)
        have *= 2
    if have == count:
        return out
    key = [slice(None)] * out.ndim
    key[axis] = slice(0, count)
    return Sym(out[tuple(key)]._checked())


def _border_strip(x: Sym, axis: int, at: int, border: int, fill: Any) -> Sym:
    """The strip of ``border`` rows (``axis`` 0) or columns (1) beside ``x``'s edge ``at``:
    that edge repeated (``fill`` None, BORDER_REPLICATE) or OpenCV's fill value per channel."""
    key: list[Any] = [slice(None)] * x.ndim
    key[axis] = slice(at, at + 1) if at >= 0 else slice(at, None)
    edge = Sym(x[tuple(key)]._checked())
    if fill is not None:
        if x.ndim == 2 or len({v.tobytes() for v in fill}) == 1:  # -0.0 is not 0.0 here
            edge = Sym(_np_full_like(edge, fill.reshape(-1)[0])._checked())
        else:
            edge = _np_stack([_np_full_like(edge[..., c], v) for c, v in enumerate(fill)],
                             axis=-1)
    return _doubled(edge, border, axis)


#: The types OpenCV's copyMakeBorder returns as they are (an int64 array comes back int32).
_BORDER_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.uint16, np.int16,
                                                 np.uint32, np.int32, np.float16, np.float32,
                                                 np.float64))


def _cv_copyMakeBorder(src: Any, top: Any, bottom: Any, left: Any, right: Any,
                       borderType: int, dst: Any = None, value: Any = None) -> Sym:
    import cv2

    x = _image(src, "copyMakeBorder")
    if x.dtype not in _BORDER_DTYPES:
        raise TraceError(f"cv2.copyMakeBorder of {x.dtype} (OpenCV returns another type for it)")
    if x.ndim == 3 and x.node.shape[2] == 1:  # OpenCV returns a one-channel image as HxW
        x = x[..., 0]
    sides = (top, bottom, left, right)
    if any(isinstance(v, Sym) for v in sides):
        return _into(dst, _drawn_border(x, sides, borderType, value))
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in sides):
        raise TraceError("cv2.copyMakeBorder with non-integer border widths")
    if min(sides) < 0:
        raise TraceError("cv2.copyMakeBorder with a negative border (OpenCV raises)")
    if x.ndim not in (2, 3) or (x.ndim == 3 and not isinstance(x.node.shape[2], int)):
        raise TraceError("cv2.copyMakeBorder of an array that is not HxW or HxWxC")
    kind = borderType & ~cv2.BORDER_ISOLATED
    fill = None
    if kind == cv2.BORDER_CONSTANT:
        # OpenCV's own conversion of the value (rounding, saturation, missing channels as 0).
        chans = 1 if x.ndim == 2 else x.node.shape[2]
        probe = np.zeros((1, 1, chans) if x.ndim == 3 else (1, 1), x.dtype)
        filled = cv2.copyMakeBorder(probe, 1, 0, 0, 0, cv2.BORDER_CONSTANT,
                                    value=0 if value is None else value)
        fill = np.asarray(filled)[0, 0].reshape(-1)
        if holds_in_float32(fill, x.dtype):
            # one padded read of the image, which a later crop of it narrows (one fn.slice
            # with its out-of-bounds rows and columns filled, as a crop of a pad is in DALI)
            return _into(dst, _drawn_border(x, sides, borderType, value))
    elif kind != cv2.BORDER_REPLICATE:
        raise TraceError("cv2.copyMakeBorder with a border type other than BORDER_CONSTANT or "
                         "BORDER_REPLICATE (the reflections are not lowered)")
    out = x
    if top or bottom:
        parts = ([_border_strip(out, 0, 0, int(top), fill)] if top else []) + [out] + \
            ([_border_strip(out, 0, -1, int(bottom), fill)] if bottom else [])
        out = _np_concatenate(parts, axis=0)
    if left or right:
        parts = ([_border_strip(out, 1, 0, int(left), fill)] if left else []) + [out] + \
            ([_border_strip(out, 1, -1, int(right), fill)] if right else [])
        out = _np_concatenate(parts, axis=1)
    return _into(dst, Sym(out._checked()))


def _drawn_border(x: Sym, sides: tuple, border_type: int, value: Any) -> Sym:
    """``cv2.copyMakeBorder`` with a constant border (widths per sample, or constant ones): a
    padded slice of the image (OpenCV raises cv2.error for a negative width, and so does the
    traced op)."""
    import cv2

    if border_type & ~cv2.BORDER_ISOLATED != cv2.BORDER_CONSTANT:
        raise TraceError("cv2.copyMakeBorder with per-sample border widths other than "
                         "BORDER_CONSTANT (the replicated and reflected borders are lowered for "
                         "constant widths only)")
    if x.ndim not in (2, 3) or (x.ndim == 3 and not isinstance(x.node.shape[2], int)):
        raise TraceError("cv2.copyMakeBorder of an array that is not HxW or HxWxC")
    widths = []
    for v in sides:
        if isinstance(v, Sym) and (v.ndim or v.dtype.kind not in "iu"):
            raise TraceError("cv2.copyMakeBorder with per-sample widths that are not integers")
        if not isinstance(v, (Sym, int, np.integer)) or isinstance(v, bool):
            raise TraceError("cv2.copyMakeBorder with non-integer border widths")
        widths.append(_dim(v))
    if not all(_nonneg(v) for v in widths):
        bad = ufunc("less", _dim_sym(widths[0]), 0)
        for v in widths[1:]:
            bad = ufunc("bitwise_or", bad, ufunc("less", _dim_sym(v), 0))
        raise_where(bad, cv2.error, "(-215:Assertion failed) top >= 0 && bottom >= 0 && left "
                    ">= 0 && right >= 0 && _src.dims() <= 2 in function 'copyMakeBorder'")
    top, bottom, left, right = widths
    chans = 1 if x.ndim == 2 else x.node.shape[2]
    probe = np.zeros((1, 1, chans) if x.ndim == 3 else (1, 1), x.dtype)
    fill = np.asarray(cv2.copyMakeBorder(probe, 1, 0, 0, 0, cv2.BORDER_CONSTANT,
                                         value=0 if value is None else value))[0, 0]
    n = x._checked()
    return Sym(padded_slice(n, _dop("subtract", 0, top), _dop("subtract", 0, left),
                            _dop("add", _dop("add", n.shape[0], top), bottom),
                            _dop("add", _dop("add", n.shape[1], left), right),
                            fill.reshape(-1) if x.ndim == 3 else fill.reshape(())))


def _cv_setRNGSeed(seed: Any) -> None:
    """OpenCV's generator seeded by a per-sample value: nothing to do in the graph, where
    :func:`_cv_randn`'s noise is DALI's (on the numpy path OpenCV seeds its own, as written).
    A constant seed is refused: the numpy path would then draw the same noise for every
    sample, which the graph does not."""
    if not isinstance(seed, Sym):
        raise TraceError("cv2.setRNGSeed of a constant (OpenCV's generator then draws the same "
                         "noise for every sample; seed it from the op's rng, as "
                         "albumentations does, for the noise to lower)")


def _opencv_scalar(v: Any) -> bool:
    """Whether OpenCV takes ``v`` as a Scalar (a number, or a tuple of 4), not as an array
    (other tuples, arrays)."""
    return (isinstance(v, (int, float)) and not isinstance(v, (bool, Sym))) or (
        isinstance(v, tuple) and len(v) == 4)


def _randn_per_channel(v: Any, what: str, channels: int) -> Any:
    """cv2.randn's ``mean`` or ``stddev`` as OpenCV reads it, per channel of the array, in
    float64: a number is the Scalar ``(v, 0, 0, 0)`` (the other channels get 0), a tuple or a
    1-D array one value per channel (Scalar's 4 for fewer channels), or one value for every
    channel; what OpenCV refuses, or a traced number whose kind (number or 0-d array) decides,
    is refused."""
    from augment_ops.trace.creation import np_array

    if isinstance(v, Sym) and v.ndim == 0 and channels > 1:
        raise TraceError(f"cv2.randn with one traced {what} for an array of {channels} "
                         "channels (OpenCV takes a number as (v, 0, 0, 0) and a 0-d array as "
                         "v for every channel); pass a tuple of one value per channel")
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, np.generic) and
                                          not isinstance(v, np.float64)):
        raise TraceError(f"cv2.randn with a {what} of type {type(v).__name__}")
    if isinstance(v, (int, float)) and not isinstance(v, Sym):
        return float(v) if channels == 1 else np.array([float(v)] + [0.0] * (channels - 1))
    scalar_form = _opencv_scalar(v)
    if isinstance(v, tuple):
        if any(isinstance(x, Sym) for x in v):
            v = np_array(list(v), np.float64)
        else:
            v = np.asarray(v, dtype=np.float64)
    elif not isinstance(v, (Sym, np.ndarray)):
        raise TraceError(f"cv2.randn with a {what} of type {type(v).__name__}")
    size = (v.node.shape[0] if v.ndim == 1 else 1) if isinstance(v, Sym) else v.size
    if v.ndim > 1 or not isinstance(size, int):
        raise TraceError(f"cv2.randn with a {what} of more than one axis")
    flat = v.astype(np.float64).reshape(-1) if isinstance(v, Sym) else v.reshape(-1)
    if size == 1:
        return flat[0]
    if size == channels or (size == 4 and channels < 4 and scalar_form):
        return flat[:channels] if channels > 1 else flat[0]
    raise TraceError(f"cv2.randn with a {what} of {size} values for an array of {channels} "
                     "channels")


def _cv_randn(dst: Any, mean: Any, stddev: Any) -> Sym:
    """``cv2.randn(dst, mean, stddev)`` into a traced float array: normal noise of each
    channel's mean and standard deviation as OpenCV reads them (:func:`_randn_per_channel`),
    drawn by DALI's generator on the native path as ``rng.normal`` of the image's shape is
    (the distribution of OpenCV's, not its numbers)."""
    from augment_ops.trace.ir import _TRACING

    if not isinstance(dst, Sym) or dst.dtype.kind != "f" or dst.ndim not in (2, 3):
        raise TraceError("cv2.randn into something other than a traced float array of 2 or 3 "
                         "axes (made with np.zeros(img.shape), say; OpenCV rounds and "
                         "saturates into an integer one)")
    channels = dst.node.shape[2] if dst.ndim == 3 else 1
    if not isinstance(channels, int):
        raise TraceError("cv2.randn into an array whose channel count is per-sample")
    if not dst._writable:
        raise TraceError("cv2.randn into the input image or a view of it")
    _whole_array(dst)
    m = _randn_per_channel(mean, "mean", channels)
    sd = _randn_per_channel(stddev, "stddev", channels)
    if _opencv_scalar(stddev) and not _opencv_scalar(mean):
        # OpenCV asserts that an array mean comes with an array stddev
        raise TraceError("cv2.randn with a mean of one form (a tuple of other than 4 values, "
                         "or an array) and a stddev of the other (a number or 4 values): "
                         "OpenCV refuses the pair")
    session = _TRACING.active
    session.library_draws += 1
    dims = list(dst.node.shape)
    noise = Sym(_new("noise", tuple(dims), ("normal", -session.library_draws, "cv2.randn"),
                     np.float64, tuple(dims)))
    dst[...] = (m + sd * noise).astype(dst.dtype)
    return dst


#: cv2 functions of OpenCV's global generator: never run as they are while tracing (their
#: draws would be frozen into the graph), but lowered (a handler) or refused.
_RANDOM = ("randn", "randu", "randShuffle", "setRNGSeed", "theRNG")

#: The cv2 functions lowered, by name: exactly, but for randn's noise (DALI's generator).
CV2_HANDLERS: dict[str, Callable[..., Any]] = {
    "cvtColor": _cv_cvtColor,
    "LUT": _cv_LUT,
    "flip": _cv_flip,
    "merge": _cv_merge,
    "split": _cv_split,
    "copyMakeBorder": _cv_copyMakeBorder,
    "warpAffine": warp_affine,
    "mixChannels": _cv_mixChannels,
    "addWeighted": _cv_addWeighted,
    "transform": _cv_transform,
    **{name: _arith_handler(name) for name in ARITH_OPS},
    "convertScaleAbs": _cv_convertScaleAbs,
    "randn": _cv_randn,
    "setRNGSeed": _cv_setRNGSeed,
}


#: cv2 functions that make an object whose methods take images, none of them lowered.
_MADE_OBJECTS = ("createCLAHE",)


class _Refusing:
    """An OpenCV object (a CLAHE) made while tracing: its methods given a traced array are
    refused with why (:data:`_WHY_NOT` of the function that made it), the rest are its own."""

    def __init__(self, real: Any, made_by: str) -> None:
        self._real, self._made_by = real, made_by

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self._real, attr)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if _has_sym(args, kwargs):
                why = _WHY_NOT.get(self._made_by, "not lowered")
                raise TraceError(f"cv2.{self._made_by}(...).{attr} ({why}); the op runs on "
                                 "the numpy path")
            return method(*args, **kwargs)
        return call


def _new_arrays(got: Any, given: tuple) -> Any:
    """The traced arrays a cv2 handler returned, as the new C-contiguous arrays OpenCV makes
    (:func:`augment_ops.trace.pairwise.made_new`); an array it was given (``dst=``) as it is."""
    if isinstance(got, Sym):
        if any(got is g for g in given):
            return got
        node = got._checked()
        made = made_new(node)
        return got if made is node else Sym(made)
    if isinstance(got, (list, tuple)) and any(isinstance(g, Sym) for g in got):
        return type(got)(_new_arrays(g, given) for g in got)
    return got


def _wrapper(name: str, real: Any) -> Callable[..., Any]:
    """cv2's ``name`` while tracing: lowered (:data:`CV2_HANDLERS`) or refused when given a
    traced array, OpenCV's own ``real`` function otherwise, but for the functions of OpenCV's
    generator (:data:`_RANDOM`), which are never run as they are."""
    handler = CV2_HANDLERS.get(name)

    def f(*args: Any, **kwargs: Any) -> Any:
        if not _has_sym(args, kwargs) and name not in _RANDOM:
            got = real(*args, **kwargs)
            return _Refusing(got, name) if name in _MADE_OBJECTS else got
        if handler is not None:
            return _new_arrays(handler(*args, **kwargs), (*args, *kwargs.values()))
        why = _WHY_NOT.get(name, "not lowered: only cv2." + ", cv2.".join(CV2_HANDLERS) + " are")
        raise TraceError(f"cv2.{name} ({why}); the op runs on the numpy path")
    f.__name__ = f.__qualname__ = name
    f.__wrapped__ = real  # type: ignore[attr-defined]
    return f


_LOCK = threading.Lock()
#: Traces running, {name: OpenCV's function}, then what restores PIL (pil_api.install_pil).
_installed: list[Any] = [0, {}]


@contextmanager
def cv2_installed() -> Iterator[None]:
    """While tracing: every function of an imported ``cv2`` module is replaced by its
    :func:`_wrapper`, so that an op's helpers and the libraries it calls reach the handlers as
    well as its own code (a call on real arrays, from any thread, is OpenCV's own); and
    ``PIL.Image.fromarray`` of a traced array gives a traced image (:mod:`.pil_api`).
    Restored when the last trace running ends."""
    cv2 = sys.modules.get("cv2")
    with _LOCK:
        if _installed[0] == 0:
            saved = {}
            for name in dir(cv2) if cv2 is not None else ():
                v = getattr(cv2, name, None)
                if not name.startswith("_") and isinstance(v, types.BuiltinFunctionType):
                    saved[name] = v
                    setattr(cv2, name, _wrapper(name, v))
            _installed[1] = saved
            _installed.append(install_pil())
        _installed[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _installed[0] -= 1
            if _installed[0] == 0:
                for name, v in _installed[1].items():
                    setattr(cv2, name, v)
                _installed[1] = {}
                restore = _installed.pop()
                if restore is not None:
                    restore()


def _sz_lut(img: Any, lut: Any, inplace: bool = True) -> Any:
    """albucore's ``sz_lut(img, lut, inplace)``: ``lut[img]`` (uint8 tables and images)."""
    if not isinstance(img, Sym):
        raise TraceError("albucore.sz_lut of a constant image with a traced table")
    if img.dtype != np.uint8:
        raise TraceError(f"albucore.sz_lut of a {img.dtype} image (it translates bytes)")
    table = lut if isinstance(lut, Sym) else np.asarray(lut)
    if table.dtype != np.uint8:
        raise TraceError(f"albucore.sz_lut with a {table.dtype} table (it translates bytes)")
    out = lookup(table, img)
    if inplace:
        return _into(img, out)
    return out


def library_handlers() -> dict[int, tuple[Any, Callable[..., Any]]]:
    """Library helpers lowered while tracing, by ``id`` of the real function: ``(real, traced)``
    (only those of libraries already imported)."""
    found: dict[int, tuple[Any, Callable[..., Any]]] = {}
    albucore = sys.modules.get("albucore")
    if albucore is not None:
        for mod in (albucore, sys.modules.get("albucore.utils"),
                    sys.modules.get("albucore.functions")):
            real = getattr(mod, "sz_lut", None) if mod is not None else None
            if real is not None:
                found[id(real)] = (real, _sz_lut)
    return found


def wrap_library(real: Any, traced: Callable[..., Any]) -> Callable[..., Any]:
    """``traced`` where a traced array is passed, else the library's own ``real``."""
    def f(*args: Any, **kwargs: Any) -> Any:
        if _has_sym(args, kwargs):
            return traced(*args, **kwargs)
        return real(*args, **kwargs)
    return f
