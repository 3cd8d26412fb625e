"""Phrasings of one op lower to the same DALI graph: the same number of operators in the built
pipeline, and numpy's pixels exactly (draws fixed with the native path's counter draws).

An array filled with a constant (``np.full_like(img, 255)``, ``np.zeros_like(img) + 7``) that
meets another array of the whole shape in arithmetic, a comparison or ``np.where`` is emitted
as a scalar constant broadcast by that operator, as the same op written with a Python scalar
is, in place of the fill's own passes over the image."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from helpers import run_traced, scalar_draws, traced_pipeline

from augment_ops import Op
from augment_ops.trace import trace_op
from extsrc.ops_runtime.seeding import counter_rng, name_salt

SEED = 5
SIZES = [(1, 1), (2, 7), (5, 3), (9, 12)]


def _images(dtype: type = np.uint8, sizes=SIZES) -> list[np.ndarray]:
    """Images (the tracer's uint8 HWC) with a black and a white pixel."""
    out = []
    for k, (h, w) in enumerate(sizes):
        img = np.random.default_rng(k).integers(0, 256, (h, w, 3), dtype=dtype)
        img.reshape(-1)[0] = 0
        img.reshape(-1)[-1] = 255
        out.append(img)
    return out


def _lowered(fn: Callable[..., np.ndarray], imgs: list[np.ndarray], random: bool = False,
             dtype: type = np.uint8, ndim: int = 3) -> tuple[list[np.ndarray], Counter]:
    """The op ``fn`` traced and run by a DALI CPU pipeline on ``imgs`` (one batch, sample k
    drawing as manifest sample k of epoch 0), and the operators of the built pipeline by kind
    (the external sources left out); numpy's results are asserted equal on the way."""
    op = Op(name=f"phrasing_{fn.__name__}", fn=fn, random=random, dtype=dtype, ndim=ndim)
    traced = trace_op(op)
    salt = name_salt(op.name)
    values = scalar_draws(traced, SEED, salt, np.arange(len(imgs), dtype=np.int64),
                          np.zeros(len(imgs), dtype=np.int64))
    pipe = traced_pipeline(traced, imgs, values)
    got = [out for (out,) in run_traced(traced, imgs, pipe=pipe)]
    for k, im in enumerate(imgs):
        ref = op.apply(im, counter_rng(SEED, 0, k, salt) if random else None)[0]
        where = f"{fn.__name__} on {im.dtype} {im.shape}"
        assert got[k].dtype == ref.dtype and got[k].shape == ref.shape, (where, got[k].dtype)
        np.testing.assert_array_equal(got[k], ref, err_msg=where)
    kinds = Counter(type(o._op).__name__ for o in pipe._ops
                    if o._op is not None and type(o._op).__name__ != "ExternalSource")
    return got, kinds


# -- one op, several phrasings ---------------------------------------------------------------------
def invert_full_like(img):
    return np.full_like(img, 255) - img


def invert_scalar(img):
    return 255 - img


def invert_typed_scalar(img):
    return np.subtract(np.uint8(255), img)


def invert_zeros_plus(img):
    return (np.zeros_like(img) + 255) - img


def offset_full_like(img):
    return img + np.full_like(img, 7)


def offset_scalar(img):
    return img + img.dtype.type(7)


def offset_ufunc(img):
    return np.add(img, np.ones_like(img) * 7)


def solarize_where_scalar(img):
    return np.where(img < 128, img, 255 - img)


def solarize_where_full(img):
    return np.where(img < np.full_like(img, 128), img, np.full_like(img, 255) - img)


def flip_slice(img, rng):
    return img[:, ::-1] if rng.random() < 0.5 else img


def flip_fliplr(img, rng):
    return np.fliplr(img) if rng.uniform() < 0.5 else img


def flip_np_flip(img, rng):
    if rng.uniform(0, 1) < 0.5:
        return np.flip(img, axis=1)
    return img


def brightness_astype(img, rng):
    return np.clip(img.astype(np.float32) * rng.uniform(0.8, 1.2), 0, 255).astype(np.uint8)


def brightness_float32_factor(img, rng):
    f = np.float32(rng.uniform(0.8, 1.2))
    return np.clip(img * f, 0, 255).astype(np.uint8)


def brightness_in_place(img, rng):
    out = img.astype(np.float32)
    out *= rng.uniform(0.8, 1.2)
    return np.clip(out, 0, 255).astype(np.uint8)


def contrast_mean_method(img, rng):
    a = rng.uniform(0.8, 1.2)
    m = img.mean()
    return np.clip((img.astype(np.float32) - m) * a + m, 0, 255).astype(np.uint8)


def contrast_blend(img, rng):
    a = rng.uniform(0.8, 1.2)
    m = np.mean(img)
    return np.clip(a * img + (1 - a) * m, 0, 255).astype(np.uint8)


PHRASINGS = {
    "invert": [invert_full_like, invert_scalar, invert_typed_scalar, invert_zeros_plus],
    "offset": [offset_full_like, offset_scalar, offset_ufunc],
    "solarize": [solarize_where_scalar, solarize_where_full],
}
RANDOM_PHRASINGS = {
    "flip": [flip_slice, flip_fliplr, flip_np_flip],
    "brightness": [brightness_astype, brightness_float32_factor, brightness_in_place],
    "contrast": [contrast_mean_method, contrast_blend],
}


@pytest.mark.parametrize("op", sorted(PHRASINGS))
def test_phrasings_of_a_pixel_op_give_one_graph_and_numpys_pixels(op):
    fns = PHRASINGS[op]
    kinds = [_lowered(f, _images(np.uint8))[1] for f in fns]
    assert all(k == kinds[0] for k in kinds), dict(zip([f.__name__ for f in fns], kinds,
                                                       strict=True))


@pytest.mark.parametrize("op", sorted(RANDOM_PHRASINGS))
def test_phrasings_of_a_random_op_give_one_graph_and_numpys_pixels(op):
    fns = RANDOM_PHRASINGS[op]
    kinds = [_lowered(f, _images(np.uint8), random=True)[1] for f in fns]
    assert all(k == kinds[0] for k in kinds), dict(zip([f.__name__ for f in fns], kinds,
                                                       strict=True))


def test_a_fill_meeting_the_image_takes_no_operator_of_its_own():
    _, kinds = _lowered(invert_full_like, _images(np.uint8))
    assert sum(kinds.values()) == 2 and kinds["_ArithmeticGenericOp"] == 1, kinds  # + layout


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32,
                                   np.float64])
