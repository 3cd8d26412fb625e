"""Shifts, conversions, per-channel fills, new arrays and vector draws traced into DALI: each op
below (none of them in tests/realops) is run by a real CPU DALI pipeline and compared with the
numpy path exactly, draws replayed through the counter generator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image, scalar_draws, unregistered
from test_trace import _emit_on
from test_trace_parity import _check_same_error

from augment_ops.trace import TraceError, trace_function
from extsrc.errors import OpError
from extsrc.ops_runtime.seeding import counter_rng

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
        values = scalar_draws(traced, SEED, 3, np.arange(len(imgs), dtype=np.int64),
                              np.zeros(len(imgs), np.int64))
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


# -- conversions --------------------------------------------------------------------------------
def u_contiguous_flip(img):
    return np.ascontiguousarray(np.fliplr(img))


def u_asarray_identity(img):
    out = img.copy()
    alias = np.asarray(out)
    alias[0:1, 0:1] = 9  # the same array: out changes too
    return np.asanyarray(out, dtype=np.uint8)


def u_array_copies(img):
    out = img.copy()
    fresh = np.array(out)
    fresh[0:1, 0:1] = 9  # a copy: out is unchanged
    return np.concatenate([out, fresh], axis=1)


def u_require_writable(img):
    out = np.require(img, np.uint8, ["W", "C"])
    out[0:1, 0:2] = 1
    return out


def u_require_dtype(img):
    return (np.require(img, dtype="f4") * 0.5).astype(np.uint8)


def u_astype_builtins(img, k: float = 0.5):
    x = img.astype(float) * k + img.astype(int) // 3
    return np.ascontiguousarray(x, dtype="f4").astype("u1")


@pytest.mark.parametrize("func", [u_contiguous_flip, u_asarray_identity, u_array_copies,
                                  u_require_writable, u_require_dtype, u_astype_builtins])
def test_conversions_equal_numpy(func):
    _check(func)


def test_conversions_numpy_refuses_are_refused():
    def fortran(img):
        return np.require(img, requirements="F")

    def copy_false(img):
        return np.array(img, dtype=np.float32, copy=False).astype(np.uint8)

    _refused(fortran, r"np\.require\(requirements='F'\)")
    _refused(copy_false, r"ValueError: Unable to avoid copy")


# -- per-channel fills --------------------------------------------------------------------------
def u_tuple_fill(img):
    out = img.copy()
    h, w = img.shape[:2]
    out[h // 3: h, 1: w // 2] = (114, 0, 255)
    return out


def u_array_fill(img, cval: tuple = (300, -1, 7)):
    out = img.copy()
    out[1:, :2, ...] = np.array(cval).astype(out.dtype)  # wraps: 44, 255, 7
    out[:1] = np.array([[[5, 6, 7]]], np.uint8)
    return out


def u_drawn_fill(img, rng):
    out = img.copy()
    h, w = img.shape[:2]
    y, x = rng.integers(0, h), rng.integers(0, w)
    out[y:y + 2, x:] = [rng.integers(0, 256) for _ in range(3)]
    out[:y, :x] = [rng.uniform(0, 255), 3.5, rng.integers(-5, 5)]  # as float64: truncated
    return out


def u_channel_list_fill(img, chans: tuple = (2, 0)):
    out = img.astype(np.int16)
    out[..., list(chans)] = -3
    out[:, 1:, [1]] = [1000]
    out[:2, :, 1:] = (7, 8)
    return out


def u_vector_fill(img):
    out = img.copy()
    mean = img[0, 0, :]  # the first pixel: a per-sample vector
    out[1:3, 1:3] = mean
    return out


def u_whole_assignment(img, rng):
    dst = np.empty_like(img)
    if rng.random() < 0.5:
        dst[:] = 255 - img
    else:
        dst[...] = img // 2
    return dst


@pytest.mark.parametrize("func,random", [
    (u_tuple_fill, False), (u_array_fill, False), (u_drawn_fill, True),
    (u_channel_list_fill, False), (u_vector_fill, False), (u_whole_assignment, True)])
def test_per_channel_fills_equal_numpy(func, random):
    _check(func, random=random)


def test_fills_numpy_refuses_are_refused():
    def wrong_length(img):
        out = img.copy()
        out[1:2, 1:2] = (1, 2)
        return out

    def out_of_range(img):
        out = img.copy()
        out[1:2, 1:2] = (1, 2, 300)
        return out

    def bad_channel(img):
        out = img.copy()
        out[..., [0, 3]] = 1
        return out

    _refused(wrong_length, r"ValueError: could not broadcast input array from shape \(2,\)")
    _refused(out_of_range, r"an assignment numpy refuses \(Python integer 300 out of bounds")
    _refused(bad_channel, r"IndexError: index 3 is out of bounds for axis 2 with size 3")


def u_python_int_fill(img, rng, top: int = 300):
    out = img.copy()
    out[0:1, 0:1] = int(rng.integers(0, top))  # numpy raises OverflowError above 255
    return out


def test_python_int_fill_in_range_needs_no_check():
    within = trace_function(u_python_int_fill, params={"top": 256}, random=True,
                            num_outputs=1, dtype=np.uint8, ndim=3)
    assert not within.guards  # proved in range: no check at run time
    _check(u_python_int_fill, random=True, top=256)


@unregistered()
def u_height_fill(img):
    out = img.copy()
    out[:, :1] = [int(img.shape[0] * 100), 1, 2]  # 300 for 3 rows: numpy's OverflowError
    return out


def test_python_int_fill_out_of_range_raises_as_numpy(tmp_path):
    """A Python int stored into a uint8 array raises OverflowError out of range (a numpy integer
    would wrap around): on both paths, for the sample, naming its line and file."""
    _check_same_error(tmp_path, u_height_fill, [(2, 3), (2, 4), (3, 3)], 2, OpError,
                      "raised OverflowError: Python integer (300 )?out of bounds for uint8")


# -- vector draws -------------------------------------------------------------------------------
def u_gains(img, rng):
    r = rng.uniform(-1, 1, 3) * [0.5, 0.25, 0.1] + 1  # yolov5's HSV gains, on RGB
    return np.clip(img * r, 0, 255).astype(np.uint8)


def u_noise_offsets(img, rng):
    off = rng.normal(0.0, 20.0, size=(1, 3)) + rng.random(3)
    return np.clip(img + off, 0, 255).astype(np.uint8)


def u_int_offsets(img, rng):
    off = rng.integers(-40, 40, size=3, dtype=np.int16)
    return np.clip(img.astype(np.int16) + off, 0, 255).astype(np.uint8)


def u_drop_channels(img, rng, k: int = 2):
    chans = rng.choice(3, size=k, replace=False)
    out = img.copy()
    out[..., chans] = 0
    return out


def u_drop_drawn_count(img, rng):
    k = rng.integers(1, 1, endpoint=True)  # one value: a constant
    chans = rng.choice(img.shape[-1], size=k, replace=False)
    out = img.copy()
    out[..., chans] = 7
    return out


def u_permuted_channels(img, rng):
    perm = rng.permutation(3)
    return img[..., perm]


def u_shuffled_list(img, rng):
    order = [0, 1, 2]
    rng.shuffle(order)
    return np.stack([img[..., order[0]], img[..., order[1]], img[..., order[2]]], axis=-1)


def u_choices(img, rng):
    v = rng.choice(np.array([10, 50, 90], np.uint8), size=3)
    return img // 2 + v


@pytest.mark.parametrize("func", [u_gains, u_noise_offsets, u_int_offsets, u_drop_channels,
                                  u_drop_drawn_count, u_permuted_channels, u_shuffled_list,
                                  u_choices])
def test_vector_draws_equal_their_replay(func):
    _check(func, random=True)


def test_vector_draws_numpy_refuses_or_drawn_sizes_are_refused():
    def drawn_size(img, rng):
        return img[..., rng.choice(3, size=rng.integers(1, 3), replace=False)]

    def weighted_without_replacement(img, rng):
        return img[..., rng.choice(3, size=2, replace=False, p=[0.2, 0.3, 0.5])]

    def too_many(img, rng):
        return img[..., rng.choice(3, size=4, replace=False)]

    def shuffled_image(img, rng):
        out = img.copy()
        rng.shuffle(out)
        return out

    def array_bounds(img, rng):
        return np.clip(img + rng.uniform([0, 0, 0], [1, 2, 3]), 0, 255).astype(np.uint8)

    _refused(drawn_size, r"rng\.choice\(size=<a per-sample value>\)", random=True)
    _refused(weighted_without_replacement, r"rng\.choice\(replace=False, p=\.\.\.\)",
             random=True)
    _refused(too_many, r"ValueError: Cannot take a larger sample than population", random=True)
    _refused(shuffled_image, r"rng\.shuffle of something other than a Python list",
             random=True)
    _refused(array_bounds, r"rng\.uniform with array arguments", random=True)


@unregistered()
def u_channel_by_height(img):
    return img[..., [img.shape[0] - 2]]  # out of range for 5 rows: numpy's IndexError


def test_per_sample_index_out_of_range_raises_as_numpy(tmp_path):
    _check_same_error(tmp_path, u_channel_by_height, [(2, 3), (4, 4), (5, 3)], 2, OpError,
                      r"IndexError: index (3 is )?out of bounds for axis 2 with size 3")


# -- powers -------------------------------------------------------------------------------------
def u_int_powers(img, k: int = 3):
    x = img.astype(np.int32)
    return (x ** k + np.power(img, 2) + img ** 0 + (img // 64) ** 5).astype(np.int32)


def u_wrapping_power(img):
    return img ** 7  # uint8: wraps around as numpy's does


def u_float_powers(img):
    x = img.astype(np.float32) / 7 - 3
    y = x ** 2 + x ** 1 + x ** 0 + (x + 0.5) ** -1 + np.power(x, 2.0)
    return np.clip(y, -1000, 1000).astype(np.float32)


def u_size_powers(img):
    h, w = img.shape[:2]
    return img[: h ** 2 // 4 + 1, : (w ** 3) % 5 + 1]


@pytest.mark.parametrize("func", [u_int_powers, u_wrapping_power, u_float_powers,
                                  u_size_powers])
def test_powers_equal_numpy(func):
    _check(func)


def test_powers_that_are_not_exact_are_refused():
    def cube(img):  # of two arrays: no lookup table of one uint8 array computes it
        return ((img.astype(np.float32) + img[::-1]) ** 3).astype(np.uint8)

    def gamma(img):  # an exponent computed from the pixels: numpy cannot make the table ahead
        table = (np.arange(256) / 255) ** (img.mean() / 128)
        return (table * 255).astype(np.uint8)[img]

    def negative(img):
        return img.astype(np.int64) ** -1

    _refused(cube, r"\*\* with exponent 3 on float32 values \(numpy calls the C library's pow")
    _refused(gamma, r"a table computed from the image's pixels or sizes with float math")
    _refused(negative, r"ValueError: Integers to negative integer powers are not allowed")


# -- np.pad -------------------------------------------------------------------------------------
def u_pad_constant(img):
    return np.pad(img, ((2, 1), (0, 3), (0, 0)), constant_values=7)


def u_pad_pairs(img):
    x = img.astype(np.int16)
    return np.pad(x, ((1, 2), (2, 1), (0, 0)), mode="constant",
                  constant_values=((-1, -2), (-300, 400), (0, 0)))


def u_pad_edge(img):
    return np.pad(img, 2, mode="edge")


def u_pad_gray(img):
    return np.pad(img[..., 1], (3, 1), constant_values=255)


@pytest.mark.parametrize("func", [u_pad_constant, u_pad_pairs, u_pad_edge, u_pad_gray])
def test_pad_equals_numpy(func):
    _check(func)


def test_pad_modes_not_exact_are_refused():
    def reflect(img):
        return np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="reflect")

    def negative(img):
        return np.pad(img, -1)

    def drawn_edge(img, rng):
        k = rng.integers(1, 4)
        return np.pad(img, ((k, k), (0, 0), (0, 0)), mode="edge")

    def drawn_on_three_axes(img, rng):
        k = rng.integers(1, 4)
        return np.pad(img, ((k, k), (0, 1), (1, 0)))

    _refused(reflect, r"np\.pad\(mode='reflect'\)")
    _refused(negative, r"ValueError: index can't contain negative values")
    _refused(drawn_edge, r"np\.pad with per-sample widths other than mode 'constant'", random=True)
    _refused(drawn_on_three_axes, r"np\.pad with per-sample widths other than .* padded on at "
             r"most two axes", random=True)


def u_pad_drawn(img, rng):
    k, j = rng.integers(0, 4), int(rng.integers(0, 3))
    return np.pad(img, ((k, 1), (j, 2 * j), (0, 0)), constant_values=300)  # stored as 44


def u_pad_to_size_channels_first(img):
    # MONAI's SpatialPad: a (C, H, W) image padded to at least 9 x 8, symmetrically
    x = img.transpose(2, 0, 1).astype(np.int16)
    a, b = max(9 - x.shape[1], 0), max(8 - x.shape[2], 0)
    widths = [(0, 0), (a // 2, a - a // 2), (b // 2, b - b // 2)]
    if not np.asarray(widths).any():
        return x.transpose(1, 2, 0)
    return np.pad(x, widths, constant_values=-5).transpose(1, 2, 0)


def u_pad_gray_drawn(img, rng):
    k = rng.integers(0, 4)
    return np.pad(img[..., 0], ((k, 0), (2, k)))


def u_pad_negative_drawn(img, rng):
    return np.pad(img, ((rng.integers(-1, 2), 0), (0, 0), (0, 0)))


@pytest.mark.parametrize("func", [u_pad_drawn, u_pad_to_size_channels_first, u_pad_gray_drawn])
def test_pad_by_per_sample_widths_equals_numpy(func):
    _check(func, random=func is not u_pad_to_size_channels_first)


def test_pad_by_a_negative_per_sample_width_raises_as_numpy_does():
    traced = trace_function(u_pad_negative_drawn, params={}, random=True, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    assert [(g.error, g.message) for g in traced.guards] == [
        ("ValueError", "index can't contain negative values")]
    with pytest.raises(ValueError, match="index can't contain negative values"):
        np.pad(_images()[0], ((-1, 0), (0, 0), (0, 0)))


# -- constant vectors on the channel axis --------------------------------------------------------
MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)
MEAN.setflags(write=False)
STD.setflags(write=False)


def u_normalize(img):
    # albumentations' Normalize: (img - mean * max) / (std * max), float32
    x = img.astype(np.float32)
    x -= MEAN
    x /= STD
    return x


def u_normalize_expr(img, mean: tuple = (0.485, 0.456, 0.406), std: tuple = (0.229, 0.224, 0.225)):
    mean = np.array(mean, dtype=np.float32) * 255.0
    denominator = np.reciprocal(np.array(std, dtype=np.float32) * 255.0)
    return ((img.astype(np.float32) - mean) * denominator).astype(np.float32)


def u_drawn_colour_matrix(img, rng):
    w = rng.integers(0, 3, size=3)  # integer products: exact in any order
    return np.clip(img @ w // 3, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("func,random", [(u_normalize, False), (u_normalize_expr, False),
                                         (u_drawn_colour_matrix, True)])
def test_channel_vectors_equal_numpy(func, random):
    _check(func, random=random)


def test_new_array_of_a_per_sample_shape_equals_numpy():
    def canvas(img):
        h, w = img.shape[:2]
        out = np.zeros((h + 2, w + 2, 3), np.uint8)
        return out[1:-1, 1:-1] + img

    def constant_canvas(img):
        return np.concatenate([img, np.zeros((img.shape[0], 2, 3), np.uint8)], axis=1)

    _check(canvas)
    _check(constant_canvas)
    _check(u_constant_shape_zeros)  # a constant shape is numpy's own array


def u_patch_of_a_fill(img, rng):
    # mmcv's cutout, mmpretrain's random erasing: a patch of a drawn size holding one value per
    # channel, made with arithmetic on np.ones and a colour, written into a region of its size
    h, w = img.shape[:2]
    ph, pw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
    y, x = int(rng.integers(0, h - ph + 1)), int(rng.integers(0, w - pw + 1))
    patch = np.array((7, 250, 0), dtype=np.float32) * np.ones((ph, pw, 3), np.float32)
    patch += 0.75
    out = img.copy()
    out[y:y + ph, x:x + pw] = patch  # float32 into uint8: numpy's cast truncates
    out[:ph, :pw] = np.ones((1, pw, 3), np.uint8) * 9  # numpy repeats the one row
    return out


def u_patch_past_the_edge(img):
    h, w = img.shape[:2]
    out = img.copy()
    out[h // 2:h // 2 + 3, :] = np.ones((3, w, 3), np.uint8) * 5  # 3 rows from the middle
    return out


def test_a_new_array_of_one_value_per_channel_written_into_a_region_equals_numpy():
    _check(u_patch_of_a_fill, random=True)
    traced = trace_function(u_patch_past_the_edge, params={}, random=False, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    assert [g.error for g in traced.guards] == ["ValueError"]
    fits = [im for im in _images() if im.shape[0] - im.shape[0] // 2 >= 3]
    assert fits and len(fits) < len(_images())
    _check(u_patch_past_the_edge, imgs=fits)
    with pytest.raises(ValueError, match="could not broadcast"):
        u_patch_past_the_edge(next(im for im in _images() if im.shape[0] < 5))


def u_own_generator(img, rng, seed=None):
    rng = np.random.default_rng(rng if seed is None else seed)  # skimage's random_noise
    return img[::-1] if rng.random() < 0.5 else img[:, ::-1]


def u_own_generator_as_numpy_runs_it(img, rng):
    return img[::-1] if rng.random() < 0.5 else img[:, ::-1]


def test_default_rng_of_the_ops_generator_is_that_generator():
    g = np.random.default_rng(0)
    assert np.random.default_rng(g) is g  # numpy hands a Generator back: the rule traced
    imgs = _images()
    traced = trace_function(u_own_generator, params={}, random=True, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    values = scalar_draws(traced, SEED, 3, np.arange(len(imgs), dtype=np.int64),
                          np.zeros(len(imgs), np.int64))
    outs = _emit_on(traced, imgs, values)
    refs = [u_own_generator_as_numpy_runs_it(im, counter_rng(SEED, 0, k, 3))
            for k, im in enumerate(imgs)]
    for out, ref in zip(outs, refs, strict=True):
        np.testing.assert_array_equal(out, ref)
    _refused(u_own_generator, r"^np\.random\.default_rng of a seed other than the op's rng",
             random=True, seed=5)


def u_lists_of_per_sample_values(img, rng):
    # skimage's rescale_intensity: np.isnan([imin, imax, omin, omax]) of per-sample numbers
    h, w = img.shape[:2]
    g = rng.uniform(0.5, 2.0)
    if np.any(np.isnan([float(h), w / g, g])):
        return img
    top = np.max([h // 3, 1])
    sides = np.add([h, w], (0, 1))
    return img[:top, :int(sides[1]) - 1 - int(np.add.reduce(np.array([1, 2])) == 4)]


def test_numpy_functions_of_lists_of_per_sample_values_equal_numpy():
    _check(u_lists_of_per_sample_values, random=True)


def u_bernoulli_flips(img, rng):
    # imgaug's fliplr: sample = rng.binomial(1, p)
    if rng.binomial(1, 0.5):
        img = img[:, ::-1]
    k = rng.binomial(3, rng.uniform(0.2, 0.8))
    return img[k:] if k < img.shape[0] else img


def u_binomial_of_a_drawn_probability(img, rng):
    return img[::-1] if rng.binomial(1, rng.uniform(0.0, 2.0)) else img


def u_standard_normal(img, rng):
    # tensorpack's self.rng.randn(), as rng.standard_normal()
    k = int(abs(rng.standard_normal()) * 2) % 3
    v = rng.standard_normal(2)
    return img[k:, int(v[0] > v[1]):]


def test_standard_normal_draws_equal_numpy():
    _check(u_standard_normal, random=True)


def test_binomial_draws_equal_numpy_and_check_their_probability():
    _check(u_bernoulli_flips, random=True)
    traced = trace_function(u_binomial_of_a_drawn_probability, params={}, random=True,
                            num_outputs=1, dtype=np.uint8, ndim=3)
    assert {(g.error, g.message) for g in traced.guards} == {
        ("ValueError", "p < 0, p > 1 or p is NaN")}
    with pytest.raises(ValueError, match="p < 0, p > 1 or p is NaN"):
        np.random.default_rng(0).binomial(1, 1.5)


def u_constant_shape_zeros(img):
    return img + np.ones((1, 1, 3), np.uint8) + np.full(3, 2, np.uint8)


def u_array_of_python_ints(img, rng):
    vals = np.array([int(rng.integers(0, 256)), 3, int(rng.uniform(0, 255.9))], np.uint8)
    return img // 2 + vals // 2


@unregistered()
def u_array_of_sizes(img):
    return img + np.array([img.shape[0] * 100, 0, 1], np.uint8)  # 300 for 3 rows


def test_array_of_python_ints_converts_as_numpy(tmp_path):
    _check(u_array_of_python_ints, random=True)
    _check_same_error(tmp_path, u_array_of_sizes, [(2, 3), (2, 4), (3, 3)], 2, OpError,
                      "raised OverflowError: Python integer (300 )?out of bounds for uint8")


def u_drawn_single_channel(img, rng):
    out = img.copy()
    out[1:, :, rng.integers(-3, 3)] = 9
    return out


def test_fill_of_one_drawn_channel_equals_numpy():
    _check(u_drawn_single_channel, random=True)


EIGEN = np.array([[3, -1, 0], [2, 2, -4], [1, 0, 5]], np.int64)
EIGEN.setflags(write=False)


def u_lighting_ints(img, rng):
    # detectron2's RandomLighting with integer eigenvectors (integer products: exact)
    alpha = rng.integers(-3, 4, size=3)
    shift = np.dot(EIGEN, alpha * np.array([2, 1, 1])) + EIGEN[0] @ alpha
    return np.clip(img.astype(np.int64) + shift, 0, 255).astype(np.uint8)


def test_constant_matrix_times_drawn_vector_equals_numpy():
    _check(u_lighting_ints, random=True)


# -- builtins min/max in traced code -----------------------------------------------------------
def u_min_of_generators(img):
    h, w = img.shape[:2]
    k = min(v for v in (3, 1, 2))  # a generator of constants: Python's own min
    j = max((v for v in (5, 9, 7)), key=lambda v: -v)
    m = max((), default=2)
    return img[: min(h, k + j + m), : max(1, min(w, k + m))]


def test_min_and_max_of_a_generator_equal_python():
    """A generator handed to min/max is read once: without traced values in it, Python's own
    min/max gets its items (before, it got the used-up generator and raised)."""
    _check(u_min_of_generators)
