"""CPU loaders resize uint8 images with Pillow on the host (extsrc.ops_runtime.hostresize): the
sizes, the centre cut, and that the loader's outputs are exactly that resize of each decoded image,
made once, whatever runs the op."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from helpers import write_dataset
from PIL import Image

import augment_ops
import extsrc
from extsrc.ops_runtime.hostresize import HostResize


def _pil(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Pillow's bilinear resize to ``size`` (h, w), written out independently of HostResize."""
    mode = {3: "RGB", 2: "L"}[img.ndim]
    return np.asarray(Image.fromarray(img, mode).resize(size[::-1], Image.BILINEAR))


@pytest.mark.parametrize("shape", [(33, 47, 3), (47, 33, 3), (5, 7, 3), (40, 40), (9, 200, 4)])
@pytest.mark.parametrize("size", [(16, 16), (24, 10), (64, 64)])
def test_outputs_have_the_requested_size_in_both_modes(shape, size):
    img = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    for mode in ("shorter_side", "stretch"):
        out = HostResize(size, mode)(img)
        assert out.shape == size + shape[2:], (mode, out.shape)
        assert out.dtype == np.uint8 and out.flags.c_contiguous


def test_stretch_is_pillows_bilinear_resize():
    img = np.random.default_rng(1).integers(0, 256, (33, 47, 3), dtype=np.uint8)
    np.testing.assert_array_equal(HostResize((16, 20), "stretch")(img), _pil(img, (16, 20)))
    gray = img[..., 0].copy()
    np.testing.assert_array_equal(HostResize((16, 20), "stretch")(gray), _pil(gray, (16, 20)))


def test_shorter_side_scales_to_cover_then_cuts_the_centre():
    # 40x80: the shorter side (40) goes to 20, the width to 40, then the centre 20x20 is kept
    img = np.zeros((40, 80, 3), np.uint8)
    img[:, :20] = 50  # the left and right quarters are cut away
    img[:, 60:] = 200
    img[:, 20:60] = 120
    out = HostResize((20, 20), "shorter_side")(img)
    assert HostResize((20, 20)).scaled_size(40, 80) == (20, 40)
    np.testing.assert_array_equal(out, _pil(img, (20, 40))[:, 10:30])
    # the kept centre; its border columns blend with the cut quarters (the filter's reach)
    assert (out[:, 1:-1] == 120).all() and out[:, 0].max() < 120 < out[:, -1].min()
    # a tall image: the top and bottom are cut
    assert HostResize((20, 20)).scaled_size(80, 40) == (40, 20)


def test_four_channels_are_resized_each_alike():
    img = np.random.default_rng(2).integers(0, 256, (30, 30, 4), dtype=np.uint8)
    img[..., 3] = 0  # an alpha of 0 must not change the colours (Pillow's RGBA resize would)
    out = HostResize((12, 12), "stretch")(img)
    for c in range(4):
        np.testing.assert_array_equal(out[..., c], _pil(np.ascontiguousarray(img[..., c]),
                                                        (12, 12)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="positive"):
        HostResize((0, 4))
    with pytest.raises(ValueError, match="shorter_side"):
        HostResize((4, 4), "crop")
    with pytest.raises(ValueError, match="uint8"):
        HostResize((4, 4))(np.zeros((8, 8, 3), np.float32))


def _decoded(manifest) -> list[np.ndarray]:
    with open(manifest) as f:
        rows = list(csv.DictReader(f))
    return [np.asarray(Image.open(manifest.parent / r["path"]).convert("RGB")) for r in rows]


def _flip(img):
    return img[:, ::-1].copy()


FLIP = augment_ops.Op(name="hostresize_test_flip", fn=_flip)


@pytest.mark.parametrize("op_workers", [0, 2])
def test_cpu_loader_outputs_are_one_host_resize_of_each_image(tmp_path, op_workers):
    # PNG: DALI's decoding is exact, so the expected images can be made here with Pillow
    manifest = write_dataset(tmp_path, 10, fmt="png", size=(33, 47))
    decoded = _decoded(manifest)
    rs = HostResize((16, 20), "shorter_side")
    with extsrc.Loader(manifest, batch_size=5, resize=(16, 20), ops=[FLIP],
                       op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=op_workers),
                       device="cpu") as loader:
        seen = 0
        for batch in loader:
            for k, i in enumerate(batch["index"].tolist()):
                np.testing.assert_array_equal(batch["image"][k].numpy(), rs(decoded[i]))
                np.testing.assert_array_equal(batch["hostresize_test_flip_0"][k].numpy(),
                                              rs(_flip(decoded[i])))
                seen += 1
    assert seen == 10


