"""Lowering rules that spare DALI operators (each costs a dispatch per batch whatever its work):
each op here runs as a real DALI pipeline on odd and even sizes, its samples equal to the numpy
function with the same draws, and its operator count at most the rules' (the count before them
in the comments)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    pattern_image,
    scalar_draws,
    sized_dataset,
    traced_equals_numpy,
    traced_pipeline,
    unregistered,
)

import extsrc
from augment_ops.trace import trace_op
from extsrc.ops_runtime.seeding import counter_rng, name_salt

SEED, SALT = 11, 5
SIZES = [(5, 5), (6, 9), (9, 6), (7, 8), (33, 47), (48, 32), (5, 11), (12, 5)]


def _lowered(op, sizes, samples: int = 48) -> int:
    """The operator count of ``op``'s graph over ``samples`` images of ``sizes`` (repeated),
    after checking every sample against the numpy function."""
    traced = trace_op(op)
    index = np.arange(samples, dtype=np.int64)
    imgs = [pattern_image(int(i), *sizes[i % len(sizes)]) for i in index]
    values = scalar_draws(traced, SEED, SALT, index, np.zeros(samples, np.int64))
    pipe = traced_pipeline(traced, imgs, values)
    (outs,) = pipe.run()
    for i, img in enumerate(imgs):
        (ref,) = op.apply(img, counter_rng(SEED, 0, int(index[i]), SALT))
        got = np.array(outs[i])
        assert got.shape == ref.shape, (img.shape, got.shape, ref.shape)
        np.testing.assert_array_equal(got, ref, err_msg=str(img.shape))
    return sum(o._op is not None for o in pipe._ops)


@unregistered()
def c_integers_cutout(image, rng, size=4):
    image = image.copy()
    y, x = rng.integers(image.shape[0] - size), rng.integers(image.shape[1] - size)
    image[y:y + size, x:x + size] = 0
    return image


@unregistered()
def c_truncated_crop(img, rng, ch=5, cw=4):
    h, w = img.shape[:2]
    ch, cw = min(ch, h), min(cw, w)
    y = int((h - ch + 1) * rng.random())
    x = int((w - cw + 1) * rng.random())
    return img[y:y + ch, x:x + cw]


@unregistered()
def c_random_rot90(img, rng):
    return np.rot90(img, rng.integers(0, 3, endpoint=True))


@unregistered()
def c_random_hflip(img, rng):
    return img[:, ::-1] if rng.random() > 0.5 else img


@unregistered()
def c_flip_or_transpose(img, rng):
    k = rng.integers(0, 3)
    if k == 0:
        return img[::-1]
    if k == 1:
        return img.transpose(1, 0, 2)[:, ::-1]
    return img


def test_a_draw_of_integers_below_a_size_needs_no_sign_fix_nor_clamp():
    """``rng.integers(h - 4)`` is in ``0..h - 5`` wherever numpy does not raise (the span is
    known >= 1 past numpy's check): the start's wrap-around of negative indices and its clamps
    take no operator, the size of the region is the constant 4, and the start is made float32
    from the floor of the draw itself, not from its int64 (26 operators before)."""
    assert _lowered(c_integers_cutout, SIZES) <= 11


def test_a_draw_of_integers_below_a_size_still_raises_where_numpy_does():
    traced = trace_op(c_integers_cutout)
    assert len(traced.guards) == 2  # h - 4 <= 0 and w - 4 <= 0: numpy's "high <= 0"
    with pytest.raises(ValueError, match="high <= 0"):
        c_integers_cutout.apply(pattern_image(0, 4, 9), counter_rng(SEED, 0, 0, SALT))


def test_a_truncated_draw_times_a_size_plus_one_needs_no_slice_clamp():
    """``int((h - ch + 1) * u)`` is at most ``h - ch``: the crop's bounds need no clamp at the
    image's size (22 operators before), and ``min(5, h)``, ``min(4, w)`` are one minimum of
    the image's sizes and a vector of the constants."""
    assert _lowered(c_truncated_crop, SIZES) <= 14


def test_a_rotation_by_a_drawn_quarter_turn_is_one_flip_and_a_transpose():
    """``np.rot90(img, k)``: one ``fn.flip`` with per-sample flags, then the transpose on the
    samples of odd ``k``, on odd and even sizes, every ``k``; its flags are computed with the
    draws, outside the graph (30 operators before)."""
    op = c_random_rot90
    turns = set()
    for i in range(48):
        img = pattern_image(i, 5, 7)
        (ref,) = op.apply(img, counter_rng(SEED, 0, i, SALT))
        turns.add(next(k for k in range(4) if np.array_equal(np.rot90(img, k), ref)))
    assert turns == {0, 1, 2, 3}  # the samples below draw every k
    assert _lowered(op, SIZES) <= 10


def test_a_random_flip_is_one_flip_with_a_per_sample_flag():
    assert _lowered(c_random_hflip, SIZES) <= 4  # 10 before: a split and merge of two branches


def test_flips_and_transposes_chosen_per_sample_compose_into_one_flip():
    """Branches that flip rows, or transpose then flip columns, or keep the image: each leaf is
    one per-sample flip and transpose."""
    assert _lowered(c_flip_or_transpose, SIZES) <= 9  # 19 before


@unregistered()
def c_fill_if_not_empty(img):
    img = img.copy()
    h, w = img.shape[:2]
    y1, y2, x1, x2 = min(3, h), min(7, h), min(2, w), min(6, w)
    if x2 > x1 and y2 > y1:
        img[y1:y2, x1:x2] = (10, 128, 250)
    return img


@unregistered()
def c_fill_if_tall(img):
    img = img.copy()
    if img.shape[0] > 6:  # not whether the region is empty: the select stays
        img[1:3, 1:3] = 7
    return img


def test_a_fill_under_a_test_that_its_region_is_not_empty_is_the_fill():
    """imgaug's ``if x2 > x1 and y2 > y1:`` before writing the rectangle: where the test fails
    the rectangle is empty, so the branch's split and merge take no operator (25 before),
    on images where it fails (3 rows, 2 columns) and where it holds."""
    sizes = [(3, 9), (9, 2), (2, 2), *SIZES]
    assert _lowered(c_fill_if_not_empty, sizes) <= 10
    assert trace_op(c_fill_if_not_empty).num_paths >= 2  # the trace has the branch


def test_a_fill_under_another_test_keeps_its_branch():
    traced = trace_op(c_fill_if_tall)
    assert traced.num_paths == 2
    _lowered(c_fill_if_tall, SIZES)


@unregistered()
def c_drop_channels(img, rng):
    img = img.copy()
    img[..., rng.choice(img.shape[-1], size=1, replace=False)] = 0
    return img


@unregistered()
def c_rows_if_drawn(img, rng):
    img = img.copy()
    rows = np.where(rng.random() < 0.5, img.shape[0], 0)
    img[:rows, 1:3] = 9
    return img


def test_an_integer_chosen_between_a_value_and_zero_is_a_product():
    """A channel's rows ``np.where(k == c, h, 0)`` (a drawn channel written): ``h`` times the
    condition made an integer with the draws, where the bitwise select takes five operators,
    and a fill's shape from row and column 0 is its stops (41 operators before)."""
    assert _lowered(c_drop_channels, SIZES) <= 25
    assert _lowered(c_rows_if_drawn, SIZES) <= 11  # 15 before


@unregistered()
def c_translate(image, rng, pad=3):
    h, w, c = image.shape
    dst = np.zeros((h + 2 * pad, w + 2 * pad, c), dtype=image.dtype)
    dst[pad:pad + h, pad:pad + w] = image
    y, x = rng.integers(low=0, high=2 * pad + 1), rng.integers(low=0, high=2 * pad + 1)
    return dst[y:y + h, x:x + w]


def test_a_window_of_the_images_size_at_a_bounded_offset_is_one_padding_slice():
    """``dst[y:y + h]`` of a canvas ``h + 6`` high, ``y`` at most 6: the stop needs no clamp
    (``y + h <= h + 6`` from the bound of ``y``), and the window's size ``(y + h) - y`` is
    ``h``, read from the image's shape (18 operators before)."""
    assert _lowered(c_translate, SIZES) <= 8


@unregistered()
def c_channel_offsets(img, rng, scale=(20.0, 5.0, 1.5)):
    alpha = rng.normal(0, 0.5, 3)
    offsets = (np.array(scale) * alpha).reshape(1, 1, 3)
    return np.clip(img.astype(np.float64) + offsets, 0, 255).astype(np.uint8)


def test_a_small_array_of_the_draws_is_computed_with_them():
    """Offsets per channel from three normal draws (mmlab's lighting): numpy computes the (1, 1,
    3) array with the draws, one external-source output, where the graph would compute the
    products and the reshape (and take one output per draw)."""
    assert _lowered(c_channel_offsets, SIZES) <= 8  # 15 before


@pytest.mark.parametrize(("op", "size"), [(c_channel_offsets, (5, 7)), (c_random_rot90, (6, 6))],
                         ids=["offsets", "rot90"])
def test_the_values_computed_with_the_draws_reach_a_loaders_graph(tmp_path, op, size):
    """Through a loader (its source computes the draws' values), every sample equals the numpy
    function run with the sample's draws: the (1, 1, 3) offsets, the flags of a rotation (square
    images: a batch stacks one shape)."""
    sizes = [size] * 16
    manifest = sized_dataset(tmp_path, sizes)
    with extsrc.Loader(manifest, batch_size=8, ops=[op], device="cpu", shuffle=False, seed=SEED,
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=1)) as loader:
        assert loader.op_paths == {op.name: "native"}
        seen = 0
        for batch in loader:
            for k, index in enumerate(batch["index"].tolist()):
                img = pattern_image(index, *sizes[index])
                (ref,) = op.apply(img, counter_rng(SEED, 0, index, name_salt(op.name)))
                np.testing.assert_array_equal(batch[f"{op.name}_0"][k].numpy(), ref)
                seen += 1
    assert seen == len(sizes)


