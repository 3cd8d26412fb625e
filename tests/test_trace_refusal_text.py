"""What a refusal says when the op hands a traced array to code the tracer does not lower: a
library outside numpy (cv2, PIL, torch) or a numpy function that converts its argument to a
concrete array. One message naming the call as the user wrote it and the user's line; never
the library's own error text nor the tracer's class names; explain() says the same.
"""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
from helpers import unregistered
from PIL import Image
from test_trace_arrays import _check

import augment_ops
from augment_ops.trace import TraceError, trace_op


@unregistered()
def x_cv2_blur(img):
    out = img.copy()
    return cv2.GaussianBlur(out, (3, 3), 0)


@unregistered()
def x_cv2_on_a_draw(img, rng):
    k = int(rng.integers(1, 3)) * 2 + 1
    return cv2.blur(img[::-1], (k, k))


@unregistered()
def x_pil(img):
    return np.asarray(Image.fromarray(img).rotate(90))


def _torch_copy(a):
    import torch

    return torch.from_numpy(a).numpy()


@unregistered()
def x_torch_in_a_helper(img):
    return _torch_copy(img // 2)


@unregistered()
def x_median(img):
    return img - np.uint8(np.median(img))


CASES = [
    (x_cv2_blur, r"cv2\.GaussianBlur \(OpenCV's fixed-point kernels for uint8 differ from DALI's "
                 r"gaussian_blur\); the op runs on the numpy path",
     r"return cv2.GaussianBlur\(out, \(3, 3\), 0\)"),
    (x_cv2_on_a_draw, r"cv2\.blur \(not lowered: only cv2\.cvtColor, cv2\.LUT",
     r"return cv2.blur\(img\[::-1\], \(k, k\)\)"),
    (x_pil, r"PIL Image\.rotate on a traced image \(PIL's rotation by an angle resamples",
     r"return np.asarray\(Image.fromarray\(img\).rotate\(90\)\)"),
    (x_torch_in_a_helper, r"torch\.from_numpy is outside numpy: .* a torch function",
     r"return torch.from_numpy\(a\).numpy\(\)"),
    (x_median, r"np\.median", r"return img - np.uint8\(np.median\(img\)\)"),
]


@pytest.mark.parametrize(("op", "construct", "line"), CASES, ids=lambda v: getattr(v, "name", ""))
def test_a_call_outside_what_the_tracer_lowers_is_named_at_the_users_line(op, construct, line):
    with pytest.raises(TraceError) as e:
        trace_op(op)
    text = str(e.value)
    assert re.fullmatch(rf"{construct}.* at \S+test_trace_refusal_text.py:\d+: {line}", text), text
    for leak in ("Sym", "Node", "OpenCV(", "__array_interface__", "Overload", "<traced"):
        assert leak not in text, (leak, text)
    assert augment_ops.explain(op) == f"numpy: {text}"


def test_a_library_function_the_tracer_lowers_is_lowered_through_its_module():
    """``albucore.sz_lut``, read as an attribute of its module, is the lookup table the tracer
    lowers it to, as when the op imports it by name."""
    albucore = pytest.importorskip("albucore")

    def x_albucore_lut(img):
        lut = np.arange(256, dtype=np.uint8)[::-1].copy()
        return albucore.sz_lut(img, lut, inplace=False)

    _check(x_albucore_lut)


def test_a_builtin_reading_a_traced_arrays_memory_is_refused_by_name():
    def x_memoryview(img):
        memoryview(img)
        return img

    with pytest.raises(TraceError, match=r"^memoryview\(\) of a traced array \(Python's "
                                         r"memoryview reads the array's memory.* at \S+"
                                         r"test_trace_refusal_text.py:\d+: memoryview\(img\)"):
        _trace_u8(x_memoryview)


def test_a_library_raising_on_bad_arguments_keeps_its_error():
    """A library's own ``raise`` for a bad constant argument is what numpy meets too: its error
    is kept (not called "outside numpy")."""
    @unregistered()
    def x_bad_kernel(img):
        return cv2.GaussianBlur(np.zeros((4, 4), np.uint8), (2, 2), 0) + img[..., 0]

    with pytest.raises(TraceError, match=r"error: OpenCV.*ksize"):
        trace_op(unregistered(ndim=2)(x_bad_kernel.fn))


# -- constructs named as written --------------------------------------------------------------
SHORT_LUT = np.arange(100, dtype=np.uint8)
SHORT_LUT.setflags(write=False)


@unregistered()
def x_short_lut(img):
    return SHORT_LUT[img]


@unregistered()
def x_power_of_a_constant(img, rng):
    gamma = rng.uniform(0.8, 1.2)
    table = (np.arange(0, 256.0) / 255) ** gamma * 255
    return img + table.astype(np.uint8)[:3]


@unregistered()
def x_power_of_a_draw(img, rng):
    return img + np.uint8(2 ** rng.integers(0, 4))


TEXTS = [
    (x_short_lut, r"a lookup table of 100 entries indexed by uint8 values: numpy raises "
                  r"IndexError for a value outside -100\.\.99", r"return SHORT_LUT\[img\]"),
    (x_power_of_a_constant, r"np\.power \(\*\*\) with a per-sample exponent",
     r"table = \(np.arange"),
    (x_power_of_a_draw, r"\*\* of integers by a per-sample exponent", r"return img \+ np"),
]


@pytest.mark.parametrize(("op", "construct", "line"), TEXTS, ids=lambda v: getattr(v, "name", ""))
def test_a_refusal_names_the_construct_as_written(op, construct, line):
    """The construct the user wrote (a lookup table numpy may index past, ``**``), at the user's
    line; explain() says the same."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 100, (5, 6, 3), dtype=np.uint8)
    op.apply(img, rng if op.random else None)  # numpy runs it: no "numpy refuses"
    with pytest.raises(TraceError) as e:
        trace_op(op)
    text = str(e.value)
    assert re.fullmatch(rf"{construct}.* at \S+test_trace_refusal_text.py:\d+: {line}.*", text), \
        text
    assert "numpy refuses" not in text and "Sym" not in text and "Node" not in text, text
    assert augment_ops.explain(op) == f"numpy: {text}"


def test_a_mutable_default_is_named_at_its_parameters_line():
    def x_defaults(img,
                   sizes=[2, 4],  # noqa: B006 - the default the tracer refuses
                   fill: int = 0):
        sizes.append(fill)  # changes the default for the next call
        return img[: sizes[0]]

    op = unregistered()(x_defaults)
    with pytest.raises(TraceError, match=r"a read of the default value of 'sizes', a list, .* at "
                                         r"\S+test_trace_refusal_text.py:\d+: sizes=\[2, 4\],"):
        trace_op(op)


# -- a per-sample value stored into a concrete array, draws among objects, many branches -------
def _trace_u8(fn, random: bool = False):
    from augment_ops.trace import trace_function

    return trace_function(fn, params={}, random=random, num_outputs=1, dtype=np.uint8, ndim=3)


# (small new arrays are traced where a per-sample value is written into them: test_trace_strided;
# these are larger than augment_ops.trace.creation.MAX_SMALL_NEW)
def s_matrix_element(img):
    C = np.eye(9)
    C[0, 2] = -img.shape[1] / 2  # x translation
    return img[:, :int(C[0, 2]) + img.shape[1]]


def s_slice_of_a_vector(img):
    cmin = np.zeros(100)
    cmin[0::2] = img.shape[1] - 1
    return img[:, :int(cmin[0])]


@pytest.mark.parametrize(("fn", "target", "name"), [
    (s_matrix_element, r"C\[0, 2\]", "C"),
    (s_slice_of_a_vector, r"cmin\[0::2\]", "cmin"),
], ids=["element", "slice"])
def test_a_per_sample_value_stored_into_a_concrete_array_is_refused_with_the_rewrite(fn, target,
                                                                                    name):
    with pytest.raises(TraceError) as e:
        _trace_u8(fn)
    assert re.match(rf"{target} = <a per-sample value>: a per-sample value written into a "
                    rf"concrete numpy array \('{name}' is a numpy array .*build the array from "
                    rf"its elements instead, {name} = np\.array\(\[\.\.\.\]\)", str(e.value)), \
        str(e.value)
    assert re.search(rf"test_trace_refusal_text\.py:\d+: {target} = ", e.value.location)


def s_permuted_functions(img, rng):
    def flip(x):
        return x[::-1]

    def mirror(x):
        return x[:, ::-1]

    for f in rng.permutation([flip, mirror])[:1]:
        img = f(img)
    return img


def test_a_draw_among_functions_is_refused_by_name_with_a_stable_message():
    texts = set()
    for _ in range(2):  # a new pair of functions each call: the message must not change
        with pytest.raises(TraceError, match=r"^rng\.permutation of a list of function values "
                                             r"\(a per-sample choice among Python objects"):
            _trace_u8(s_permuted_functions, random=True)
        try:
            _trace_u8(s_permuted_functions, random=True)
        except TraceError as e:
            texts.add(str(e))
    assert len(texts) == 1 and "0x" not in texts.pop()


def s_retries(img, rng):
    for _ in range(40):
        h = rng.integers(1, 10)
        if h < img.shape[0]:
            return img[:h]
    return img


def test_too_many_branch_outcomes_names_the_line_that_branches():
    with pytest.raises(TraceError, match=r"more than \d+ branch outcomes .* at \S+"
                                         r"test_trace_refusal_text\.py:\d+: if h < img\.shape"):
        _trace_u8(s_retries, random=True)


# -- a refusal says what to write instead, and what it says lowers -------------------------------
def r_drawn_axis(img, rng):
    return np.flip(img, axis=int(rng.integers(0, 2)))


def r_drawn_axis_branch(img, rng):
    k = int(rng.integers(0, 2))
    return np.flip(img, 0) if k == 0 else np.flip(img, 1)


def r_ravel(img):
    return img.ravel().reshape(img.shape)


def r_ravel_rewritten(img):
    return img.reshape(-1).reshape(img.shape)


def r_tile(img):
    return np.tile(img[..., :1], (1, 1, 3))


def r_tile_rewritten(img):
    return np.repeat(img[..., :1], 3, axis=2)


def r_round(img):
    return (img * 0.5).round().astype(np.uint8)


def r_round_rewritten(img):
    return np.rint(img * 0.5).astype(np.uint8)


def r_repeat(img):
    return img[..., :1].repeat(3, axis=2)


def r_repeat_rewritten(img):
    return np.repeat(img[..., :1], 3, axis=2)


def r_ptp(img):
    return (img.astype(np.int16) - np.ptp(img)).astype(np.uint8)


def r_ptp_rewritten(img):
    return (img.astype(np.int16) - (img.max() - img.min())).astype(np.uint8)


def r_drawn_channel(img, rng):
    out = img.astype(np.int16)
    out[..., int(rng.integers(0, 3))] += 20
    return np.clip(out, 0, 255).astype(np.uint8)


def r_drawn_channel_rewritten(img, rng):
    out = img.astype(np.int16)
    out = np.where(np.arange(3) == int(rng.integers(0, 3)), out + 20, out)
    return np.clip(out, 0, 255).astype(np.uint8)


def r_binomial_mask(img, rng):
    out = img.copy()
    out[rng.binomial(1, 0.1, size=img.shape[:2]).astype(bool)] = 0
    return out


def r_binomial_mask_rewritten(img, rng):
    out = img.copy()
    out[rng.random(img.shape[:2]) < 0.1] = 0
    return out


@pytest.mark.parametrize("func, says, rewritten", [
    (r_drawn_axis, r"an axis drawn or computed per sample .*np\.flip\(img, 0\) if k == 0",
     r_drawn_axis_branch),
    (r_ravel, r"ndarray\.ravel \(not among the numpy functions .*x\.reshape\(-1\)",
     r_ravel_rewritten),
    (r_tile, r"np\.tile .*np\.repeat\(g\[\.\.\., None\], 3, axis=2\)", r_tile_rewritten),
    (r_round, r"ndarray\.round .*np\.rint\(x\) \(floats rounded to integers, with no decimals",
     r_round_rewritten),
    (r_repeat, r"ndarray\.repeat .*np\.repeat\(x, n, axis=a\) where axis a has length 1",
     r_repeat_rewritten),
    (r_ptp, r"np\.ptp .*x\.max\(axis=a\) - x\.min\(axis=a\)", r_ptp_rewritten),
    (r_drawn_channel, r"np\.where\(np\.arange\(3\) == c, out \+ d, out\)",
     r_drawn_channel_rewritten),
    (r_binomial_mask, r"rng\.binomial\(size=<a per-sample value>\) .*rng\.random\(shape\) < p",
     r_binomial_mask_rewritten),
])
def test_a_refusal_gives_a_rewrite_that_lowers(func, says, rewritten):
    random = "rng" in func.__code__.co_varnames
    op = unregistered()(func)
    with pytest.raises(TraceError, match=says) as info:
        trace_op(op)
    assert "Sym" not in str(info.value) and "Traceback" not in str(info.value)
    assert re.search(says, augment_ops.explain(op))
    trace_op(unregistered()(rewritten))  # the rewrite lowers
    if rewritten is not r_binomial_mask_rewritten:  # (its mask is DALI's noise: other values)
        _check(rewritten, random=random)  # and gives numpy's pixels