@pytest.mark.parametrize("op_workers", [0, 2])
def test_transform_output_resized_by_the_op_that_reads_it(tmp_path, op_workers):
    manifest = write_dataset(tmp_path, 6, fmt="png", size=(33, 47))
    decoded = _decoded(manifest)
    rs = HostResize((16, 20), "shorter_side")
    with extsrc.Loader(manifest, batch_size=3, resize=(16, 20), transforms=[FLIP], ops=[FLIP],
                       op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=op_workers),
                       device="cpu") as loader:
        seen = 0
        for batch in loader:
            for k, i in enumerate(batch["index"].tolist()):
                np.testing.assert_array_equal(batch["image"][k].numpy(), rs(_flip(decoded[i])))
                np.testing.assert_array_equal(batch["hostresize_test_flip_0"][k].numpy(),
                                              rs(decoded[i]))
                seen += 1
    assert seen == 6


def _python_functions(loader) -> int:
    pipe = loader._build_pipeline()
    pipe.build()
    return sum(type(o._op).__name__ == "PythonFunction" for o in pipe._ops)


def test_main_image_is_resized_by_the_first_op_that_resizes_its_outputs(tmp_path):
    """The decoded image and an op's outputs go through the op pool once per batch: the op's
    worker resizes its input too. A transform's output feeding ops is resized by the first
    of them; an op whose outputs the host cannot resize (float) leaves it to a step of its
    own."""
    manifest = write_dataset(tmp_path, 4, fmt="png", size=(33, 47))
    to_float = augment_ops.Op(name="hostresize_test_float2",
                              fn=lambda img: img.astype(np.float32), dtype=np.float32)
    two = {"ops": [FLIP, FLIP], "output_map": ["image", "a", "b", "label"]}
    cases = [({"ops": [FLIP]}, 1), (two, 2),
             ({"transforms": [FLIP], "ops": [FLIP]}, 2), ({"ops": [to_float]}, 2)]
    for kwargs, expected in cases:
        with extsrc.Loader(manifest, batch_size=2, resize=8,
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=0), device="cpu",
                           **kwargs) as loader:
            assert _python_functions(loader) == expected, kwargs


def test_float_op_outputs_are_resized_by_dali_and_formats_still_apply(tmp_path):
    def to_float(img):
        return img.astype(np.float32) / 2

    op = augment_ops.Op(name="hostresize_test_float", fn=to_float, dtype=np.float32)
    manifest = write_dataset(tmp_path, 6, fmt="png")
    with extsrc.Loader(manifest, batch_size=3, resize=8, ops=[op],
                       op_runtime=extsrc.OpRuntime(op_path="numpy"),
                       device="cpu",
                       format=extsrc.BatchFormat(layout="NCHW", dtype="float32")) as loader:
        batch = next(iter(loader))
    assert batch["image"].shape == (3, 3, 8, 8)
    assert batch["hostresize_test_float_0"].shape == (3, 3, 8, 8)
    # the halved values survive (DALI resized the float output; Pillow would refuse it)
    assert 0 < batch["hostresize_test_float_0"].max() <= 128


@pytest.mark.parametrize("shape", [(20, 23), (16, 19), (17, 16), (2, 47), (5, 2), (33, 47),
                                   (47, 33), (100, 61)])
@pytest.mark.parametrize("size", [(16, 16), (7, 13)])
def test_shorter_side_geometry_is_dalis(shape, size):
    # DALI's resize(mode="not_smaller") then crop is what a GPU loader does: the same scaled size
    # and the same centre window (rounded alike), so CPU and GPU loaders cut the same region.
    from nvidia.dali import fn, pipeline_def

    h, w = size
    rs = HostResize(size, "shorter_side")
    img = np.zeros((*shape, 3), np.uint8)
    sh, sw = rs.scaled_size(*shape)
    coords = np.zeros((sh, sw, 3), np.uint8)  # each pixel holds its own row and column
    coords[..., 0] = np.arange(sh)[:, None]
    coords[..., 1] = np.arange(sw)[None, :]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(source=lambda: [img], batch=True, layout="HWC")
        b = fn.external_source(source=lambda: [coords], batch=True, layout="HWC")
        return fn.resize(a, resize_x=w, resize_y=h, mode="not_smaller"), fn.crop(b, crop=size)

    p = pipe()
    p.build()
    scaled, cropped = (np.asarray(o[0]) for o in p.run())
    assert scaled.shape[:2] == (sh, sw)
    assert rs.scaled_size(sh, sw) == (sh, sw)  # so rs(coords) only cuts the centre
    np.testing.assert_array_equal(rs(coords), cropped)
