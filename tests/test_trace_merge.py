"""Branch outcomes merged into one graph: a condition decided again is the same decision, and a
choice between outcomes computed by the same operators moves into their arguments.

Each op draws small integers (every outcome is taken in a batch of 64) and is checked equal to
numpy on every sample, in a real CPU DALI pipeline, with the sample's counter draws.
"""

from __future__ import annotations

import cv2
import numpy as np
from helpers import pattern_image, traced_equals_numpy, unregistered

from augment_ops.trace import trace_op

SEED = 11
BATCH = 64


def _batch(h: int = 5, w: int = 6) -> list[np.ndarray]:
    return [pattern_image(k, h, w) for k in range(BATCH)]


@unregistered()
def m_early_return_then_each_shift(img, rng):
    """albumentations' shift_hsv in miniature: return early when every shift is 0, then apply
    each shift that is not 0 (``!=`` after ``==``: the same decisions)."""
    a, b, c = (int(rng.integers(-1, 2)) for _ in range(3))
    if a == 0 and b == 0 and c == 0:
        return img
    x = img.astype(np.float32)
    if a != 0:
        x[..., 0] = x[..., 0] + 40 * a
    if b != 0:
        x[..., 1] = x[..., 1] * (1 + 0.25 * b)
    if c != 0:
        x = x + 10 * c
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def test_a_condition_decided_again_adds_no_outcome():
    traced = trace_op(m_early_return_then_each_shift)
    # the outcomes of (a == 0, b == 0, c == 0) numpy can take: 4 with a != 0, 2 with a == 0 and
    # b != 0, then c != 0 and all three 0; each later ``!= 0`` is decided already
    assert traced.num_paths == 8
    wants = traced_equals_numpy(m_early_return_then_each_shift, _batch(), seed=SEED)
    imgs = _batch()
    assert any(np.array_equal(w, i) for w, i in zip(wants, imgs, strict=True))  # the early return
    assert len({w.tobytes() for w in wants}) > 20


@unregistered()
def m_three_signs(img, rng):
    """27 outcomes, each the same arithmetic on other arguments."""
    x = img.astype(np.float32)
    for ch in range(3):
        s = rng.integers(-1, 2)
        if s < 0:
            x[..., ch] = x[..., ch] * 0.5
        elif s > 0:
            x[..., ch] = x[..., ch] + 30
    return np.minimum(x, 255).astype(np.uint8)


def test_outcomes_of_the_same_operators_compute_them_once():
    traced = trace_op(m_three_signs)
    assert traced.num_paths == 27
    # one cast to uint8 and one minimum of the image for all 27 outcomes
    big = [n for n in traced.nodes() if n.ndim == 3]
    assert sum(n.op == "cast" and n.dtype == np.uint8 for n in big) == 1
    assert sum(n.op == "bin" and n.attrs[0] == "minimum" for n in big) == 1
    wants = traced_equals_numpy(m_three_signs, _batch(), seed=SEED)
    assert len({w.tobytes() for w in wants}) > 20


@unregistered()
def m_int_order_twice(img, rng):
    k = rng.integers(0, 4)
    out = img
    if k < 2:
        out = out // 2
    if k >= 2:  # the negation of k < 2 for integers
        out = out[::-1]
    return out


def test_an_integer_comparison_and_its_negation_are_one_decision():
    assert trace_op(m_int_order_twice).num_paths == 2
    traced_equals_numpy(m_int_order_twice, _batch(), seed=SEED)


@unregistered()
def m_nan_ratio_twice(img):
    """A float may be NaN: ``v < 1`` False does not make ``v >= 1`` True."""
    v = img[0, 0, 0] / np.float64(img[0, 0, 1])
    out = img
    if v < 1:
        out = out // 2
    if v >= 1:
        out = out // 3
    return out


def test_a_float_comparison_is_not_taken_for_the_negation_of_its_opposite():
    imgs = [pattern_image(k, 4, 5) for k in range(6)]
    imgs[0][0, 0, :2] = 0  # 0 / 0: NaN, neither branch
    imgs[1][0, 0, :2] = (3, 0)  # inf
    imgs[2][0, 0, :2] = (1, 2)
    imgs[3][0, 0, :2] = (2, 1)
    wants = traced_equals_numpy(m_nan_ratio_twice, imgs)
    np.testing.assert_array_equal(wants[0], imgs[0])


@unregistered()
def m_return_input_or_crop_or_scale(img, rng):
    """One outcome is the input itself, others a crop: a choice no operator moves into."""
    k = rng.integers(0, 3)
    if k == 0:
        return img
    if k == 1:
        return img[1:, :-1]
    return img // 2


def test_outcomes_of_different_operators_and_shapes_stay_a_choice():
    traced_equals_numpy(m_return_input_or_crop_or_scale, _batch(), seed=SEED)


