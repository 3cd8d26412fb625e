"""numpy constructs of library code traced into DALI: decorated ops, a constant array's ``dot``,
``reshape`` and ``np.broadcast_to``, and padded crops of a per-sample canvas. Each op below is run
by a real CPU DALI pipeline and compared with the numpy path exactly (draws replayed through the
counter generator), or refused naming the construct."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import unregistered
from PIL import Image
from test_trace_arrays import _check, _refused
from test_trace_parity import _check_same_error

from extsrc.errors import OpError


def _keeps_dtype(func):
    """A decorator as albucore writes them (``functools.wraps``, the op held in its closure)."""
    @functools.wraps(func)
    def wrapped(img, *args, **kwargs):
        dtype = img.dtype
        out = func(img, *args, **kwargs)
        return out if out.dtype == dtype else np.clip(out, 0, 255).astype(dtype)
    return wrapped


# -- decorated ops: the wrapped function sees the traced np and builtins ------------------------
@_keeps_dtype
@_keeps_dtype
def u_decorated(img, bits: int = 3):
    lut = np.arange(256, dtype=np.uint8) & np.uint8(256 - 2 ** (8 - bits))
    return lut[img].astype(np.int16) * 2


def test_a_decorated_op_traces_through_its_decorators():
    _check(u_decorated)
    _check(u_decorated, bits=6)


@_keeps_dtype
def u_decorated_refused(img):
    return np.fft.fft(img).real


def test_a_decorated_op_is_refused_at_its_own_line():
    _refused(u_decorated_refused, r"np\.fft\.fft at .*test_trace_numops\.py:\d+: "
                                  r"return np\.fft\.fft\(img\)\.real")


# -- a constant array's dot with a drawn vector -------------------------------------------------
def u_constant_dot(img, rng):
    m = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0], [2.0, 2.0, -2.0]])
    v = rng.integers(0, 9, size=3).astype(np.float64)  # integer sums: exact in any order
    return np.clip(img + m.dot(v), 0, 255).astype(np.uint8)


def u_constant_vector_dot(img, rng):
    w = np.array([0.5, 0.25, -0.125])
    return np.clip(img - 8 * w.dot(rng.integers(0, 20, size=3)), 0, 255).astype(np.uint8)


def test_a_constant_arrays_dot_of_a_drawn_vector_lowers():
    _check(u_constant_dot, random=True)
    _check(u_constant_vector_dot, random=True)


def u_constant_dot_out(img, rng):
    m = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    out = np.zeros(3)
    m.dot(rng.normal(size=3), out=out)
    return img


def test_a_constant_arrays_dot_with_out_is_refused():
    _refused(u_constant_dot_out, r"ndarray\.dot with out=", random=True)


# -- new arrays of a per-sample shape: a canvas, an array pasted into it, a crop of it ----------
def u_translate(img, rng, pad: int = 2):
    h, w, c = img.shape
    dst = np.full((h + 2 * pad, w + 2 * pad + 1, c), (10, 20, 30), dtype=np.uint8)
    dst[pad:pad + h, pad + 1:pad + 1 + w] = img[::-1]
    y = rng.integers(0, 2 * pad + 1)
    x = rng.integers(0, 2 * pad + 2)
    return dst[y:y + h, x:x + w]


def u_canvas_refilled(img, pad: int = 1):
    h, w = img.shape[:2]
    dst = np.zeros((h + pad, w + 3 * pad, 3), dtype=np.int16)
    dst[:] = np.array([-5, 300, 7])
    dst[pad:, 2 * pad:2 * pad + w] = img.astype(np.int16) * 2 - 100
    return dst[: h // 2 + 1]


def u_gray_canvas(img):
    h, w = img.shape[:2]
    dst = np.ones((h + 2, w + 2), np.uint8)
    dst[1:-1, 1:-1] = img[..., 1]
    return dst[::-1, 1:]


def u_blank_canvas(img):
    h, w = img.shape[:2]
    return np.full((h // 2 + 1, 2 * w, 3), 9, np.uint8)


def test_an_array_pasted_into_a_new_array_of_a_per_sample_shape_lowers():
    _check(u_translate, random=True)
    _check(u_canvas_refilled)
    _check(u_gray_canvas)
    _check(u_blank_canvas)


def u_canvas_region_fill(img, rng):
    h, w = img.shape[:2]
    dst = np.zeros((h + 2, w + 2, 3), np.uint8)
    dst[1:3, 1:3] = rng.integers(0, 255)
    return dst


def u_canvas_inexact_fill(img):
    h, w = img.shape[:2]
    dst = np.full((h + 2, w + 2, 3), 0.1)
    dst[1:h + 1, 1:w + 1] = img
    return dst.astype(np.uint8)


def u_canvas_drawn_size(img, rng):
    n = rng.integers(1, 4)
    return np.zeros((n, n, 3), np.uint8) + img[:1, :1]


def test_other_writes_into_a_new_array_are_refused():
    _refused(u_canvas_region_fill, r"write into a new array of a per-sample shape other than "
                                   r"one array", random=True)
    _refused(u_canvas_inexact_fill, r"filled with \[0\.1, 0\.1, 0\.1\], which float32 does not "
                                    r"hold exactly")


def test_a_new_array_of_a_drawn_shape_lowers():
    _check(u_canvas_drawn_size, random=True)


@unregistered()
def u_paste_too_tall(img):
    h, w = img.shape[:2]
    dst = np.zeros((h // 2 + 3, w, 3), np.uint8)
    dst[: h] = img  # the region is shorter than the image where h > 6
    return dst


@unregistered()
def u_canvas_negative(img):
    h, w = img.shape[:2]
    return np.zeros((h - 7, w, 3), np.uint8) + img[:1]


# -- PIL crops of boxes that may reach outside the image: zeros there, as PIL fills -------------
def u_pil_crop_outside(img):
    h, w = img.shape[:2]
    return np.asarray(Image.fromarray(img).crop((-2, 1, w + 3, h // 2 + 2)))


def u_pil_crop_drawn(img, rng):
    x = rng.integers(-3, 4)
    y = rng.integers(-3, 4)
    return np.asarray(Image.fromarray(img).crop((x, y, x + 4, y + 3)))


def test_a_pil_crop_outside_the_image_pads_with_zeros():
    _check(u_pil_crop_outside)
    _check(u_pil_crop_drawn, random=True)


@unregistered()
def u_pil_crop_reversed(img):
    h, w = img.shape[:2]
    return np.asarray(Image.fromarray(img).crop((3, 0, w, h)))


@pytest.mark.parametrize(("op", "sizes", "bad", "message"), [
    (u_paste_too_tall, [(5, 7), (6, 4), (9, 7)], 2, r"ValueError: could not broadcast input "
                                                    r"array"),
    (u_canvas_negative, [(9, 7), (8, 4), (6, 7)], 2, r"ValueError: negative dimensions are not "
                                                     r"allowed"),
    (u_pil_crop_reversed, [(5, 7), (6, 4), (9, 2)], 2, r"ValueError: Coordinate 'right' is less "
                                                       r"than 'left'"),
])
def test_a_new_array_or_crop_raises_for_the_sample_numpy_raises_for(tmp_path, op, sizes, bad,
                                                                   message):
    _check_same_error(tmp_path, op, sizes, bad, OpError, message)
