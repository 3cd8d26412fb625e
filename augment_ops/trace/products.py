"""Whether numpy's float matrix products sum in the written-out order on this machine.

The tracer lowers a matrix product over the channels (``img.dot(w)``, ``img @ w``, ``m @ v``)
to the sum written out, ``(x0*w0 + x1*w1) + x2*w2 ...``, each step rounded in the result dtype.
numpy hands float products to its BLAS, whose kernels may sum in another order or fuse
multiply-adds, depending on the library, the processor, the dtype and the call: on one x86-64
machine with OpenBLAS, float64 ``dot`` summed in order and float64 ``@`` did not, float32 ``@``
did and float32 ``dot`` did not, each differing in the last bit of about 1 value in 7. So the
tracer asks numpy, in the process that runs the numpy path: :func:`sums_in_order` computes the
product the op makes on probe arrays of the op's dtype, weights and shape (numpy hands one row,
one column or a vector to other kernels than a matrix), and the tracer lowers it only where
every value equals the written-out sum, to the sign of zero. Integer products wrap around alike
in any order and need no probe, nor do float sums exact in any order.
"""

from __future__ import annotations

import numpy as np

__all__ = ["exact_in_any_order", "grid", "probe_shapes", "same_bits", "sums_in_order",
           "written_out"]

#: Drawn vectors probed where the op's weights are per-sample values.
_DRAWN = 8
_KNOWN: dict[tuple, bool] = {}


def written_out(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over ``a``'s last axis as the graph computes it: summed in order, ``b`` a vector
    (C,) or matrix (C, K), then ``+ 0.0``, which numpy's kernels start their sums from (a sum of
    -0.0 products is +0.0 there)."""
    cols = [b] if b.ndim == 1 else [b[:, k] for k in range(b.shape[1])]
    outs = []
    for col in cols:
        acc = a[..., 0] * col[0]
        for i in range(1, len(col)):
            acc = acc + a[..., i] * col[i]
        outs.append(acc + col.dtype.type(0))
    return outs[0] if b.ndim == 1 else np.stack(outs, axis=-1)


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal values with equal signs of zero (``np.array_equal`` takes -0.0 for 0.0)."""
    return bool(np.array_equal(x, y) and np.array_equal(np.signbit(x), np.signbit(y)))


def probe_shapes(dims: tuple[int | None, ...]) -> list[tuple[int, ...]]:
    """Shapes of the leading axes (the channel axis left out) of an operand whose axes are
    ``dims`` (an int: a constant length; None: one that differs per sample): those of a
    per-sample length at ImageNet sizes, and each at 1 (numpy hands a product of one row or one
    column to other kernels than a matrix's), all at 1, all small, all square."""
    free = [k for k, d in enumerate(dims) if d is None]
    big = {k: (375, 500)[i] if i < 2 else 2 for i, k in enumerate(free)}
    variants = [big, dict.fromkeys(free, 1), dict.fromkeys(free, 7), dict.fromkeys(free, 64)]
    for k in free:
        variants.append({**big, k: 1})
    shapes: list[tuple[int, ...]] = []
    for v in variants:
        shape = tuple(int(d) if d is not None else v[k] for k, d in enumerate(dims))
        if shape not in shapes:
            shapes.append(shape)
    return shapes


#: Products probed at least, per kind of values: a small operand (a vector, one pixel) is
#: probed as that many operands.
_PER_KIND = 1024


def _operands(shape: tuple[int, ...], channels: int, dtype: np.dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    full = (*shape, channels)
    count = -(-_PER_KIND // max(1, int(np.prod(shape, dtype=np.int64))))
    out = []
    for _ in range(count):
        out += [rng.integers(0, 256, full).astype(dtype),  # pixel values
                rng.random(full).astype(dtype),  # scaled to [0, 1)
                rng.normal(0.0, 50.0, full).astype(dtype)]  # centred
    return out


def _vectors(channels: int, dtype: np.dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-3.0, 3.0, channels).astype(dtype) for _ in range(_DRAWN)]


def sums_in_order(kind: str, dtype: np.dtype, channels: int, *, dims: tuple[int | None, ...] = (),
                  left: np.ndarray | None = None, right: np.ndarray | None = None) -> bool:
    """Whether numpy's ``kind`` product (``"dot"``: ``ndarray.dot`` and ``np.dot``;
    ``"matmul"``: ``@`` and ``np.matmul``) of float ``dtype`` values gives :func:`written_out`
    here, to the sign of zero. The operands: an array whose leading axes are ``dims`` (see
    :func:`probe_shapes`; ``left`` None) times the constant ``right`` (C,) or (C, K), or times a
    drawn vector (``right`` None too), or the constant ``left`` (K, C) or (C,) times a drawn
    vector. Measured once per question."""
    dtype = np.dtype(dtype)
    key = (kind, dtype.str, channels, dims,
           None if left is None else (left.shape, left.astype(dtype).tobytes()),
           None if right is None else (right.shape, right.astype(dtype).tobytes()))
    if key not in _KNOWN:
        product = np.dot if kind == "dot" else np.matmul
        if left is None:
            lefts = [a for shape in probe_shapes(dims) for a in _operands(shape, channels, dtype)]
            rights = [right.astype(dtype)] if right is not None else _vectors(channels, dtype)
        else:
            lefts, rights = [left.astype(dtype)], _vectors(channels, dtype)
        with np.errstate(all="ignore"):
            _KNOWN[key] = all(same_bits(product(a, b), written_out(a, b))
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
