"""OpenCV's colour and channel arithmetic lowered by the tracer: ``cv2.cvtColor`` between BGR/RGB
and HSV for uint8, ``cv2.mixChannels`` (a channel gather, the source channels constant or drawn),
``cv2.addWeighted`` for uint8 values, and numpy's float ``%`` and ``//`` by a positive constant
(the hue tables of YOLO's HSV augmentation). Each is run by a real CPU DALI pipeline and compared
with OpenCV (or numpy) bit for bit, on images holding the edge values (0, 255, grey pixels whose
saturation is 0, max = min) and widths on both sides of OpenCV's vector blocks."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_trace import _emit_on

from augment_ops.lower_dali import SampleScalars, sample_scalar_nodes
from augment_ops.trace import TraceError, trace_function
from augment_ops.trace.cv2_color import HSV_SHIFT, hsv_tables, vector_block
from augment_ops.trace.cv2_weighted import weights_exact
from extsrc.ops_runtime.seeding import counter_rng, counter_uniform

cv2 = pytest.importorskip("cv2")

SEED = 7


def _every_colour() -> np.ndarray:
    """Every one of the 2**24 byte triples, (2**24, 3)."""
    c = np.arange(1 << 24, dtype=np.uint32)
    return np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8)


def _edge_images() -> list[np.ndarray]:
    """Images of the edge values and of widths around OpenCV's vector blocks: a dense sample of
    all colours, greys (S = 0, max = min), 0 and 255 mixed, 1x1, odd and even sizes."""
    rng = np.random.default_rng(1)
    dense = np.ascontiguousarray(_every_colour()[::61][:48 * 1024]).reshape(48, 1024, 3)
    grey = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
    extremes = rng.choice(np.array([0, 1, 254, 255], np.uint8), (9, 67, 3))
    return [dense, grey, extremes, np.zeros((1, 1, 3), np.uint8),
            np.full((2, 3, 3), 255, np.uint8),
            *(rng.integers(0, 256, (int(rng.integers(1, 9)), w, 3), dtype=np.uint8)
              for w in (1, 7, 31, 32, 33, 63, 64, 65, 97))]


def _run(func, imgs, *, random: bool = False, dtype=np.uint8, ndim: int = 3) -> list:
    """``func`` traced and run by DALI on ``imgs`` (one batch)."""
    traced = trace_function(func, params={}, random=random, num_outputs=1, dtype=dtype,
                            ndim=ndim)
    values = ()
    if random:
        values = SampleScalars(sample_scalar_nodes(traced),
                               lambda i, e, slot: counter_uniform(SEED, e, i, 5, slot))(
            np.arange(len(imgs), dtype=np.int64), np.zeros(len(imgs), np.int64))
    return _emit_on(traced, imgs, values)


def _check(func, imgs=None, *, random: bool = False, dtype=np.uint8, ndim: int = 3) -> None:
    """``func`` run by DALI equals ``func`` run by numpy and OpenCV, bit for bit."""
    imgs = _edge_images() if imgs is None else imgs
    outs = _run(func, imgs, random=random, dtype=dtype, ndim=ndim)
    for k, im in enumerate(imgs):
        ref = func(im, counter_rng(SEED, 0, k, 5)) if random else func(im)
        assert outs[k].dtype == ref.dtype and outs[k].shape == ref.shape, (k, im.shape)
        bad = outs[k].view(np.uint8) != np.ascontiguousarray(ref).view(np.uint8)
        assert not bad.any(), f"{func.__name__}: {int(bad.sum())} bytes differ on image {k} " \
                              f"{im.shape}"


def _refusal(func, *, random: bool = False, dtype=np.uint8, ndim: int = 3) -> str:
    with pytest.raises(TraceError) as e:
        trace_function(func, params={}, random=random, num_outputs=1, dtype=dtype, ndim=ndim)
    return str(e.value)


# -- HSV -------------------------------------------------------------------------------------
COLOR_CODES = ["COLOR_BGR2HSV", "COLOR_RGB2HSV", "COLOR_BGR2HSV_FULL", "COLOR_RGB2HSV_FULL",
               "COLOR_HSV2BGR", "COLOR_HSV2RGB", "COLOR_RGB2YUV", "COLOR_BGR2YUV",
               "COLOR_YUV2RGB", "COLOR_YUV2BGR"]


@pytest.mark.parametrize("name", COLOR_CODES)
def test_hsv_and_yuv_conversions_equal_opencv(name):
    code = getattr(cv2, name)

    def u_convert(img):
        return cv2.cvtColor(img, code)
    _check(u_convert)


def test_hsv_into_dst_and_back_equals_opencv():
    def u_round_trip(img):
        out = img.copy()
        hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
        cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=out)
        return out
    _check(u_round_trip)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["COLOR_BGR2HSV", "COLOR_HSV2BGR", "COLOR_HSV2RGB"])
def test_hsv_conversions_equal_opencv_on_every_colour(name):
    code = getattr(cv2, name)

    def u_convert(img):
        return cv2.cvtColor(img, code)
    every = _every_colour().reshape(16, 1024, 1024, 3)
    for part in every:  # a megapixel a batch keeps DALI's buffers small
        _check(u_convert, [part])


def test_the_hsv_formulas_are_opencvs_on_every_colour():
    """The arithmetic cv2_color lowers, in numpy, on all 2**24 triples, through OpenCV's vector
    code (rows of 4096) and its scalar code (rows narrower than a block)."""
    img = _every_colour()
    b, g, r = (img[:, k].astype(np.int64) for k in range(3))
    sdiv, hdiv = hsv_tables(180)
    v = np.maximum(np.maximum(b, g), r)
    diff = v - np.minimum(np.minimum(b, g), r)
    half = 1 << (HSV_SHIFT - 1)
    s = (diff * sdiv[v] + half) >> HSV_SHIFT
    h = np.where(v == r, g - b, np.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * hdiv[diff] + half) >> HSV_SHIFT
    h += np.where(h < 0, 180, 0)
    np.testing.assert_array_equal(
        cv2.cvtColor(img.reshape(4096, 4096, 3), cv2.COLOR_BGR2HSV).reshape(-1, 3),
        np.stack([h, s, v], -1).astype(np.uint8))

    f32, f64 = np.float32, np.float64
    hh, ss, vv = (img[:, k].astype(f32) for k in range(3))
    s = ss * (f32(1) / f32(255))
    v = vv * (f32(1) / f32(255))
    h = hh * (f32(6) / f32(180))
    pre = np.floor(h)
    frac = h - pre
    sector = (pre - np.floor(pre * (f32(1) / f32(6))) * f32(6)).astype(np.int64)

    def fused(x):
        return (1.0 - s.astype(f64) * x.astype(f64)).astype(f32)
    tab = np.stack([v, v * (f32(1) - s), v * fused(frac), v * fused(f32(1) - frac)])
    order = np.array([[1, 3, 0], [1, 0, 2], [3, 0, 1], [0, 2, 1], [0, 1, 3], [2, 1, 0]])
    picked = np.take_along_axis(tab, order[sector].T, axis=0).T * f32(255)
    block = vector_block()
    if block is not None:
        vector = cv2.cvtColor(img.reshape(-1, 32 * block, 3), cv2.COLOR_HSV2BGR)
        np.testing.assert_array_equal(vector.reshape(-1, 3),
                                      np.minimum(np.floor(picked), 255).astype(np.uint8))
    scalar = cv2.cvtColor(img.reshape(-1, 1, 3), cv2.COLOR_HSV2BGR)
    np.testing.assert_array_equal(scalar.reshape(-1, 3),
                                  np.minimum(np.rint(picked), 255).astype(np.uint8))


def test_the_vector_block_is_what_opencv_does_on_every_width():
    block = vector_block()
    assert block is None or block in (2, 4, 8, 16, 32, 64, 128, 256)
    for w in (1, 5, 31, 32, 33, 100, 300):
        row = np.zeros((1, w, 3), np.uint8)
        row[..., 1:] = 1  # blue 0.996: truncated by the vector code, rounded by the scalar one
        start = 0 if block is None else w - w % block
        expect = (np.arange(w) >= start).astype(np.uint8)
        np.testing.assert_array_equal(cv2.cvtColor(row, cv2.COLOR_HSV2BGR)[0, :, 0], expect)


def u_yolo_hsv(im, rng):
    """YOLOv5's augment_hsv: drawn gains, tables from np.arange applied with cv2.LUT."""
    r = rng.uniform(-1, 1, 3) * [0.5, 0.5, 0.5] + 1
    hue, sat, val = cv2.split(cv2.cvtColor(im, cv2.COLOR_BGR2HSV))
    x = np.arange(0, 256, dtype=r.dtype)
    lut_hue = ((x * r[0]) % 180).astype(im.dtype)
    lut_sat = np.clip(x * r[1], 0, 255).astype(im.dtype)
    lut_val = np.clip(x * r[2], 0, 255).astype(im.dtype)
    im_hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
    return cv2.cvtColor(im_hsv, cv2.COLOR_HSV2BGR)


