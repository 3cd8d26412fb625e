"""numpy constructs of library code traced into DALI: decorated ops, a constant array's ``dot``,
``reshape`` and ``np.broadcast_to``, and padded crops of a per-sample canvas. Each op below is run
by a real CPU DALI pipeline and compared with the numpy path exactly (draws replayed through the
counter generator), or refused naming the construct."""

from __future__ import annotations

import functools

import numpy as np
from test_trace_arrays import _check, _refused


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
