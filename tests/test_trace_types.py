"""What a traced value is to ``isinstance``, ``np.isscalar`` and ``np.ndim``: what the value numpy
computes is, so that an op (or a library helper it calls) that dispatches on the type of a draw
or a size takes the branch numpy takes. Each op is compared with numpy in a real CPU DALI
pipeline, its draws replayed from the counter draws the native path uses.
"""

from __future__ import annotations

import numbers

import numpy as np
import pytest
from helpers import pattern_image, run_traced, scalar_draws, unregistered

from augment_ops.trace import trace_op
from extsrc.ops_runtime.seeding import counter_rng, name_salt

SEED = 7



def _amount(value, scale):
    """A library-style helper: a number is used as is, anything else per channel."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value * scale
    return value[np.newaxis, np.newaxis, :] * scale


def _is_numpy_scalar(value) -> bool:
    return isinstance(value, np.generic)


@unregistered()
def t_add_any_number(img, rng):
    v = rng.uniform(-20, 20)  # a Python float
    out = img.astype(np.float32) + _amount(v, 1)
    return np.clip(out, 0, 255).astype(np.uint8)


@unregistered()
def t_scalar_kinds(img, rng):
    k = rng.integers(0, 10)  # np.int64
    u = rng.random()  # float
    h = img.shape[0]  # int
    # numpy: k is a numpy scalar, u and h are not; all three are scalars of rank 0
    shift = k if _is_numpy_scalar(k) else 100
    shift = shift + (0 if _is_numpy_scalar(u) or _is_numpy_scalar(h) else 3)
    if not (np.isscalar(k) and np.isscalar(u) and np.isscalar(h)):
        shift = shift * 0
    if np.ndim(u) != 0 or np.ndim(img) != 3 or not isinstance(img, np.ndarray):
        shift = 50
    if isinstance(h, int) and isinstance(u, float) and isinstance(k, numbers.Integral):
        shift = shift + 1
    return img + np.uint8(shift)


@unregistered()
def t_weights_by_type(img, rng):
    w = np.float32(rng.uniform(0.5, 1.5))  # np.float32
    if isinstance(w, float):  # np.float32 is not a Python float
        w = w * 4
    if isinstance(w, np.floating):
        w = w + np.float32(0.25)
    return np.clip(img * w, 0, 255).astype(np.uint8)


@unregistered()
def t_type_of(img, rng):
    u = rng.random()
    shift = 1
    if type(u) is float and type(img) is np.ndarray and type(rng.integers(0, 3)) is np.int64:
        shift = 5
    if type(img.shape[0]) is not int:
        shift = 0
    return img + np.uint8(shift)


OPS = [t_add_any_number, t_scalar_kinds, t_weights_by_type, t_type_of]


def _run_native(traced, op, imgs, index, epoch):
    values = scalar_draws(traced, SEED, name_salt(op.name), index, epoch)
    return [out for (out,) in run_traced(traced, imgs, values)]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_type_checks_on_draws_and_sizes_take_numpys_branch(op):
    traced = trace_op(op)
    assert traced.num_paths == 1  # a type check is decided at trace time, as numpy decides it
    imgs = [pattern_image(k, 4 + k, 5 + 2 * k) for k in range(6)]
    index = np.arange(6, dtype=np.int64) * 3 + 1
    epoch = np.zeros(6, dtype=np.int64)
    outs = _run_native(traced, op, imgs, index, epoch)
    for k, got in enumerate(outs):
        rng = counter_rng(SEED, 0, int(index[k]), name_salt(op.name))
        (ref,) = op.apply(imgs[k], rng)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_scalar_kinds_reference_takes_the_expected_branch():
    """The reference itself: ``shift`` is the draw k (a numpy scalar) plus 3 (u and h are not)
    plus 1 (all scalars, the Python types int and float), so the test above compares branches
    that are not fallbacks."""
    img = pattern_image(0, 4, 5)
    rng = counter_rng(SEED, 0, 1, name_salt(t_scalar_kinds.name))
    k = counter_rng(SEED, 0, 1, name_salt(t_scalar_kinds.name)).integers(0, 10)
    (out,) = t_scalar_kinds.apply(img, rng)
    np.testing.assert_array_equal(out, img + np.uint8(k + 4))


def test_the_tracer_still_sees_its_own_class():
    """Inside the tracer a traced value is a ``Sym``; outside it, an array or scalar."""
    from augment_ops.trace.ir import _new
    from augment_ops.trace.sym import Sym

    x = Sym(_new("input", (), (), np.uint8, (2, 3, 3)))
    assert isinstance(x, Sym) and type(x) is Sym
    assert isinstance(x, np.ndarray) and not isinstance(x, np.generic)


def test_type_of_values_in_the_op_is_numpys():
    img = pattern_image(0, 4, 5)
    rng = counter_rng(SEED, 0, 1, name_salt(t_type_of.name))
    (out,) = t_type_of.apply(img, rng)
    np.testing.assert_array_equal(out, img + np.uint8(5))
