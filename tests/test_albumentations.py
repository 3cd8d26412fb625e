"""from_albumentations: an albumentations pipeline as a registered random op, reproducible per
sample from the loader's seed, in this process, in another process and through the loader."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset
from PIL import Image

A = pytest.importorskip("albumentations")

import augment_ops  # noqa: E402
from augment_ops import OpRegistrationError, from_albumentations  # noqa: E402
from extsrc import Workers  # noqa: E402
from extsrc.ops_runtime.seeding import name_salt, sample_rng  # noqa: E402  # noqa: E402

# Module level, so the op pickles by value and a spawned process can rebuild it.
TRANSFORM = A.Compose([
    A.HorizontalFlip(p=0.5),
    A.Affine(rotate=(-30, 30), scale=(0.8, 1.2), p=0.9),
    A.RandomBrightnessContrast(p=0.9),
])
NAME = "albu_test"


@pytest.fixture
def op():
    o = from_albumentations(TRANSFORM, name=NAME, replace=True)
    yield o
    augment_ops.unregister(NAME)


def _image(seed: int = 0, shape=(40, 52, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _apply_in_child(op_bytes: bytes, img: np.ndarray, seeds: list[int]) -> list[np.ndarray]:
    op = pickle.loads(op_bytes)
    return [op.apply(img, np.random.default_rng(s))[0] for s in seeds]


def test_registered_random_op(op):
    assert augment_ops.get(NAME) is op
    assert op.random and op.num_outputs == 1 and augment_ops.available_paths(op) == ("numpy",)
    assert "HorizontalFlip" in op.description and "Compose" in op.description
    with pytest.raises(OpRegistrationError, match="already registered"):
        from_albumentations(TRANSFORM, name=NAME)
    with pytest.raises(OpRegistrationError, match="albumentations transform"):
        from_albumentations(lambda image: image, name="not_albu")


def test_same_generator_same_output_and_seed_matters(op):
    img = _image()
    outs = [op.apply(img, np.random.default_rng(s))[0] for s in range(8)]
    again = [op.apply(img, np.random.default_rng(s))[0] for s in range(8)]
    assert all(np.array_equal(a, b) for a, b in zip(outs, again, strict=True))
    assert outs[0].shape == img.shape and outs[0].dtype == np.uint8
    assert len({o.tobytes() for o in outs}) > 1


def test_callers_transform_is_not_reseeded(op):
    before = TRANSFORM.random_generator
    op.apply(_image(), np.random.default_rng(0))
    assert TRANSFORM.random_generator is before


def test_children_draw_from_one_stream():
    # albumentations' own set_random_seed gives every child the same seed, so two p=0.5 flips
    # would always fire together; the op must not inherit that.
    flips = from_albumentations(
        A.Compose([A.HorizontalFlip(p=0.5), A.VerticalFlip(p=0.5)]), name="flips_test",
        replace=True,
    )
    try:
        img = _image(1, (6, 6, 3))
        kinds = set()
        for s in range(32):
            out = flips.apply(img, np.random.default_rng(s))[0]
            kinds.add(next(k for k, ref in enumerate(
                [img, img[:, ::-1], img[::-1], img[::-1, ::-1]]) if np.array_equal(out, ref)))
        assert kinds == {0, 1, 2, 3}
    finally:
        augment_ops.unregister("flips_test")


def test_pickles_and_matches_in_a_spawned_process(op):
    img = _image(2)
    data = pickle.dumps(op)
    seeds = [0, 1, 2, 3]
    here = [op.apply(img, np.random.default_rng(s))[0] for s in seeds]
    local_copy = _apply_in_child(data, img, seeds)
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        there = pool.submit(_apply_in_child, data, img, seeds).result(timeout=120)
    for a, b, c in zip(here, local_copy, there, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


@pytest.mark.slow
def test_loader_matches_reference_with_and_without_workers(op, tmp_path: Path):
    import extsrc

    manifest = write_dataset(tmp_path, 12, fmt="png", size=(32, 40))
    m = extsrc.read_manifest(manifest)

    def run(**kwargs):
        with extsrc.Loader(m, batch_size=4, ops=[op], resize=(32, 40), device="cpu", seed=5,
                           **kwargs) as loader:
            return [(b["index"].numpy().copy(), b["albu_test_0"].numpy().copy())
                    for _ in range(2) for b in loader]

    in_process = run(workers=Workers(num_workers=0))
    workers = run(workers=Workers(num_workers=2, start_method="spawn"))
    for (i0, x0), (i1, x1) in zip(in_process, workers, strict=True):
        assert np.array_equal(i0, i1) and np.array_equal(x0, x1)
    # Epoch 1 re-augments: the same sample differs between epochs.
    first, second = np.concatenate([x for _, x in in_process[:3]]), \
        np.concatenate([x for _, x in in_process[3:]])
    assert not np.array_equal(first, second)
    # The loader's output is the op run on the decoded image with that sample's generator
    # (without resize, so on one 32x40 PNG listed four times).
    eq_m = extsrc.Manifest.from_lists([m.paths[0]] * 4, [0, 1, 2, 3])
    with extsrc.Loader(eq_m, batch_size=4, ops=[op], device="cpu", seed=9,
                       workers=Workers(num_workers=0),
                       shuffle=False) as loader:
        batch = next(iter(loader))
    img = np.asarray(Image.open(eq_m.paths[0]).convert("RGB"))
    for k, index in enumerate(batch["index"].tolist()):
        ref = op.apply(img, sample_rng(9, 0, index, name_salt(NAME)))[0]
        assert np.array_equal(batch["albu_test_0"][k].numpy(), ref)
