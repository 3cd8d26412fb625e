"""Every fast path an op declares gives the numpy reference's result, through a real loader.

The ``native`` path (DALI operators) runs here in DALI's CPU-only mode; the ``gpu`` path (CuPy
through ``python_function(device="gpu")``) runs only where a GPU is visible (``-m gpu``).
Exact for slicing and flips; within ``op.tolerance`` for interpolating ops.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image
from PIL import Image

import augment_ops
import extsrc
from extsrc.ops_runtime.paths import choose_paths
from extsrc.ops_runtime.seeding import counter_rng, name_salt, sample_rng

SEED = 11
H, W = 33, 47  # odd on purpose: catches h//2 rounding and height/width swaps


def _cases(path: str) -> list:
    return [pytest.param(op.name, id=f"{op.name}-{path}") for op in augment_ops.iter_ops()
            if path in augment_ops.available_paths(op)]


@pytest.fixture(scope="module")
def same_size_pngs(tmp_path_factory) -> tuple[extsrc.Manifest, list[np.ndarray]]:
    root: Path = tmp_path_factory.mktemp("parity")
    pixels, paths = [], []
    for i in range(6):
        img = pattern_image(i, H, W)
        Image.fromarray(img).save(root / f"{i}.png")
        pixels.append(img)
        paths.append(str(root / f"{i}.png"))
    return extsrc.Manifest.from_lists(paths, list(range(6))), pixels


def _check_parity(op_name: str, path: str, device: str, data) -> None:
    manifest, pixels = data
    op = augment_ops.get(op_name)
    with extsrc.Loader(manifest, batch_size=3, ops=[op_name],
                       op_runtime=extsrc.OpRuntime(op_path={op_name: path}),
                       device=device, seed=SEED, shuffle=True,
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {op_name: path}
        seen = 0
        for _ in range(2):  # two epochs: random ops must follow the epoch too
            epoch = loader.epoch
            for batch in loader:
                for k, index in enumerate(batch["index"].tolist()):
                    rng = None
                    if op.random:
                        # The traced native path draws from the counter-based stream, which
                        # counter_rng replays on numpy; the other paths from numpy's generator.
                        make = counter_rng if path == "native" else sample_rng
                        rng = make(SEED, epoch, index, name_salt(op_name))
                    refs = op.apply(pixels[index], rng)
                    for j, ref in enumerate(refs):
                        got = batch[f"{op_name}_{j}"][k].cpu().numpy()
                        assert got.shape == ref.shape, (op_name, path, j)
                        diff = np.abs(got.astype(np.int32) - ref.astype(np.int32)).max()
                        assert diff <= op.tolerance, (op_name, path, j, diff)
                    seen += 1
        assert seen == 2 * len(manifest)


@pytest.mark.slow
@pytest.mark.parametrize("op_name", _cases("native"))
def test_native_path_matches_numpy_reference(op_name, same_size_pngs):
    _check_parity(op_name, "native", "cpu", same_size_pngs)


@pytest.mark.gpu
@pytest.mark.parametrize("op_name", _cases("gpu"))
def test_gpu_path_matches_numpy_reference(op_name, same_size_pngs):
    _check_parity(op_name, "gpu", "cuda", same_size_pngs)


@pytest.mark.gpu
@pytest.mark.parametrize("op_name", _cases("native"))
def test_native_path_on_gpu_matches_numpy_reference(op_name, same_size_pngs):
    _check_parity(op_name, "native", "cuda", same_size_pngs)


def test_grid2x2_declares_a_gpu_path_and_traces_a_native_one():
    grid = augment_ops.get("grid2x2")
    assert grid.paths == ("numpy", "gpu")
    assert augment_ops.available_paths(grid) == ("numpy", "native", "gpu")


def _untraceable_op():
    @augment_ops.augment_op(name="blur_outside_numpy", replace=True)
    def blur_outside_numpy(img):
        import scipy.ndimage

        return scipy.ndimage.uniform_filter(img, size=3)

    return blur_outside_numpy


def test_automatic_choice_prefers_native_then_gpu_then_numpy():
    ops = [augment_ops.get(n) for n in ("grid2x2", "random_crop", "grayscale")]
    ops.append(_untraceable_op())
    try:
        # Without a GPU, pixel arithmetic and several outputs go to the numpy path (next test).
        assert choose_paths(ops, gpu=False) == {
            "grid2x2": "numpy", "random_crop": "native", "grayscale": "numpy",
            "blur_outside_numpy": "numpy"}
        on_gpu = choose_paths(ops, gpu=True)
        assert on_gpu == {"grid2x2": "native", "random_crop": "native", "grayscale": "native",
                          "blur_outside_numpy": "numpy"}
    finally:
        augment_ops.unregister("blur_outside_numpy")


def _brightness(img):
    return np.clip(img.astype(np.float32) * 1.2, 0, 255).astype(np.uint8)


def _corners(img):
    h, w = img.shape[:2]
    out = img.copy()
    out[: h // 4, : w // 4] = 0
    return out[:, ::-1]


def _random_brightness(img, rng):
    return np.clip(img.astype(np.float32) * rng.uniform(0.5, 1.5), 0, 255).astype(np.uint8)


def test_on_the_cpu_pixel_arithmetic_runs_on_the_numpy_path(tmp_path):
    math = augment_ops.Op(name="paths_test_brightness", fn=_brightness)
    moves = augment_ops.Op(name="paths_test_corners", fn=_corners)
    ops = [math, moves, augment_ops.get("grid2x2"), augment_ops.get("grayscale")]
    # grid2x2: only moves pixels, but four outputs, which the numpy path resizes in one step
    assert choose_paths(ops, gpu=False) == {
        "paths_test_brightness": "numpy", "paths_test_corners": "native",
        "grid2x2": "numpy", "grayscale": "numpy"}
    assert set(choose_paths(ops, gpu=True).values()) == {"native"}
    # An op that cannot go to worker processes keeps its native path (a parameter, not a
    # global or closure variable: an op reading an object with state does not trace).
    lock = __import__("threading").Lock()
    unpicklable = augment_ops.Op(name="paths_test_locked",
                                 fn=lambda img, lock=None: (img.astype(np.float32) * 1.5)
                                 .astype(np.uint8), params=(("lock", lock),))
    assert choose_paths([unpicklable], gpu=False) == {"paths_test_locked": "native"}


def test_explain_choice_says_why_the_automatic_choice_picks_each_path():
    from extsrc.ops_runtime.paths import explain_choice

    math = augment_ops.Op(name="paths_test_brightness", fn=_brightness)
    moves = augment_ops.Op(name="paths_test_corners", fn=_corners)
    lock = __import__("threading").Lock()
    unpicklable = augment_ops.Op(name="paths_test_locked",
                                 fn=lambda img, lock=None: (img.astype(np.float32) * 1.5)
                                 .astype(np.uint8), params=(("lock", lock),))
    untraceable = _untraceable_op()
    try:
        cases = [
            (math, False, r"^numpy: the op's traced graph computes new pixel values"),
            (augment_ops.get("grid2x2"), False, r"^numpy: the op has 4 outputs"),
            (moves, False, r"^native \(traced\): DALI operators on the CPU, as the op only "
                           r"moves pixels"),
            (unpicklable, False, r"^native \(traced\): .*cannot be sent to the op pool"),
            (math, True, r"^native \(traced\): DALI operators on the GPU$"),
            (untraceable, False, r"^numpy: .*scipy"),
            (untraceable, True, r"^numpy: .*scipy"),
        ]
        for op, gpu, why in cases:
            chosen = choose_paths([op], gpu=gpu)[op.name]
            got = explain_choice(op, gpu=gpu)
            assert got.startswith(chosen + (":" if chosen == "numpy" else " ")), (op.name, got)
            assert re.search(why, got), (op.name, gpu, got)
    finally:
        augment_ops.unregister("blur_outside_numpy")


def test_on_a_gpu_an_op_of_hundreds_of_steps_over_the_image_runs_on_the_numpy_path():
    """albumentations' HueSaturationValue (OpenCV's HSV arithmetic, emulated exactly) takes
    hundreds of steps over the image and was measured faster on the numpy path on a GPU;
    torchvision's adjust_hue, of fewer, faster natively."""
    from realops.torchvision_ops import tv_adjust_hue
    from realops_holdout.albumentations_ops import alb_hue_saturation_value

    from extsrc.ops_runtime.paths import GPU_NUMPY_MIN_STEPS, explain_choice, image_steps

    assert image_steps(alb_hue_saturation_value) >= GPU_NUMPY_MIN_STEPS
    assert explain_choice(alb_hue_saturation_value, gpu=True).startswith(
        "numpy: the op's traced graph takes")
    assert choose_paths([alb_hue_saturation_value], gpu=True) == {
        alb_hue_saturation_value.name: "numpy"}
    assert 0 < image_steps(tv_adjust_hue) < GPU_NUMPY_MIN_STEPS
    assert choose_paths([tv_adjust_hue], gpu=True) == {tv_adjust_hue.name: "native"}


