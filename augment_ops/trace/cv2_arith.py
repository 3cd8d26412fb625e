"""OpenCV's saturating arithmetic (``cv2.add``, ``subtract``, ``multiply``, ``divide``,
``absdiff``, ``convertScaleAbs``) as traced numpy arithmetic that gives OpenCV's bits.

What OpenCV 5 computes, measured with cv2 itself (``tests/test_trace_cv2_arith.py`` pins it):

* uint8 images: two arrays are added, subtracted and differenced exactly and saturated; a
  scalar (a Python number, ``np.float64``, a tuple or a ``Scalar``: one value per channel; a
  lone number counts for every channel) is first rounded to an integer (``cvRound``: half to
  even) for ``add``/``subtract``/``absdiff``, while ``multiply``/``divide`` by a scalar work in
  float64; results are rounded half to even and saturated, and a division by 0 gives 0.
  ``multiply``/``divide`` of two arrays with a ``scale`` work in float32, ``scale * a`` first.
* float32 images: IEEE float32 arithmetic (``x / 0`` is inf or NaN); a scalar is rounded to
  float32 for ``add``/``subtract``/``absdiff``, while ``multiply``/``divide`` by a scalar work
  in float64 and round the result to float32.
* ``dtype=cv2.CV_32F``/``CV_64F`` works in that type without rounding the scalar.
* ``convertScaleAbs``: ``saturate(|x * alpha + beta|)``, a fused multiply-add in float32.

Each lowering is one numpy expression (:func:`_model`) that the tracer lowers exactly as numpy
computes it. Where the operands other than the image are constants, the same expression is run
in numpy at trace time and compared with OpenCV bit for bit, through its vector code (long rows)
and its scalar code (one pixel a row): on every uint8 value (and every pair of uint8 values for
two arrays), or on a fixed sample of float32 values; the call lowers only where all agree.
A per-sample scalar cannot be checked so: it is lowered for ``add``/``subtract``/``absdiff``/
``multiply``/``divide`` by one number whose bounds the tracer knows (OpenCV's integer
conversion overflows beyond them), the expressions being the ones the tests compare with
OpenCV over many scalars.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from augment_ops.trace.facts import lower, upper
from augment_ops.trace.ir import TraceError
from augment_ops.trace.sym import Sym

__all__ = ["ARITH_OPS", "arith", "convert_scale_abs"]

#: The two-operand functions lowered, each with whether it takes ``scale=``.
ARITH_OPS = {"add": False, "subtract": False, "absdiff": False, "multiply": True,
             "divide": True}

#: The largest per-sample scalar magnitude lowered for a uint8 result: OpenCV rounds to a 32-bit
#: integer (a product up to 255 times the scalar), which overflows beyond.
_INT_SAFE = float(2 ** 31 // 256)
#: The smallest per-sample divisor magnitude lowered for a uint8 result (255 / it < 2**31).
_TINY = 2.0 ** -20


def _depth_dtype(depth: int) -> np.dtype | None:
    import cv2

    return {cv2.CV_8U: np.dtype(np.uint8), cv2.CV_32F: np.dtype(np.float32),
            cv2.CV_64F: np.dtype(np.float64)}.get(depth)


def _sat_u8(v: Any) -> Any:
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)


def _model(op: str, x: Any, y: Any, scalar: bool, swap: bool, scale: float,
           out: np.dtype) -> Any:
    """OpenCV's ``op`` of image ``x`` and ``y`` (an array like ``x``, or with ``scalar`` float64
    values per channel, broadcast), ``y`` first where ``swap``, in numpy: on arrays at trace
    time, on the traced image when lowering (the same expression, so the same bits)."""
    f64 = np.float64
    if out == np.uint8:
        if not scalar:
            if op in ("add", "subtract", "absdiff"):
                a, b = x.astype(np.int32), y.astype(np.int32)
                if swap:
                    a, b = b, a
                v = a + b if op == "add" else a - b
                return np.clip(np.abs(v) if op == "absdiff" else v, 0, 255).astype(np.uint8)
            a, b = x.astype(np.float32), y.astype(np.float32)
            if swap:
                a, b = b, a
            if op == "multiply":
                return _sat_u8(a * b if scale == 1 else np.float32(scale) * a * b)
            return _sat_u8(np.float32(scale) * a / (b + (b == 0))) * (b != 0)
        a = x.astype(f64)
        if op in ("add", "subtract", "absdiff"):
            b = np.rint(y)
            if swap:
                a, b = b, a
            v = a + b if op == "add" else a - b
            return _sat_u8(np.abs(v) if op == "absdiff" else v)
        b = y * f64(scale) if scale != 1 else y
        if op == "multiply":
            return _sat_u8(a * b)
        num, den = (b, a) if swap else (a, b)
        # times "not 0" rather than np.where: the divisor may be the constant scalar
        return _sat_u8(num / (den + (den == 0))) * (den != 0)
    t = out.type
    a = x.astype(out)
    if not scalar or op in ("add", "subtract", "absdiff"):
        b = y.astype(out)
        if swap:
            a, b = b, a
        if op == "add":
            return a + b
        if op == "subtract":
            return a - b
        if op == "absdiff":
            return np.abs(a - b)
        if scale != 1:
            a = t(scale) * a
        return a * b if op == "multiply" else a / b
    a = a.astype(f64)
    b = y * f64(scale) if scale != 1 else y
    if op == "multiply":
        return (a * b).astype(out)
    return ((b / a) if swap else (a / b)).astype(out)


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


def _float_probe() -> np.ndarray:
    """A fixed sample of float32 values: bytes, halves, small and large magnitudes, zeros."""
    rng = np.random.default_rng(0)
    parts = [np.arange(256), np.arange(-4, 260) + 0.5, rng.uniform(-1, 1, 1024),
             rng.uniform(-1e4, 1e4, 1024), rng.standard_normal(512) * 1e-3, [0.0, -0.0]]
    return np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)


def _paths(call: Any, a: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's result on rows of ``a`` (and ``b``), through its vector code (one long row) and
    its scalar code (one pixel a row of a strided view), as one long row each."""
    def column(x: np.ndarray) -> np.ndarray:
        wide = np.zeros((x.shape[1], 2, *x.shape[2:]), x.dtype)
        wide[:, 0] = x[0]
        return wide[:, :1]
    vector = np.asarray(call(a, b))
    scalar = np.asarray(call(column(a), None if b is None else column(b)))
    return vector, scalar.reshape(vector.shape)


