"""Lookup tables (``table[img]``, ``np.take``, ``cv2.LUT``, albucore's ``sz_lut``) and the cv2
layer of the tracer: each lowered op gives numpy's (and OpenCV's) pixels exactly in a CPU DALI
pipeline, every image value met; what cannot be exact is refused naming the call and why."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import scalar_draws
from test_trace import _emit_on

from augment_ops.trace import TraceError, trace_function
from extsrc.ops_runtime.seeding import counter_rng

cv2 = pytest.importorskip("cv2")

SEED = 11


def _images(count: int = 5) -> list[np.ndarray]:
    """Random HWC uint8 images of several sizes, and one holding every value 0..255."""
    rng = np.random.default_rng(3)
    every = (np.arange(16 * 16 * 3) % 256).astype(np.uint8).reshape(16, 16, 3)
    return [every, *(rng.integers(0, 256, (int(rng.integers(1, 12)), int(rng.integers(1, 12)), 3),
                                  dtype=np.uint8) for _ in range(count))]


def _check(func, *, random: bool = False, ndim: int = 3, epoch: int = 0, **params) -> None:
    """``func`` traced and run by DALI equals ``func`` run by numpy on every image."""
    imgs = _images()
    draw = (lambda k: {"rng": counter_rng(SEED, epoch, k, 5)}) if random else (lambda k: {})
    ref0 = func(imgs[0], **draw(0), **params)
    traced = trace_function(func, params=params, random=random, num_outputs=1,
                            dtype=ref0.dtype, ndim=ndim)
    values = ()
    if random:
        values = scalar_draws(traced, SEED, 5, np.arange(len(imgs), dtype=np.int64),
                              np.full(len(imgs), epoch, np.int64))
    outs = _emit_on(traced, imgs, values)
    for k, im in enumerate(imgs):
        ref = func(im, **draw(k), **params)
        assert outs[k].dtype == ref.dtype and outs[k].shape == ref.shape, (k, outs[k].dtype,
                                                                          ref.dtype)
        np.testing.assert_array_equal(outs[k], ref, err_msg=f"{func.__name__} on image {k}")


def _refusal(func, *, random: bool = False, ndim: int = 3, dtype=np.uint8) -> str:
    with pytest.raises(TraceError) as e:
        trace_function(func, params={}, random=random, num_outputs=1, dtype=dtype, ndim=ndim)
    return str(e.value)


# -- per-sample tables: the table's expression applied to the pixels ---------------------------
def u_add_clipped(img, rng):
    value = rng.integers(-60, 60, endpoint=True)
    table = np.clip(np.arange(256, dtype=np.int16) + value, 0, 255).astype(np.uint8)
    return table[img]


def u_multiply_float32(img, rng):
    factor = np.float32(rng.uniform(0.5, 1.5))
    table = np.clip(np.arange(256, dtype=np.float32) * factor, 0, 255).astype(np.uint8)
    return table[img]


def u_solarize_drawn(img, rng):
    threshold = rng.integers(0, 256)
    values = np.arange(256)
    table = np.where(values >= threshold, 255 - values, values).astype(np.uint8)
    return table[img]


def u_posterize_drawn(img, rng):
    step = rng.integers(1, 8, endpoint=True) * 16
    return (np.arange(256) // step * step).astype(np.uint8)[img]


def u_gamma_float64_steps(img, rng):
    # np.arange(0, 1, 1/255) is start + i * step in float64, and the square is a float64
    # constant float32 cannot hold: read through three float32-exact tables.
    scale = rng.uniform(0.8, 1.2)
    table = (np.arange(0, 256.0 / 255, 1.0 / 255) ** 2) * 255 * scale
    return np.clip(table, 0, 255).astype(np.uint8)[img]


def u_contrast_linear(img, rng):
    alpha = rng.uniform(0.6, 1.4)
    table = 128 + alpha * (np.arange(256, dtype=np.float32) - 128)
    return np.clip(table, 0, 255).astype(img.dtype)[img]


def u_table_to_float(img, rng):
    scale = rng.uniform(0.5, 2.0)
    return (np.arange(256) / 255.0 * scale)[img]


def u_draws_of_shape_one(img, rng):
    # imgaug's contrast functions: the draws come as arrays of shape (1,), cast with
    # np.float32(array), and broadcast against the table's 256 entries
    alpha, shift = np.float32(rng.uniform(0.6, 1.4, (1,))), rng.integers(-20, 20, size=(1,))
    table = 128 + alpha * (np.linspace(0, 255, 256, dtype=np.float32) - 128) + shift
    return np.clip(table, 0, 255).astype(np.uint8)[img]


@pytest.mark.parametrize("func", [u_add_clipped, u_multiply_float32, u_solarize_drawn,
                                  u_posterize_drawn, u_gamma_float64_steps, u_contrast_linear,
                                  u_table_to_float, u_draws_of_shape_one],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("epoch", [0, 1])
def test_per_sample_tables_equal_numpy(func, epoch):
    _check(func, random=True, epoch=epoch)


# -- constant tables --------------------------------------------------------------------------
_TABLES = {
    "uint8": np.random.default_rng(1).integers(0, 256, 256).astype(np.uint8),
    "int16": np.random.default_rng(2).integers(-3000, 3000, 256).astype(np.int16),
    "float32": np.random.default_rng(3).normal(size=256).astype(np.float32),
    "float64": np.random.default_rng(4).normal(size=256),  # three float32 parts
    "bool": np.random.default_rng(5).integers(0, 2, 256).astype(bool),
}


@pytest.mark.parametrize("name", sorted(_TABLES))
def test_constant_tables_through_np_take_equal_numpy(name):
    table = _TABLES[name]

    def u_take(img):
        return np.take(table, img)
    if table.dtype == bool:
        assert "bool values" in _refusal(u_take, dtype=bool)
        return
    _check(u_take)


def u_list_table(img):
    table = np.array([min(255, i + 40) for i in range(256)], dtype=np.uint8)
    return table[img]


def u_arange_table(img):
    return (255 - np.arange(256)).astype(np.uint8)[img[..., ::-1]]


def u_linspace_table(img):
    return np.linspace(0.0, 1.0, 256)[img]


@pytest.mark.parametrize("func", [u_list_table, u_arange_table, u_linspace_table],
                         ids=lambda f: f.__name__)
def test_constant_tables_the_op_builds_index_like_numpy(func):
    _check(func)


def test_negative_indices_count_from_the_end_as_in_numpy():
    table = np.random.default_rng(6).integers(0, 256, 256).astype(np.uint8)

    def u_signed(img):
        return np.take(table, img.astype(np.int8))
    _check(u_signed)


def test_tables_that_may_be_indexed_out_of_range_are_refused():
    short = np.arange(100, dtype=np.uint8)

    def u_short(img):
        return np.take(short, img)

    def u_wide_index(img):
        return np.take(np.arange(256, dtype=np.uint8), img.astype(np.uint16))

    def u_large_ints(img):
        return np.take(np.arange(256, dtype=np.int64) * (2**40 + 1), img)

    assert re.search(r"100 entries indexed by uint8 values: numpy raises IndexError .* give "
                     r"the table 256 entries", _refusal(u_short))
    assert "indexed by uint16 values" in _refusal(u_wide_index)
    assert "float32 does not hold exactly" in _refusal(u_large_ints, dtype=np.int64)


def test_a_traced_table_at_a_boolean_index_stays_a_mask():
    def u_mask(img):
        out = img.copy()
        out[img > 128] = 0
        return out
    _check(u_mask)


# -- cv2 -------------------------------------------------------------------------------------
def u_rgb2gray(img):
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)


def u_bgr2gray(img):
    return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)


def u_bgr2rgb_in_place(img):
    out = img.copy()
    cv2.cvtColor(out, cv2.COLOR_BGR2RGB, out)
    return out


def u_gray2rgb(img):
    return cv2.cvtColor(img[..., 1], cv2.COLOR_GRAY2RGB)


def u_flips(img):
    return cv2.flip(cv2.flip(img, 0), -1)[:, ::-1] + cv2.flip(img, 1)


def u_split_merge(img):
    b, g, r = cv2.split(img)
    return cv2.merge((r, cv2.LUT(g, 255 - np.arange(256, dtype=np.uint8)), b))


def u_lut_per_channel(img):
    tables = np.stack([np.arange(256) // 2, 255 - np.arange(256), np.arange(256)], -1)
    return cv2.LUT(img, tables[None].astype(np.uint8))


def u_lut_drawn_into_dst(img, rng):
    shift = rng.integers(0, 100)
    table = np.clip(np.arange(256) + shift, 0, 255).astype(np.uint8)
    out = img.copy()
    cv2.LUT(out, table, dst=out)
    return out


@pytest.mark.parametrize("func,ndim", [(u_rgb2gray, 2), (u_bgr2gray, 2), (u_bgr2rgb_in_place, 3),
                                       (u_gray2rgb, 3), (u_flips, 3), (u_split_merge, 3),
                                       (u_lut_per_channel, 3)], ids=lambda f: getattr(
                                           f, "__name__", str(f)))
def test_cv2_calls_equal_opencv(func, ndim):
    _check(func, ndim=ndim)


def test_cv2_lut_of_a_drawn_table_into_dst_equals_opencv():
    _check(u_lut_drawn_into_dst, random=True)


def test_the_gray_formula_is_opencvs_on_every_rgb_triple():
    from augment_ops.trace.cv2_api import _gray_u8  # noqa: F401 (the formula lowered)

    v = np.arange(256, dtype=np.int64)
    r, g, b = (a.ravel() for a in np.meshgrid(v, v, v, indexing="ij"))
    img = np.stack([r, g, b], -1).astype(np.uint8).reshape(4096, 4096, 3)
    ours = (9798 * r + 19235 * g + 3735 * b + (1 << 14)) >> 15
    np.testing.assert_array_equal(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).ravel(), ours)


def u_resize(img):
    return cv2.resize(img, (8, 8))


def u_add_weighted(img):
    scaled = img.astype(np.float32) / 255
    return cv2.addWeighted(scaled, 0.5, scaled, 0.5, 0)


def u_lab(img):
    return cv2.cvtColor(img, cv2.COLOR_RGB2LAB)


def u_gray_float(img):
    return cv2.cvtColor(img.astype(np.float32), cv2.COLOR_RGB2GRAY)


def u_constant_cv2(img):
    m = cv2.getRotationMatrix2D((1.0, 1.0), 90.0, 1.0)  # constants: OpenCV itself
    return img + np.uint8(m.shape[0])


def test_other_cv2_calls_are_refused_naming_the_call_and_why():
    assert re.search(r"^cv2\.resize \(OpenCV's interpolation", _refusal(u_resize))
    assert "cv2.addWeighted of float32 values other than uint8 ones" in _refusal(u_add_weighted)
    assert "cv2.cvtColor with COLOR_RGB2LAB" in _refusal(u_lab)
    assert "cv2.cvtColor to gray of float32" in _refusal(u_gray_float, ndim=2, dtype=np.float32)
    assert "u_resize" not in _refusal(u_resize) and "test_trace_lookup.py" in _refusal(u_resize)


def test_cv2_on_constants_is_opencv_and_cv2_is_restored_after_tracing():
    real = cv2.cvtColor
    _check(u_constant_cv2)
    assert cv2.cvtColor is real and cv2.resize.__module__ == real.__module__
    with pytest.raises(TraceError):
        trace_function(u_resize, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)
    assert cv2.cvtColor is real


def test_histogram_equalisation_is_refused_saying_why():
    def u_equalize(img):
        hist = np.histogram(img, 256, (0, 255))[0]
        return (np.cumsum(hist) // 3).astype(np.uint8)[img]
    msg = _refusal(u_equalize)
    assert re.search(r"^np\.histogram of pixel values .* no histogram or cumulative-sum operator",
                     msg)


# -- albucore -------------------------------------------------------------------------------
def test_albucore_sz_lut_is_a_lookup_table():
    albucore = pytest.importorskip("albucore")
    sz_lut = albucore.sz_lut
    table = (255 - np.arange(256)).astype(np.uint8)
    namespace = {"np": np, "sz_lut": sz_lut, "table": table}
    exec("def u_sz_lut(img):\n    return sz_lut(img, table, inplace=False)\n", namespace)
    _check(namespace["u_sz_lut"])


_LEVELS = (np.arange(256) // 64 * 64 + 32).astype(np.uint8)
_LEVELS.setflags(write=False)


def u_module_table(img):
    return _LEVELS[img]


def test_a_read_only_module_table_indexes_like_numpy():
    _check(u_module_table)


def _lut_into_copy(image, table):
    # The habit of cv2 wrappers: check size and flags, copy when the array is not its own.
    if image.size == 0:
        return image
    if not image.flags["OWNDATA"] or not image.flags["WRITEABLE"]:
        image = np.copy(image)
    if not image.flags["C_CONTIGUOUS"]:
        image = np.ascontiguousarray(image)
    return cv2.LUT(image, table, dst=image)


def u_wrapper_checks_flags(img):
    table = np.clip(64 + 1.5 * (np.arange(256, dtype=np.float32) - 64), 0, 255)
    return _lut_into_copy(img[1:, ::-1], table.astype(np.uint8))


def test_size_and_flags_let_a_cv2_wrapper_trace():
    _check(u_wrapper_checks_flags)


def u_flags_as_numpy_reports_them(img):
    out = img.copy()
    if not out.flags.writeable or not out.flags["OWNDATA"] or out[1:].flags.owndata:
        raise ValueError("flags differ from numpy's")
    return out


def test_flags_read_as_items_or_attributes_are_numpys():
    _check(u_flags_as_numpy_reports_them)

    def u_unknown_flag(img):
        return img if img.flags["FNC"] else img.copy()
    assert "ndarray.flags['FNC']" in _refusal(u_unknown_flag)


def u_uint16_table(img):
    table = np.arange(65536, dtype=np.uint16) * np.uint16(3)
    return table[img.astype(np.uint16) * np.uint16(257)]


def test_a_table_of_every_uint16_value_indexes_like_numpy():
    _check(u_uint16_table)


def u_border_constant(img):
    return cv2.copyMakeBorder(img, 3, 0, 5, 2, cv2.BORDER_CONSTANT, value=(114.6, -3, 300))


def u_border_gray_replicate(img):
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    return cv2.copyMakeBorder(gray, 1, 4, 0, 7, cv2.BORDER_REPLICATE)


def u_border_scalar(img):
    return cv2.copyMakeBorder(img, 2, 2, 2, 2, cv2.BORDER_CONSTANT, value=9)


@pytest.mark.parametrize("func,ndim", [(u_border_constant, 3), (u_border_gray_replicate, 2),
                                       (u_border_scalar, 3)],
                         ids=lambda f: getattr(f, "__name__", str(f)))
def test_copy_make_border_equals_opencv(func, ndim):
    _check(func, ndim=ndim)


def test_copy_make_border_refuses_reflections_and_per_sample_widths():
    def u_reflect(img):
        return cv2.copyMakeBorder(img, 2, 2, 2, 2, cv2.BORDER_REFLECT_101)

    def u_per_sample(img):
        return cv2.copyMakeBorder(img, img.shape[0] // 2, 0, 0, 0, cv2.BORDER_REPLICATE)
    assert "other than BORDER_CONSTANT or BORDER_REPLICATE" in _refusal(u_reflect)
    assert "per-sample border widths other than BORDER_CONSTANT" in _refusal(u_per_sample)


def u_border_float_fill(img):
    """A fill float32 does not hold (DALI pads with float32 values): concatenated strips."""
    return cv2.copyMakeBorder(img.astype(np.float64), 1, 2, 3, 0, cv2.BORDER_CONSTANT,
                              value=(0.1, 1e300, -2.5))


def u_border_then_crop(img):
    """A constant border cropped again: one padded read of the image."""
    padded = cv2.copyMakeBorder(img, 4, 4, 4, 4, cv2.BORDER_CONSTANT, value=(7, 8, 9))
    return padded[2:-1, 3:padded.shape[1] - 5]


@pytest.mark.parametrize("func", [u_border_float_fill, u_border_then_crop],
                         ids=lambda f: f.__name__)
def test_copy_make_border_of_any_fill_equals_opencv(func):
    _check(func)


def u_border_signed_zeros(img):
    return cv2.copyMakeBorder(img.astype(np.float32), 1, 2, 2, 1, cv2.BORDER_CONSTANT,
                              value=(-0.0, 0.0, -0.0))


def u_border_one_channel(img):
    return cv2.copyMakeBorder(img[..., 1:2], 2, 1, 0, 3, cv2.BORDER_CONSTANT, value=5)


def test_copy_make_border_keeps_the_sign_of_a_zero_fill_per_channel():
    imgs = _images()
    traced = trace_function(u_border_signed_zeros, params={}, random=False, num_outputs=1,
                            dtype=np.float32, ndim=3)
    for im, got in zip(imgs, _emit_on(traced, imgs, ()), strict=True):
        want = u_border_signed_zeros(im)
        assert got.tobytes() == want.tobytes()  # bit for bit: -0.0 is not 0.0
    assert np.signbit(want[0, 0, 0]) and not np.signbit(want[0, 0, 1])


def test_copy_make_border_of_one_channel_or_int64_is_opencvs():
    """OpenCV returns a one-channel HxWx1 image as HxW, and an int64 one as int32."""
    _check(u_border_one_channel, ndim=2)

    def u_int64(img):
        return cv2.copyMakeBorder(img.astype(np.int64), 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=3)
    assert "cv2.copyMakeBorder of int64" in _refusal(u_int64, dtype=np.int32)
