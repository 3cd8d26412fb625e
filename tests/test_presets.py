"""Train / val presets on the CPU: shapes, normalisation against numpy, randomness, and ops."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import extsrc
from extsrc import IMAGENET_MEAN, IMAGENET_STD, TrainPreset, ValPreset, train_loader, val_loader

MEAN = np.asarray(IMAGENET_MEAN, np.float32)
STD = np.asarray(IMAGENET_STD, np.float32)


@pytest.fixture(scope="module")
def smooth(tmp_path_factory) -> extsrc.Manifest:
    """Five 80x112 PNGs of smooth ramps (so resampling filters agree closely)."""
    root = tmp_path_factory.mktemp("smooth")
    yy, xx = np.mgrid[0:80, 0:112]
    paths = []
    for i in range(5):
        img = np.stack([np.clip(xx * 2 + i * 10, 0, 255), np.clip(yy * 3, 0, 255),
                        np.clip(xx + yy + i * 40, 0, 255)], axis=2).astype(np.uint8)
        p = root / f"{i}.png"
        Image.fromarray(img).save(p)
        paths.append(str(p))
    return extsrc.Manifest.from_lists(paths, [0, 1, 2, 3, 4])


def _reference(path: str, crop: int, resize_to: tuple[int, int] | None = None) -> np.ndarray:
    im = Image.open(path).convert("RGB")
    if resize_to is not None:  # (width, height); Pillow's bilinear downscale is a triangle filter
        im = im.resize(resize_to, Image.BILINEAR)
    a = np.asarray(im, np.float32)
    h, w = a.shape[:2]
    y, x = (h - crop) // 2, (w - crop) // 2
    return ((a[y:y + crop, x:x + crop] - MEAN) / STD).transpose(2, 0, 1)


def test_presets_are_frozen_and_validated():
    p = TrainPreset()
    assert (p.crop, p.random_area, p.mirror_p) == (224, (0.08, 1.0), 0.5)
    assert ValPreset().size == 256 and ValPreset().crop == 224
    assert p.mean == pytest.approx((123.675, 116.28, 103.53))
    assert p.std == pytest.approx((58.395, 57.12, 57.375))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.crop = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="crop"):
        ValPreset(size=100, crop=224)
    with pytest.raises(ValueError, match="std"):
        TrainPreset(std=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="mirror_p"):
        TrainPreset(mirror_p=2.0)
    with pytest.raises(ValueError, match="random_area"):
        TrainPreset(random_area=(0.5, 0.1))


def test_val_normalisation_matches_numpy(smooth: extsrc.Manifest):
    # Shorter side already 80: the resize is the identity, so the match is exact.
    with val_loader(smooth, batch_size=2, size=80, crop=64, device="cpu",
                    workers=extsrc.Workers(num_workers=0)) as v:
        assert (v.config.shuffle, v.config.sampling.last_batch) == (False, "partial")
        batches = list(v)
    assert [len(b["index"]) for b in batches] == [2, 2, 1]
    image = np.concatenate([b["image"].numpy() for b in batches])
    index = np.concatenate([b["index"].numpy() for b in batches])
    assert image.shape == (5, 3, 64, 64) and image.dtype == np.float32
    assert index.tolist() == [0, 1, 2, 3, 4]
    for k, i in enumerate(index):
        np.testing.assert_allclose(image[k], _reference(smooth.paths[i], 64), atol=1e-4)


def test_val_resize_shorter_side_within_a_pixel(smooth: extsrc.Manifest):
    with val_loader(smooth, batch_size=5, size=40, crop=32, device="cpu",
                    workers=extsrc.Workers(num_workers=0)) as v:
        image = next(iter(v))["image"].numpy()
    assert image.shape == (5, 3, 32, 32)
    for k in range(5):
        ref = _reference(smooth.paths[k], 32, resize_to=(56, 40))
        # Compare in pixel units: DALI's and Pillow's triangle filters agree to about 1/255.
        assert np.abs((image[k] - ref) * STD[:, None, None]).max() <= 1.5


def test_train_shapes_randomness_and_ops(smooth: extsrc.Manifest):
    def epochs(seed: int) -> list[np.ndarray]:
        with train_loader(smooth, batch_size=2, crop=48, ops=["grid2x2"], device="cpu",
                          seed=seed, workers=extsrc.Workers(num_workers=0)) as t:
            assert len(t) == 2  # last_batch="drop": 5 samples -> 2 full batches
            out = []
            for _ in range(2):
                for b in t:
                    assert b["image"].shape == (2, 3, 48, 48)
                    assert str(b["image"].dtype) == "torch.float32"
                    # Ops see the decoded image; their outputs are resized to crop x crop,
                    # in the preset's format.
                    assert b["grid2x2_0"].shape == (2, 3, 48, 48)
                    assert str(b["grid2x2_0"].dtype) == "torch.float32"
                    out.append((b["index"].numpy().copy(), b["image"].numpy().copy()))
        return out

    a, b = epochs(0), epochs(0)
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
               for x, y in zip(a, b, strict=True)), "same seed, same crops"
    by_epoch = [
        {int(i): img for idx, imgs in a[2 * e:2 * e + 2]
         for i, img in zip(idx, imgs, strict=True)}
        for e in range(2)
    ]
    common = sorted(set(by_epoch[0]) & set(by_epoch[1]))
    assert common, "some sample appears in both epochs"
    assert any(not np.array_equal(by_epoch[0][i], by_epoch[1][i]) for i in common), \
        "a new epoch draws new crops for the same sample"
    values = np.concatenate([x[1] for x in a])
    # Normalised: roughly zero-centred, not 0..255.
    assert -3.5 < values.min() < 0 < values.max() < 3.5


def test_loader_kwargs_override_defaults(smooth: extsrc.Manifest, tmp_path: Path):
    t = train_loader(smooth, batch_size=2, crop=32, device="cpu",
                     sampling=extsrc.Sampling(last_batch="pad"),
                     shuffle=False, preset=TrainPreset(crop=32, mirror_p=0.0))
    assert (t.config.shuffle, t.config.sampling.last_batch, len(t)) == (False, "pad", 3)
    assert isinstance(t.config.stages[-1], TrainPreset) and t.config.stages[-1].mirror_p == 0.0
    v = val_loader(smooth, batch_size=2, size=40, crop=32, ops=["hflip"], resize=16,
                   device="cpu")
    assert v.config.resize == (16, 16)