@functools.cache
def _checked(op: str, src: str, chans: int, value: tuple | None, swap: bool, scale: float,
             out: str) -> str | None:
    """None where :func:`_model` is OpenCV's ``op`` on every probe value of dtype ``src``
    (with ``chans`` channels, 0 for a 2-D image), by the constant scalar ``value`` (OpenCV's
    per-channel float64 values) or, where None, with a second array, else why not."""
    import cv2

    sdt, odt = np.dtype(src), np.dtype(out)
    base = np.arange(256).astype(sdt) if sdt == np.uint8 else _float_probe()
    if value is None:
        base, other = (base.repeat(base.size), np.tile(base, base.size)) if sdt == np.uint8 \
            else (base, _float_probe()[::-1].copy())
    else:
        other = None
    shape = (1, base.size) if chans == 0 else (1, base.size, chans)

    def image(v: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(v.reshape(1, -1, *([1] if chans else [])),
                                                    shape))
    a, b = image(base), None if other is None else image(other)
    depth = {np.dtype(np.uint8): cv2.CV_8U, np.dtype(np.float32): cv2.CV_32F,
             np.dtype(np.float64): cv2.CV_64F}[odt]
    kw: dict[str, Any] = {"dtype": depth}
    if ARITH_OPS[op]:
        kw["scale"] = scale
    if op == "absdiff":
        kw = {}
    fn = getattr(cv2, op)

    def call(p: np.ndarray, q: np.ndarray | None) -> Any:
        second = q if q is not None else (value[0] if len(value) == 1 else value)
        return fn(second, p, **kw) if swap else fn(p, second, **kw)
    try:
        vector, scalar = _paths(call, a, b)
    except cv2.error as e:
        return f"OpenCV raises: {str(e).strip().splitlines()[-1]}"
    if not _same_bits(vector, scalar):
        return ("OpenCV's vector and scalar code give different results here, so its pixels "
                "depend on the image's size and memory layout")
    y = b if value is None else np.asarray(value[:max(chans, 1)], np.float64)
    if value is not None and chans == 0:
        y = y[0]
    with np.errstate(all="ignore"):
        want = _model(op, a, y, value is not None, swap, scale, odt)
    if not _same_bits(vector, np.asarray(want)):
        return "its arithmetic here is not the one lowered (checked against OpenCV at trace time)"
    return None


