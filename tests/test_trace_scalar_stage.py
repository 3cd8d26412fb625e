"""An op's per-sample scalars computed by numpy in one DALI operator
(:mod:`augment_ops.trace.scalar_stage`): where they would take many operators (YOLOv5's cutout:
31 rectangles from four draws each and the image's size), one ``fn.python_function`` computes
them all per batch, the draws arriving packed in one external-source output; the pixels stay
numpy's exactly, in a bare pipeline and through the loader with reader processes."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import has_gpu, pattern_image
from PIL import Image
from realops.ultralytics_ops import y5_cutout
from test_trace_phrasing import _images, _lowered

import augment_ops
import extsrc
from augment_ops import Op, lower_dali
from augment_ops.lower_dali import SampleScalars, sample_scalar_nodes, uses_stage
from augment_ops.trace import TraceError, scalar_stage, trace_op
from extsrc.ops_runtime.seeding import counter_rng, name_salt

#: YOLOv5's cutout from the corpus (31 rectangles, each from four draws and the image's size);
#: it draws ``rng.integers(1, int(h / 32))``, so images are at least 32 pixels on each side.
many_boxes = y5_cutout.fn
BOX_SIZES = [(32, 32), (33, 47), (64, 40), (75, 101)]


def shape_arithmetic(img):
    """Scalars where numpy's and DALI's arithmetic differ: floor division and modulo of negative
    numbers, integer wrap-around in casts, float truncation and rounding half to even."""
    h, w = img.shape[:2]
    a = (h * 7 - w * 13) // 5
    b = (w - 3 * h) % 4
    c = np.int64(h * 37 + w).astype(np.uint8)  # wraps around
    d = int(np.rint(h / 2.0 + 0.5))
    e = int(-w / 3)  # truncated toward 0
    top = min(h, max(0, abs(a) % (h + 1)))
    left = min(w, max(0, (b + d) % (w + 1)))
    out = img.copy()
    out[top:, left:] = c
    out[: max(1, -e) % h] = np.uint8(d + b)
    return out


SIZES = [(1, 1), (2, 7), (5, 3), (9, 12), (31, 40), (64, 33)]


@pytest.mark.parametrize("scalars", ["dali", "numpy"])
def test_scalars_differing_between_numpy_and_dali_equal_numpy(scalars, monkeypatch):
    monkeypatch.setattr(scalar_stage, "STAGE_MIN_OPERATORS", 10**9 if scalars == "dali" else 0)
    _, kinds = _lowered(shape_arithmetic, _images(np.uint8, sizes=SIZES))
    assert (kinds["PythonFunction"] == 1) == (scalars == "numpy"), kinds


def test_many_scalars_take_one_operator_and_keep_numpys_pixels():
    op = Op(name="phrasing_many_boxes", fn=many_boxes, random=True, dtype=np.uint8, ndim=3)
    assert uses_stage(trace_op(op))
    _, kinds = _lowered(many_boxes, _images(np.uint8, sizes=BOX_SIZES), random=True)
    # One erase per rectangle, one function for every scalar, a subscript per erase argument.
    assert kinds["PythonFunction"] == 1 and kinds["Erase"] == 31, kinds
    assert kinds.get("_ArithmeticGenericOp", 0) == 0 and kinds.get("Cast", 0) == 0, kinds
    assert sum(kinds.values()) < 31 * 5, kinds


def test_packed_draws_read_back_exactly():
    op = Op(name="phrasing_many_boxes", fn=many_boxes, random=True, dtype=np.uint8, ndim=3)
    nodes = sample_scalar_nodes(trace_op(op))
    dtypes = {n.dtype for n in nodes}
    assert len(nodes) > 100 and len(dtypes) >= 2, dtypes  # bools, int64s, float64s mixed

    def uniform(i, e, slot):
        return (np.arange(len(i)) * 0.137 + slot * 0.011 + e * 0.5) % 1.0

    index, epoch = np.arange(5, dtype=np.int64), np.full(5, 3, np.int64)
    plain = SampleScalars(nodes, uniform)(index, epoch)
    (rows,) = SampleScalars(nodes, uniform, packed=True)(index, epoch)
    assert rows.dtype == np.uint8 and rows.shape[0] == 5
    back = SampleScalars(nodes, uniform, packed=True).unpack(rows)
    for a, b in zip(plain, back, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _pngs(root: Path, n: int) -> tuple[extsrc.Manifest, list[np.ndarray]]:
    pixels, paths = [], []
    for i in range(n):
        img = pattern_image(i, 44, 52)  # >= 32: see BOX_SIZES
        Image.fromarray(img).save(root / f"{i}.png")
        pixels.append(img)
        paths.append(str(root / f"{i}.png"))
    return extsrc.Manifest.from_lists(paths, list(range(n))), pixels


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_loaders_native_path_with_packed_draws_equals_numpy(tmp_path, device):
    """Through the loader, with reader processes computing the packed draws: every sample of
    two epochs equals the numpy function with the same counter-based draws."""
    if device == "cuda" and not has_gpu():
        pytest.skip("no CUDA GPU")
    manifest, pixels = _pngs(tmp_path, 6)
    op = augment_ops.augment_op(name="stage_many_boxes", replace=True)(many_boxes)
    try:
        assert uses_stage(trace_op(op))
        with extsrc.Loader(manifest, batch_size=3, ops=[op.name], device=device, seed=7,
                           op_runtime=extsrc.OpRuntime(op_path={op.name: "native"}),
                           workers=extsrc.Workers(num_workers=2)) as loader:
            seen = 0
            for _ in range(2):
                epoch = loader.epoch
                for batch in loader:
                    for k, index in enumerate(batch["index"].tolist()):
                        rng = counter_rng(7, epoch, index, name_salt(op.name))
                        (ref,) = op.apply(pixels[index], rng)
                        got = batch[f"{op.name}_0"][k].cpu().numpy()
                        np.testing.assert_array_equal(got, ref, err_msg=f"sample {index}")
                        seen += 1
            assert seen == 12
    finally:
        augment_ops.unregister(op.name)


def exp_of_size(img):
    h, w = img.shape[:2]
    k = int(np.exp(h / 7.0) * 1000) % 5
    return img[:k + 1, : int(np.log(w + 1.0) * 3) % w + 1]


def test_float_functions_of_sizes_are_numpys_in_one_operator():
    """``np.exp``/``np.log`` of per-sample scalars: DALI's may differ from numpy's in the last
    bit, so numpy computes them (the stage), whatever the number of scalar operators."""
    _, kinds = _lowered(exp_of_size, _images(np.uint8, sizes=SIZES))
    assert kinds["PythonFunction"] == 1, kinds


def test_a_float_function_of_a_pixel_scalar_is_refused():
    def exp_of_mean(img):
        return (img * np.exp(img.mean() / 100)).astype(np.uint8)

    with pytest.raises(TraceError, match=r"^np\.exp of pixel values"):
        trace_op(Op(name="phrasing_exp_of_mean", fn=exp_of_mean, dtype=np.uint8, ndim=3))


def boxed_crop(img, rng, size=6, pad=2):
    """MMPretrain's RandomCrop through mmcv: a constant border, then a crop whose box is a
    ``(1, 4)`` array clipped by ``np.maximum``/``np.minimum`` (mmcv's ``imcrop``)."""
    img = cv2.copyMakeBorder(img, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=0)
    h, w = img.shape[:2]
    th, tw = min(h, size), min(w, size)
    oy, ox = rng.integers(0, h - th + 1), rng.integers(0, w - tw + 1)
    box = np.array([ox, oy, ox + tw - 1, oy + th - 1])[None, ...].astype(np.int32)
    box[:, 0::2] = np.maximum(np.minimum(box[:, 0::2], w - 1), 0)
    box[:, 1::2] = np.maximum(np.minimum(box[:, 1::2], h - 1), 0)
    x1, y1, x2, y2 = tuple(box[0, :])
    return img[y1:y2 + 1, x1:x2 + 1, ...]


@pytest.mark.parametrize("scalars", ["dali", "numpy"])
def test_a_small_array_of_two_axes_is_computed_by_the_stage(scalars, monkeypatch):
    """The box of two axes is computed in the stage on the way to its four scalars (no DALI
    arithmetic or cast), and the crop of the border is one padded read (no concatenation)."""
    monkeypatch.setattr(scalar_stage, "STAGE_MIN_OPERATORS", 10**9 if scalars == "dali" else 0)
    _, kinds = _lowered(boxed_crop, _images(np.uint8, sizes=[*SIZES, (3, 2), (40, 7)]),
                        random=True)
    assert kinds["Slice"] == 1, kinds
    if scalars == "numpy":
        assert kinds["PythonFunction"] == 1, kinds
        assert not {"_ArithmeticGenericOp", "Cast", "Cat"} & set(kinds), kinds


def test_the_stage_is_chosen_by_the_images_device():
    """On a GPU, where each scalar operator of DALI is a CPU operator dispatched per sample,
    the stage takes an op's scalars from fewer operators than on the CPU."""
    from realops_holdout.albumentations_ops import alb_center_crop

    traced = trace_op(alb_center_crop)
    count = lower_dali.scalar_cost(traced)
    assert scalar_stage.STAGE_MIN_OPERATORS_GPU <= count < scalar_stage.STAGE_MIN_OPERATORS
    assert uses_stage(traced, gpu=True) and not uses_stage(traced, gpu=False)


def test_a_batch_of_per_sample_values_keeps_their_dtype_and_refuses_another_shape():
    samples = [np.array([5, 7, 3], np.int64), np.array([2, 9, 3], np.int64)]
    got = scalar_stage._batch(samples, (3,), np.dtype(np.int64))
    assert got.dtype == np.int64 and got.tolist() == [[5, 7, 3], [2, 9, 3]]
    assert scalar_stage._batch([], (3,), np.dtype(np.int64)).shape == (0, 3)
    flags = [np.array(True), np.array(False)]
    got = scalar_stage._batch(flags, (), None)
    assert got.dtype == np.bool_ and got.tolist() == [True, False]
    with pytest.raises(ValueError, match=r"shape \(3,\) expected"):
        scalar_stage._batch([np.array([5, 7], np.int64)] * 2, (3,), np.dtype(np.int64))
