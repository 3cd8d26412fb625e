"""The traced native path agrees with the numpy path on every input, errors included.

Where numpy returns a value (integer ``//`` and ``%`` by 0 or -1, float division by 0, a 2-D
mask written into an HWC image), the traced graph returns the same value. Real CPU DALI
pipelines throughout.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import pattern_image
from test_trace import _emit_on

import augment_ops
from augment_ops import augment_op
from augment_ops.trace import trace_function, trace_op


def unregistered(**kw):
    def wrap(fn):
        op = augment_op(replace=True, **kw)(fn)
        augment_ops.unregister(op.name)
        return op
    return wrap


# -- values numpy returns where DALI raised --------------------------------------------------------
INT_TYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64]


def _division_program(dt, name):
    def program(img):
        x = img.astype(dt) - dt(100)  # negative and wrapped-around values
        x[0:1] = np.iinfo(dt).min  # the most negative value over -1 traps in hardware
        y = (img % 5).astype(dt) - dt(2)  # -2, -1, 0, 1, 2
        return x // y if name == "floordiv" else x % y
    return program


@pytest.mark.parametrize("dt", INT_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["floordiv", "mod"])
def test_integer_division_by_zero_and_minus_one_equals_numpy(dt, name):
    program = _division_program(dt, name)
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (5, 3)])]
    with np.errstate(all="ignore"):
        refs = [program(im) for im in imgs]
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=dt, ndim=3)
    for got, ref, im in zip(_emit_on(traced, imgs), refs, imgs, strict=True):
        assert ((im % 5) == 2).any() and ((im % 5) == 1).any()  # y takes 0 and -1
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("divisor", [0, -1])
@pytest.mark.parametrize("name", ["floordiv", "mod"])
def test_integer_division_by_a_constant_zero_or_minus_one_equals_numpy(divisor, name):
    def program(img):
        x = img.astype(np.int32) - 128
        x[0:1] = np.iinfo(np.int32).min
        d = np.int32(divisor)
        return x // d if name == "floordiv" else x % d

    imgs = [pattern_image(3, 9, 5)]
    with np.errstate(all="ignore"):
        ref = program(imgs[0])
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.int32,
                            ndim=3)
    np.testing.assert_array_equal(_emit_on(traced, imgs)[0], ref)


def test_float_division_by_zero_gives_inf_and_nan_as_numpy():
    def program(img):
        y = (img % 3).astype(np.float32) - 1  # -1, 0, 1
        return (img.astype(np.float32) - 128) / y

    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (11, 5)])]
    with np.errstate(all="ignore"):
        refs = [program(im) for im in imgs]
    assert np.isinf(refs[0]).any()
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.float32,
                            ndim=3)
    for got, ref in zip(_emit_on(traced, imgs), refs, strict=True):
        np.testing.assert_array_equal(got, ref)


# -- boolean masks of lower rank -----------------------------------------------------------------
@unregistered()
def u_mask_pixels(img):
    out = img.copy()
    out[img[..., 0] > 128] = 0
    return out


@unregistered()
def u_mask_rows(img):
    out = img.astype(np.int16)
    out[(img[:, 0, 1] > 100)] = -1
    return out.astype(np.uint8)


@pytest.mark.parametrize("op", [u_mask_pixels, u_mask_rows], ids=lambda op: op.name)
def test_a_mask_of_lower_rank_selects_whole_pixels_as_numpy(op):
    assert augment_ops.explain(op) == "native (traced)"
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (13, 5)])]
    refs = [op.apply(im)[0] for im in imgs]
    for got, ref in zip(_emit_on(trace_op(op), imgs), refs, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_a_mask_of_another_shape_is_refused_at_trace_time():
    @unregistered()
    def u_mask_shifted(img):
        out = img.copy()
        out[img[1:, :, 0] > 128] = 0
        return out

    assert re.match(r"numpy: a boolean index whose axis 0 may differ in length",
                    augment_ops.explain(u_mask_shifted))
