"""Batch conventions (layout, dtype, normalize) and the resize modes, through real DALI pipelines
on real PNG files, against numpy computations of the same formulas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import pattern_image
from PIL import Image

import extsrc
from extsrc import Loader, VideoLoader, Workers
from extsrc.graph.batchformat import BatchFormat, check_mean_std
from extsrc.loading.presets import IMAGENET_MEAN, IMAGENET_STD, TrainPreset, ValPreset
from extsrc.tools.preview import to_display

H, W = 21, 17  # odd and unequal: a height/width swap shows


def _same_size_pngs(root: Path, n: int = 4) -> Path:
    lines = ["path,label"]
    for i in range(n):
        Image.fromarray(pattern_image(i, H, W)).save(root / f"{i}.png")
        lines.append(f"{i}.png,{i}")
    (root / "m.csv").write_text("\n".join(lines) + "\n")
    return root / "m.csv"


def _first_batch(manifest: Path, **kw) -> dict:
    with Loader(manifest, batch_size=4, shuffle=False, workers=Workers(num_workers=0),
                **kw) as loader:
        return next(iter(loader))


def _reference(norm, n: int = 4) -> np.ndarray:
    """The formula in float32 as DALI's crop_mirror_normalize computes it: (x - mean) times the
    reciprocal of std (within one float32 ulp of dividing)."""
    x = np.stack([pattern_image(i, H, W) for i in range(n)]).astype(np.float32)
    if norm is None:
        return x
    mean, std = (0.0, 255.0) if norm == "scale" else norm
    mean = np.asarray(mean, np.float32)
    inv = np.float32(1) / np.asarray(std, np.float32)
    return (x - mean) * inv


@pytest.mark.parametrize("norm", [None, "scale", (IMAGENET_MEAN, IMAGENET_STD)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_values_equal_the_numpy_formula(tmp_path, norm, dtype, layout):
    batch = _first_batch(_same_size_pngs(tmp_path),
                         format=BatchFormat(layout=layout, dtype=dtype, normalize=norm))
    ref = _reference(norm).astype(dtype)
    if layout == "NCHW":
        ref = ref.transpose(0, 3, 1, 2)
    got = batch["image"]
    assert got.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(got.numpy(), ref)


def test_bfloat16_is_the_float32_result_converted_by_torch(tmp_path):
    norm = (IMAGENET_MEAN, IMAGENET_STD)
    batch = _first_batch(_same_size_pngs(tmp_path),
                         format=BatchFormat(layout="NCHW", dtype="bfloat16", normalize=norm))
    ref = torch.from_numpy(_reference(norm).transpose(0, 3, 1, 2).copy()).to(torch.bfloat16)
    assert batch["image"].dtype == torch.bfloat16
    assert torch.equal(batch["image"], ref)


def test_uint8_nchw_keeps_pixels(tmp_path):
    batch = _first_batch(_same_size_pngs(tmp_path), format=BatchFormat(layout="NCHW"))
    assert batch["image"].dtype == torch.uint8
    np.testing.assert_array_equal(
        batch["image"].numpy(), _reference(None).astype(np.uint8).transpose(0, 3, 1, 2)
    )


def test_every_image_output_gets_the_format(png_dataset):
    """Main image and op outputs alike: shape, dtype and layout; labels and metadata untouched."""
    with Loader(png_dataset, batch_size=5, ops=["grid2x2"], resize=(20, 30),
                format=BatchFormat(layout="NCHW", dtype="float16", normalize="scale"),
                workers=Workers(num_workers=0)) as loader:
        batch = next(iter(loader))
        names = loader.output_names
    for name in names[:-1]:  # every image output
        assert batch[name].shape == (5, 3, 20, 30), name
        assert batch[name].dtype == torch.float16, name
        assert 0.0 <= float(batch[name].min()) and float(batch[name].max()) <= 1.0
    assert batch["label"].dtype == torch.int64
    assert batch["index"].dtype == torch.int64 and batch["is_pad"].dtype == torch.bool


def test_defaults_are_nhwc_uint8_unnormalised(png_dataset):
    with Loader(png_dataset, batch_size=5, resize=16, workers=Workers(num_workers=0)) as loader:
        c = loader.config.format
        batch = next(iter(loader))
    assert (c.layout, c.dtype, c.normalize, c.resize_mode) == (
        "NHWC", "uint8", None, "shorter_side")
    assert batch["image"].shape == (5, 16, 16, 3) and batch["image"].dtype == torch.uint8


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(layout="CHW"), "layout must be 'NHWC' or 'NCHW'"),
        (dict(dtype="float64"), "dtype must be one of"),
        (dict(dtype=torch.float32), "dtype must be one of"),
        (dict(normalize="unit"), "normalize must be None, 'scale'"),
        (dict(normalize=((1, 2, 3),), dtype="float32"), "normalize must be None, 'scale'"),
        (dict(normalize=((1, 2, 3), (1, 0, 1)), dtype="float32"), "std values must be > 0"),
        (dict(normalize=((1, 2, 3), (1, 2)), dtype="float32"), "std needs 1 value .* or 3"),
        (dict(normalize="scale"), "dtype='uint8' cannot hold"),
        (dict(resize_mode="crop"), "resize_mode must be 'shorter_side'"),
    ],
)
def test_bad_format_options_fail_at_construction(png_dataset, kw, match):
    with pytest.raises(ValueError, match=match):
        Loader(png_dataset, batch_size=4, workers=Workers(num_workers=0),
               format=BatchFormat(**kw))


TORCHVISION = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@pytest.mark.parametrize(
    ("norm", "match"),
    [
        (TORCHVISION, r"look like 0-1 units .*mean=\(123\.675, 116\.28, 103\.53\), "
                      r"std=\(58\.395, 57\.12, 57\.375\).*extsrc\.IMAGENET_MEAN"),
        (((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), r"look like 0-1 units .*mean=\(127\.5,"),
        ((0.5, 0.25), r"look like 0-1 units"),
        ((IMAGENET_MEAN, TORCHVISION[1]), r"std looks like 0-1 units .*would reach about 673\)"
                                          r".*mean=\(123\.675, 116\.28, 103\.53\)"),
        ((TORCHVISION[0], IMAGENET_STD), r"mean looks like 0-1 units .*mean=\(123\.675,"),
        ((0, 0.5), r"std looks like 0-1 units .*mean=\(0\.0,\), std=\(127\.5,\)"),
        ((np.array(TORCHVISION[0]), torch.tensor(TORCHVISION[1])), "look like 0-1 units"),
        (((1, 2, 3), (1, -2, 1)), "std values must be > 0"),
        (((1, 2, 3), 0), "std values must be > 0"),
        (((1, float("nan"), 3), (1, 2, 3)), "mean must hold finite numbers"),
        (((1, 2, 3), (1, float("inf"), 3)), "std must hold finite numbers"),
        (((1, 2, 3, 4), (1, 2, 3, 4)), r"mean needs 1 value \(every channel\) or 3"),
        (((), ()), "mean needs 1 value"),
        ((("1", "2", "3"), (1, 1, 1)), "mean must be a number or a sequence of numbers"),
        (((1, 2, 3), (True, 1, 1)), "std must be a number or a sequence of numbers"),
    ],
)
def test_bad_mean_std_fail_at_construction_of_every_loader(png_dataset, tmp_path, norm, match):
    """One rule for every normalisation the loaders take; the video loader's too."""
    with pytest.raises(ValueError, match=match):
        Loader(png_dataset, batch_size=4, workers=Workers(num_workers=0),
               format=BatchFormat(dtype="float32", normalize=norm))
    videos = tmp_path / "videos.csv"
    videos.write_text("path,label\na.webm,0\n")
    with pytest.raises(ValueError, match=match):
        VideoLoader(videos, batch_size=1, sequence_length=2, workers=Workers(num_workers=0),
                    format=BatchFormat(dtype="float32", normalize=norm))


