"""PIL images of traced arrays (``Image.fromarray`` -> :class:`TracedImage` -> ``np.asarray``):
each lowered op gives PIL's pixels exactly in a CPU DALI pipeline; other PIL calls are refused
naming them."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from test_trace import _emit_on
from test_trace_lookup import _check, _refusal

from augment_ops.trace import TraceError, trace_function

Image = pytest.importorskip("PIL.Image")
ImageOps = pytest.importorskip("PIL.ImageOps")
ImageEnhance = pytest.importorskip("PIL.ImageEnhance")
ImageDraw = pytest.importorskip("PIL.ImageDraw")


def _transposed(method):
    def op(img):
        return np.asarray(Image.fromarray(img).transpose(method))
    op.__name__ = f"u_transpose_{int(method)}"
    return op


@pytest.mark.parametrize("method", list(range(7)))
def test_transposes_equal_pil(method):
    _check(_transposed(method))


def u_crop_inside(img):
    pil = Image.fromarray(img)
    w, h = pil.size
    return np.asarray(pil.crop((w // 4, h // 3, w // 4 + (w - w // 4) // 2, h)))


def u_point_function(img):
    return np.asarray(Image.fromarray(img).point(lambda v: v * 3 - 100))


def u_point_per_band(img):
    lut = [255 - i for i in range(256)] + [i // 2 for i in range(256)] + \
        [min(255, i * 2) for i in range(256)]
    return np.asarray(Image.fromarray(img).point(lut))


def u_gray_and_back(img):
    gray = Image.fromarray(img).convert("L")
    return np.array(gray.convert("RGB"))


def u_split_bands(img):
    r, _g, b = Image.fromarray(img).split()
    return np.asarray(r) // 2 + np.asarray(b) // 2


def u_image_ops(img):
    pil = Image.fromarray(img)
    out = ImageOps.posterize(ImageOps.solarize(ImageOps.invert(pil), 100), 3)
    return np.array(out, dtype=np.float32) / 255


def u_gray_point(img):
    gray = Image.fromarray(img[..., 0])
    return np.asarray(gray.point([(i * 7) % 256 for i in range(256)]))


def u_crop_outside(img):
    pil = Image.fromarray(img)
    return np.asarray(pil.crop((0, 0, 8, 8)))  # PIL fills the part outside the image with 0


@pytest.mark.parametrize("func,ndim", [(u_crop_inside, 3), (u_crop_outside, 3),
                                       (u_point_function, 3),
                                       (u_point_per_band, 3), (u_gray_and_back, 3),
                                       (u_split_bands, 2), (u_image_ops, 3),
                                       (u_gray_point, 2)],
                         ids=lambda f: getattr(f, "__name__", str(f)))
def test_pil_calls_equal_pil(func, ndim):
    _check(func, ndim=ndim)


def test_asarray_of_a_traced_image_is_read_only_as_pils():
    def u_write_asarray(img):
        a = np.asarray(Image.fromarray(img))
        a[0:1, 0:1] = 0
        return a
    assert "read-only" in _refusal(u_write_asarray)


def u_resize(img):
    return np.asarray(Image.fromarray(img).resize((4, 4)))


def u_cmyk(img):
    return np.asarray(Image.fromarray(img).convert("CMYK"))


def u_float_image(img):
    return np.asarray(Image.fromarray(img.astype(np.float32)))


def u_drawn_table(img, rng):
    shift = rng.integers(0, 9)
    return np.asarray(Image.fromarray(img).point(lambda v: v + shift))


def u_short_table(img):
    return np.asarray(Image.fromarray(img).point([1, 2, 3]))


def test_other_pil_calls_are_refused_naming_them():
    assert re.search(r"^PIL Image\.resize on a traced image \(PIL's resampling",
                     _refusal(u_resize))
    assert "PIL Image.convert from RGB to CMYK" in _refusal(u_cmyk)
    assert "Image.fromarray of a float32 array" in _refusal(u_float_image, dtype=np.float32)
    assert "PIL Image.point with a per-sample table (PIL needs its numbers" in \
        _refusal(u_drawn_table, random=True)
    assert "PIL Image.point with a table PIL refuses (" in _refusal(u_short_table)


def test_fromarray_is_restored_after_tracing():
    real = Image.fromarray
    with pytest.raises(TraceError):
        trace_function(u_resize, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)
    assert Image.fromarray is real
    assert np.asarray(Image.fromarray(np.zeros((2, 2), np.uint8))).shape == (2, 2)


def test_histogram_based_image_ops_are_refused_saying_why():
    def u_dark(img):
        h = Image.fromarray(img).convert("L").histogram()
        return img // 2 if sum(h[:64]) > sum(h[64:]) else img
    assert "PIL Image.histogram on a traced image (a histogram of the pixels" in \
        _refusal(u_dark)


# -- results made without the image: a blank PIL image, a constant on one branch ---------------
def u_resize_unless_flat(img):
    pil = Image.fromarray(img)
    if pil.height == 1:  # a degenerate size tested first, as ImageOps.fit and pad do
        return np.asarray(Image.new("RGB", (4, 4)))
    return np.asarray(pil.resize((4, 4)))


def u_constant_branch(img):
    if img.shape[0] > 4:
        return img[:4]
    return np.zeros((3, 4, 3), np.uint8)


def u_constant(img):
    return np.asarray(Image.new("RGB", (4, 4), (9, 9, 9)))


def u_canvas_of_a_drawn_colour(img):
    pil = Image.fromarray(img)
    return np.asarray(Image.new("RGB", pil.size, (pil.size[1], 0, 0)))


def u_pasted_on_a_canvas(img):
    canvas = Image.new("RGB", (32, 32))
    canvas.paste(Image.fromarray(img), (0, 0))
    return np.asarray(canvas)


def u_padded_by_a_crop(img):
    pil = Image.fromarray(img)
    w, h = pil.size
    return np.asarray(pil.crop((-2, -1, w + 3, h + 1)))


def _refused(func) -> TraceError:
    with pytest.raises(TraceError) as e:
        trace_function(func, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)
    return e.value


def _line(func, text: str) -> str:
    """``file:line: code`` of the line of ``func`` holding ``text``."""
    lines, first = inspect.getsourcelines(func)
    k = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(func)}:{first + k}: {lines[k].strip()}"


def test_a_branch_made_without_the_image_gives_way_to_the_construct_of_the_others():
    # The branch tested first returns a blank image; the other resizes the traced one, which
    # is the reason the op does not lower.
    e = _refused(u_resize_unless_flat)
    assert e.construct.startswith("PIL Image.resize on a traced image (PIL's resampling")
    assert e.location == _line(u_resize_unless_flat, "pil.resize((4, 4))")


def test_a_constant_output_is_refused_at_its_line_naming_the_test_that_chose_it():
    e = _refused(u_constant_branch)
    assert e.construct.startswith("output 0 is a ndarray made without the image on a branch "
                                  "chosen by the per-sample test at " +
                                  _line(u_constant_branch, "if img.shape[0] > 4"))
    assert e.location == _line(u_constant_branch, "np.zeros((3, 4, 3)")
    e = _refused(u_constant)
    assert e.construct.startswith("output 0 is a ndarray made without the image, the same for "
                                  "every image")
    assert e.location == _line(u_constant, "Image.new")


def test_a_blank_pil_image_never_stands_in_for_the_traced_one():
    e = _refused(u_canvas_of_a_drawn_colour)
    assert e.construct.startswith("PIL Image.new of a per-sample colour, or of a per-sample "
                                  "size in a mode other than L and RGB (a blank image made "
                                  "without the traced one")
    assert e.location == _line(u_canvas_of_a_drawn_colour, "Image.new")
    e = _refused(u_pasted_on_a_canvas)
    assert e.construct.startswith("PIL.Image.Image.paste given a traced image")
    assert e.location == _line(u_pasted_on_a_canvas, "canvas.paste")
    assert Image.new("L", (2, 1), 7).tobytes() == b"\x07\x07"  # restored after tracing


# -- blends: ImageEnhance's enhancers, Image.blend, a blank image of the traced one's size ------
def u_brightness_drawn(img, rng):
    return np.asarray(ImageEnhance.Brightness(Image.fromarray(img)).enhance(
        float(rng.uniform(0.2, 1.8))))


def u_color_drawn(img, rng):
    return np.asarray(ImageEnhance.Color(Image.fromarray(img)).enhance(
        float(rng.uniform(0.0, 2.0))))


def u_blend_with_a_colour(img):
    pil = Image.fromarray(img)
    tinted = Image.blend(Image.new("RGB", pil.size, (250, 3, 128)), pil, -0.7)
    return np.asarray(Image.blend(tinted, pil.convert("L").convert("RGB"), 0.35))


def u_blend_gray(img):
    gray = Image.fromarray(img).convert("L")
    return np.asarray(Image.blend(gray, Image.new("L", gray.size, 255), 1.6))


def u_canvas_of_the_image_size(img):
    return np.asarray(Image.new("RGB", Image.fromarray(img).size, 5))  # an int: (5, 0, 0)


@pytest.mark.parametrize(("func", "random"), [
    (u_brightness_drawn, True), (u_color_drawn, True), (u_blend_with_a_colour, False),
    (u_blend_gray, False), (u_canvas_of_the_image_size, False)], ids=lambda v: getattr(
        v, "__name__", ""))
def test_blends_and_blank_images_of_the_image_size_equal_pil(func, random):
    _check(func, random=random, ndim=2 if func is u_blend_gray else 3)


def u_expand(img):
    return np.asarray(ImageOps.expand(Image.fromarray(img), border=(3, 1, 0, 2), fill=(9, 8, 7)))


def u_paste_into_a_larger_image(img):
    pil = Image.fromarray(img).convert("L")
    out = Image.new("L", (pil.size[0] + 3, pil.size[1] + 2), 200)
    out.paste(pil, (3, 2))
    return np.asarray(out)


def u_paste_that_may_clip(img):
    pil = Image.fromarray(img)
    out = pil.copy()
    out.paste(pil.crop((0, 0, 2, 2)), (pil.size[0] // 2, 0))  # past the edge on narrow images
    return np.asarray(out)


def test_expand_and_paste_inside_equal_pil():
    _check(u_expand)
    _check(u_paste_into_a_larger_image, ndim=2)
    assert "PIL Image.paste other than of a traced image of the same mode, without a mask, " \
        "at an upper left corner where the tracer shows it lies inside" in \
        _refusal(u_paste_that_may_clip)


def u_rectangle_drawn(img, rng):
    # RandAugment's Cutout: corners drawn as floats, reaching past the image's edges
    pil = Image.fromarray(img)
    w, h = pil.size
    x0, y0 = rng.uniform(-3.0, w), rng.uniform(-3.0, h)
    box = (x0, y0, x0 + rng.uniform(0.0, 4.0), min(h + 2, y0 + 3))
    ImageDraw.Draw(pil).rectangle(box, (125, 123, 114))
    return np.asarray(pil)


def u_rectangle_gray(img):
    pil = Image.fromarray(img).convert("L")
    w, h = pil.size
    ImageDraw.Draw(pil).rectangle([(0, 1), (w // 2, h)], fill=17, outline=17)
    return np.asarray(pil)


def u_rectangle_reversed(img):
    pil = Image.fromarray(img)
    ImageDraw.Draw(pil).rectangle((2, 0, pil.size[0] - 3, 1), (1, 2, 3))  # x1 < x0 if narrow
    return np.asarray(pil)


def u_rectangle_outlined(img):
    pil = Image.fromarray(img)
    ImageDraw.Draw(pil).rectangle((0, 0, 2, 2), (1, 2, 3), outline=(9, 9, 9))
    return np.asarray(pil)


def test_a_filled_rectangle_drawn_on_a_traced_image_equals_pil():
    _check(u_rectangle_drawn, random=True)
    _check(u_rectangle_gray, ndim=2)
    traced = trace_function(u_rectangle_reversed, params={}, random=False, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    assert [(g.error, g.message) for g in traced.guards] == [
        ("ValueError", "x1 must be greater than or equal to x0")]
    with pytest.raises(ValueError, match="x1 must be greater than or equal to x0"):
        u_rectangle_reversed(np.zeros((3, 4, 3), np.uint8))
    assert "PIL ImageDraw rectangle other than filled with a constant colour" in \
        _refusal(u_rectangle_outlined)


def u_uninitialised_canvas(img):
    return np.asarray(Image.new("RGB", Image.fromarray(img).size, None))


def test_an_uninitialised_image_of_the_image_size_is_refused():
    assert "PIL Image.new(color=None) of a per-sample size (PIL leaves its pixels " \
        "uninitialised)" in _refusal(u_uninitialised_canvas)


def u_blend_of_other_sizes(img):
    pil = Image.fromarray(img)
    return np.asarray(Image.blend(pil, pil.crop((0, 0, pil.size[0], 4)), 0.5))


def u_blend_with_a_constant_image(img):
    return np.asarray(Image.blend(Image.fromarray(img), Image.new("RGB", (4, 4)), 0.5))


def test_a_blend_of_images_that_do_not_match_raises_as_pil_does():
    traced = trace_function(u_blend_of_other_sizes, params={}, random=False, num_outputs=1,
                            dtype=np.uint8, ndim=3)
    # PIL's check first; the arithmetic's own broadcast check after it never fires alone
    assert (traced.guards[0].error, traced.guards[0].message) == ("ValueError",
                                                                  "images do not match")
    assert {g.error for g in traced.guards} == {"ValueError"}
    with pytest.raises(ValueError, match="images do not match"):
        u_blend_of_other_sizes(np.zeros((5, 3, 3), np.uint8))
    assert "PIL Image.blend of a traced image with an image made without it" in \
        _refusal(u_blend_with_a_constant_image)


def test_padding_by_a_crop_outside_the_image_equals_pil():
    # the rewrite the refusal of a per-sample Image.new suggests
    _check(u_padded_by_a_crop)


def u_resize_unless_it_fails(img):
    pil = Image.fromarray(img)
    try:
        pil = pil.resize((4, 4))
    except ValueError:
        pass  # numpy's run always resizes; a refusal caught here must not lower the identity
    return np.asarray(pil)


def u_blank_unless_it_fails(img):
    try:
        canvas = Image.new("RGB", Image.fromarray(img).size, (img.shape[0], 0, 0))
    except Exception:
        canvas = Image.new("RGB", (4, 4))
    return np.asarray(canvas)[:1, :1] // 2 + img // 2  # numpy's canvas is black: img // 2


def test_a_refusal_the_op_catches_is_still_the_reason():
    for func, construct, line in [
            (u_resize_unless_it_fails, "PIL Image.resize on a traced image", "pil.resize"),
            (u_blank_unless_it_fails, "PIL Image.new of a per-sample colour", "Image.fromarray")]:
        e = _refused(func)
        assert e.construct.startswith(construct), e
        assert "(refused, and caught by a try/except that goes on without it" in e.construct
        assert e.location == _line(func, line)


# -- ImageStat and ImageEnhance.Contrast: statistics of the traced image --------------------------
ImageStat = pytest.importorskip("PIL.ImageStat")


def _contrast(img, factor):
    return ImageEnhance.Contrast(img).enhance(factor)


# A table of augmentations the op picks from by name, as timm's and RandAugment's are: the
# functions called through it run as traced copies (int() of the image's mean, in Contrast).
NAME_TO_OP = {"Contrast": _contrast}


def u_contrast_drawn(img, rng):
    return np.asarray(NAME_TO_OP["Contrast"](Image.fromarray(img), float(rng.uniform(0.1, 1.9))))


def u_contrast_gray(img):
    return np.asarray(ImageEnhance.Contrast(Image.fromarray(img[..., 1])).enhance(0.4))


def u_stat_arithmetic(img):
    st = ImageStat.Stat(Image.fromarray(img))
    lo, hi = st.extrema[1]
    centred = img.astype(np.float64) - np.array(st.mean)
    return (centred * (st.count[0] / (st.sum[2] + 1)) + (hi - lo)).astype(np.float32)


def u_stat_median(img):
    return img + int(ImageStat.Stat(Image.fromarray(img)).median[0])


def u_grey_of_the_drawn_level(img, rng):
    # an L image of a per-sample integer colour, clipped to 0..255 as PIL clips it
    pil = Image.fromarray(img)
    return np.asarray(Image.new("L", pil.size, int(rng.integers(-300, 600))))


@pytest.mark.parametrize(("func", "random", "ndim"), [
    (u_contrast_drawn, True, 3), (u_contrast_gray, False, 2), (u_stat_arithmetic, False, 3),
    (u_grey_of_the_drawn_level, True, 2)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_image_statistics_and_contrast_equal_pil(func, random, ndim):
    _check(func, random=random, ndim=ndim)


def test_a_flat_image_and_other_statistics():
    flat = np.full((3, 4, 3), 200, np.uint8)
    traced = trace_function(u_contrast_gray, params={}, random=False, num_outputs=1,
                            dtype=np.uint8, ndim=2)

    (got,) = _emit_on(traced, [flat])
    np.testing.assert_array_equal(got, u_contrast_gray(flat))
    assert _refusal(u_stat_median).startswith(
        "PIL ImageStat.Stat.median of a traced image (only count, sum, mean and extrema")
    assert ImageStat.Stat(Image.new("L", (2, 1), 7)).mean == [7.0]  # restored after tracing


# -- ImageOps.autocontrast ------------------------------------------------------------------
def u_autocontrast(img):
    return np.asarray(ImageOps.autocontrast(Image.fromarray(img)))


def u_autocontrast_gray(img):
    return np.asarray(ImageOps.autocontrast(Image.fromarray(img[..., 2])))


def _contrast_images() -> list[np.ndarray]:
    """Every kind of band: full range, narrow ranges (whose tables round near the integers),
    two values, constant (identity), one constant band beside others, 1x1."""
    rs = np.random.default_rng(4)
    narrow = rs.integers(97, 104, (9, 13, 3), dtype=np.uint8)
    two = np.where(rs.random((5, 6, 3)) < 0.5, 3, 250).astype(np.uint8)
    mixed = rs.integers(0, 256, (7, 7, 3), dtype=np.uint8)
    mixed[..., 1] = 42
    spans = np.stack([np.arange(256, dtype=np.uint8).reshape(16, 16) // k + 3 * k
                      for k in (1, 3, 7)], axis=2).astype(np.uint8)
    return [rs.integers(0, 256, (11, 17, 3), dtype=np.uint8), narrow, two, mixed, spans,
            np.full((4, 5, 3), 200, np.uint8), np.full((1, 1, 3), 9, np.uint8)]


@pytest.mark.parametrize(("func", "ndim"), [(u_autocontrast, 3), (u_autocontrast_gray, 2)])
def test_autocontrast_equals_pil(func, ndim):
    imgs = _contrast_images()
    traced = trace_function(func, params={}, random=False, num_outputs=1, dtype=np.uint8,
                            ndim=ndim)
    for k, (img, out) in enumerate(zip(imgs, _emit_on(traced, imgs, ()), strict=True)):
        ref = func(img)
        assert out.shape == ref.shape and out.dtype == ref.dtype, k
        np.testing.assert_array_equal(out, ref, err_msg=f"image {k}")


def test_autocontrast_with_a_cutoff_is_refused_saying_why():
    def cut(img):
        return np.asarray(ImageOps.autocontrast(Image.fromarray(img), cutoff=2))

    assert "ImageOps.autocontrast of a traced image with cutoff" in _refusal(cut)