@unregistered()
def c_scale_and_shift(img):
    return (img.astype(np.float64) * 1.3 - 50.5).astype(np.uint8)


@unregistered()
def c_normal_shift(img, rng):
    return (img.astype(np.float64) + 40 * rng.normal()).astype(np.uint8)


def test_a_cast_to_integers_of_bounded_floats_truncates_by_the_remainder():
    """Floats the tracer bounds (finite, of either sign) truncate as ``x - x % 1`` before the
    cast (on the CPU, where DALI's float ``%`` is ``fmod``), wrapping around as numpy's do
    (-0.5 -> 0, -1.5 -> 255, 300.7 -> 44), where the select between ``ceil`` and ``floor``
    takes ten operators; a normal draw is bounded through its ``log`` and ``sqrt`` (draws are
    below 1) (24 and 22 operators before)."""
    assert _lowered(c_scale_and_shift, SIZES) <= 12
    assert _lowered(c_normal_shift, SIZES) <= 10


# -- the facts the rules above rest on ----------------------------------------------------------
I8, F8 = np.dtype(np.int64), np.dtype(np.float64)


def _const(v, dt):
    from augment_ops.trace.ir import Node

    return Node("const", (), (), dt, (), value=np.array(v, dt))


def _op(name, *args, dt=I8, kind="bin"):
    from augment_ops.trace.ir import Node

    return Node(kind, args, (name,), dt, ())