def _scalar_values(value: Any, chans: int, name: str) -> tuple[float, ...]:
    """OpenCV's float64 value per channel of a constant scalar operand (asked of OpenCV itself:
    a lone number counts for every channel, a tuple is padded with zeros)."""
    import cv2

    probe = np.zeros((2, 2, chans) if chans else (2, 2), np.float64)
    try:
        got = np.asarray(cv2.add(probe, value))
    except cv2.error as e:
        raise TraceError(f"cv2.{name} with a second operand OpenCV refuses "
                         f"({str(e).strip().splitlines()[-1]})") from None
    return tuple(float(v) for v in got.reshape(-1, max(chans, 1))[0])


def _drawn(value: Sym, name: str, out: np.dtype, divisor: bool) -> Sym:
    """A per-sample scalar operand, checked as OpenCV takes it (a Python number or
    ``np.float64``) and bounded where OpenCV's integer conversion would overflow (for a
    ``divisor``, also away from 0)."""
    n = value._checked()
    if n.ndim != 0:
        raise TraceError(f"cv2.{name} with a per-sample array operand (only a per-sample number "
                         "or an image is lowered)")
    if not (n.weak or n.dtype == np.float64):
        raise TraceError(f"cv2.{name} with a {n.dtype} scalar (OpenCV raises: it takes a Python "
                         "number or np.float64)")
    if out == np.uint8:
        lo, up = lower(n), upper(n)
        if lo is None or up is None or not -_INT_SAFE <= lo <= up <= _INT_SAFE:
            raise TraceError(f"cv2.{name} of a uint8 image by a per-sample number the tracer "
                             f"cannot bound within +-{_INT_SAFE:g} (OpenCV's conversion to an "
                             "integer overflows beyond)")
        if divisor and lo < _TINY and up > -_TINY:
            raise TraceError(f"cv2.{name} of a uint8 image by a per-sample number the tracer "
                             f"cannot keep away from 0 by {_TINY:g} (OpenCV's conversion of "
                             "the quotient to an integer overflows there)")
    return value.astype(np.float64)


def arith(name: str, src1: Any, src2: Any, *, scale: Any = 1.0, dtype: Any = -1,
          mask: Any = None) -> Sym:
    """OpenCV's ``name`` (one of :data:`ARITH_OPS`) where ``src1`` or ``src2`` is traced (see
    the module docstring); the result, not yet written into ``dst``."""
    if mask is not None:
        raise TraceError(f"cv2.{name} with mask=")
    if isinstance(src2, (list, tuple)) and any(isinstance(v, Sym) for v in src2):
        raise TraceError(f"cv2.{name} with per-sample values per channel (only a per-sample "
                         "number, a constant per-channel scalar or an image is lowered)")
    if isinstance(scale, Sym):
        raise TraceError(f"cv2.{name} with a per-sample scale (its rounding is checked against "
                         "OpenCV for each constant scale at trace time)")
    scale = 1.0 if scale is None else float(scale)
    swap = not (isinstance(src1, Sym) and src1.ndim > 0)
    x, y = (src2, src1) if swap else (src1, src2)
    if not isinstance(x, Sym) or x.ndim == 0:
        raise TraceError(f"cv2.{name} with no traced image operand (only a traced image with a "
                         "second image or a number is lowered)")
    if x.dtype not in (np.uint8, np.float32):
        raise TraceError(f"cv2.{name} of a {x.dtype} image (uint8 and float32 are lowered)")
    if x.ndim not in (2, 3) or (x.ndim == 3 and not isinstance(x.node.shape[2], int)):
        raise TraceError(f"cv2.{name} of an array that is not HxW or HxWxC")
    chans = 0 if x.ndim == 2 else x.node.shape[2]
    out = x.dtype if dtype in (-1, None) else _depth_dtype(int(dtype))
    if out is None or (x.dtype == np.float32 and out == np.uint8):
        raise TraceError(f"cv2.{name} with dtype={dtype} for a {x.dtype} image (only its own "
                         "depth, CV_32F and CV_64F are lowered)")
    array = (isinstance(y, Sym) and y.ndim > 0) or \
        (isinstance(y, np.ndarray) and y.shape == tuple(x.node.shape))
    if array:
        shape = y.node.shape if isinstance(y, Sym) else y.shape
        if y.dtype != x.dtype or y.ndim != x.ndim or any(
                a is not b and a != b for a, b in zip(x.node.shape, shape, strict=True)):
            raise TraceError(f"cv2.{name} of arrays of different dtypes or shapes (OpenCV "
                             "raises or needs dtype=; convert one with astype)")
        why = _checked(name, x.dtype.str, chans, None, swap, scale, out.str)
        if why is not None:
            raise TraceError(f"cv2.{name} of two {x.dtype} arrays ({why})")
        return _model(name, x, y, False, swap, scale, out)
    if isinstance(y, Sym):
        if scale != 1:
            raise TraceError(f"cv2.{name} by a per-sample number with scale= (not lowered)")
        divisor = name == "divide" and not swap
        return _model(name, x, _drawn(y, name, out, divisor), True, swap, scale, out)
    values = _scalar_values(y, chans, name)
    why = _checked(name, x.dtype.str, chans, values, swap, scale, out.str)
    if why is not None:
        raise TraceError(f"cv2.{name} of a {x.dtype} image by {y!r} ({why})")
    vec = np.asarray(values[:max(chans, 1)], np.float64)
    return _model(name, x, vec if chans else np.float64(vec[0]), True, swap, scale, out)