def test_a_folded_fill_keeps_numpys_dtype_and_wrap_around(dtype):
    """The fill's constant keeps the fill's dtype: integer results wrap around as numpy's do
    (200 * 255 in int16, 100 * -1 in int8), float results round as numpy's (a float64 fill stays
    float64, where DALI keeps bare real constants as float32)."""

    k = 100 if dtype == np.int8 else 200  # numpy refuses 200 as an int8

    def scale_by_full(img, dt=dtype, k=k):
        x = img.astype(dt)
        return x * np.full_like(x, k) - (np.zeros_like(x) + 1)

    def float64_fill(img, dt=dtype):
        x = img.astype(dt)
        return (np.full_like(x, 0.1, dtype=np.float64) + 0.2) * x

    _lowered(scale_by_full, _images(), dtype=dtype)
    _lowered(float64_fill, _images(), dtype=np.float64)


def test_a_fill_broadcast_against_a_smaller_array_keeps_its_pass():
    """Where no other operand has the result's whole shape (a fill of the image's shape plus a
    row), the fill's shape makes the result's: it is not replaced by a scalar."""

    def fill_plus_row(img):
        return np.full_like(img, 2) + img[:1]

    _, kinds = _lowered(fill_plus_row, _images(np.uint8))
    _, plain = _lowered(invert_scalar, _images(np.uint8))
    assert sum(kinds.values()) > sum(plain.values()), kinds


@pytest.mark.parametrize("mid", [np.int16, np.uint16, np.int32, np.int64, np.float32,
                                 np.float64])