def test_the_cpu_path_choice_and_batches_do_not_depend_on_the_op_workers(tmp_path):
    from helpers import write_dataset

    op = augment_ops.Op(name="paths_test_random_brightness", fn=_random_brightness, random=True)
    manifest = write_dataset(tmp_path, 8)
    got = []
    for workers in (0, 1, 2):
        with extsrc.Loader(manifest, batch_size=4, transforms=[op], device="cpu", resize=16,
                           seed=3, op_runtime=extsrc.OpRuntime(op_workers=workers)) as loader:
            assert loader.op_paths == {"paths_test_random_brightness": "numpy"}
            got.append([b["image"].clone() for b in loader])
    for other in got[1:]:
        assert all(a.equal(b) for a, b in zip(got[0], other, strict=True))


def test_override_forces_a_path_and_refuses_undeclared_ones():
    ops = [augment_ops.get("grid2x2"), _untraceable_op()]
    try:
        assert choose_paths(ops, gpu=False, override="numpy") == {
            "grid2x2": "numpy", "blur_outside_numpy": "numpy"}
        with pytest.raises(ValueError, match=r"'blur_outside_numpy' has no 'native' "
                           r"implementation \(numpy: .*test_op_paths.py:\d+: .*uniform_filter"):
            choose_paths(ops, gpu=False, override={"blur_outside_numpy": "native"})
    finally:
        augment_ops.unregister("blur_outside_numpy")
    ops = [augment_ops.get("grid2x2"), augment_ops.get("grayscale")]
    with pytest.raises(ValueError, match="needs a GPU device"):
        choose_paths(ops, gpu=False, override={"grid2x2": "gpu"})
    with pytest.raises(ValueError, match="does not use"):
        choose_paths(ops, gpu=False, override={"hflip": "numpy"})


def test_native_lowering_refused_for_random_ops():
    op = augment_ops.get("random_hflip")
    with pytest.raises(augment_ops.OpRegistrationError, match="is random"):
        op.implement("native")(lambda img: img)