def test_drawn_hsv_tables_equal_opencv():
    _check(u_yolo_hsv, random=True)


def test_float_hsv_is_refused_saying_why():
    def u_float_hsv(img):
        return cv2.cvtColor(img.astype(np.float32), cv2.COLOR_BGR2HSV)
    msg = _refusal(u_float_hsv, dtype=np.float32)
    assert re.search(r"^cv2\.cvtColor between BGR/RGB and HSV of float32 \(only OpenCV's "
                     r"8-bit arithmetic is lowered: .*vector and scalar code", msg)
    assert "test_trace_cv2.py" in msg

    def u_full_back(img):
        return cv2.cvtColor(img, cv2.COLOR_HSV2BGR_FULL)
    assert "cv2.cvtColor with COLOR_HSV2BGR_FULL (only" in _refusal(u_full_back)


# -- YUV -------------------------------------------------------------------------------------
def test_the_yuv_formulas_are_opencvs_on_every_colour():
    """OpenCV's fixed-point BT.601 YUV, which cv2_color lowers, on all 2**24 triples."""
    from augment_ops.trace.cv2_color import _FROM_UV, _TO_UV, _TO_Y, YUV_SHIFT

    img = _every_colour()
    a, b, c = (img[:, k].astype(np.int64) for k in range(3))

    def descale(x):
        return (x + (1 << (YUV_SHIFT - 1))) >> YUV_SHIFT
    y = descale(a * _TO_Y[0] + b * _TO_Y[1] + c * _TO_Y[2])
    half = 128 << YUV_SHIFT
    yuv = np.stack([y, descale((c - y) * _TO_UV[0] + half), descale((a - y) * _TO_UV[1] + half)],
                   -1)
    np.testing.assert_array_equal(cv2.cvtColor(img.reshape(4096, 4096, 3),
                                               cv2.COLOR_RGB2YUV).reshape(-1, 3),
                                  np.clip(yuv, 0, 255).astype(np.uint8))
    u, v = b - 128, c - 128
    rgb = np.stack([a + descale(v * _FROM_UV[3]),
                    a + descale(u * _FROM_UV[1] + v * _FROM_UV[2]), a + descale(u * _FROM_UV[0])],
                   -1)
    np.testing.assert_array_equal(cv2.cvtColor(img.reshape(4096, 4096, 3),
                                               cv2.COLOR_YUV2RGB).reshape(-1, 3),
                                  np.clip(rgb, 0, 255).astype(np.uint8))