@pytest.mark.parametrize("out", [np.float64, np.float32, np.int8, np.uint8, np.int16])
def test_a_cast_through_a_type_holding_every_value_is_one_cast(mid, out):
    """``img.astype(A).astype(B)``, where A holds every value of the image's dtype, is one
    conversion from the image to B, with numpy's wrap-around and rounding."""

    def twice(img, mid=mid, out=out):
        return img.astype(mid).astype(out)

    def once(img, out=out):
        return img.astype(out)

    _, kinds_twice = _lowered(twice, _images(), dtype=out)
    _, kinds_once = _lowered(once, _images(), dtype=out)
    # An output that is the input itself (uint8 -> A -> uint8) takes no layout operator.
    if out != np.uint8:
        assert kinds_twice == kinds_once, (kinds_twice, kinds_once)
    else:
        assert kinds_twice == Counter({"Reshape": 1}) and not kinds_once, kinds_twice


@pytest.mark.parametrize("out", [np.float64, np.uint8, np.int16])
def test_a_narrowing_first_cast_is_kept(out):
    """uint8 -> int8 wraps 128..255 around: the second cast converts the wrapped values."""

    def twice(img, out=out):
        return (img.astype(np.int8) * np.int8(3)).astype(np.int8).astype(out) + \
            img.astype(np.int8).astype(out)

    _lowered(twice, _images(), dtype=out)


def test_multiplying_by_one_and_exact_float64_constants_take_no_operators():
    def plain(img):
        x = img.astype(np.float64)
        return np.clip(x * 0.5, 0, 255)

    def phrased(img):
        x = img.astype(np.float64) * 1
        return np.clip(1.0 * x * 0.5, 0.0, 255.0)

    _, a = _lowered(plain, _images(), dtype=np.float64)
    _, b = _lowered(phrased, _images(), dtype=np.float64)
    assert a == b and "Reinterpret" not in a, (a, b)


@pytest.mark.parametrize("c", [0.1, -0.0, 1e-300, float("inf"), 2.0**-149, 3.0e38, 1e39])
def test_float64_constants_keep_their_value(c):
    """A float64 constant float32 cannot hold (0.1, a subnormal, beyond float32's range) and
    -0.0 keep their exact bits; those it can (inf, 2**-149, 3e38 after rounding: not exact)
    are typed constants."""

    def affine(img, c=c):
        return img.astype(np.float64) * c + c

    _lowered(affine, _images(), dtype=np.float64)


def select_fill_row_condition(img):
    return np.where(img[:1] < 100, np.full_like(img, 3), img)


def select_fill_column_value(img):
    return np.where(img < 100, img[:, :1], np.full_like(img, 7))


def divide_fill_by_zeroes(img):  # numpy's 9 // 0 is 0, as the folded constant's must be
    return np.full_like(img, 9) // (img % 4) + np.ones_like(img) * img


def float_fill_arithmetic(img):
    return (np.zeros_like(img, dtype=np.float32) - 0.5) * img


@pytest.mark.parametrize("fn", [select_fill_row_condition, select_fill_column_value,
                                divide_fill_by_zeroes, float_fill_arithmetic],
                         ids=lambda f: f.__name__)
def test_folded_fills_broadcast_and_divide_as_numpy(fn):
    _lowered(fn, _images(), dtype=np.float32 if fn is float_fill_arithmetic else np.uint8)


def grey_mean_method(img):
    return img.mean(axis=2).astype(np.uint8)[..., None]


def grey_np_mean(img):
    return np.mean(img, axis=-1).astype(np.uint8)[..., None]


def grey_channels_added(img):
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return ((b.astype(np.float64) + r.astype(np.float64) + g.astype(np.float64)) / 3.0
            ).astype(np.uint8)[..., None]


def test_phrasings_of_a_channel_mean_are_one_sum():
    fns = [grey_mean_method, grey_np_mean, grey_channels_added]
    kinds = [_lowered(f, _images())[1] for f in fns]
    assert all(k == kinds[0] for k in kinds), kinds
    assert kinds[0]["Sum"] == 1 and "_TensorSubscript" not in kinds[0], kinds[0]


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int16, np.uint16, np.int32,
                                np.int64, np.uint64])
def test_a_channel_sum_in_any_dtype_that_holds_it_is_one_sum(dt):
    def added(img, dt=dt):
        return img[..., 2].astype(dt) + img[..., 0].astype(dt) + img[..., 1].astype(dt)

    _, kinds = _lowered(added, _images(), dtype=dt, ndim=2)
    assert kinds["Sum"] == 1 and "_TensorSubscript" not in kinds, kinds


