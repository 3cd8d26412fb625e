"""Arrays of noise drawn the size of the image (``rng.normal(0, s, img.shape)``, salt and
pepper from ``rng.random(img.shape)``): lowered, drawn on the native path by DALI's own
generator (``fn.random.normal`` / ``fn.random.uniform``).

Their values cannot equal any replay on numpy, so they are checked by distribution: pixel by
pixel against the numpy path's, with the shape, dtype and everything the op computes around
the noise checked exactly by filling the noise with constants on both paths. The other draws
of the op keep their counter-based values (a draw after the noise included); a loader gives
every sample and epoch its own noise, the same again for the same seed and other noise for
another one.
"""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
from helpers import NOISE_FILLS, encode, noise_filled, run_traced, scalar_draws, unregistered

import augment_ops
from augment_ops.trace import DrawRng, TraceError, trace_op
from augment_ops.trace.rng import noise_slots
from extsrc import Loader, OpRuntime
from extsrc.ops_runtime.seeding import counter_rng, name_salt, sample_rng

SEED = 5


@unregistered()
def n_gaussian(img, rng, sigma: float = 12.0):
    return np.clip(img + rng.normal(0, sigma, img.shape), 0, 255).astype(np.uint8)


@unregistered()
def n_standard(img, rng, sigma: float = 12.0):
    noise = rng.standard_normal(img.shape)
    return np.clip(img + noise * sigma, 0, 255).astype(np.uint8)


@unregistered()
def n_drawn_scale(img, rng):
    """A drawn scale, noise shared by the channels (imgaug's), and a flip drawn after it."""
    h, w, _ = img.shape
    scale = rng.uniform(2, 20)
    values = np.round(rng.normal(3.0, scale, (h, w, 1)))
    out = np.clip(img.astype(np.int16) + values.astype(np.int16), 0, 255).astype(np.uint8)
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return out


@unregistered()
def n_salt_pepper(img, rng, amount: float = 0.1):
    u = rng.uniform(0, 1, size=img.shape)
    out = img.copy()
    out[u < amount / 2] = 0
    out[u > 1 - amount / 2] = 255
    return out


@unregistered()
def n_random(img, rng):
    return (img * rng.random(img.shape)).astype(np.uint8)


@unregistered(min_size=9)
def n_constant_size(img, rng):
    """A constant size of more than MAX_VECTOR_DRAWS values: noise too (on a crop)."""
    patch = rng.normal(0, 30, (8, 9, 3))
    return np.clip(img[:8, :9] + patch, 0, 255).astype(np.uint8)


@unregistered()
def n_scalar_of_noise(img, rng):
    """Noise of a constant size read as scalars: a branch on one, an offset by another (the
    graph computes them, as it draws the noise; the readers cannot)."""
    x = rng.normal(0, 1, 100)
    out = np.clip(img + x[3] * 10, 0, 255).astype(np.uint8)
    if x[0] < 0.5:
        out = out[:, ::-1]
    return out


@unregistered()
def n_noise_in_one_branch(img, rng):
    """Noise in one branch, a small vector drawn at the same slot in the other."""
    if rng.random() < 0.5:
        return np.clip(img + rng.normal(0, 5, img.shape), 0, 255).astype(np.uint8)
    return np.clip(img * rng.random(3), 0, 255).astype(np.uint8)


@unregistered()
def n_branch_on_noise(img, rng):
    n = rng.normal(0, 5, img.shape)
    if n[0, 0, 0] > 0:
        return img[::-1].copy()
    return np.clip(img - n, 0, 255).astype(np.uint8)


@unregistered()
def n_cv2_randn(img, rng, sigma: float = 12.0):
    """OpenCV's generator, seeded from the op's (albumentations' GaussNoise): DALI's too."""
    cv2.setRNGSeed(int(rng.integers(0, 2**16)))
    noise = np.zeros(img.shape)
    cv2.randn(noise, (0.0, 0.0, 0.0), (sigma, sigma * rng.uniform(0.99, 1), sigma))
    return np.clip(img + noise, 0, 255).astype(np.uint8)


NOISE_OPS = [n_gaussian, n_standard, n_drawn_scale, n_salt_pepper, n_random, n_constant_size,
             n_scalar_of_noise, n_noise_in_one_branch, n_branch_on_noise, n_cv2_randn]


def _images(n: int, size=(10, 13)) -> list[np.ndarray]:
    return [np.random.default_rng(k).integers(0, 256, (*size, 3), dtype=np.uint8)
            for k in range(n)]