def test_a_librarys_check_of_a_condition_decided_already_is_a_run_time_check(tmp_path,
                                                                               monkeypatch):
    """The user's ``if k >= 0:`` and then a library's ``if k < 0: raise``: the library's test is
    the decision already taken, and its raise is the numpy path's error for those samples (a
    check at run time), not a refusal."""
    import sys

    import augment_ops.state
    import augment_ops.trace.runs

    (tmp_path / "checklib.py").write_text(
        "def validate(k):\n"
        "    if k < 0:\n"
        "        raise ValueError('k must be >= 0')\n"
        "    return k\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    real = augment_ops.state.library_file

    def library_file(path: str) -> bool:  # tmp_path stands for an installed library
        return str(path).startswith(str(tmp_path)) or real(path)

    monkeypatch.setattr(augment_ops.state, "library_file", library_file)
    monkeypatch.setattr(augment_ops.trace.runs, "library_file", library_file)
    monkeypatch.delitem(sys.modules, "checklib", raising=False)
    import checklib

    @unregistered()
    def checked_by_a_library(img, rng):
        k = rng.integers(-1, 2)
        out = img // 2 if k >= 0 else img
        checklib.validate(k)
        return out

    traced = trace_op(checked_by_a_library)
    assert traced.num_paths == 1
    assert [(g.error, g.message) for g in traced.guards] == [("ValueError", "k must be >= 0")]


@unregistered()
def m_wrapped_unsigned_condition(img, rng):
    """``k - 2`` of a uint8 wraps around (254, 255, 0, 1): ``j < 2`` holds for half the draws,
    which bounds taken as exact arithmetic (-2..1) would call always."""
    j = rng.integers(0, 4).astype(np.uint8) - np.uint8(2)
    x = img.astype(np.int16)
    if j < 2:
        x = x + 50
    if 2 <= j:
        x = x - 50
    return np.clip(x, 0, 255).astype(np.uint8)


def test_a_condition_on_a_value_that_wraps_around_is_decided_per_sample():
    assert trace_op(m_wrapped_unsigned_condition).num_paths == 2
    wants = traced_equals_numpy(m_wrapped_unsigned_condition, _batch(), seed=SEED)
    imgs = _batch()
    assert any(np.array_equal(w, np.clip(i.astype(np.int16) - 50, 0, 255)) for w, i in
               zip(wants, imgs, strict=True))


@unregistered(dtype=np.float32)
def m_rint_to_signed_zeros(img):
    """rint of values in (-0.5, 0) and of -0.0 is -0.0, as numpy gives it."""
    x = img.astype(np.float32) * np.float32(-0.25) + np.float32(0.5)
    return np.rint(np.concatenate([x, x * np.float32(0), -x], axis=1))


def test_rint_keeps_the_sign_of_a_zero():
    imgs = _batch()[:6]
    traced = trace_op(m_rint_to_signed_zeros)
    from helpers import run_traced

    for img, (got,) in zip(imgs, run_traced(traced, imgs), strict=True):
        want = m_rint_to_signed_zeros.apply(img, None)[0]
        assert got.tobytes() == want.tobytes()  # bit for bit: -0.0 is not 0.0
    assert (np.signbit(want) & (want == 0)).any()


@unregistered(dtype=np.float32)
def m_abs_of_negative_zeros(img):
    return np.abs(-img.astype(np.float32))


def test_abs_clears_the_sign_of_a_zero():
    imgs = _batch()[:4]
    for img in imgs:
        img[0, :, 1] = 0  # zeros, negated to -0.0
    traced = trace_op(m_abs_of_negative_zeros)
    from helpers import run_traced

    for img, (got,) in zip(imgs, run_traced(traced, imgs), strict=True):
        want = m_abs_of_negative_zeros.apply(img, None)[0]
        assert got.tobytes() == want.tobytes()  # bit for bit: -0.0 is not 0.0
    assert (want == 0).any()


def test_a_python_int_out_of_a_numpy_types_range_is_a_run_time_check():
    @unregistered()
    def rows_as_uint8(img):
        return img[:np.uint8(img.shape[0]) // 2]

    assert [g.error for g in trace_op(rows_as_uint8).guards] == ["OverflowError"]


def test_an_index_array_of_channels_is_taken_as_a_list_of_them():
    @unregistered()
    def channels(img):
        return img[:, :, np.array([2, 0, 1])]

    traced_equals_numpy(channels, _batch()[:4])


def pad_if_needed(img, min_size=8):
    """albumentations' PadIfNeeded in miniature: rows and columns padded only where the image
    is smaller, each outcome a padded read of the image or the image itself."""
    h, w = img.shape[:2]
    top = max(0, min_size - h) // 2
    left = max(0, min_size - w) // 2
    if h < min_size or w < min_size:
        return cv2.copyMakeBorder(img, top, max(0, min_size - h) - top, left,
                                  max(0, min_size - w) - left, cv2.BORDER_CONSTANT, value=7)
    return img


def test_outcomes_padded_or_not_are_one_padded_read():
    from test_trace_phrasing import _lowered

    sizes = [(3, 5), (9, 4), (6, 12), (10, 10), (8, 8), (1, 1)]
    _, kinds = _lowered(pad_if_needed, [pattern_image(k, h, w) for k, (h, w) in enumerate(sizes)])
    assert kinds["Slice"] == 1 and "Split" not in kinds and "Merge" not in kinds, kinds


@unregistered(ndim=2)
def m_grey_pads_of_two_fills(img):
    """Two padded reads of a grey image with different fills: their fills are not chosen per
    sample (DALI takes a fill as a constant), the reads stay a choice."""
    g = img[..., 0]
    h = g.shape[0]
    if h < 8:
        return cv2.copyMakeBorder(g, 8 - h, 0, 0, 0, cv2.BORDER_CONSTANT, value=7)
    return cv2.copyMakeBorder(g, 0, 0, 0, 1, cv2.BORDER_CONSTANT, value=0)


@unregistered()
def m_same_width_on_two_sides(img, rng):
    """One drawn width on top and on the left, or no pad: the merged bounds are one value in
    two lanes of the read's anchor."""
    t = rng.integers(0, 4)
    if img.shape[0] < 6:
        return cv2.copyMakeBorder(img, t, 1, t, 0, cv2.BORDER_CONSTANT, value=3)
    return img


def test_padded_outcomes_of_other_fills_or_one_width_twice_equal_numpy():
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(3, 5), (9, 4), (1, 1), (7, 7)])]
    traced_equals_numpy(m_grey_pads_of_two_fills, imgs)
    traced_equals_numpy(m_same_width_on_two_sides, imgs * 4, seed=SEED)