def _cast(x, dt):
    from augment_ops.trace.ir import Node

    return Node("cast", (x,), (dt.str,), dt, ())


def _draw(slot=0):
    from augment_ops.trace.ir import Node

    return Node("uniform", (), (slot,), F8, ())


def _height():
    from augment_ops.trace.ir import Node

    return Node("in_dim", (), (0,), I8, ())


def test_a_truncated_draw_times_a_size_is_below_the_size():
    from augment_ops.trace.facts import _at_most

    h = _height()
    ch = _op("minimum", _const(5, I8), h)
    span = _op("add", _op("subtract", h, ch), _const(1, I8))  # h - ch + 1 >= 1
    y = _cast(_op("trunc", _op("multiply", _cast(span, F8), _draw(), dt=F8), dt=F8, kind="un"),
              I8)
    assert _at_most(y, h)
    assert _at_most(_op("add", y, ch), h)  # y + ch <= h: the crop fits
    wide = _cast(_op("floor", _op("multiply", _draw(1), _cast(_op("add", h, _const(1, I8)), F8),
                                  dt=F8), dt=F8, kind="un"), I8)
    assert _at_most(wide, h)  # floor(u * (h + 1)) <= h
    assert not _at_most(wide, _op("subtract", h, _const(1, I8)))  # but may reach h