def test_clahe_is_refused_naming_its_histograms():
    def u_clahe(img):
        yuv = cv2.cvtColor(img, cv2.COLOR_RGB2YUV)
        c = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))
        yuv[:, :, 0] = c.apply(yuv[:, :, 0])
        return cv2.cvtColor(yuv, cv2.COLOR_YUV2RGB)
    assert re.search(r"^cv2\.createCLAHE\(\.\.\.\)\.apply \(CLAHE needs per-tile histograms",
                     _refusal(u_clahe))
    clahe = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))  # outside a trace: OpenCV's
    assert clahe.apply(np.zeros((8, 8), np.uint8)).shape == (8, 8)


# -- float % and // by a constant ------------------------------------------------------------
def u_float_mod(img, rng):
    x = img[..., 0].astype(np.float64) * (rng.uniform(0.5, 1.5) * 1.37)
    return np.stack([x % 180, x // 7.5, (x * 3) % 0.375], -1).astype(np.float32)


def test_float_remainder_and_floor_division_equal_numpy():
    rng = np.random.default_rng(2)
    imgs = [rng.integers(0, 256, (5, 9, 3), dtype=np.uint8), np.full((2, 2, 3), 255, np.uint8),
            np.zeros((1, 3, 3), np.uint8)]
    _check(u_float_mod, imgs, random=True, dtype=np.float32)


def test_float_remainder_at_and_beside_multiples_equals_numpy():
    def u_near(img):
        x = img[..., 0].astype(np.float64)
        return np.stack([(x * 1.5) % 180, (x * 7.5) % 7.5, ((x + 1) * 3 * (1 - 2.0 ** -50)) % 3.0,
                         (x * 3 + 2.0 ** -40) // 3.0], -1)
    _check(u_near, [np.arange(256, dtype=np.uint8).reshape(16, 16, 1)], dtype=np.float64)


def test_float_remainder_of_negative_values_equals_numpy():
    """numpy's remainder of a negative value is fmod of its magnitude, negated, plus the divisor
    where negative, and +0.0 where 0: compared bit for bit (-0.0 against +0.0 too)."""

    def u_negative(img, rng):
        x = img[..., 0].astype(np.float64) + rng.uniform(-300, 300)
        exact = img[..., 0].astype(np.float64) - 128  # -8 % 8 is fmod's -0.0, numpy's +0.0
        return np.stack([x % 180, (x - 0.5) % 7.5, (x.astype(np.float32) - 128) % 0.375,
                         exact % 8.0], -1)

    imgs = [np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, -1),
            np.full((2, 2, 3), 121, np.uint8), np.zeros((1, 3, 3), np.uint8)]
    _check(u_negative, imgs, random=True, dtype=np.float64)


def test_float_remainder_of_unbounded_values_or_by_draws_is_refused():
    def u_unbounded(img, rng):
        return img.astype(np.float64) * rng.uniform(0, 2.0 ** 60) % 180

    def u_floor_negative(img):
        return (img.astype(np.float32) - 300) // 180

    def u_by_draw(img, rng):
        return img.astype(np.float64) % rng.uniform(1, 2)

    def u_by_tenth(img):
        return img.astype(np.float64) % 0.1
    assert re.search(r"^np\.remainder of floating-point values of a value the tracer cannot "
                     r"bound within -180", _refusal(u_unbounded, random=True, dtype=np.float64))
    assert re.search(r"^np\.floor_divide of floating-point values of a value the tracer cannot "
                     r"bound within 0\.\.180", _refusal(u_floor_negative, dtype=np.float32))
    assert "only of a value >= 0 by a positive constant" in _refusal(u_by_draw, random=True,
                                                                     dtype=np.float64)
    assert re.search(r"by 0\.1, whose \d+ significant bits", _refusal(u_by_tenth,
                                                                     dtype=np.float64))


# -- mixChannels -----------------------------------------------------------------------------
def u_shuffle(img, rng):
    """albumentations' channel_shuffle: a drawn permutation through cv2.mixChannels."""
    order = list(range(img.shape[-1]))
    rng.shuffle(order)
    out = np.empty_like(img)
    pairs = []
    for i, j in enumerate(order):
        pairs.extend([j, i])
    cv2.mixChannels([img], [out], pairs)
    return out


def u_mix_constant(img):
    out = np.empty_like(img)
    gray = np.zeros_like(img[..., 0])
    got = cv2.mixChannels([img, img[..., 1]], [out, gray], [3, 0, -1, 1, 0, 2, 2, 3])
    return got[0] + got[1][..., None]


def u_take_drawn(img, rng):
    return np.take(img, rng.permutation(3), axis=-1)


def u_take_constant(img):
    return np.take(img, [2, 0, 0], axis=2)


def u_index_drawn_pair(img, rng):
    return img[:, :, rng.choice(3, 2, replace=False)]


def test_channel_gathers_equal_opencv():
    _check(u_shuffle, random=True)
    _check(u_mix_constant)


@pytest.mark.parametrize("func,random", [(u_take_drawn, True), (u_take_constant, False),
                                         (u_index_drawn_pair, True)],
                         ids=["take_drawn", "take_constant", "index_drawn_pair"])
def test_channel_gathers_of_numpy_equal_numpy(func, random):
    _check(func, random=random)


def test_channel_gathers_that_cannot_be_exact_are_refused():
    def u_into_source(img):
        out = img.copy()
        cv2.mixChannels([out], [out], [2, 0, 0, 2])
        return out

    def u_drawn_destination(img, rng):
        out = img.copy()
        cv2.mixChannels([img], [out], [0, rng.integers(0, 3)])
        return out

    def u_unbounded_source(img, rng):
        out = img.copy()
        cv2.mixChannels([img], [out], [rng.integers(0, 5), 0])
        return out
    assert "writing into one of its sources" in _refusal(u_into_source)
    assert "per-sample or out-of-range destination" in _refusal(u_drawn_destination,
                                                               random=True)
    assert "cannot bound within 0..2" in _refusal(u_unbounded_source, random=True)


# -- addWeighted -----------------------------------------------------------------------------
def u_brightness(img):
    """mmcv's adjust_brightness: float32 copies of uint8 values, weights summing to 1."""
    dark = np.zeros_like(img)
    out = cv2.addWeighted(img.astype(np.float32), 1.2, dark.astype(np.float32), 1 - 1.2, 0)
    return np.clip(out, 0, 255).astype(img.dtype)


def u_blend_u8(img):
    return cv2.addWeighted(img, 1.5, np.full_like(img, 255), -0.5, 0)


def u_float_out(img):
    return cv2.addWeighted(img.astype(np.float32), 0.8, img[::-1].astype(np.float32), 0.2, 0)


def test_add_weighted_equals_opencv():
    _check(u_brightness)
    _check(u_blend_u8)
    if weights_exact(0.8, 0.2, 0.0, "<f4") is None:
        _check(u_float_out, dtype=np.float32)


def test_add_weighted_checks_its_weights_on_every_pair_of_bytes():
    # Weights OpenCV computes differently in its vector and scalar code (found, not assumed:
    # which ones depends on the OpenCV build) are refused with that reason.
    rng = np.random.default_rng(4)
    for _ in range(40):
        a, b, g = (float(w) for w in rng.uniform(-2, 2, 3))
        why = weights_exact(a, b, g, "<f4")
        if why is not None:
            break
    assert why is not None

    def u_weights(img):
        return cv2.addWeighted(img.astype(np.float32), a, img.astype(np.float32), b, g)
    assert f"cv2.addWeighted ({why}" in _refusal(u_weights, dtype=np.float32)


def test_add_weighted_that_cannot_be_checked_is_refused():
    def u_drawn_weight(img, rng):
        return cv2.addWeighted(img, rng.uniform(0, 1), img, 0.5, 0)

    def u_float_values(img):
        x = img.astype(np.float32) / 255
        return cv2.addWeighted(x, 0.5, x, 0.5, 0)
    assert "cv2.addWeighted with a per-sample weight" in _refusal(u_drawn_weight, random=True)
    assert "float32 values other than uint8 ones" in _refusal(u_float_values,
                                                              dtype=np.float32)


# -- warpAffine by whole pixels ----------------------------------------------------------------
def _translate(tx, ty, **kw):
    def f(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.float32([[1, 0, tx], [0, 1, ty]]), (w, h), **kw)
    f.__name__ = f"translate_{tx}_{ty}"
    return f


def _translate_gray(img):
    g = img[..., 1]
    h, w = g.shape
    return cv2.warpAffine(g, np.float64([[1, 0, -2], [0, 1, 1]]), (w, h), borderValue=77)


@pytest.mark.parametrize("f", [
    _translate(3, 0), _translate(0, -2), _translate(-5, 4), _translate(0, 0),
    _translate(40, 0), _translate(-1100, 3),
    _translate(2, 1, borderValue=(127.5, 300, -4)),
    _translate(1, 2, flags=cv2.INTER_NEAREST, borderValue=9),
    _translate(3, -1, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderValue=(1, 2, 3)),
], ids=lambda f: f.__name__)
def test_warp_affine_by_whole_pixels_equals_opencv(f):
    # sizes smaller and larger than the shifts, 1x1 and 1-pixel rows
    imgs = [im for im in _edge_images() if im.shape[0] * im.shape[1] <= 48 * 1024][:8]
    _check(f, imgs)


def test_warp_affine_of_a_gray_image_equals_opencv():
    _check(_translate_gray, ndim=2)


def test_warp_affine_that_resamples_is_refused_saying_why():
    def half_pixel(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.float32([[1, 0, 0.5], [0, 1, 0]]), (w, h))

    def rotation(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, cv2.getRotationMatrix2D((4, 4), 30, 1.0), (w, h))

    def other_size(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.float32([[1, 0, 1], [0, 1, 0]]), (w + 1, h))

    def reflected(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.float32([[1, 0, 1], [0, 1, 0]]), (w, h),
                              borderMode=cv2.BORDER_REFLECT)

    def cubic(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.float32([[1, 0, 1], [0, 1, 0]]), (w, h),
                              flags=cv2.INTER_CUBIC)

    assert re.search(r"cv2\.warpAffine by \[\[1\.0, 0\.0, 0\.5\].*OpenCV's fixed-point "
                     r"interpolation differs from DALI's warp_affine", _refusal(half_pixel))
    assert "cv2.warpAffine by [[0.866" in _refusal(rotation)
    assert "into a size other than the image's own" in _refusal(other_size)
    assert "border mode other than BORDER_CONSTANT" in _refusal(reflected)
    assert "flags=2" in _refusal(cubic)


# -- transform: a colour matrix --------------------------------------------------------------
SEPIA = np.array([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]])


def _sepia(img):
    return cv2.transform(img, SEPIA)


def _signed_matrix(img):  # negative weights: sums below 0 saturate to 0
    return cv2.transform(img, np.array([[1.2, -0.3, 0.1], [-0.5, 1.5, 0.0],
                                        [0.25, 0.25, 0.5]], np.float32))


def _with_zero_offsets(img):
    return cv2.transform(img, np.hstack([SEPIA, np.zeros((3, 1))]))


@pytest.mark.parametrize("f", [_sepia, _signed_matrix, _with_zero_offsets],
                         ids=lambda f: f.__name__)
def test_transform_by_a_colour_matrix_equals_opencv(f):
    _check(f)


def test_transform_that_is_not_fixed_point_is_refused_saying_why():
    def big(img):
        return cv2.transform(img, SEPIA * 50)

    def offsets(img):
        return cv2.transform(img, np.hstack([SEPIA, np.ones((3, 1))]))

    def gray(img):
        return cv2.transform(img, SEPIA[:1])

    assert "a weight of 32 or more, which OpenCV computes in float32" in _refusal(big)
    for f in (offsets, gray):
        assert "cv2.transform other than of a uint8 image with 3 channels by a 3x3 matrix" in \
            _refusal(f)


def test_warp_affine_and_transform_where_opencv_raises_or_gives_nan_are_refused():
    def as_list(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, [[1, 0, 2], [0, 1, 1]], (w, h))

    def int_matrix(img):
        h, w = img.shape[:2]
        return cv2.warpAffine(img, np.array([[1, 0, 2], [0, 1, 1]]), (w, h))

    def inverse_floats(img):  # 1 / 0 is inf beside the pixels bilinear weighs by 0
        x = 1 / img.astype(np.float32)
        h, w = x.shape[:2]
        return cv2.warpAffine(x, np.float32([[1, 0, 1], [0, 1, 0]]), (w, h))

    def infinite_border(img):
        x = img.astype(np.float32)
        h, w = x.shape[:2]
        return cv2.warpAffine(x, np.float32([[1, 0, 1], [0, 1, 0]]), (w, h),
                              borderValue=(np.inf,) * 3)

    def transform_list(img):
        return cv2.transform(img, [[0.5, 0.25, 0.25]] * 3)

    for f in (as_list, int_matrix):
        assert "cv2.warpAffine raises for these arguments on every image" in _refusal(f)
    for f in (inverse_floats, infinite_border):
        assert "bilinear interpolation of float values that may be infinite, NaN or -0.0" in \
            _refusal(f, dtype=np.float32)
    assert "cv2.transform raises for this matrix on every image" in _refusal(transform_list)


def test_warp_affine_by_whole_pixels_of_finite_floats_equals_opencv():
    def floats(img):
        x = img.astype(np.float32) / 255
        h, w = x.shape[:2]
        return cv2.warpAffine(x, np.float32([[1, 0, -2], [0, 1, 1]]), (w, h), borderValue=0.5)

    _check(floats, dtype=np.float32)


def test_bilinear_warps_of_negative_zeros_and_transforms_of_other_images_say_why():
    def negative_zeros(img):  # OpenCV's weighted sum makes -0.0 into 0.0
        x = img.astype(np.float32) * np.float32(-1)
        h, w = x.shape[:2]
        return cv2.warpAffine(x, np.float32([[1, 0, 1], [0, 1, 0]]), (w, h))

    def four_channels(img):  # OpenCV runs it; it is not lowered
        x = np.concatenate([img, img[..., :1]], axis=2).astype(np.float32)
        return cv2.transform(x, np.eye(4, 5))

    assert "float values that may be infinite, NaN or -0.0" in _refusal(negative_zeros,
                                                                       dtype=np.float32)
    why = _refusal(four_channels, dtype=np.float32, ndim=3)
    assert "cv2.transform other than of a uint8 image with 3 channels" in why, why
