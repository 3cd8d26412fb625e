"""Float matrix products over the channels (``dot``, ``@``, ``np.dot``, ``np.matmul``): numpy's
BLAS sums them in its kernel's order, which depends on the machine, the dtype and the operand's
shape. Whatever the tracer decides for each phrasing below, a product it lowers gives numpy's
values to the bit (the sign of zero included) on images of every shape, one-pixel rows and
columns among them, and a product it refuses says to write the sum out. Sums exact in any order
(pixel values times weights of a few binary digits) always lower."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image, scalar_draws, unregistered
from test_trace import _emit_on

from augment_ops.trace import TraceError, trace_op
from augment_ops.trace.products import same_bits
from extsrc.ops_runtime.seeding import counter_rng, name_salt

W64 = np.array([0.299, 0.587, 0.114])
W32 = W64.astype(np.float32)
NEGATIVE = np.array([-0.2125, -0.7154, -0.0721])
BINARY = np.array([-0.5, 0.25, -0.25], np.float32)  # pixel values times these: exact sums
M = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
for _a in (W64, W32, NEGATIVE, BINARY, M):
    _a.setflags(write=False)  # constants (a writable global array does not trace)

SIZES = [(1, 1), (1, 7), (7, 1), (2, 2), (5, 9), (33, 47)]


def _images() -> list[np.ndarray]:
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(SIZES)]
    imgs.append(np.zeros((4, 5, 3), np.uint8))  # black: every product 0, or -0.0 by a negative
    return imgs


def _broadcast(img, v):
    """A per-image value as an image of its size, the op's output."""
    return img[..., 0].astype(v.dtype) * 0 + v


OPS = {
    "f64 image.dot": lambda img: img.astype(np.float64).dot(W64),
    "f32 image.dot": lambda img: img.astype(np.float32).dot(W32),
    "f64 image @": lambda img: img.astype(np.float64) @ W64,
    "f32 image @": lambda img: img.astype(np.float32) @ W32,
    "f64 np.dot": lambda img: np.dot(img.astype(np.float64), W64),
    "f32 np.matmul": lambda img: np.matmul(img.astype(np.float32), W32),
    "f64 rows.dot": lambda img: img.astype(np.float64).reshape(-1, 3).dot(W64).reshape(
        img.shape[:2]),
    "f32 column @": lambda img: np.repeat(img[:, :1].astype(np.float32) @ W32, 1, axis=1) * 1
    + img[..., 0].astype(np.float32) * 0,
    "f64 pixel.dot": lambda img: _broadcast(img, img[0, 0].astype(np.float64).dot(W64)),
    "f32 pixel @": lambda img: _broadcast(img, img[0, 0].astype(np.float32) @ W32),
    "f64 negative weights, 1 / x": lambda img: 1.0 / img.astype(np.float64).dot(NEGATIVE),
    "f32 binary weights @": lambda img: img.astype(np.float32) @ BINARY,
    "f32 binary weights, 1 / x": lambda img: np.float32(1) / (img.astype(np.float32) @ BINARY),
}
RANDOM_OPS = {
    "f64 image.dot(drawn)": lambda img, rng: img.astype(np.float64).dot(rng.uniform(0, 1, 3)),
    "f32 image @ drawn": lambda img, rng: img.astype(np.float32) @ rng.uniform(
        -1, 1, 3).astype(np.float32),
    "f64 np.dot(matrix, drawn)": lambda img, rng: img.astype(np.float64) + np.dot(
        M, rng.normal(0, 0.1, 3)),
    "f64 matrix @ drawn": lambda img, rng: img.astype(np.float64) + M @ rng.normal(0, 0.1, 3),
}
ALWAYS_LOWER = {"f32 binary weights @", "f32 binary weights, 1 / x"}


def _lowered_or_refused(op) -> object | None:
    try:
        return trace_op(op)
    except TraceError as e:
        text = str(e)
        assert ("write the sum out" in text or "float16" in text), text
        return None


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_lowered_float_product_gives_numpys_bits_on_every_shape(name):
    func = OPS[name]
    sample = func(_images()[0])
    op = unregistered(name="t_product", dtype=sample.dtype, ndim=sample.ndim)(
        lambda img: func(img))
    traced = _lowered_or_refused(op)
    if name in ALWAYS_LOWER:
        assert traced is not None, name
    if traced is None:
        return
    imgs = _images()
    for k, out in enumerate(_emit_on(traced, imgs)):
        with np.errstate(all="ignore"):
            want = func(imgs[k])
        assert out.dtype == want.dtype and out.shape == want.shape, (name, k)
        assert same_bits(out, want), (name, imgs[k].shape, out.ravel()[:4], want.ravel()[:4])


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_a_lowered_product_with_drawn_weights_gives_numpys_bits(name):
    func = RANDOM_OPS[name]
    sample = func(_images()[0], counter_rng(3, 0, 0, 1))
    op = unregistered(name="t_drawn_product", dtype=sample.dtype, ndim=sample.ndim)(
        lambda img, rng: func(img, rng))
    traced = _lowered_or_refused(op)
    if traced is None:
        return
    imgs = _images() * 4  # several draws per shape
    index = np.arange(len(imgs), dtype=np.int64)
    salt = name_salt(op.name)
    values = scalar_draws(traced, 3, salt, index, np.zeros(len(imgs), np.int64))
    for k, out in enumerate(_emit_on(traced, imgs, values)):
        want = func(imgs[k], counter_rng(3, 0, k, salt))
        assert same_bits(out, want), (name, k, imgs[k].shape)