def test_terms_that_do_not_cancel_bound_a_difference():
    from augment_ops.trace.facts import _at_most

    h = _height()
    y = _op("minimum", _cast(_op("floor", _op("multiply", _draw(), _const(7.0, F8), dt=F8),
                                 dt=F8, kind="un"), I8), _const(6, I8))  # 0..6
    assert _at_most(_op("add", y, h), _op("add", h, _const(6, I8)))
    assert not _at_most(_op("add", y, h), _op("add", h, _const(5, I8)))


def test_a_normal_draw_has_finite_bounds():
    from augment_ops.trace.facts import lower, upper

    u = _draw()
    assert upper(u) < 1
    log = _op("log", _op("subtract", _const(1.0, F8), u, dt=F8), dt=F8, kind="un")
    r = _op("sqrt", _op("multiply", _const(-2.0, F8), log, dt=F8), dt=F8, kind="un")
    assert -37.5 < lower(log) and upper(log) >= 0
    assert lower(r) <= 0 and 8.5 < upper(r) < 8.7  # sqrt(-2 log 2**-53) = 8.57
    # log of a value that may be 0 has no lower bound
    assert lower(_op("log", u, dt=F8, kind="un")) is None


# -- integer conversions of values in range: DALI's cast (which saturates) as numpy's ------------
@unregistered()
def c_clipped_jitter(img, rng):
    shift = int(rng.integers(-300, 301))
    return np.clip(img.astype(np.int16) * 3 + shift, 0, 255).astype(np.uint8)


@unregistered()
def c_clip_inside_the_range(img, rng):
    shift = int(rng.integers(-300, 301))
    return np.clip(img.astype(np.int32) * 3 + shift, 10, 200).astype(np.uint8)


@unregistered()
def c_bounded_by_the_facts(img, rng):
    x = np.clip(img.astype(np.int32) - 128 + int(rng.integers(-300, 301)), -128, 127)
    return (x.astype(np.int8).astype(np.int16) + 128).astype(np.uint8)


@unregistered()
def c_clip_past_the_range(img, rng):
    shift = int(rng.integers(-300, 301))
    return np.clip(img.astype(np.int16) * 3 + shift, -10, 300).astype(np.uint8)  # wraps


@pytest.mark.parametrize("op, most", [
    (c_clipped_jitter, 7),  # 10 before: the clip and the low bits kept through int64
    (c_clip_inside_the_range, 8),  # 10 before
    (c_bounded_by_the_facts, 10),  # 19 before
    (c_clip_past_the_range, 10),  # wraps as numpy does: the low bits kept
], ids=lambda v: getattr(v, "name", v))
def test_an_integer_conversion_of_values_in_range_is_one_cast(op, most):
    assert _lowered(op, SIZES) <= most


