"""Per-sample lookup tables (``augment_ops.trace.gather``): a table built with float math DALI
does not reproduce bit for bit and a draw (``np.arange(256) ** gamma``, ``np.exp`` with a drawn
gain, ``(img / 255) ** gamma``) is computed by numpy for each sample beside its draws, and read
at the pixels by one Python call per batch.

Each op, in real DALI pipelines on the CPU and on the GPU, equals numpy with the sample's
counter draws on every uint8 value, for samples whose draws differ within one batch; a table
numpy cannot compute ahead (from pixel values or sizes) is refused with that reason; and a
Loader's readers deliver the tables.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from helpers import loader_equals_numpy, traced_equals_numpy, unregistered
from helpers import sized_dataset as _dataset

from augment_ops.trace import TraceError, trace_op

SEED = 9


@unregistered()
def g_arange_gamma(img, rng):
    table = ((np.arange(256) / 255) ** rng.uniform(0.5, 1.5) * 255).astype(np.uint8)
    return table[img]


@unregistered()
def g_cv2_lut_gamma(img, rng):
    gamma = rng.uniform(0.7, 1.7)
    table = (np.linspace(0, 1.0, num=256, dtype=np.float32) ** np.float32(gamma)) * 255
    return cv2.LUT(img, np.clip(table, 0, 255).astype(np.uint8))


@unregistered()
def g_pixels_gamma(img, rng):
    return ((img / 255) ** rng.uniform(0.5, 1.5) * 255).astype(np.uint8)


@unregistered(dtype=np.float64)
def g_exp_gain(img, rng):
    return np.exp(img / 255.0 * rng.uniform(0.5, 1.5))


@unregistered(dtype=np.float32)
def g_exp_table_float32(img, rng):
    gain = np.float32(rng.uniform(5, 6))
    return 1 / (1 + np.exp(gain * (np.float32(0.4) - np.arange(256, dtype=np.float32) / 255)))[img]


@unregistered(dtype=np.uint16)
def g_uint16_table(img, rng):
    return (np.arange(256) ** rng.uniform(1.5, 2.0)).astype(np.uint16)[img]


@unregistered()
def g_signed_positions(img, rng):
    # an int8 index counts from the table's end where negative, as numpy's indexing does
    table = (np.arange(256) ** rng.uniform(0.9, 1.0)).astype(np.uint8)
    return table[img.astype(np.int8)]


OPS = [g_arange_gamma, g_cv2_lut_gamma, g_pixels_gamma, g_exp_gain, g_exp_table_float32,
       g_uint16_table, g_signed_positions]


def _images() -> list[np.ndarray]:
    every = np.stack([np.arange(256, dtype=np.uint8).reshape(16, 16),
                      np.arange(255, -1, -1, dtype=np.uint8).reshape(16, 16),
                      (np.arange(256) * 7 % 256).astype(np.uint8).reshape(16, 16)], axis=2)
    rs = np.random.default_rng(2)
    return [every, every, rs.integers(0, 256, (5, 7, 3), dtype=np.uint8), every,
            np.full((1, 1, 3), 255, np.uint8)]


def _check(op, gpu: bool) -> None:
    assert any(n.op == "gather" for n in trace_op(op).nodes()), op.name
    outs = traced_equals_numpy(op, _images(), seed=SEED, index=np.arange(5) * 5 + 1,
                               epoch=[0, 1, 0, 0, 1], gpu=gpu)
    # the same image in three samples: three draws, three tables
    assert len({outs[k].tobytes() for k in (0, 1, 3)}) == 3, op.name


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)],
                         ids=["cpu", "gpu"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_a_per_sample_table_equals_numpy_with_the_samples_draws(op, gpu):
    _check(op, gpu=gpu)


def test_an_exact_table_of_a_draw_is_still_pushed_onto_the_pixels():
    """A table of exact arithmetic on np.arange and a draw needs no Python call: it is the
    expression applied to the pixels (augment_ops.trace.lookup)."""
    @unregistered()
    def brightness_table(img, rng):
        table = np.clip(np.arange(256) + rng.integers(-30, 30), 0, 255).astype(np.uint8)
        return table[img]

    assert not any(n.op == "gather" for n in trace_op(brightness_table).nodes())


@unregistered()
def g_gamma_of_the_mean(img):
    table = ((np.arange(256) / 255) ** (img.mean() / 128) * 255).astype(np.uint8)
    return table[img]


@unregistered()
def g_exp_of_the_size(img):
    return np.exp(np.arange(256) / img.shape[0])[img].astype(np.float32)


@unregistered(dtype=np.float64)
def g_scaled_by_the_max(img, rng):
    # the base reads img.max(), a value only the image gives, besides the pixels
    return (img / (img.max() + 1.0)) ** rng.uniform(0.5, 1.5)


@unregistered(dtype=np.float64)
def g_contrast_around_min(img, rng):
    # MONAI's AdjustContrast in short: img - img.min() is a uint8 array, whose 256 values the
    # table covers
    return ((img - img.min()) / 255.0) ** rng.uniform(0.5, 1.5)


def test_a_table_of_a_uint8_array_computed_from_pixels_is_per_sample():
    _check(g_contrast_around_min, gpu=False)


@unregistered(dtype=np.float64)
def g_pow_of_a_scalar_draw(img, rng):
    # 2.0 ** u of a Python float is the C library's pow; numpy's array pow differs from it
    return img * 2.0 ** rng.uniform(-1, 1)


@pytest.mark.parametrize(("op", "reason"), [
    (g_gamma_of_the_mean, r"a table computed from the image's pixels or sizes"),
    (g_exp_of_the_size, r"a table computed from the image's pixels or sizes"),
    (g_scaled_by_the_max, r"\*\* with a per-sample exponent, where numpy does not compute "
                          r"it .* nor values computed from the image"),
    (g_pow_of_a_scalar_draw, r"\*\* with a per-sample exponent, where numpy does not compute "
                             r"it .* not a single number, which the numpy path raises with the "
                             r"C library's pow"),
], ids=lambda v: getattr(v, "name", ""))
def test_a_table_numpy_cannot_compute_ahead_is_refused_with_that_reason(op, reason):
    with pytest.raises(TraceError, match=reason):
        trace_op(op)


def test_a_loader_s_readers_deliver_each_sample_s_table(tmp_path):
    manifest = _dataset(tmp_path, [(6, 6)] * 12)
    outs = loader_equals_numpy(g_cv2_lut_gamma, manifest, seed=SEED, batch_size=4,
                               size=(6, 6), workers=2)
    assert len({o.tobytes() for o in outs}) == 12


def test_explain_says_the_table_is_read_by_a_python_call_per_batch():
    import augment_ops
    from augment_ops.trace import TABLE_NOTE

    assert augment_ops.explain(g_arange_gamma) == f"native (traced; {TABLE_NOTE})"
    assert "one Python call per batch" in TABLE_NOTE


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
def test_the_gpu_read_gathers_a_batch_of_tables_as_numpy_takes(dtype):
    """read_tables, which the GPU path runs through DLPack, checked with torch on the CPU."""
    torch = pytest.importorskip("torch")
    from augment_ops.trace.gather import read_tables

    rs = np.random.default_rng(0)
    tables = [rs.integers(-300, 300, 256).astype(dtype) for _ in range(4)]
    positions = [rs.integers(0, 256, s, dtype=np.uint8)
                 for s in [(5, 7, 3), (1, 1), (2, 9), (0, 3)]]
    got = read_tables([torch.from_numpy(t) for t in tables],
                      [torch.from_numpy(p) for p in positions])
    for g, t, p in zip(got, tables, positions, strict=True):
        assert g.shape == p.shape
        np.testing.assert_array_equal(g.numpy(), np.take(t, p))


@unregistered(dtype=np.float64)
def g_channel_gains(img, rng):
    # an array of draws raised to a power: numpy's array routine, in the readers as on numpy
    return img * rng.uniform(0.5, 1.5, size=3) ** 2.2


def test_a_small_array_of_draws_with_float_math_is_computed_by_numpy():
    traced_equals_numpy(g_channel_gains, _images(), seed=SEED)


def test_a_power_of_draws_that_is_an_output_itself_is_refused():
    """The readers compute a small array of draws that the image's values read; one that is
    itself an output DALI would compute, with its own pow."""
    @unregistered(dtype=np.float64)
    def only_draws(img, rng):
        return img.astype(np.float64) * 0 + rng.uniform(0.5, 1.5, size=(1, 1, 3)) ** 2.2

    traced_equals_numpy(only_draws, _images(), seed=SEED)  # read by the image's values: lowers

    @unregistered(dtype=np.float64, num_outputs=2)
    def draws_out(img, rng):
        return img.astype(np.float64), rng.uniform(0.5, 1.5, size=(1, 1, 3)) ** 2.2

    with pytest.raises(TraceError, match=r"\*\* with exponent 2\.2"):
        trace_op(draws_out)


def test_float_math_of_an_array_of_draws_that_is_an_output_is_refused():
    @unregistered(dtype=np.float64, num_outputs=2)
    def exp_out(img, rng):
        return img.astype(np.float64), np.exp(rng.uniform(size=(1, 1, 3)))

    with pytest.raises(TraceError, match=r"np\.exp of an array of draws that no value of the "
                                         r"image reads"):
        trace_op(exp_out)