def test_mean_std_in_pixel_units_and_the_exported_constants_pass():
    assert extsrc.IMAGENET_MEAN is IMAGENET_MEAN and extsrc.IMAGENET_STD is IMAGENET_STD
    assert BatchFormat(dtype="float32", normalize=(IMAGENET_MEAN, IMAGENET_STD)).normalize == (
        tuple(IMAGENET_MEAN), tuple(IMAGENET_STD))
    # mean 0 and std 1 keep pixel values (0-255) and are not taken for 0-1 units
    assert BatchFormat(dtype="float32", normalize=(0, 1)).normalize == ((0.0,), (1.0,))
    assert BatchFormat(dtype="float32", normalize=(127.5, 127.5)).normalize == ((127.5,),
                                                                                 (127.5,))
    assert check_mean_std(np.float32(127.5), [64, 64, 64]) == ((127.5,), (64.0, 64.0, 64.0))


def test_presets_and_render_batch_take_the_same_rule():
    with pytest.raises(ValueError, match=r"TrainPreset: mean=.* look like 0-1 units"):
        TrainPreset(mean=TORCHVISION[0], std=TORCHVISION[1])
    with pytest.raises(ValueError, match=r"ValPreset: std \(R, G, B\) must hold finite numbers"):
        ValPreset(std=(58.0, float("nan"), 57.0))
    batch = {"image": torch.zeros(1, 3, 4, 4), "label": torch.zeros(1)}
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match=r"render_batch: mean=.* look like 0-1 units"):
        extsrc.render_batch(batch, mean=TORCHVISION[0], std=TORCHVISION[1])
    with pytest.raises(ValueError, match="to_display: std values must be > 0"):
        to_display(np.zeros((4, 4, 3), np.float32), std=(1.0, 0.0, 1.0))


