"""``cv2.warpAffine`` by a constant whole-pixel translation (mmcv's ``imtranslate``, the
translations of AutoAugment policies): a padded slice of the image.

A matrix ``[[1, 0, tx], [0, 1, ty]]`` with integer ``tx`` and ``ty`` moves every pixel by whole
pixels: OpenCV's interpolation weights are then 1 for the source pixel and 0 for its neighbours
(nearest and bilinear, fixed-point or not), so each output pixel is a source pixel, and the
border OpenCV's constant fill where the source falls outside the image. Bilinear adds each
neighbour times its weight, 0 included: for float images it is lowered only where no value can
be infinite or NaN (an infinity times 0 is NaN). That is
:func:`augment_ops.trace.indexing.padded_slice`, exact. Any other matrix resamples, with
OpenCV's fixed-point arithmetic, which DALI's ``warp_affine`` does not reproduce: refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from augment_ops.trace.facts import _no_nan, linear_form, lower, no_negative_zero, sound, upper
from augment_ops.trace.indexing import padded_slice
from augment_ops.trace.ir import TraceError
from augment_ops.trace.sym import Sym, _dim

__all__ = ["warp_affine"]

_RESAMPLES = ("OpenCV's fixed-point interpolation differs from DALI's warp_affine; only a "
              "constant whole-pixel translation, [[1, 0, tx], [0, 1, ty]] with integer tx "
              "and ty, is lowered")


def _translation(M: Any, inverse: bool) -> tuple[int, int]:
    """The whole-pixel offset ``(dx, dy)`` at which output pixel ``(x, y)`` reads the source,
    ``(x + dx, y + dy)``, for matrix ``M``; raises :class:`TraceError` for any other matrix."""
    if isinstance(M, Sym):
        raise TraceError(f"cv2.warpAffine with a per-sample matrix ({_RESAMPLES})")
    m = np.asarray(M, dtype=np.float64)  # OpenCV reads the matrix as double
    if m.shape != (2, 3) or not np.all(np.isfinite(m)):
        raise TraceError(f"cv2.warpAffine with a matrix of shape {list(m.shape)}")
    tx, ty = m[0, 2], m[1, 2]
    if m[0, 0] != 1 or m[0, 1] != 0 or m[1, 0] != 0 or m[1, 1] != 1 or tx != int(tx) or \
            ty != int(ty) or max(abs(tx), abs(ty)) >= 2 ** 31:
        raise TraceError(f"cv2.warpAffine by {m.tolist()} ({_RESAMPLES})")
    # Without WARP_INVERSE_MAP, OpenCV inverts the matrix: the output at (x, y) reads the
    # source at (x - tx, y - ty).
    return (int(tx), int(ty)) if inverse else (-int(tx), -int(ty))


def _fill(x: Sym, border_value: Any, interpolation: int) -> np.ndarray:
    """OpenCV's own border value for ``x``'s dtype and channels: a 1x1 image warped entirely
    outside itself (its conversion of the value: rounding, saturation, missing channels)."""
    import cv2

    chans = 1 if x.ndim == 2 else int(x.node.shape[2])
    probe = np.zeros((1, 1, chans) if x.ndim == 3 else (1, 1), x.dtype)
    far = np.float64([[1, 0, 8], [0, 1, 8]])
    value = 0 if border_value is None else border_value
    out = cv2.warpAffine(probe, far, (1, 1), flags=interpolation,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=value)
    return np.asarray(out).reshape(-1)


def warp_affine(src: Any, M: Any, dsize: Any, dst: Any = None, flags: int | None = None,
                borderMode: int | None = None, borderValue: Any = None) -> Sym:
    """``cv2.warpAffine`` of a traced image by a constant whole-pixel translation into an
    output of the image's own size (see the module)."""
    import cv2

    if not isinstance(src, Sym):
        raise TraceError("cv2.warpAffine of a constant with a traced argument")
    if dst is not None:
        raise TraceError("cv2.warpAffine with dst=")
    x = src
    if x.ndim not in (2, 3) or (x.ndim == 3 and not isinstance(x.node.shape[2], int)):
        raise TraceError("cv2.warpAffine of an array that is not HxW or HxWxC")
    flags = cv2.INTER_LINEAR if flags is None else int(flags)
    interpolation = flags & cv2.INTER_MAX
    if interpolation not in (cv2.INTER_NEAREST, cv2.INTER_LINEAR) or \
            flags & ~(cv2.INTER_MAX | cv2.WARP_INVERSE_MAP):
        raise TraceError(f"cv2.warpAffine with flags={flags} (nearest and bilinear "
                         "interpolation are lowered, for whole-pixel translations)")
    border = cv2.BORDER_CONSTANT if borderMode is None else int(borderMode)
    if border != cv2.BORDER_CONSTANT:
        raise TraceError("cv2.warpAffine with a border mode other than BORDER_CONSTANT")
    if isinstance(borderValue, Sym) or (isinstance(borderValue, (tuple, list)) and any(
            isinstance(v, Sym) for v in borderValue)):
        raise TraceError("cv2.warpAffine with a per-sample border value")
    _opencv_accepts(x, M, flags, border, borderValue)
    dx, dy = _translation(M, bool(flags & cv2.WARP_INVERSE_MAP))
    if isinstance(dsize, Sym) or not isinstance(dsize, (tuple, list)) or len(dsize) != 2:
        raise TraceError("cv2.warpAffine with a dsize that is not a (width, height) pair")
    height, width = x.node.shape[0], x.node.shape[1]
    try:
        same = [linear_form(_dim(v)) == linear_form(d) is not None
                for v, d in zip(dsize, (width, height), strict=True)]
    except TraceError:
        same = [False]
    if not all(same):
        raise TraceError("cv2.warpAffine into a size other than the image's own (width, "
                         "height): its output would be resampled or cropped")
    fill = _fill(x, borderValue, interpolation)
    if interpolation == cv2.INTER_LINEAR and x.dtype.kind == "f" and not (
            _finite(x._checked()) and no_negative_zero(x._checked()) and
            np.all(np.isfinite(fill)) and not np.any((fill == 0) & np.signbit(fill))):
        # OpenCV still adds the neighbour times a weight of 0: an infinity there gives NaN,
        # and -0.0 + 0.0 gives 0.0
        raise TraceError("cv2.warpAffine with bilinear interpolation of float values that may "
                         "be infinite, NaN or -0.0 (OpenCV adds each neighbour times its "
                         "weight, 0 included, so an infinity beside a pixel makes it NaN and "
                         "-0.0 becomes 0.0; use INTER_NEAREST, or keep the values finite and "
                         "add 0.0)")
    return Sym(padded_slice(x._checked(), dy, dx, height, width, fill))


