"""A traced op's native path takes HWC uint8 images of 3 channels
(:mod:`extsrc.ops_runtime.op_inputs`): after a transform declared otherwise it runs on the numpy
path, forced onto its native path the loader refuses it when built, and where the channel count
is known only at run time the native path checks it per sample, naming the sample. Before, a
traced op after a float32 transform computed other pixels than its numpy path, silently."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import has_gpu, sized_dataset, unregistered

import extsrc
from augment_ops.registry import OpContractError
from extsrc.ops_runtime.op_inputs import DECODED, fit_to_inputs, op_inputs


@unregistered(dtype=np.float32)
def oi_to_half(img):
    return img.astype(np.float32) / 2


@unregistered(dtype=np.float32)
def oi_centred(img):
    # On float pixels numpy truncates in astype(np.int16); a traced uint8 graph need not.
    return (img.astype(np.int16) - 128).astype(np.float32)


@unregistered()
def oi_first_channel(img):
    return img[..., :1]


@unregistered(ndim=2)
def oi_grey(img):
    return img[..., 0]


@unregistered()
def oi_mirror(img):
    return img[:, ::-1]


@unregistered()
def oi_rgb_to_bgr(img):
    return img[..., ::-1]


def _native(*ops):
    return {op.name: "native" for op in ops}


def test_a_traced_op_after_a_float_transform_runs_on_the_numpy_path():
    paths = fit_to_inputs([oi_to_half, oi_centred], [], _native(oi_to_half, oi_centred), set())
    assert paths == {oi_to_half.name: "native", oi_centred.name: "numpy"}
    # an op reads the last transform's output
    paths = fit_to_inputs([oi_to_half], [oi_mirror], _native(oi_to_half, oi_mirror), set())
    assert paths[oi_mirror.name] == "numpy"


def test_a_rank_2_or_single_channel_traced_output_sends_the_next_traced_op_to_numpy():
    for first in (oi_grey, oi_first_channel):
        paths = fit_to_inputs([first, oi_mirror], [], _native(first, oi_mirror), set())
        assert paths == {first.name: "native", oi_mirror.name: "numpy"}, first.name
    # on the numpy path, the first transform's channel count is known at run time only: the
    # next op keeps its native path, checked per sample
    paths = fit_to_inputs([oi_first_channel, oi_mirror], [],
                          {oi_first_channel.name: "numpy", oi_mirror.name: "native"}, set())
    assert paths[oi_mirror.name] == "native"
    given = op_inputs([oi_first_channel, oi_mirror], [], paths)
    assert given[0] == DECODED and given[1].channels is None


def test_a_three_channel_traced_transform_keeps_the_next_op_native():
    paths = fit_to_inputs([oi_rgb_to_bgr, oi_mirror], [], _native(oi_rgb_to_bgr, oi_mirror),
                          set())
    assert paths == _native(oi_rgb_to_bgr, oi_mirror)
    assert op_inputs([oi_rgb_to_bgr, oi_mirror], [], paths)[1].channels == 3


def test_a_forced_native_path_the_input_does_not_fit_is_refused_at_construction(tmp_path):
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    with pytest.raises(ValueError, match=r"op 'oi_centred' cannot run on its native path here: "
                                         r"transform 'oi_to_half' before it gives float32"):
        extsrc.Loader(m, batch_size=4, transforms=[oi_to_half, oi_centred], device="cpu",
                      op_runtime=extsrc.OpRuntime(op_path="native"),
                      workers=extsrc.Workers(num_workers=0))


def test_the_automatic_choice_gives_numpys_pixels_after_a_float_transform(tmp_path):
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    kw = {"batch_size": 4, "transforms": [oi_to_half, oi_centred], "device": "cpu",
          "shuffle": False, "workers": extsrc.Workers(num_workers=0)}
    with extsrc.Loader(m, op_runtime=extsrc.OpRuntime(op_path={oi_to_half.name: "native"}),
                       **kw) as loader:
        assert loader.op_paths == {oi_to_half.name: "native", oi_centred.name: "numpy"}
        got = next(iter(loader))["image"]
    with extsrc.Loader(m, op_runtime=extsrc.OpRuntime(op_path="numpy"), **kw) as loader:
        want = next(iter(loader))["image"]
    np.testing.assert_array_equal(got.cpu().numpy(), want.cpu().numpy())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("first, fails", [(oi_first_channel, True), (oi_rgb_to_bgr, False)],
                         ids=["one-channel", "three-channels"])
def test_a_channel_count_known_at_run_time_is_checked_per_sample(tmp_path, first, fails,
                                                                  device):
    if device == "cuda" and not has_gpu():
        pytest.skip("needs a CUDA GPU")
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    kw = {"batch_size": 4, "transforms": [first, oi_mirror], "device": device,
          "shuffle": False, "workers": extsrc.Workers(num_workers=0)}
    native = extsrc.OpRuntime(op_path={first.name: "numpy", oi_mirror.name: "native"})
    with extsrc.Loader(m, op_runtime=native, **kw) as loader:
        assert loader.op_paths[oi_mirror.name] == "native"
        if fails:
            with pytest.raises(OpContractError, match=r"op 'oi_mirror' on its native path "
                                                      r"takes HWC images with 3 channels, got 1 "
                                                      r"from the transform before it \[sample .*"
                                                      r"line 2 \(.*img0\.png\)"):
                next(iter(loader))
            return
        got = next(iter(loader))["image"]
    with extsrc.Loader(m, op_runtime=extsrc.OpRuntime(op_path="numpy"), **kw) as loader:
        want = next(iter(loader))["image"]
    np.testing.assert_array_equal(got.cpu().numpy(), want.cpu().numpy())
