"""Pillow's RGB <-> HSV conversions lowered by the tracer (:mod:`augment_ops.trace.pil_color`),
run by real CPU DALI pipelines and compared with Pillow bit for bit: on images of the edge values
(greys, 0 and 255, a dense sample of all colours) and, in the slow test, on every colour."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image
from test_trace_cv2 import _check, _every_colour, _refusal


def u_to_hsv(img):
    return np.asarray(Image.fromarray(img).convert("HSV"))


def u_to_rgb(img):
    return np.asarray(Image.fromarray(img, "HSV").convert("RGB"))


def u_hue_shift(img):
    """torchvision's PIL adjust_hue: split, shift the hue bytes, merge and convert back."""
    h, s, v = Image.fromarray(img).convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    np_h += np.array(0.3 * 255).astype(np.uint8)
    return np.asarray(Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB"))


@pytest.mark.parametrize("func", [u_to_hsv, u_to_rgb, u_hue_shift],
                         ids=["to_hsv", "to_rgb", "hue_shift"])
def test_pil_hsv_conversions_equal_pillow(func):
    _check(func)


@pytest.mark.slow
@pytest.mark.parametrize("func", [u_to_hsv, u_to_rgb], ids=["to_hsv", "to_rgb"])
def test_pil_hsv_conversions_equal_pillow_on_every_colour(func):
    for part in _every_colour().reshape(16, 1024, 1024, 3):
        _check(func, [part])


def test_other_pil_conversions_and_merges_are_refused():
    def u_to_lab(img):
        return np.asarray(Image.fromarray(img).convert("LAB"))

    def u_merge_rgba(img):
        r, g, b = Image.fromarray(img).split()
        return np.asarray(Image.merge("RGBA", (r, g, b, r)))
    assert re.search(r"^PIL Image\.convert from RGB to LAB \(only L <-> RGB and RGB <-> HSV",
                     _refusal(u_to_lab))
    assert "PIL Image.merge to 'RGBA' of other than three traced L bands" in _refusal(
        u_merge_rgba, ndim=3)
    bands = [Image.fromarray(np.zeros((2, 2), np.uint8))] * 3  # outside a trace: Pillow's own
    assert Image.merge("RGB", bands).mode == "RGB"
