"""numpy constructs of library code traced into DALI: decorated ops, a constant array's ``dot``,
new arrays of a per-sample shape with an array pasted in and cropped (padded slices, as PIL's
crop outside the image and cv2.copyMakeBorder of per-sample widths are), ``reshape`` and
``np.broadcast_to``, float casts that wrap around, loops over a drawn count and picks among
constants by a draw. Each op below is run by a real CPU DALI pipeline and compared with the
numpy path exactly (draws replayed through the counter generator), raises where numpy raises,
or is refused naming the construct."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import pattern_image, unregistered
from PIL import Image
from test_trace_arrays import _check, _refused
from test_trace_parity import _check_same_error

from extsrc.errors import OpError
from extsrc.ops_runtime.seeding import counter_rng


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
    _refused(u_decorated_refused, r"np\.fft\.fft \(not among .*\) at .*test_trace_numops\.py:\d+: "
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
    _refused(u_paste_maybe_one_row, r"an array that may be broadcast into a region of a new "
                                    r"array \(a size of 1, which numpy repeats")
    _refused(u_canvas_inexact_fill, r"filled with \[0\.1, 0\.1, 0\.1\], which float32 does not "
                                    r"hold exactly")


def test_a_new_array_of_a_drawn_shape_lowers():
    _check(u_canvas_drawn_size, random=True)


@unregistered()
def u_paste_too_tall(img):
    h, w = img.shape[:2]
    dst = np.zeros((h + 4, w, 3), np.uint8)
    dst[:] = 5
    dst[: h + 4] = np.concatenate([img, img])  # the region's height is not the array's but for h 4
    return dst


def u_paste_maybe_one_row(img):
    h, w = img.shape[:2]
    dst = np.zeros((h // 2 + 3, w, 3), np.uint8)
    dst[: h] = img  # numpy repeats a 1-row image over the region, which is then 1 row too
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




# -- reshape and broadcast_to ------------------------------------------------------------------
def u_pixels_as_rows(img):
    flat = img.reshape(-1, img.shape[-1]).astype(np.float32)
    mixed = flat @ np.array([[0.5, 0.25, 0.0], [0.25, 0.5, 0.25], [0.0, 0.25, 0.5]],
                            np.float32)
    return np.clip(mixed.reshape(img.shape), 0, 255).astype(np.uint8)


def u_rows_reshaped(img):
    h, w, c = img.shape
    rows = np.reshape(img, (h, w * c))[:, ::-1]
    return rows.reshape((h, w, c)) // 2 + img[:1] // 2


def u_lighting(img, rng):
    eigval = np.array([55.4625, 4.7940, 1.1475])
    eigvec = np.array([[-0.5836, -0.6948, 0.4203], [-0.5808, -0.0045, -0.8140],
                       [-0.5675, 0.7192, 0.4009]])
    alpha = rng.normal(0, 0.1, 3)
    alter = eigvec * np.broadcast_to(alpha.reshape(1, 3), (3, 3)) * eigval
    alter = np.broadcast_to(alter.sum(axis=1).reshape(1, 1, 3), img.shape)
    return (img.astype(np.float32) + alter).astype(np.uint8)  # wraps below 0 and above 255


def u_broadcast_output(img):
    return np.broadcast_to(img[:1, :1], img.shape).copy()


def u_flat_and_back(img):
    flat = img.reshape(-1)
    return (flat // 2 + np.broadcast_to(flat[:1], flat.shape) // 2).reshape(img.shape)


def u_broadcast_corner(img):
    return np.broadcast_to(img[:1, :1, 0], img.shape[:2]) // 3 + img[..., 1] // 3


def u_broadcast_narrow(img):
    return np.broadcast_to(img[:, :4], (img.shape[0], 4, 3)) // 2  # a width of 1 repeated


def test_reshape_and_broadcast_to_equal_numpy():
    _check(u_broadcast_narrow, imgs=[np.full((h, w, 3), 7 * w + h, np.uint8)
                                     for h, w in [(3, 1), (2, 4), (5, 6)]])
    _check(u_pixels_as_rows)
    _check(u_flat_and_back)
    _check(u_broadcast_corner)
    _check(u_rows_reshaped)
    _check(u_lighting, random=True)
    _check(u_broadcast_output)


def u_reshape_fortran(img):
    return img.reshape(-1, 3, order="F").reshape(img.shape)


def test_a_fortran_order_reshape_is_refused():
    _refused(u_reshape_fortran, r"reshape with order= other than 'C'")


@unregistered()
def u_reshape_pairs(img):
    return img.reshape(-1, 2)[:, :1].reshape(img.shape[0], -1, 3)


@unregistered()
def u_broadcast_rows(img):
    h = img.shape[0]
    return np.broadcast_to(img[:, :4], (h, 4, 3)) // 2  # narrower images than 4 raise


@pytest.mark.parametrize(("op", "sizes", "bad", "message"), [
    (u_reshape_pairs, [(4, 4), (6, 8), (3, 5)], 2, r"ValueError: cannot reshape"),
    (u_broadcast_rows, [(5, 4), (6, 5), (6, 3)], 2, r"ValueError: operands could not be "
                                                    r"broadcast"),
])
def test_reshape_and_broadcast_to_raise_for_the_sample_numpy_raises_for(tmp_path, op, sizes,
                                                                       bad, message):
    _check_same_error(tmp_path, op, sizes, bad, OpError, message)


# -- float to 8- and 16-bit integers outside their range: numpy wraps around --------------------
def u_wrapping_casts(img):
    x = img.astype(np.float32) * 3 - 300.5
    return (x.astype(np.uint8) // 4 + x.astype(np.int8).astype(np.uint8) // 4
            + (x * 100).astype(np.int16).astype(np.uint8) // 4
            + (x.astype(np.float64) * 300).astype(np.uint16).astype(np.uint8) // 4)


def test_float_casts_to_narrow_integers_wrap_as_numpy():
    _check(u_wrapping_casts)


# -- cv2.copyMakeBorder with per-sample widths: a padded slice ----------------------------------
def u_drawn_border(img, rng):
    import cv2

    h, w = img.shape[:2]
    top = int(rng.integers(0, 4))
    return cv2.copyMakeBorder(img, top, h // 3, w // 2, 3 - top, cv2.BORDER_CONSTANT,
                              value=(114, 7, 300))


def u_drawn_gray_border(img):
    import cv2

    h = img.shape[0]
    return cv2.copyMakeBorder(img[..., 0], h // 2, 0, 1, 2, cv2.BORDER_CONSTANT, value=9)


def test_a_border_of_per_sample_widths_lowers():
    _check(u_drawn_border, random=True)
    _check(u_drawn_gray_border)


@unregistered()
def u_border_maybe_negative(img):
    import cv2

    return cv2.copyMakeBorder(img, img.shape[0] - 3, 0, 0, 0, cv2.BORDER_CONSTANT, value=0)


def u_border_drawn_replicated(img):
    import cv2

    return cv2.copyMakeBorder(img, img.shape[0] // 2, 0, 0, 0, cv2.BORDER_REPLICATE)


def test_other_borders_of_per_sample_widths_are_refused():
    _refused(u_border_drawn_replicated, r"cv2\.copyMakeBorder with per-sample border widths other "
                                        r"than BORDER_CONSTANT")


# -- loops over range() of a drawn count: unrolled, one branch per count ------------------------
def u_drawn_holes(img, rng):
    out = img.copy()
    h, w = img.shape[:2]
    for _ in range(rng.integers(1, 4)):
        y = rng.integers(0, h)
        x = rng.integers(0, w)
        out[y:y + 2, x:x + 3] = 0
    return out


def u_drawn_steps(img, rng):
    out = img // 2
    steps = range(2, 2 + rng.integers(0, 3))
    if not isinstance(steps, range):
        raise TypeError("a range is a range")
    for k in steps:
        out = out + k
    return out


def test_a_loop_over_a_drawn_count_lowers():
    _check(u_drawn_holes, random=True)
    _check(u_drawn_steps, random=True)


def u_holes_of_drawn_shapes(img, rng, shapes: tuple = ((2, 2), (2, 4), (4, 2))):
    out = img.copy()
    h, w = img.shape[:2]
    sizes = np.array(shapes)
    for _ in range(rng.integers(1, 3)):
        x1 = rng.integers(0, w)
        y1 = rng.integers(0, h)
        cw, ch = sizes[rng.integers(0, len(shapes))]
        out[y1:np.clip(y1 + ch, 0, h), x1:np.clip(x1 + cw, 0, w), :] = (0, 0, 0)
    return out


def u_pick_a_value(img, rng):
    gains = np.array([0.5, 1.0, 1.5, 2.0])
    return np.clip(img * gains[rng.integers(-4, 4)], 0, 255).astype(np.uint8)


def test_picking_from_constants_by_a_draw_lowers():
    _check(u_holes_of_drawn_shapes, random=True)
    _check(u_pick_a_value, random=True)


def u_list_index(img, rng):
    shapes = [(2, 2), (2, 4)]  # a list the op makes, which may change between uses
    cw, ch = shapes[rng.integers(0, 2)]
    return img[:ch, :cw]


def test_a_list_the_op_makes_indexed_by_a_draw_is_refused_with_the_rewrite():
    _refused(u_list_index, r"needs a concrete int \(a list or tuple index, .*np\.array\(values\)"
                           r"\[i\]\)", random=True)


def u_tuple_default_index(img, rng, shapes: tuple = ((2, 2), (2, 4), (1, 3))):
    cw, ch = shapes[rng.integers(-3, 3)]  # negative indices count from the end
    return img[:ch, :cw]


def test_a_tuple_default_indexed_by_a_draw_lowers():
    imgs = [pattern_image(k, 2 + k % 3, 3 + k % 4) for k in range(16)]
    # every index from -3 to 2 is drawn by some image (the draws _check gives image k)
    assert {int(counter_rng(11, 0, k, 3).integers(-3, 3)) for k in range(16)} == set(
        range(-3, 3))
    _check(u_tuple_default_index, random=True, imgs=imgs)


def u_loop_over_rows(img):
    out = img.copy()
    for y in range(img.shape[0]):
        out[y:y + 1] = out[y:y + 1] // 2
    return out


def test_a_loop_over_an_unbounded_count_is_refused():
    _refused(u_loop_over_rows, r"range\(\) of a per-sample count the tracer cannot bound by 16")


@pytest.mark.parametrize(("op", "sizes", "bad", "message"), [
    (u_paste_too_tall, [(4, 7), (4, 5), (6, 3)], 2, r"ValueError: could not broadcast input "
                                                    r"array"),
    (u_canvas_negative, [(9, 7), (8, 4), (6, 7)], 2, r"ValueError: negative dimensions are not "
                                                     r"allowed"),
    (u_border_maybe_negative, [(5, 7), (3, 4), (2, 5)], 2, r"raised error: .*\(-215:Assertion "
                                                           r"failed\) top >= 0"),
    (u_pil_crop_reversed, [(5, 7), (6, 4), (9, 2)], 2, r"ValueError: Coordinate 'right' is less "
                                                       r"than 'left'"),
])
def test_a_new_array_or_crop_raises_for_the_sample_numpy_raises_for(tmp_path, op, sizes, bad,
                                                                   message):
    _check_same_error(tmp_path, op, sizes, bad, OpError, message)

# -- numpy's scalar types of arrays, axis moves, iteration over the channels ---------------------
def u_scalar_type_of_an_array(img, rng):
    gain = rng.uniform(0.5, 1.5, (1,))  # imgaug draws a sample of shape (1,)
    return np.clip(img * np.float32(gain), 0, 255).astype(np.uint8)


def u_scalar_types_of_scalars(img, rng):
    g = rng.uniform(0.5, 1.5)
    return np.clip(img * np.float32(g) + np.float64(g), 0, 255).astype(np.uint8)


def test_a_numpy_scalar_type_of_a_per_sample_value_converts_as_numpy_does():
    _check(u_scalar_type_of_an_array, random=True)
    _check(u_scalar_types_of_scalars, random=True)


def u_rollaxis(img, start: int = 0):
    channels_first = np.rollaxis(img, 2, start)
    return np.rollaxis(channels_first, 0, 3).copy() if start == 0 else channels_first


def u_moveaxis(img):
    return np.moveaxis(np.moveaxis(img, -1, 0)[::-1], 0, -1)


def u_channels_iterated(img, rng):
    shift = rng.integers(-40, 40)
    x = np.rollaxis(img.astype(np.int16), 2, 0)
    lo, hi = np.min(x), np.max(x)
    return np.stack([np.clip(c + shift, lo, hi) for c in x], axis=2).astype(np.uint8)


def test_rollaxis_and_moveaxis_are_transposes_and_the_channels_iterate():
    _check(u_rollaxis)
    _check(u_rollaxis, start=2)
    _check(u_moveaxis)
    _check(u_channels_iterated, random=True)


def u_rows_iterated(img):
    return np.stack([r for r in img], axis=0)


def test_iteration_over_a_per_sample_length_is_refused():
    _refused(u_rows_iterated, r"iteration over an array longer than 64 or of a per-sample length")