def _finite(n: Any) -> bool:
    """Whether every value of float node ``n`` is finite, for any image: sound finite bounds
    and no NaN, integers converted, or such a value divided by a constant of magnitude >= 1
    (``img.astype(np.float32) / 255``)."""
    lo, up = lower(n), upper(n)
    if lo is not None and up is not None and np.isfinite(lo) and np.isfinite(up) and \
            sound(n) and _no_nan(n):
        return True
    if n.op == "cast":
        return n.args[0].dtype.kind in "biu" or _finite(n.args[0])
    if n.op == "bin" and n.attrs[0] == "divide" and n.args[1].op == "const":
        b = np.asarray(n.args[1].value, np.float64)
        return bool(np.all(np.isfinite(b)) and np.all(np.abs(b) >= 1)) and _finite(n.args[0])
    return False


def _opencv_accepts(x: Sym, M: Any, flags: int, border: int, border_value: Any) -> None:
    """Raise :class:`TraceError` where OpenCV raises for these arguments on every image (a
    matrix as a list, or of integers): OpenCV itself is called on a 2x2 image of ``x``'s dtype
    and channels."""
    import cv2

    if isinstance(M, Sym):
        return  # refused by _translation
    chans = 1 if x.ndim == 2 else int(x.node.shape[2])
    probe = np.zeros((2, 2, chans) if x.ndim == 3 else (2, 2), x.dtype)
    try:
        cv2.warpAffine(probe, M, (2, 2), flags=flags, borderMode=border,
                       borderValue=0 if border_value is None else border_value)
    except Exception as e:
        raise TraceError(f"cv2.warpAffine raises for these arguments on every image "
                         f"({type(e).__name__}: {str(e).strip()[:200]})") from None