def test_format_is_frozen():
    fmt = BatchFormat(dtype="float32", normalize=([1, 2, 3], [4, 5, 6]))
    assert fmt.normalize == ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0))
    with pytest.raises(AttributeError):
        fmt.dtype = "uint8"  # type: ignore[misc]


# -- resize modes ---------------------------------------------------------------------------------
def _disc_png(root: Path, h: int = 60, w: int = 120, r: int = 24) -> Path:
    """A white disc of radius ``r`` centred on a black ``h`` x ``w`` image."""
    yy, xx = np.mgrid[0:h, 0:w]
    disc = ((yy - (h - 1) / 2) ** 2 + (xx - (w - 1) / 2) ** 2) <= r * r
    img = np.zeros((h, w, 3), np.uint8)
    img[disc] = 255
    Image.fromarray(img).save(root / "disc.png")
    (root / "m.csv").write_text("path,label\ndisc.png,0\n")
    return root / "m.csv"


def _disc_aspect(image: torch.Tensor) -> float:
    """Width over height of the bright region of an HWC image."""
    mask = image[..., 0].numpy() > 127
    rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    return (cols[-1] - cols[0] + 1) / (rows[-1] - rows[0] + 1)


@pytest.mark.parametrize("size", [(40, 40), (33, 51)])
def test_shorter_side_keeps_a_circle_round(tmp_path, size):
    manifest = _disc_png(tmp_path)
    with Loader(manifest, batch_size=1, resize=size,
                workers=Workers(num_workers=0)) as loader:  # the default
        image = next(iter(loader))["image"][0]
    assert tuple(image.shape) == (*size, 3)
    assert _disc_aspect(image) == pytest.approx(1.0, abs=0.1)
    # The crop is centred: the disc's centre stays at the image's centre.
    ys, xs = np.nonzero(image[..., 0].numpy() > 127)
    assert ys.mean() == pytest.approx((size[0] - 1) / 2, abs=1.0)
    assert xs.mean() == pytest.approx((size[1] - 1) / 2, abs=1.0)


def test_stretch_squashes_a_circle(tmp_path):
    manifest = _disc_png(tmp_path)  # 60 x 120 to 40 x 40: width shrinks twice as much
    with Loader(manifest, batch_size=1, resize=40, format=BatchFormat(resize_mode="stretch"),
                workers=Workers(num_workers=0)) as loader:
        image = next(iter(loader))["image"][0]
    assert tuple(image.shape) == (40, 40, 3)
    assert _disc_aspect(image) == pytest.approx(0.5, abs=0.1)


def test_resume_checks_the_resize_mode_not_the_presentation(png_dataset):
    from extsrc import StateMismatchError

    kw = dict(batch_size=5, resize=16, workers=Workers(num_workers=0))
    state = Loader(png_dataset, format=BatchFormat(resize_mode="stretch"), **kw).state_dict()
    with pytest.raises(StateMismatchError, match="resize_mode: 'stretch' in the state, "
                                                 "'shorter_side' here"):
        Loader(png_dataset, **kw).load_state_dict(state)
    # Layout, dtype and normalisation present the same pixels: a run may change them.
    Loader(png_dataset,
           format=BatchFormat(resize_mode="stretch", layout="NCHW", dtype="bfloat16",
                              normalize="scale"), **kw).load_state_dict(state)


@pytest.mark.gpu
def test_format_on_the_gpu_matches_the_cpu(tmp_path):
    manifest = _same_size_pngs(tmp_path)
    kw = dict(format=BatchFormat(layout="NCHW", dtype="float32",
                                 normalize=(IMAGENET_MEAN, IMAGENET_STD)), resize=(16, 12))
    cpu = _first_batch(manifest, device="cpu", **kw)
    with Loader(manifest, batch_size=4, shuffle=False, device="cuda",
                workers=Workers(num_workers=0, decoder="cpu"), **kw) as loader:
        gpu = next(iter(loader))
    assert gpu["image"].is_cuda and gpu["image"].shape == (4, 3, 16, 12)
    # DALI's CPU and GPU resize kernels may differ by a rounding step of the pixel values.
    diff = (gpu["image"].cpu() - cpu["image"]).abs().max()
    assert float(diff) <= 1.0 / min(IMAGENET_STD) + 1e-5
    with Loader(manifest, batch_size=4, shuffle=False, workers=Workers(num_workers=0),
                device="cuda", format=BatchFormat(dtype="bfloat16", normalize="scale")) as loader:
        batch = next(iter(loader))
    assert batch["image"].is_cuda and batch["image"].dtype == torch.bfloat16
