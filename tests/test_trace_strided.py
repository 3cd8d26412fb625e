"""Slices with a step other than 1 and -1 on axes of a constant length
(``augment_ops.trace.strided``), and small ``np.empty`` arrays filled with per-sample values
(mmcv's ``bbox_clip``: ``cmin = np.empty(4); cmin[0::2] = w - 1; cmin[1::2] = h - 1``).

Each op runs in a real DALI CPU pipeline and equals numpy on images of several sizes; a step on
an axis of per-sample length, and a write through a view made by a step, are refused saying so.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from test_trace_arrays import _check, _refused

from augment_ops.trace import trace_function


def s_bbox_clip(img):
    # mmcv/image/geometric.py bbox_clip, then imcrop's slice of the clipped box
    box = np.array([1, 2, 30, 40])
    cmin = np.empty(box.shape[-1], dtype=box.dtype)
    cmin[0::2] = img.shape[1] - 1
    cmin[1::2] = img.shape[0] - 1
    x1, y1, x2, y2 = np.maximum(np.minimum(box, cmin), 0)
    return img[y1:y2 + 1, x1:x2 + 1]


def s_read_coordinates(img):
    box = np.array([img.shape[1] // 4, img.shape[0] // 3, img.shape[1] - 1, img.shape[0] - 1])
    xs, ys = box[0::2], box[1::2]
    return img[ys.min():ys.max(), xs[::-1][1]:xs[-1]]


def s_write_values(img):
    corners = np.empty((2, 4), dtype=np.int64)
    corners[:, ::2] = np.array([[0], [img.shape[1] // 2]])
    corners[:, 1::2] = np.array([img.shape[0] // 3, img.shape[0] - 1])
    return img[corners[0, 1]:corners[1, 3], corners[0, 0]:corners[1, 2]]


def s_every_other_channel(img):
    return img[..., ::2] // 2 + img[:, :, ::-2]


def s_reversed_steps(img):
    v = np.empty(6, dtype=np.int64)
    v[5:0:-2] = img.shape[0] - 1
    v[4::-2] = 0
    return img[v[4]:v[5], v[0]:v[3] + 1]


def s_box_by_index(img):
    box = np.empty(4, dtype=np.int64)  # filled element by element with per-sample values
    box[0], box[1] = 0, 0
    box[2], box[3] = img.shape[1] - 1, img.shape[0] // 2
    return img[box[1]:box[3] + 1, box[0]:box[2] + 1]


def s_swap_red_blue(img):
    x = img.copy()
    x[..., ::2] = x[..., ::-2]  # numpy reads the whole value before it writes
    return x


@pytest.mark.parametrize("func", [s_bbox_clip, s_read_coordinates, s_write_values,
                                  s_every_other_channel, s_reversed_steps, s_box_by_index,
                                  s_swap_red_blue],
                         ids=lambda f: f.__name__)
def test_a_strided_slice_of_a_constant_length_axis_equals_numpy(func):
    _check(func)


def test_a_step_on_an_axis_of_per_sample_length_is_refused():
    def every_other_row(img):
        return img[::2]

    _refused(every_other_row, r"^a slice step of 2 on an axis of per-sample length")


def s_through_view(img):
    a = np.empty(4, dtype=np.int64)
    a[:] = 1
    v = a[::2]
    v[0] = img.shape[0] - 1
    return img[:a[0]]


def test_a_write_through_a_strided_view_is_refused():
    _refused(s_through_view, r"^v\[0\] = <a per-sample value>: a per-sample value written into "
                             r"a concrete numpy array")


def s_constant_matrix(img):
    m = np.empty((2, 3), np.float32)  # filled with constants only: numpy's own array
    m[0] = [1, 0, 2]
    m[1] = [0, 1, 1]
    inv = np.linalg.inv(m[:, :2].astype(np.float64))
    shift = int(sum(m[:, 2].tolist())) + int(inv[0, 0])
    return cv2.warpAffine(img, m, (img.shape[1], img.shape[0]))[shift:]


def test_a_small_np_empty_filled_with_constants_stays_a_numpy_array():
    """Only an np.empty a per-sample value is written into is traced; one filled with
    constants is numpy's, which cv2, np.linalg and Python take as they are."""
    _check(s_constant_matrix)


def test_a_value_numpy_cannot_broadcast_raises_as_numpy_does():
    def bad(img):
        a = np.empty(4, dtype=np.int64)
        a[::2] = np.array([img.shape[0], img.shape[1], 1])
        return img[:a[0]]

    with pytest.raises(ValueError, match="could not broadcast"):
        bad(np.zeros((3, 3, 3), np.uint8))
    with pytest.raises(Exception, match="could not broadcast"):
        trace_function(bad, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)


def s_eye_translation(img):
    # YOLOv5's random_perspective: C = np.eye(3); C[0, 2] = -w / 2, then the matrix's numbers
    c = np.eye(3)
    c[0, 2] = -img.shape[1] / 2
    c[1, 2] = -img.shape[0] / 2
    return img[:int(-c[1, 2]) + 1, :int(-c[0, 2]) + 1]


def test_a_per_sample_value_written_into_np_eye_lowers():
    _check(s_eye_translation)


def s_caught_write(img, rng):
    a = np.empty(3, np.float32)
    a[:] = 1
    try:  # numpy raises nothing here; a trace that failed the write must not take the except
        a[0] = rng.uniform()
    except ValueError:
        a[0] = 0.5
    return (img.astype(np.float32) * a).astype(np.uint8)


def s_written_scalar(img, rng):
    b = np.empty(4, np.float32)
    b[:] = 1
    b[1] = rng.uniform(0.5, 1.0)
    return (img.astype(np.float32) * b[1]).astype(np.uint8)


@pytest.mark.parametrize("func", [s_caught_write, s_written_scalar], ids=lambda f: f.__name__)
def test_a_drawn_value_written_into_a_small_array_equals_numpy(func):
    _check(func, random=True)


def test_an_element_written_into_a_small_vector_is_a_stack_of_its_elements():
    """A stack of elements and takes, which the per-sample scalar stage computes, where a write
    into a region would be slices and a concatenation."""
    from augment_ops.trace import trace_function

    traced = trace_function(s_box_by_index, params={}, random=False, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    assert not any(n.op in ("cat", "slice") and n.ndim == 1 for n in traced.nodes())
