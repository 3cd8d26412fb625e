"""Whether numpy's float matrix products sum in the written-out order on this machine.

The tracer lowers a matrix product over the channels (``img.dot(w)``, ``img @ w``, ``m @ v``)
to the sum written out, ``(x0*w0 + x1*w1) + x2*w2 ...``, each step rounded in the result dtype.
numpy hands float products to its BLAS, whose kernels may sum in another order or fuse
multiply-adds, depending on the library, the processor, the dtype and the call: on one x86-64
machine with OpenBLAS, float64 ``dot`` summed in order and float64 ``@`` did not, float32 ``@``
did and float32 ``dot`` did not, each differing in the last bit of about 1 value in 7. So the
tracer asks numpy, in the process that runs the numpy path: :func:`sums_in_order` computes the
product the op makes on probe arrays of the op's dtype and weights, and the tracer lowers it
only where every value equals the written-out sum. Integer products wrap around alike in any
order and need no probe.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sums_in_order"]

#: Probe image sizes: a small one, a square one, an ImageNet-sized one (kernels may switch
#: paths with the size).
_SIZES = ((7, 9), (64, 64), (375, 500))
#: Drawn vectors probed where the op's weights are per-sample values.
_DRAWN = 16
_KNOWN: dict[tuple, bool] = {}


def _written_out(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over ``a``'s last axis, summed in order: ``b`` a vector (C,) or matrix (C, K)."""
    cols = [b] if b.ndim == 1 else [b[:, k] for k in range(b.shape[1])]
    outs = []
    for col in cols:
        acc = a[..., 0] * col[0]
        for i in range(1, len(col)):
            acc = acc + a[..., i] * col[i]
        outs.append(acc)
    return outs[0] if b.ndim == 1 else np.stack(outs, axis=-1)


def _images(channels: int, dtype: np.dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for h, w in _SIZES:
        shape = (h, w, channels)
        out += [rng.integers(0, 256, shape).astype(dtype),  # pixel values
                rng.random(shape).astype(dtype),  # scaled to [0, 1)
                rng.normal(0.0, 50.0, shape).astype(dtype)]  # centred
    return out


def _vectors(channels: int, dtype: np.dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-3.0, 3.0, channels).astype(dtype) for _ in range(_DRAWN)]


def sums_in_order(kind: str, dtype: np.dtype, channels: int, *, left: np.ndarray | None = None,
                  right: np.ndarray | None = None) -> bool:
    """Whether numpy's ``kind`` product (``"dot"``: ``ndarray.dot`` and ``np.dot``;
    ``"matmul"``: ``@`` and ``np.matmul``) of float ``dtype`` values sums over the ``channels``
    axis in the written-out order here. The operands: an image (``left`` None) times the
    constant ``right`` (C,) or (C, K), or times a drawn vector (``right`` None too), or the
    constant ``left`` (K, C) or (C,) times a drawn vector. Measured once per question."""
    dtype = np.dtype(dtype)
    key = (kind, dtype.str, channels,
           None if left is None else (left.shape, left.astype(dtype).tobytes()),
           None if right is None else (right.shape, right.astype(dtype).tobytes()))
    if key not in _KNOWN:
        product = np.dot if kind == "dot" else np.matmul
        if left is None:
            lefts = _images(channels, dtype)
            rights = [right.astype(dtype)] if right is not None else _vectors(channels, dtype)
        else:
            lefts, rights = [left.astype(dtype)], _vectors(channels, dtype)
        with np.errstate(all="ignore"):
            _KNOWN[key] = all(np.array_equal(product(a, b), _written_out(a, b))
                              for a in lefts for b in rights)
    return _KNOWN[key]


def grid(values: np.ndarray) -> int | None:
    """The least ``k`` (up to 60) such that every value is a multiple of ``2**-k`` (``0``:
    integers), or ``None``: the step on which a product's terms lie."""
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        return None
    for k in range(61):
        scaled = v * 2.0 ** k
        if np.array_equal(scaled, np.round(scaled)):
            return k
    return None


def exact_in_any_order(dtype: np.dtype, terms: list[tuple[int | None, float, int | None, float]]
                       ) -> bool:
    """Whether a float product's sum is exact whatever its order: each term ``(k_x, |x|max,
    k_w, |w|max)`` a product of values on grids of step ``2**-k_x`` and ``2**-k_w`` (see
    :func:`grid`), and the sum of the terms' bounds, on the finer grid, within the integers
    ``dtype`` holds exactly (``2**(nmant + 1)``): every partial sum and product is then exact,
    in any order, with fused multiply-adds or not (integer pixel values times weights of a few
    binary digits)."""
    if dtype.kind != "f":
        return True  # integers wrap around alike in any order
    if any(kx is None or kw is None for kx, _, kw, _ in terms):
        return False
    k = max(kx + kw for kx, _, kw, _ in terms)  # type: ignore[operator]
    total = sum(mx * mw for _, mx, _, mw in terms)
    return total * 2.0 ** k <= 2.0 ** (np.finfo(dtype).nmant + 1)
