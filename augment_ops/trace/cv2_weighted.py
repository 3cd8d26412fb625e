"""``cv2.addWeighted(src1, alpha, src2, beta, gamma)`` as traced arithmetic that gives OpenCV's
bits, for uint8 images and float32 arrays holding uint8 values.

OpenCV computes ``src1 * alpha + (src2 * beta + gamma)`` in float32 with the weights rounded to
float32: its vector code as two fused multiply-adds (one rounding each), its scalar code (rows
shorter than a vector) as ``(src1 * alpha + round(src2 * beta)) + gamma``; uint8 results are
rounded half to even and saturated. The lowering computes the vector code's form: each fused
multiply-add as a float64 multiply-add rounded to float32 (the product of a uint8 value and a
float32 weight is exact in float64, the sum nearly always is).

"Nearly always" is not exact, and the two code paths differ for some weights. So at trace time,
for the op's constant weights, OpenCV itself is run on every pair of uint8 values through both
code paths and compared with the lowering's arithmetic, bit for bit: the call lowers only where
all three agree on all 65,536 pairs, so the pixels are OpenCV's whatever the image's layout and
size. Weights drawn per sample cannot be checked so, and are refused.

``cv2.transform`` of a uint8 RGB image by a 3x3 colour matrix (albumentations' ``ToSepia``) is
OpenCV's fixed-point arithmetic, weights rounded to multiples of 1/1024 and integer sums; it is
checked the same way, on all 2**24 colours, for each constant matrix.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, TraceError
from augment_ops.trace.lower_patterns import _fill_constant
from augment_ops.trace.sym import Sym

__all__ = ["add_weighted", "transform", "weights_exact"]


def _byte_valued(n: Node) -> bool:
    """Whether every value of ``n`` is an integer 0..255: a uint8 array, a cast of one (or of
    booleans), or an array filled with such a constant."""
    if n.dtype == np.uint8:
        return True
    if n.op == "cast" and isinstance(n.args[0], Node) and n.args[0].dtype in (np.uint8,
                                                                               np.bool_):
        return True
    f = _fill_constant(n)
    return f is not None and float(f) in range(256)


def _model(a: np.ndarray, b: np.ndarray, alpha: float, beta: float, gamma: float,
           dtype: np.dtype) -> np.ndarray:
    """What the lowered graph computes, in numpy (the same float64 and float32 steps)."""
    f64, f32 = np.float64, np.float32
    wa, wb, wg = (f64(f32(w)) for w in (alpha, beta, gamma))
    inner = (b.astype(f64) * wb + wg).astype(f32)
    out = (a.astype(f64) * wa + inner.astype(f64)).astype(f32)
    if dtype == np.uint8:
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return out


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.tobytes() == y.tobytes()


@functools.cache
def weights_exact(alpha: float, beta: float, gamma: float, dtype: str) -> str | None:
    """None where OpenCV's ``addWeighted`` with these weights equals the lowering's arithmetic
    on every pair of uint8 values (as ``dtype``, uint8 or float32) through its vector and its
    scalar code, else why not."""
    import cv2

    dt = np.dtype(dtype)
    v = np.arange(256, dtype=np.uint8)
    a, b = (x.astype(dt) for x in np.meshgrid(v, v, indexing="ij"))
    want = _model(a, b, alpha, beta, gamma, dt)
    # Rows of 256 values: the vector code; single-value rows of a strided view: the scalar code.
    vector = cv2.addWeighted(np.ascontiguousarray(a), alpha, np.ascontiguousarray(b), beta, gamma)

    def column(x: np.ndarray) -> np.ndarray:
        wide = np.zeros((x.size, 2), dt)
        wide[:, 0] = x.reshape(-1)
        return wide[:, :1]
    scalar = cv2.addWeighted(column(a), alpha, column(b), beta, gamma).reshape(a.shape)
    if not _same_bits(np.asarray(vector), np.asarray(scalar)):
        return ("with these weights OpenCV's vector and scalar code give different results, "
                "so its pixels depend on the image's size and memory layout")
    if not _same_bits(np.asarray(vector), want):
        return ("with these weights a float64 multiply-add rounded to float32 does not give "
                "OpenCV's fused multiply-add on every pair of uint8 values")
    return None


def add_weighted(src1: Any, alpha: Any, src2: Any, beta: Any, gamma: Any,
                 dtype: int = -1) -> Sym:
    """OpenCV's ``addWeighted`` of two traced arrays (see the module docstring)."""
    if not (isinstance(src1, Sym) and isinstance(src2, Sym)):
        raise TraceError("cv2.addWeighted of a constant array and a traced one")
    if any(isinstance(w, Sym) for w in (alpha, beta, gamma)):
        raise TraceError("cv2.addWeighted with a per-sample weight (OpenCV's rounding is "
                         "checked for each constant weight at trace time; write the weighted "
                         "sum in numpy, with numpy's results)")
    if dtype not in (-1, None):
        raise TraceError("cv2.addWeighted with dtype=")
    dt = src1.dtype
    if src2.dtype != dt or src1.ndim != src2.ndim or any(
            x is not y and x != y for x, y in zip(src1.node.shape, src2.node.shape,
                                                  strict=True)):
        raise TraceError("cv2.addWeighted of arrays of different dtypes or shapes (OpenCV "
                         "raises)")
    if dt not in (np.uint8, np.float32):
        raise TraceError(f"cv2.addWeighted of {dt} arrays (uint8 and float32 are lowered)")
    if not (_byte_valued(src1._checked()) and _byte_valued(src2._checked())):
        raise TraceError("cv2.addWeighted of float32 values other than uint8 ones (OpenCV's "
                         "fused multiply-adds are checked on every pair of uint8 values; on "
                         "arbitrary float32 values they cannot be; write the weighted sum in "
                         "numpy, with numpy's results)")
    weights = tuple(float(w) for w in (alpha, beta, gamma))
    why = weights_exact(*weights, dt.str)
    if why is not None:
        raise TraceError(f"cv2.addWeighted ({why}; write the weighted sum in numpy, with "
                         "numpy's results)")
    # The graph is the model the trace-time check ran: the same steps on the traced arrays.
    return _model(src1, src2, *weights, dt)


