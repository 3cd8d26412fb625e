"""PIL's ``ImageOps.equalize`` of a traced image (``augment_ops.trace.pil_equalize``): each band's
histogram, PIL's integer table and the read, one Python call per batch.

Ops that equalize RGB and L images, in real DALI pipelines on the CPU and on the GPU, equal PIL
on images of every kind of band (one value, two values, tables whose ``step`` is 0 or 1 and whose
entries PIL clips, random ones) in one batch of differing sizes; the table rule equals the
installed Pillow's on random histograms; a mask, another mode and a Pillow whose tables differ
are refused saying so; ``explain()`` names the Python call.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import traced_equals_numpy, unregistered
from PIL import Image, ImageOps

from augment_ops.trace import TraceError, explain, trace_op
from augment_ops.trace.pil_equalize import _probe_images, equalize_tables, model_holds


@unregistered()
def eq_rgb(img):
    return np.asarray(ImageOps.equalize(Image.fromarray(img)))


@unregistered()
def eq_gray(img):
    return np.asarray(ImageOps.equalize(Image.fromarray(img[..., 1])))[..., None]


@unregistered()
def eq_drawn(img, rng):
    # as timm's RandAugment applies it: with probability one half
    if rng.random() > 0.5:
        return img
    return np.asarray(ImageOps.equalize(Image.fromarray(img)))


def _images() -> list[np.ndarray]:
    """RGB images holding every kind of band of :func:`_probe_images`, and a 1x1 image."""
    rs = np.random.default_rng(8)
    out = []
    for im in _probe_images():
        band = im if im.ndim == 2 else im[..., 0]
        other = rs.integers(0, 256, band.shape, dtype=np.uint8)
        out.append(np.ascontiguousarray(np.stack([other, band, band[::-1]], axis=-1)))
    out.append(np.full((1, 1, 3), 77, np.uint8))
    return out


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)],
                         ids=["cpu", "gpu"])
@pytest.mark.parametrize("op", [eq_rgb, eq_gray, eq_drawn], ids=lambda o: o.name)
def test_equalize_equals_pil_in_a_dali_pipeline(op, gpu):
    assert any(n.op == "equalize" for n in trace_op(op).nodes())
    imgs = _images()
    traced_equals_numpy(op, imgs, seed=3, index=np.arange(len(imgs)),
                        epoch=np.zeros(len(imgs), np.int64), gpu=gpu)


def test_the_table_rule_equals_pillows_on_random_histograms():
    rs = np.random.default_rng(2)
    counts = []
    for k in range(300):
        present = rs.choice(256, size=rs.integers(1, 12), replace=False)
        h = np.zeros(256, np.int64)
        h[present] = rs.integers(1, [3, 40, 400, 3000][k % 4], size=present.size)
        counts.append(h)
    for h in counts:
        band = np.repeat(np.arange(256, dtype=np.uint8), h)[None, :]
        want = np.asarray(ImageOps.equalize(Image.fromarray(band)))
        got = equalize_tables(h)[band]
        np.testing.assert_array_equal(got, want, err_msg=str(np.flatnonzero(h)))


def test_a_mask_and_another_mode_are_refused_saying_why():
    @unregistered()
    def masked(img):
        pil = Image.fromarray(img)
        return np.asarray(ImageOps.equalize(pil, mask=Image.new("L", pil.size, 255)))

    @unregistered()
    def hsv(img):
        return np.asarray(ImageOps.equalize(Image.fromarray(img).convert("HSV")))

    with pytest.raises(TraceError, match=r"^PIL ImageOps\.equalize of a traced image with a "
                                         r"mask \(a histogram of the masked pixels"):
        trace_op(masked)
    with pytest.raises(TraceError, match=r"^PIL ImageOps\.equalize of a traced HSV image"):
        trace_op(hsv)


def test_a_pillow_whose_tables_differ_is_refused(monkeypatch):
    def other_rule(image, mask=None):  # a Pillow that stretched instead
        return ImageOps.autocontrast(image)

    @unregistered()
    def equalized(img):
        return np.asarray(ImageOps.equalize(Image.fromarray(img)))

    assert model_holds(ImageOps.equalize) and not model_holds(other_rule)
    monkeypatch.setattr(ImageOps, "equalize", other_rule)
    with pytest.raises(TraceError, match=r"this Pillow's tables differ from the rule the "
                                         r"tracer knows"):
        trace_op(equalized)


def test_explain_names_the_python_call():
    assert "PIL's equalize as one Python call per batch" in explain(eq_rgb)
