"""A traced op's native path takes HWC uint8 images of 3 channels
(:mod:`extsrc.ops_runtime.op_inputs`): after a transform declared otherwise it runs on the numpy
path, forced onto its native path the loader refuses it when built, and where the channel count
is known only at run time it is checked per sample, naming the sample: a traced op after a
float32 transform must not compute other pixels than its numpy path."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import has_gpu, sized_dataset, unregistered

import extsrc
from extsrc.errors import OpOutputError
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
def test_a_numpy_transforms_channel_count_is_checked_by_its_runner(tmp_path, first, fails,
                                                                   device):
    # The traced op after it keeps its native path (automatically); the transform's own
    # Python call checks what it gives it, with no call of the op's.
    if device == "cuda" and not has_gpu():
        pytest.skip("needs a CUDA GPU")
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    kw = {"batch_size": 4, "transforms": [first, oi_mirror], "device": device,
          "shuffle": False, "workers": extsrc.Workers(num_workers=0)}
    # (with an op pool: on a GPU, its runner copies the images between the GPU and the pool)
    auto = extsrc.OpRuntime(op_path={first.name: "numpy"}, op_workers=2)
    with extsrc.Loader(m, op_runtime=auto, **kw) as loader:

        assert loader.op_paths[oi_mirror.name] == "native"
        if fails:
            with pytest.raises(OpOutputError, match=r"op 'oi_first_channel' output 0 has 1 "
                                                    r"channel \(shape \(12, 10, 1\)\), but "
                                                    r"op 'oi_mirror' after it runs a traced "
                                                    r"native path, which takes 3 \[sample .*"
                                                    r"line 2 "
                                                    r"\(.*img0\.png\)\]") as e:
                next(iter(loader))
            assert (e.value.op, e.value.line) == (first.name, 2)
            return
        got = next(iter(loader))["image"]
    with extsrc.Loader(m, op_runtime=extsrc.OpRuntime(op_path="numpy"), **kw) as loader:
        want = next(iter(loader))["image"]
    np.testing.assert_array_equal(got.cpu().numpy(), want.cpu().numpy())


def _first_channel_by_hand(img):
    return img[:, :, 0:1]


def test_after_a_transform_lowered_by_hand_a_traced_op_checks_the_channels_first(tmp_path):
    @unregistered()
    def oi_hand_first_channel(img):
        return img[..., :1]

    @unregistered()
    def oi_bright_guard(img):
        # a check computed from pixels of channel 2, which a one-channel image lacks
        if img[..., 2].max() > 254:
            raise ValueError("too bright")
        return img[::-1]

    oi_hand_first_channel.implement("native")(_first_channel_by_hand)
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    kw = {"batch_size": 4, "transforms": [oi_hand_first_channel, oi_bright_guard],
          "device": "cpu", "shuffle": False, "workers": extsrc.Workers(num_workers=0)}
    # automatically, on the numpy path: nothing in Python would see the count
    paths = fit_to_inputs(kw["transforms"], [], _native(*kw["transforms"]), set())
    assert paths[oi_bright_guard.name] == "numpy"
    native = extsrc.OpRuntime(op_path="native")
    with extsrc.Loader(m, op_runtime=native, **kw) as loader:
        with pytest.raises(OpOutputError, match=r"op 'oi_bright_guard' on its native path "
                                                r"takes HWC images with 3 channels, got 1 "
                                                r"from transform 'oi_hand_first_channel' "
                                                r"before it \[sample .*line 2") as e:
            next(iter(loader))
    assert (e.value.op, e.value.line) == (oi_hand_first_channel.name, 2)


def test_the_pipeline_refuses_paths_whose_traced_op_cannot_take_its_input(tmp_path):
    from extsrc.graph.image import build_pipeline
    from extsrc.loading.loader import LoaderConfig

    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    with extsrc.Loader(m, batch_size=4, transforms=[oi_to_half, oi_centred], device="cpu",
                       workers=extsrc.Workers(num_workers=0)) as loader:
        config, source = loader.config, loader.source
    assert isinstance(config, LoaderConfig)
    with pytest.raises(ValueError, match="op 'oi_centred' cannot run on its native path here"):
        build_pipeline(source, config, _native(oi_to_half, oi_centred))


@pytest.mark.parametrize("runtime", [{"op_workers": 0}, {"op_workers": 2, "op_pool": "thread"},
                                     {"op_workers": 2, "op_pool": "process"}],
                         ids=["in-dalis-thread", "threads", "processes"])
def test_the_runner_checks_the_channels_for_the_ops_reading_the_last_transform(tmp_path,
                                                                               runtime):
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    rt = extsrc.OpRuntime(op_path={oi_first_channel.name: "numpy", oi_mirror.name: "native",
                                   oi_rgb_to_bgr.name: "native"}, **runtime)
    with extsrc.Loader(m, batch_size=4, transforms=[oi_first_channel],
                       ops=[oi_mirror, oi_rgb_to_bgr], device="cpu", shuffle=False,
                       op_runtime=rt, workers=extsrc.Workers(num_workers=0)) as loader:
        with pytest.raises(OpOutputError, match=r"but ops 'oi_mirror', 'oi_rgb_to_bgr' after "
                                                r"it run traced native paths, which take 3 "
                                                r"\[sample .*line 2 ") as e:
            next(iter(loader))
    assert (e.value.op, e.value.line) == (oi_first_channel.name, 2)


def test_an_op_the_process_pool_cannot_take_keeps_its_native_path_with_the_check(tmp_path):
    import threading

    import augment_ops

    @unregistered()
    def oi_hand_bgr(img):
        return img[..., ::-1]

    # a parameter that cannot be pickled, which the traced graph does not read
    oi_locked_flip = augment_ops.Op(name="oi_locked_flip", fn=lambda img, lock=None: img[:, ::-1],
                                    params=(("lock", threading.Lock()),))
    @unregistered()
    def oi_hand_one_channel(img):
        return img[..., :1]

    oi_hand_bgr.implement("native")(_reversed_channels_by_hand)
    oi_hand_one_channel.implement("native")(_first_channel_by_hand)
    m = sized_dataset(tmp_path, [(12, 10)] * 4)
    kw = {"batch_size": 4, "transforms": [oi_hand_bgr, oi_locked_flip], "device": "cpu",
          "shuffle": False, "workers": extsrc.Workers(num_workers=0)}
    for pool in ("process", "thread"):  # the path does not depend on the pool
        rt = extsrc.OpRuntime(op_workers=2, op_pool=pool)
        with extsrc.Loader(m, op_runtime=rt, **kw) as loader:
            assert loader.op_paths == {oi_hand_bgr.name: "native",
                                       oi_locked_flip.name: "native"}
            got = next(iter(loader))["image"]
    rt = extsrc.OpRuntime(op_path="numpy", op_workers=0)
    with extsrc.Loader(m, op_runtime=rt, **kw) as loader:
        want = next(iter(loader))["image"]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # and it checks the channel count it is given
    kw["transforms"] = [oi_hand_one_channel, oi_locked_flip]
    with extsrc.Loader(m, **kw) as loader:
        with pytest.raises(OpOutputError, match="got 1 from transform 'oi_hand_one_channel'"):
            next(iter(loader))


def _reversed_channels_by_hand(img):
    from nvidia.dali import fn

    return fn.cat(img[:, :, 2:3], img[:, :, 1:2], img[:, :, 0:1], axis=2)