def _native(op, imgs, index, epoch=None, gpu: bool = False):
    traced = trace_op(op)
    epoch = np.zeros(len(imgs), np.int64) if epoch is None else epoch
    return [o for (o,) in run_traced(traced, imgs, scalar_draws(traced, SEED, name_salt(op.name),
                                                                 index, epoch), gpu=gpu)]


@pytest.mark.parametrize("op", NOISE_OPS, ids=lambda op: op.name)
def test_noise_lowers_and_explain_says_whose_generator_draws_it(op):
    traced = trace_op(op)
    assert noise_slots(traced)
    said = augment_ops.explain(op)
    assert said.startswith("native (traced; ") and "drawn by DALI's generator" in said
    assert "other ones in a resumed run" in said


def _check_exact(op, fills, gpu: bool = False) -> None:
    """The noise filled with the constants ``fills`` on both paths: the native output (``gpu``:
    on GPU 0) equals the replay's, on sizes down to a 1-pixel image."""
    traced = trace_op(op)
    sizes = [s for s in [(1, 1), (3, 2), (9, 10), (16, 21)] if min(s) >= op.min_size]
    imgs = [im for s in sizes for im in _images(2, s)]
    index = np.arange(len(imgs), dtype=np.int64) * 3 + 1
    with noise_filled(fills) as filled:
        outs = _native(op, imgs, index, gpu=gpu)
        for k, (img, got) in enumerate(zip(imgs, outs, strict=True)):
            rng = counter_rng(SEED, 0, int(index[k]), name_salt(op.name), filled.noise,
                              noise_slots(traced))
            (ref,) = filled.apply(op, img, rng)
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_array_equal(got, ref, err_msg=f"{img.shape}, index {index[k]}")


