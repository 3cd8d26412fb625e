"""render_batch / preview draw real batches to PNG; make_sample_dataset writes a real dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("matplotlib")

import extsrc
from extsrc.loading.presets import IMAGENET_MEAN, IMAGENET_STD
from extsrc.tools.preview import image_outputs, preview, render_batch, to_display
from extsrc.tools.sample_data import SHAPES, make_sample_dataset


def _batch(n: int = 3) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    hwc = torch.from_numpy(rng.integers(0, 256, (n, 20, 30, 3), dtype=np.uint8))
    chw = (hwc.permute(0, 3, 1, 2).float() - torch.tensor(IMAGENET_MEAN)[:, None, None]) \
        / torch.tensor(IMAGENET_STD)[:, None, None]
    return {
        "image": hwc,
        "norm": chw,
        "gray": torch.from_numpy(rng.integers(0, 256, (n, 10, 10), dtype=np.uint8)),
        "label": torch.arange(n),
        "index": torch.arange(n) + 10,
        "is_pad": torch.tensor([False] * (n - 1) + [True]),
    }


def test_to_display_undoes_normalisation_and_layouts():
    b = _batch()
    np.testing.assert_array_equal(to_display(b["norm"][0]), b["image"][0].numpy())
    np.testing.assert_array_equal(to_display(b["image"][0]), b["image"][0].numpy())
    assert to_display(b["gray"][0]).shape == (10, 10)
    assert to_display(np.zeros((1, 8, 9), np.uint8)).shape == (8, 9)  # CHW, one channel


def test_render_batch_grid_titles_and_png(tmp_path: Path):
    b = _batch(3)
    assert image_outputs(b) == ["image", "norm", "gray"]
    out = tmp_path / "sub" / "grid.png"
    fig = render_batch(b, path=out, classes=["cat", "dog", "emu"], max_samples=2)
    assert len(fig.axes) == 2 * 3
    assert [ax.get_title() for ax in fig.axes[:3]] == ["image", "norm", "gray"]
    assert fig.axes[0].get_ylabel() == "#10\ncat (0)"
    assert fig.axes[3].get_ylabel() == "#11\ndog (1)"
    with Image.open(out) as im:
        assert im.format == "PNG" and im.width > 100 and im.height > 100
    # Pad repeats are marked.
    assert "pad" in render_batch(b).axes[6].get_ylabel()


def test_render_batch_moves_device_tensors_to_host():
    class FakeCuda:
        """Stands in for a CUDA tensor: only .detach().cpu() gives host data."""

        ndim = 4

        def __init__(self, t: torch.Tensor) -> None:
            self.t, self.moved = t, False

        def detach(self):
            return self

        def cpu(self):
            self.moved = True
            return self.t

    fake = FakeCuda(_batch()["image"])
    render_batch({"image": fake, "label": torch.zeros(3, dtype=torch.int64)})
    assert fake.moved


def test_render_batch_errors():
    with pytest.raises(ValueError, match="no image outputs"):
        render_batch({"label": torch.zeros(2)})
    with pytest.raises(ValueError, match="max_samples"):
        render_batch(_batch(), max_samples=0)


def test_make_sample_dataset(tmp_path: Path):
    path = make_sample_dataset(tmp_path / "d", n=10, size=(40, 56), num_classes=3, fmt="mixed")
    m = extsrc.read_manifest(path, check_files=True)
    assert len(m) == 10 and m.classes == sorted(SHAPES[:3])
    with Image.open(m.paths[0]) as im0, Image.open(m.paths[1]) as im1:
        assert (im0.format, im1.format, im0.size) == ("PNG", "JPEG", (56, 40))
        a = np.asarray(im0)
    assert a.std() > 5, "images have visible structure"
    again = make_sample_dataset(tmp_path / "e", n=10, size=(40, 56), num_classes=3, fmt="mixed")
    assert (tmp_path / "e" / "images" / Path(m.paths[0]).name).read_bytes() == \
        Path(m.paths[0]).read_bytes()
    assert again.name == "manifest.csv"
    with pytest.raises(ValueError, match="num_classes"):
        make_sample_dataset(tmp_path / "x", num_classes=99)
    with pytest.raises(ValueError, match="fmt"):
        make_sample_dataset(tmp_path / "x", fmt="gif")


def test_preview_real_loader(tmp_path: Path):
    manifest = make_sample_dataset(tmp_path / "d", n=6, size=(48, 64), fmt="png")
    out = tmp_path / "preview.png"
    fig = preview(manifest, ops=["grid2x2"], n=4, path=out, resize=None)
    assert [ax.get_title() for ax in fig.axes[:5]] == ["image"] + [f"grid2x2_{k}" for k in range(4)]
    assert len(fig.axes) == 4 * 5
    # shuffle=False: the first lines, labelled with their class names.
    assert fig.axes[0].get_ylabel() == "#0\ncircle (0)"
    with Image.open(out) as im:
        assert im.format == "PNG"
    # A Loader works too (its next batch is drawn).
    with extsrc.Loader(manifest, batch_size=2, device="cpu",
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert len(preview(loader).axes) == 2