@unregistered()
def c_lanes_in_and_out_of_range(img):
    # y0 fits uint8, x0 wraps for images 256 or more wide: the two bounds are computed together
    # (one vector), yet each converts as numpy converts it.
    img = img.copy()
    h, w = img.shape[:2]
    y0 = np.int64(h % 100).astype(np.uint8)
    x0 = np.int64(w % 1000).astype(np.uint8)
    img[y0 // 2:, x0 // 2:] = 0
    return img


@unregistered()
def c_float_lanes_in_and_out_of_range(img):
    h, w = img.shape[:2]
    y0 = (np.int64(h % 100) * 1.0).astype(np.uint8)
    x0 = (np.int64(w % 1000) * 1.0).astype(np.uint8)
    return img[y0 // 4:, x0 // 4:]


@pytest.mark.parametrize("op", [c_lanes_in_and_out_of_range, c_float_lanes_in_and_out_of_range],
                         ids=lambda v: v.name)
def test_scalars_computed_together_convert_each_as_numpy_does(op):
    traced_equals_numpy(op, [pattern_image(0, 40, 300), pattern_image(1, 40, 90),
                             pattern_image(2, 260, 513)])


# -- np.clip(v, 0, 255).astype(np.uint8) of float values: floor, then DALI's saturating cast -----
@unregistered()
def c_float_blend(img, rng):
    w = rng.uniform(0.5, 1.5)
    out = img * w + (1 - w) * 128.0
    return np.clip(out, 0, 255).astype(np.uint8)


@unregistered()
def c_float_scale_may_be_nan(img, rng):
    x = img.astype(np.float32)
    out = x / x * 200 + rng.uniform(-300, 300)  # 0 / 0 is NaN: the clip stays
    return np.clip(out, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("op, most", [
    (c_float_blend, 9),  # 10 with the clip, the floor and the cast
], ids=lambda v: getattr(v, "name", v))
def test_a_float_clipped_to_the_range_of_uint8_is_floored_and_cast(op, most):
    assert _lowered(op, SIZES) <= most


def test_a_float_that_may_be_nan_keeps_its_clip():
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(SIZES)]
    imgs[0][0, 0] = 0  # 0 / 0 somewhere
    with np.errstate(invalid="ignore"):
        traced_equals_numpy(c_float_scale_may_be_nan, imgs)


@unregistered()
def c_wrapped_divisor(img):
    # The divisor wraps around in uint8 (it is odd, never 0): numpy's quotient exceeds 255 and
    # wraps in the conversion, which no bound may skip.
    x = img.astype(np.float32)
    return (x * 129 / (img * 2 + 129)).astype(np.uint8)


def test_a_quotient_by_a_wrapped_divisor_converts_as_numpy_does():
    full = np.repeat(np.arange(256, dtype=np.uint8).reshape(16, 16, 1), 3, axis=2)
    with np.errstate(all="ignore"):
        traced_equals_numpy(c_wrapped_divisor, [full, pattern_image(0, 9, 7)])


# -- np.clip(x, 0, 255).astype(np.uint8) of floats: floor, and DALI's cast saturates ------------
def _blend(img, src, w):
    # fvcore's BlendTransform.apply_image, as detectron2's colour augmentations use it
    img = img.astype(np.float32)
    return np.clip((1 - w) * src + w * img, 0, 255).astype(np.uint8)


@unregistered()
def c_mean_contrast(image, rng):
    # the mean is a float64 sum of the image over its size: finite, so never NaN
    return _blend(image, image.mean(), rng.uniform(0.8, 1.2))


@unregistered()
def c_grey_saturation(image, rng):
    # a float64 grey channel, given its channel axis back by np.newaxis
    grey = image.dot([0.299, 0.587, 0.114])[:, :, np.newaxis]
    return _blend(image, grey, rng.uniform(0.8, 1.2))


@pytest.mark.parametrize("op", [c_mean_contrast, c_grey_saturation])
def test_a_clip_before_a_saturating_cast_takes_no_operator(op):
    _lowered(op, SIZES)
    traced = trace_op(op)
    imgs = [pattern_image(0, 5, 7)]
    pipe = traced_pipeline(traced, imgs, scalar_draws(traced, SEED, SALT, np.zeros(1, np.int64),
                                                      np.zeros(1, np.int64)))
    clamps = [o for o in pipe._ops if o._op is not None and "clamp(" in str(o._spec)]
    assert not clamps  # the clip was one pass over the image more (floor, then the cast)