@pytest.mark.parametrize("case", ["int8_wraps", "two_of_three", "a_channel_twice",
                                  "four_terms"])
def test_sums_that_are_not_a_whole_exact_channel_sum_keep_their_additions(case):
    """int8 overflows (numpy wraps each partial sum), a sum missing a channel or taking one
    twice is another value: each keeps numpy's own additions, with numpy's pixels."""

    def int8_wraps(img):
        return img[..., 0].astype(np.int8) + img[..., 1].astype(np.int8) + \
            img[..., 2].astype(np.int8)

    def two_of_three(img):
        return img[..., 0].astype(np.int16) + img[..., 2].astype(np.int16)

    def a_channel_twice(img):
        return img[..., 0].astype(np.int16) + img[..., 0].astype(np.int16) + \
            img[..., 1].astype(np.int16)

    def four_terms(img):  # every channel, one of them twice
        return (img[..., 0].astype(np.int16) + img[..., 1].astype(np.int16)) + \
            (img[..., 2].astype(np.int16) + img[..., 0].astype(np.int16))

    fn = {"int8_wraps": int8_wraps, "two_of_three": two_of_three,
          "a_channel_twice": a_channel_twice, "four_terms": four_terms}[case]
    _, kinds = _lowered(fn, _images(), dtype=np.int8 if case == "int8_wraps" else np.int16,
                        ndim=2)
    assert "Sum" not in kinds, kinds


