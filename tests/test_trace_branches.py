"""Per-sample branches whose outputs differ in layout: one batch mixes samples of both branches.

A branch that transposes, rotates or computes elementwise gives DALI a layout other than the
other branch's; the native path merges them per sample and must equal numpy on every sample of
the batch (real CPU DALI pipelines, counter draws replayed on numpy).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    loader_equals_numpy,
    pattern_image,
    run_traced,
    traced_equals_numpy,
    unregistered,
)
from helpers import sized_dataset as _dataset

from augment_ops.trace import TraceError, trace_op
from extsrc.ops_runtime.seeding import counter_rng, name_salt

SEED = 5



@unregistered()
def b_rot_if_tall(img):
    h, w = img.shape[:2]
    return np.rot90(img) if h > w else img


@unregistered()
def b_transpose_or_halve(img):
    if img.shape[0] % 2:
        return img.transpose(1, 0, 2)
    return img // 2


@unregistered()
def b_crop_or_swap_channels(img):
    if img.shape[1] > 4:
        return img[1:, 2:]
    return np.swapaxes(img, 0, 1)[:, ::-1]


@unregistered(ndim=2)
def b_plane_or_its_transpose(img):
    if img.shape[0] > 3:
        return img[..., 0].T
    return img[..., 1] + img[..., 2]


@unregistered()
def b_nested(img):
    h, w = img.shape[:2]
    if h > 4:
        if w > 4:
            return np.rot90(img, 3)
        return img[:, ::-1]
    return np.flipud(img.transpose(1, 0, 2))


OPS = [b_rot_if_tall, b_transpose_or_halve, b_crop_or_swap_channels, b_plane_or_its_transpose,
       b_nested]
SIZES = [(5, 3), (3, 5), (6, 6), (4, 7), (7, 2), (2, 2)]


def _emit_on(traced, imgs: list[np.ndarray]) -> list[np.ndarray]:
    return [out for (out,) in run_traced(traced, imgs)]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_a_batch_mixing_branches_of_different_layouts_equals_numpy(op):
    traced = trace_op(op)
    assert traced.num_paths >= 2
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(SIZES)]
    outs = _emit_on(traced, imgs)
    for img, got in zip(imgs, outs, strict=True):
        (ref,) = op.apply(img, None)
        assert got.dtype == ref.dtype and got.shape == ref.shape, (img.shape, got.shape)
        np.testing.assert_array_equal(got, ref, err_msg=str(img.shape))


@unregistered()
def b_random_rot90(img, rng):
    return np.rot90(img, rng.integers(0, 3, endpoint=True))



def test_a_loader_batch_whose_samples_draw_different_rotations_equals_numpy(tmp_path):
    """``np.rot90(img, k)`` with k drawn per sample, 8 samples a batch: the branches' layouts
    (WHC and HWC) differ within the batch, and every sample equals the numpy function run with
    the sample's counter draws."""
    manifest = _dataset(tmp_path, [(6, 6)] * 16)
    outs = loader_equals_numpy(b_random_rot90, manifest, seed=SEED, batch_size=8, size=(6, 6))
    ks = {next(r for r in range(4) if np.array_equal(np.rot90(pattern_image(i, 6, 6), r), out))
          for i, out in enumerate(outs)}
    assert len(ks) >= 3, ks  # the batches mix rotations


@unregistered()
def b_concat_in_one_branch(img, rng):
    k = rng.integers(1, 4)
    if rng.random() < 0.5:
        return np.concatenate([img[:k], img[k:2 * k]], axis=1)
    return img[:1].copy()


@unregistered()
def b_sum_in_one_branch(img, rng):
    k = rng.integers(1, 4)
    if rng.random() < 0.5:
        return img[:k] // 2 + img[k:2 * k] // 2
    return img[:1].copy()


def _numpy_runs(op, count: int, size: tuple[int, int]) -> tuple[list[np.ndarray], list[int]]:
    """The pattern images of samples 0..count-1 on which numpy runs ``op`` (with their counter
    draws) without raising, and their indices."""
    salt = name_salt(op.name)
    imgs, index = [], []
    for i in range(count):
        img = pattern_image(i, *size)
        try:
            op.apply(img, counter_rng(SEED, 0, i, salt))
        except ValueError:
            continue
        imgs.append(img)
        index.append(i)
    return imgs, index


@pytest.mark.parametrize("op", [b_concat_in_one_branch, b_sum_in_one_branch],
                         ids=lambda o: o.name)
def test_arrays_of_sizes_that_differ_only_on_another_branch_do_not_stop_the_batch(op):
    """np.concatenate, or arithmetic, of arrays of per-sample sizes: numpy raises where they
    differ (a check on the native path), and DALI, which computes both outcomes for the whole
    batch, is given arrays cut to one size where the other outcome is taken."""
    assert [g.error for g in trace_op(op).guards] == ["ValueError"]
    imgs, index = _numpy_runs(op, 64, (3, 4))
    shapes = {w.shape for w in traced_equals_numpy(op, imgs, seed=SEED, index=index)}
    assert len(shapes) == 2


def test_a_concatenation_whose_sizes_come_from_pixel_values_is_refused():
    @unregistered()
    def by_pixel(img):
        k = img[0, 0, 0] % 4 + 1
        if img[0, 0, 1] > 128:
            return np.concatenate([img[:k], img[k:2 * k]], axis=1)
        return img[:1].copy()

    with pytest.raises(TraceError, match=r"a check numpy makes \(ValueError: all the input array "
                                         r"dimensions except for the concatenation axis"):
        trace_op(by_pixel)


@unregistered(dtype=np.int16)
def b_where_in_one_branch(img, rng):
    k1, k2 = rng.integers(1, 4), rng.integers(1, 4)
    if rng.random() < 0.5:
        return np.where(img[:k1] > 100, img[1:1 + k2].astype(np.int16), np.int16(-1))
    return img.astype(np.int16)[:1]


def test_a_three_operand_where_of_sizes_that_differ_only_on_another_branch():
    imgs, index = _numpy_runs(b_where_in_one_branch, 48, (4, 3))
    traced_equals_numpy(b_where_in_one_branch, imgs, seed=SEED, index=index)


def test_sizes_equal_by_their_form_are_not_cut():
    @unregistered(dtype=np.int16)
    def difference(img):
        return img[:, 1:].astype(np.int16) - img[:, :-1]

    assert sum(n.op == "slice" for n in trace_op(difference).nodes()) == 2