# -- cv2.transform ---------------------------------------------------------------------------
#: OpenCV's fixed-point scale for ``transform`` of uint8 images with 3 channels in and out.
_TRANSFORM_BITS = 10


def _transform_model(x: Any, weights: tuple[tuple[int, int, int], ...]) -> Any:
    """OpenCV's fixed-point ``transform`` of uint8 RGB values ``x`` (an array or a traced one):
    per output channel ``(w0 * c0 + w1 * c1 + w2 * c2 + 512) >> 10``, saturated to uint8."""
    chans = [x[..., j].astype(np.int32) for j in range(3)]
    rows = []
    for w in weights:
        acc = chans[0] * w[0] + chans[1] * w[1] + chans[2] * w[2] + (1 << (_TRANSFORM_BITS - 1))
        rows.append(np.clip(acc >> _TRANSFORM_BITS, 0, 255).astype(np.uint8))
    return np.stack(rows, axis=-1)


@functools.cache
def _transform_weights(matrix: bytes) -> tuple[tuple[tuple[int, int, int], ...] | None, str]:
    """The fixed-point weights of a 3x3 float64 matrix (its bytes) where OpenCV's
    ``transform`` equals :func:`_transform_model` on every one of the 2**24 colours and on a
    row shorter than its vectors; else ``(None, why not)``."""
    import cv2

    m = np.frombuffer(matrix, np.float64).reshape(3, 3)
    m32 = m.astype(np.float32)  # OpenCV reads the matrix as float for uint8 images
    if not np.all(np.abs(m32) < 1 << (15 - _TRANSFORM_BITS)):
        return None, ("a weight of 32 or more, which OpenCV computes in float32 instead of "
                      "fixed point")
    weights = tuple(tuple(int(v) for v in row) for row in
                    np.rint(m32 * np.float32(1 << _TRANSFORM_BITS)).astype(np.int64))
    c = np.arange(1 << 24, dtype=np.uint32)
    every = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8)
    for img in (every.reshape(4096, 4096, 3), every[::40_000][:5].reshape(1, 5, 3)):
        if not _same_bits(np.asarray(cv2.transform(img, m)), _transform_model(img, weights)):
            return None, ("with this matrix OpenCV's result is not its fixed-point arithmetic "
                          "on every colour")
    return weights, ""


def transform(src: Any, m: Any) -> Sym:
    """OpenCV's ``transform`` of a traced uint8 RGB image by a constant 3x3 matrix (a colour
    matrix: albumentations' ``ToSepia``), checked against OpenCV on every colour at trace time
    (:func:`_transform_weights`)."""
    if not isinstance(src, Sym):
        raise TraceError("cv2.transform of a constant with a traced argument")
    if isinstance(m, Sym):
        raise TraceError("cv2.transform by a per-sample matrix (OpenCV's fixed-point rounding "
                         "is checked for each constant matrix at trace time; write the sums "
                         "in numpy, with numpy's results)")
    import cv2

    chans = src.node.shape[2] if src.ndim == 3 else 1
    try:  # OpenCV's own checks of the matrix (a list, an integer matrix, a wrong shape)
        if isinstance(chans, int) and src.ndim in (2, 3):
            cv2.transform(np.zeros((1, 1, chans) if src.ndim == 3 else (1, 1), src.dtype), m)
    except Exception as e:
        raise TraceError(f"cv2.transform raises for this matrix on every image "
                         f"({type(e).__name__}: {str(e).strip()[:200]})") from None
    mat = np.asarray(m, dtype=np.float64)
    if mat.shape == (3, 4) and not mat[:, 3].any():
        mat = mat[:, :3]
    if src.dtype != np.uint8 or src.ndim != 3 or src.node.shape[2] != 3 or mat.shape != (3, 3):
        raise TraceError("cv2.transform other than of a uint8 image with 3 channels by a "
                         "3x3 matrix (OpenCV computes those in fixed point; the others in "
                         "float32 are not lowered)")
    weights, why = _transform_weights(np.ascontiguousarray(mat).tobytes())
    if weights is None:
        raise TraceError(f"cv2.transform ({why}; write the sums in numpy, with numpy's "
                         "results)")
    return _transform_model(src, weights)