@functools.cache
def _abs_checked(alpha: float, beta: float, chans: int) -> str | None:
    import cv2

    v = np.arange(256, dtype=np.uint8).reshape(1, 256)
    a = v if chans == 0 else np.ascontiguousarray(np.repeat(v[..., None], chans, 2))
    vector, scalar = _paths(lambda p, _: cv2.convertScaleAbs(p, alpha=alpha, beta=beta), a,
                            None)
    if not _same_bits(vector, scalar):
        return ("OpenCV's vector and scalar code give different results for these weights, "
                "so its pixels depend on the image's size and memory layout")
    if not _same_bits(vector, _abs_model(a, alpha, beta)):
        return ("a float64 multiply-add rounded to float32 does not give OpenCV's fused "
                "multiply-add on every uint8 value")
    return None


def _abs_model(x: Any, alpha: float, beta: float) -> Any:
    """OpenCV's fused multiply-add in float32: a uint8 value times a float32 weight is exact
    in float64, and the float64 sum rounded to float32 is the fused result wherever the check
    against OpenCV passes."""
    wa, wb = (np.float64(np.float32(w)) for w in (alpha, beta))
    fused = (x.astype(np.float64) * wa + wb).astype(np.float32)
    return _sat_u8(np.abs(fused))


def convert_scale_abs(src: Any, alpha: Any = 1.0, beta: Any = 0.0) -> Sym:
    """OpenCV's ``convertScaleAbs`` of a traced uint8 image by constant weights."""
    alpha, beta = 1.0 if alpha is None else alpha, 0.0 if beta is None else beta
    if not isinstance(src, Sym):
        raise TraceError("cv2.convertScaleAbs of a constant with a traced weight")
    if isinstance(alpha, Sym) or isinstance(beta, Sym):
        raise TraceError("cv2.convertScaleAbs with a per-sample alpha or beta (OpenCV's "
                         "rounding is checked for constant weights at trace time)")
    if src.dtype != np.uint8:
        raise TraceError(f"cv2.convertScaleAbs of a {src.dtype} image (only uint8 is lowered: "
                         "OpenCV's float32 multiply-add cannot be checked on every float32 value)")
    if src.ndim not in (2, 3) or (src.ndim == 3 and not isinstance(src.node.shape[2], int)):
        raise TraceError("cv2.convertScaleAbs of an array that is not HxW or HxWxC")
    why = _abs_checked(float(alpha), float(beta), 0 if src.ndim == 2 else src.node.shape[2])
    if why is not None:
        raise TraceError(f"cv2.convertScaleAbs ({why})")
    return _abs_model(src, float(alpha), float(beta))