@pytest.mark.parametrize("op", NOISE_OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("fills", NOISE_FILLS)
@pytest.mark.parametrize("scalars", ["dali", "numpy"])
def test_around_its_noise_the_op_equals_its_replay_exactly(op, fills, scalars, monkeypatch):
    """Every value but the noise's, the drawn scale and the flip after the noise included, is
    the replay's (on a 1-pixel image an image-sized draw is smaller than a constant size that
    stays per-sample scalars), with the op's per-sample scalars computed by DALI's operators
    or by numpy in one."""
    from augment_ops.trace import scalar_stage

    monkeypatch.setattr(scalar_stage, "STAGE_MIN_OPERATORS", 10**9 if scalars == "dali" else 0)
    _check_exact(op, fills)


@pytest.mark.gpu
@pytest.mark.parametrize("op", NOISE_OPS, ids=lambda op: op.name)
def test_around_its_noise_the_op_equals_its_replay_exactly_on_the_gpu(op):
    """The same on the GPU, where a branch on a noise value needs its predicate on the CPU."""
    _check_exact(op, NOISE_FILLS[0], gpu=True)
    img = np.full((13, 13, 3), 120, np.uint8)
    outs = _native(op, [img] * 16, np.arange(16, dtype=np.int64), gpu=True)
    # DALI's own noise, other for each sample (n_branch_on_noise's flipped samples are alike)
    assert len({o.tobytes() for o in outs}) >= 4


@unregistered()
def n_cv2_forms(img, rng, mean=5.0, stddev=12.0, dims=3):
    cv2.setRNGSeed(int(rng.integers(0, 2**16)))
    noise = np.zeros(img.shape if dims == 3 else img.shape[:2])
    cv2.randn(noise, mean, stddev)
    if dims == 2:
        noise = noise[..., None]
    return np.clip(img + noise, 0, 255).astype(np.uint8)


# mean and stddev as OpenCV reads them: a number is (v, 0, 0, 0), a 1-tuple or a 0-d or
# 1-value array every channel's, 3 values one per channel, a 4-tuple (a Scalar) its first 3.
CV2_FORMS = [
    (5.0, 12.0, 3), ((5.0,), (12.0,), 3), ((5.0, -3.0, 1.0), (12.0, 4.0, 0.0), 3),
    ((5.0, -3.0, 1.0, 9.0), (12.0, 4.0, 0.0, 7.0), 3), (np.array(5.0), np.array([12.0]), 3),
    (np.array([5.0, -3.0, 1.0], np.float32), np.array([12.0, 4.0, 2.0], np.float32), 3),
    (5.0, (12.0, 4.0, 0.0), 3), (5.0, 12.0, 2), ((5.0, 1.0, 2.0, 3.0), 12.0, 2),
]


@pytest.mark.parametrize(("mean", "stddev", "dims"), CV2_FORMS, ids=repr)
def test_cv2_randn_reads_mean_and_stddev_as_opencv_does(mean, stddev, dims):
    op = n_cv2_forms.with_params(mean=mean, stddev=stddev, dims=dims)
    assert noise_slots(trace_op(op)) == {(-1, "cv2.randn")}
    for fills in NOISE_FILLS:
        _check_exact(op, fills)


@pytest.mark.parametrize(("mean", "stddev", "dims", "match"), [
    ((5.0, -3.0, 1.0), 12.0, 3, "OpenCV refuses the pair"),
    ((5.0, 1.0), (12.0, 2.0), 3, "of 2 values for an array of 3 channels"),
    ((5.0, 1.0, 2.0), (12.0, 1.0, 2.0), 2, "of 3 values for an array of 1 channels"),
    ([5.0, 1.0, 2.0], (12.0, 1.0, 2.0), 3, "a mean of type list"),
    (np.float32(5.0), 12.0, 3, "a mean of type float32"),
])
def test_cv2_randn_refuses_what_opencv_refuses(mean, stddev, dims, match):
    op = n_cv2_forms.with_params(mean=mean, stddev=stddev, dims=dims)
    with pytest.raises(TraceError, match=re.escape(match)):
        trace_op(op)
    with pytest.raises((cv2.error, TypeError)):
        op.apply(_images(1)[0], sample_rng(SEED, 0, 0, 1))


def test_opencvs_generator_is_never_run_while_tracing():
    """A constant seed, noise into an array of a constant shape, a traced mean for several
    channels (number or 0-d array: OpenCV's reading differs) are refused, and OpenCV's global
    generator is where tracing found it."""
    @unregistered()
    def constant_seed(img, rng):
        cv2.setRNGSeed(7)
        noise = np.zeros(img.shape)
        cv2.randn(noise, (0.0,), (9.0,))
        return np.clip(img + noise, 0, 255).astype(np.uint8)

    @unregistered()
    def constant_shape(img, rng):
        noise = np.zeros((4, 4, 3))
        cv2.randn(noise, (0.0,), (9.0,))
        return np.clip(img[:4, :4] + noise, 0, 255).astype(np.uint8)

    @unregistered()
    def traced_number(img, rng):
        noise = np.zeros(img.shape)
        cv2.randn(noise, 0.0, rng.uniform(5, 9))
        return np.clip(img + noise, 0, 255).astype(np.uint8)

    @unregistered()
    def uniform_noise(img, rng):
        noise = np.zeros(img.shape)
        cv2.randu(noise, 0.0, 9.0)
        return np.clip(img + noise, 0, 255).astype(np.uint8)

    cv2.setRNGSeed(123)
    before = np.zeros(8)
    cv2.randn(before, 0.0, 1.0)
    cv2.setRNGSeed(123)
    for op, match in [(constant_seed, r"cv2\.setRNGSeed of a constant"),
                      (constant_shape, r"cv2\.randn into something other than a traced float"),
                      (traced_number, r"one traced stddev for an array of 3 channels"),
                      (uniform_noise, r"cv2\.randu \(OpenCV's global generator")]:
        with pytest.raises(TraceError, match=match):
            trace_op(op)
    after = np.zeros(8)
    cv2.randn(after, 0.0, 1.0)
    np.testing.assert_array_equal(before, after)


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


# n_drawn_scale's pixels share a drawn scale per sample: 48 samples are too few for its
# distribution; its draws are checked exactly above, and its noise is DALI's normal as here.
@pytest.mark.parametrize("op", [n_gaussian, n_standard, n_salt_pepper, n_random, n_cv2_randn],
                         ids=lambda op: op.name)
def test_dalis_noise_has_the_numpy_paths_distribution_pixel_by_pixel(op):
    """One grey image (mid-grey: no clipping hides a wrong scale) as 48 samples: the change of
    every pixel on the native path against the numpy path's (``np.random.Generator``), as
    distributions of 24,336 values each; the samples' noise differs."""
    img = np.full((13, 13, 3), 120, np.uint8)
    n = 48
    index = np.arange(n, dtype=np.int64)
    native = _native(op, [img] * n, index)
    numpy_path = [op.apply(img, sample_rng(SEED, 0, int(i), name_salt(op.name)))[0]
                  for i in index]
    a = np.concatenate([o.astype(np.float64).ravel() for o in native]) - 120
    b = np.concatenate([o.astype(np.float64).ravel() for o in numpy_path]) - 120
    # Two samples of 24,336 from one distribution: KS above 0.02 with probability < 1e-3.
    assert _ks(a, b) < 0.02, (_ks(a, b), a.mean(), a.std(), b.mean(), b.std())
    assert abs(a.std() / b.std() - 1) < 0.05
    assert len({o.tobytes() for o in native}) == n


def test_dalis_noise_is_drawn_anew_for_every_pixel_and_channel_or_shared_as_the_shape_says():
    """Gaussian noise of the image's shape: neighbouring pixels and channels uncorrelated;
    noise of shape (h, w, 1) (imgaug's): the same change in every channel of a pixel."""
    img = np.full((16, 16, 3), 120, np.uint8)
    index = np.arange(32, dtype=np.int64)
    r = np.stack([o.astype(np.float64) - 120 for o in _native(n_gaussian, [img] * 32, index)])
    for a, b in [(r[:, :, :-1], r[:, :, 1:]), (r[:, :-1], r[:, 1:]), (r[..., 0], r[..., 1])]:
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.05
    shared = np.stack([o.astype(np.int16) - 120
                       for o in _native(n_drawn_scale, [img] * 32, index)])
    unclipped = (shared > -120) & (shared < 135)
    same = (shared[..., 0] == shared[..., 1]) & (shared[..., 1] == shared[..., 2])
    assert same[unclipped.all(axis=-1)].all() and (shared != 0).mean() > 0.5


def test_a_draw_of_a_per_sample_size_that_is_not_noise_is_refused_naming_it():
    @unregistered()
    def integers_noise(img, rng):
        return img + rng.integers(0, 3, size=img.shape).astype(np.uint8)

    @unregistered()
    def one_axis(img, rng):
        return img + rng.normal(0, 1, img.shape[1])[None, :, None].astype(np.uint8)

    with pytest.raises(TraceError, match=r"rng\.integers\(size=<a per-sample value>\)"):
        trace_op(integers_noise)
    with pytest.raises(TraceError, match=r"a random array of a per-sample shape of rank 1"):
        trace_op(one_axis)


def test_a_replay_takes_the_traced_ops_noise_slots_whatever_the_image_size():
    """On numpy every size is a number: a 1x1 image's noise (3 values) would be per-sample
    scalars, 3 slots, by size alone; given the traced op's noise slots it is one slot, as
    traced, and the draw after it keeps its value."""
    traced = trace_op(n_drawn_scale)
    slots = noise_slots(traced)
    assert slots == {(1, "normal")} and traced.num_draws == 3
    tiny = np.zeros((1, 1, 3), np.uint8)
    seen = []
    rng = DrawRng(lambda k: seen.append(k) or 0.25, noise_slots=slots)
    n_drawn_scale.fn(tiny, rng)
    assert seen == [0, 1, 2]
    by_size = DrawRng(lambda k: seen.append(k) or 0.25)
    seen.clear()
    n_drawn_scale.fn(tiny, by_size)
    assert len(seen) > 3  # the normals as per-sample scalars: two draws each


@pytest.fixture(scope="module")
def grey(tmp_path_factory):
    root = tmp_path_factory.mktemp("grey")
    lines = ["path,label"]
    for i in range(6):
        (root / f"{i}.png").write_bytes(encode(np.full((12, 10, 3), 100 + 10 * i, np.uint8),
                                               "png"))
        lines.append(f"{i}.png,{i % 2}")
    (root / "m.csv").write_text("\n".join(lines) + "\n")
    return str(root / "m.csv")


def _epochs(manifest: str, seed: int, device: str = "cpu") -> list[dict[int, np.ndarray]]:
    with Loader(manifest, batch_size=4, transforms=[n_gaussian], device=device, seed=seed,
                shuffle=False, op_runtime=OpRuntime(op_path="native")) as loader:
        assert loader.op_paths == {"n_gaussian": "native"}
        return [{int(i): im.cpu().numpy() for b in loader
                 for i, im in zip(b["index"], b["image"], strict=True)} for _ in range(2)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_loader_gives_every_sample_and_epoch_its_own_noise_the_same_for_a_seed(grey, device):
    a, again, other = _epochs(grey, 1, device), _epochs(grey, 1, device), _epochs(grey, 2, device)
    for epoch in range(2):
        assert sorted(a[epoch]) == list(range(6))
        for i in range(6):
            np.testing.assert_array_equal(a[epoch][i], again[epoch][i])
            assert (a[epoch][i] != other[epoch][i]).any()
            assert (a[epoch][i] != 100 + 10 * i).any()
            # clipping aside, the noise of sigma 12 moves the grey by a few units on average
            assert 3 < np.abs(a[epoch][i].astype(int) - (100 + 10 * i)).mean() < 20
    assert all((a[0][i] != a[1][i]).any() for i in range(6))
    residuals = [a[0][i].astype(int) - (100 + 10 * i) for i in range(6)]
    assert len({r.tobytes() for r in residuals}) == 6
