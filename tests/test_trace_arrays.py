"""Shifts, conversions, per-channel fills, new arrays and vector draws traced into DALI: each op
below (none of them in tests/realops) is run by a real CPU DALI pipeline and compared with the
numpy path exactly, draws replayed through the counter generator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image
from test_trace import _emit_on

from augment_ops.lower_dali import SampleScalars, sample_scalar_nodes
from augment_ops.trace import TraceError, trace_function
from extsrc.seeding import counter_rng, counter_uniform

SEED = 11
SIZES = [(1, 1), (3, 5), (6, 4), (9, 7)]


def _images(dtype=np.uint8) -> list[np.ndarray]:
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(SIZES)]
    if dtype == np.uint8:
        for im in imgs:
            im.reshape(-1)[0], im.reshape(-1)[-1] = 0, 255
    return imgs


def _check(func, random: bool = False, imgs: list[np.ndarray] | None = None, **params) -> None:
    """``func`` traced, run in a DALI CPU pipeline, equals numpy on every image (``random``:
    with the counter draws of sample ``k`` on both paths)."""
    imgs = imgs if imgs is not None else _images()

    def ref(k: int, im: np.ndarray) -> np.ndarray:
        if random:
            return func(im, counter_rng(SEED, 0, k, 3), **params)
        return func(im, **params)

    refs = [ref(k, im) for k, im in enumerate(imgs)]
    traced = trace_function(func, params=params, random=random, num_outputs=1,
                            dtype=refs[0].dtype, ndim=refs[0].ndim)
    values = ()
    if random:
        program = SampleScalars(sample_scalar_nodes(traced),
                                lambda i, e, slot: counter_uniform(SEED, e, i, 3, slot))
        values = program(np.arange(len(imgs), dtype=np.int64), np.zeros(len(imgs), np.int64))
    outs = _emit_on(traced, imgs, values)
    for k, r in enumerate(refs):
        assert outs[k].dtype == r.dtype and outs[k].shape == r.shape, (k, outs[k].dtype, r.dtype)
        np.testing.assert_array_equal(outs[k], r, err_msg=f"image {k} {imgs[k].shape}")


def _refused(func, match: str, random: bool = False, **params) -> None:
    with pytest.raises(TraceError, match=match):
        trace_function(func, params=params, random=random, num_outputs=1, dtype=np.uint8,
                       ndim=3)


# -- shifts -------------------------------------------------------------------------------------
def u_posterize_ops(img, bits: int = 3):
    return (img >> (8 - bits)) << (8 - bits)


def u_posterize_np(img, shift: int = 5):
    return np.left_shift(np.right_shift(img, shift), shift)


def u_signed_shifts(img, s: int = 3):
    x = img.astype(np.int16) - 128
    return ((x >> s) + (x << s)).astype(np.int16)


def u_wide_shifts(img, s: int = 8):
    x = img.astype(np.int8)
    return (x >> s) + (img >> np.uint8(s)) + (img << np.uint8(s)) + (x >> 7)


def u_shift_in_place(img, s: int = 2):
    out = img.copy()
    out >>= s
    out <<= 1
    return out


def u_shift_sizes(img):
    h, w = img.shape[:2]
    return img[: (h >> 1) + 1, : ((w << 2) >> 3) + 1]


@pytest.mark.parametrize("func,params", [
    (u_posterize_ops, {"bits": 3}), (u_posterize_ops, {"bits": 8}), (u_posterize_np, {}),
    (u_posterize_np, {"shift": 0}), (u_signed_shifts, {}), (u_signed_shifts, {"s": 15}),
    (u_signed_shifts, {"s": 20}), (u_wide_shifts, {}), (u_wide_shifts, {"s": 9}),
    (u_shift_in_place, {}), (u_shift_sizes, {})])
def test_shifts_equal_numpy(func, params):
    _check(func, **params)


def test_shifts_numpy_refuses_or_per_sample_counts_are_refused():
    def floats(img):
        return (img.astype(np.float32) >> 1).astype(np.uint8)

    def drawn(img, rng):
        return img >> rng.integers(0, 8)

    def negative(img):
        return img[: img.shape[0] >> -1]

    _refused(floats, r"np\.right_shift \(>>\) raises for these operands")
    _refused(drawn, r"np\.right_shift \(>>\) by a per-sample count", random=True)
    _refused(negative, r"ValueError: negative shift count")