# -- a rectangle filled with a value per channel: one erase ----------------------------------------
def fill_tuple(img):
    out = img.copy()
    h, w = img.shape[:2]
    out[h // 4:h // 2 + 1, 1:w] = (114, 0, 255)
    return out


def fill_per_channel_writes(img):
    out = img.copy()
    h, w = img.shape[:2]
    for c, v in enumerate((114, 0, 255)):
        out[h // 4:h // 2 + 1, 1:w, c] = v
    return out


def fill_drawn_list(img, rng):
    out = img.copy()
    h, w = img.shape[:2]
    y, x = int(rng.integers(0, h)), int(rng.integers(0, w))
    out[y:y + 3, x:x + 2] = [rng.integers(64, 191, endpoint=True) for _ in range(3)]
    return out


def fill_drawn_array(img, rng):
    out = img.copy()
    h, w = img.shape[:2]
    y, x = int(rng.integers(0, h)), int(rng.integers(0, w))
    out[y:y + 3, x:x + 2] = np.array([rng.integers(64, 191, endpoint=True) for _ in range(3)])
    return out


@pytest.mark.parametrize("fns,random", [((fill_tuple, fill_per_channel_writes), False),
                                        ((fill_drawn_list, fill_drawn_array), True)])
def test_a_fill_with_a_value_per_channel_is_one_erase(fns, random):
    """``out[y0:y1, x0:x1] = (r, g, b)`` (constants or draws), written channel by channel or as
    one tuple: one ``fn.erase`` with a value per channel, not one pass per channel."""
    kinds = [_lowered(f, _images(np.uint8), random=random)[1] for f in fns]
    assert all(k["Erase"] == 1 for k in kinds), kinds


def test_a_channel_written_twice_keeps_numpys_order():
    """The last write of a channel wins in numpy; such fills are not merged into one erase."""

    def twice(img):
        out = img.copy()
        out[:2, :2, 0] = 1
        out[:2, :2, 1] = 2
        out[:2, :2, 0] = 3
        out[:2, :2, 2] = 4
        return out

    _lowered(twice, _images(np.uint8))


# -- a branch between crops of one image is one crop with bounds chosen per sample ---------------
def _crop_or_other_crop(img, rng):
    h, w = img.shape[:2]
    if rng.random() < 0.5 and h > 2:
        return img[1:h - 1]  # mmcv's imcrop of a box, one way or another
    return img[:, w // 3:]


def test_a_branch_between_crops_of_one_image_chooses_bounds_not_images():
    from helpers import traced_equals_numpy, unregistered

    op = unregistered()(_crop_or_other_crop)
    traced = trace_op(op)
    assert not any(n.op == "select" and n.ndim for n in traced.nodes())
    imgs = _images()
    outs = traced_equals_numpy(op, imgs, seed=5, index=np.arange(len(imgs)) * 7,
                               epoch=np.zeros(len(imgs), np.int64))
    assert len({o.shape[0] == i.shape[0] for o, i in zip(outs, imgs, strict=True)}) == 2


# -- an integer array converted to float: DALI converts it in the arithmetic operator ----------
def f_scale(img):
    return img.astype(np.float32) * np.float32(0.7)


def f_divide_by_image(img):  # zero pixels: inf, as numpy
    return np.float32(3) / img.astype(np.float32)


def f_int16_offset(img):
    return (img.astype(np.int16) - 128).astype(np.float32) + np.float32(0.5)


def f_int32_in_float32(img):  # at most 255 * 65536 < 2**24: float32 holds every value
    return (img.astype(np.int32) * 65536).astype(np.float32) * np.float32(1.5)


def f_int32_beyond_float32(img):  # up to 255 * 700001: float32 rounds; the cast stays
    return (img.astype(np.int32) * 700001).astype(np.float32) * np.float32(1.5)


def f_two_images(img):  # uint8 * uint8 would wrap in DALI: one side keeps its cast
    return img.astype(np.float32) * img.astype(np.float32)


def f_widened(img):
    return img.astype(np.float32).astype(np.float64) * 0.3 - img.astype(np.float64) * 1


def f_float32_widened(img):  # float32 values, NaN and inf among them, in float64 arithmetic
    x = img.astype(np.float32) / (img.astype(np.float32) - np.float32(255))
    return x.astype(np.float64) + 0.1


@pytest.mark.parametrize("fn, dtype, casts", [
    (f_scale, np.float32, 0), (f_divide_by_image, np.float32, 0),
    (f_int16_offset, np.float32, 1), (f_int32_in_float32, np.float32, 1),
    (f_int32_beyond_float32, np.float32, 2), (f_two_images, np.float32, 1),
    (f_widened, np.float64, 0), (f_float32_widened, np.float64, 0)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_an_exact_conversion_to_float_takes_no_operator(fn, dtype, casts):
    with np.errstate(divide="ignore", invalid="ignore"):
        _, kinds = _lowered(fn, _images(), dtype=dtype)
    assert kinds["Cast"] == casts, kinds


def flip_both_axes(img):
    return np.flip(img, axis=(0, 1))


def flip_by_steps(img):
    return img[::-1, ::-1]


def flip_in_turn(img):
    return np.flip(np.flip(img, 1), 0)


def flip_three_times(img):
    return np.flip(np.flip(np.flip(img, 0), 1), 0)  # the columns only


def flips_that_cancel_of_a_channel_flip(img):
    return np.rot90(np.rot90(img[..., ::-1], 2), 2) // 2 + img // 2


def channel_flip_beside_the_image(img):
    return img // 2 + img[..., ::-1] // 2


def flip_beside_a_transposed_image(img):
    t = np.transpose(img, (1, 0, 2))
    return np.flip(t, 2) // 2 + t // 2 + np.flip(t, 1) // 4


def stack_of_sizes_and_a_float64_constant(img):
    scale = np.array([img.shape[0], img.shape[1], 7], np.float64)
    return scale * img.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("fn", [flips_that_cancel_of_a_channel_flip,
                                channel_flip_beside_the_image, flip_beside_a_transposed_image],
                         ids=lambda f: f.__name__)
def test_a_flip_keeps_the_image_layout_for_arithmetic_with_it(fn):
    _lowered(fn, _images())


def test_a_stack_takes_a_float64_constant():
    _lowered(stack_of_sizes_and_a_float64_constant, _images(), dtype=np.float64)


def test_flips_of_rows_and_columns_are_one_flip():
    fns = [flip_both_axes, flip_by_steps, flip_in_turn]
    kinds = [_lowered(f, _images())[1] for f in fns]
    assert all(k == kinds[0] for k in kinds) and kinds[0]["Flip"] == 1, kinds
    assert _lowered(flip_three_times, _images())[1]["Flip"] == 1
