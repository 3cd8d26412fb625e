"""Loader end to end on real DALI CPU pipelines (device="cpu": this suite runs without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import pattern_image, write_dataset
from PIL import Image

import augment_ops
from extsrc import Loader, OpRuntime, Sampling, Workers, read_manifest
from extsrc.ops_runtime.seeding import name_salt, sample_rng
from extsrc.sources.sharding import shard_plan

GRID_NAMES = ["image", "grid2x2_0", "grid2x2_1", "grid2x2_2", "grid2x2_3", "label"]
ODD = (33, 47)
N_ODD = 8
ODD_LABELS = [300, 70000, 2**40, 0, 5, 256, 255, 1]


def grid_tiles(img: np.ndarray) -> list[np.ndarray]:
    """Reference grid2x2: split at h // 2, w // 2; TL, TR, BL, BR."""
    h, w = img.shape[:2]
    y, x = h // 2, w // 2
    return [img[:y, :x], img[:y, x:], img[y:, :x], img[y:, x:]]


def epoch(loader: Loader) -> list[dict[str, torch.Tensor]]:
    return list(loader)


def column(batches, key) -> list[int]:
    return [int(v) for b in batches for v in b[key]]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """23 images, PNG and JPEG alternating, sizes varying, labels 300/70000/7."""
    path = write_dataset(
        tmp_path_factory.mktemp("mixed"), 23, fmt="mixed", label_fn=lambda i: [300, 70000, 7][i % 3]
    )
    return read_manifest(path)


@pytest.fixture(scope="module")
def odd_png(tmp_path_factory):
    """8 lossless PNGs, all 33x47 (odd), with large labels."""
    root = tmp_path_factory.mktemp("odd")
    lines = ["path,label"]
    for i in range(N_ODD):
        Image.fromarray(pattern_image(i, *ODD)).save(root / f"{i}.png")
        lines.append(f"{i}.png,{ODD_LABELS[i]}")
    (root / "manifest.csv").write_text("\n".join(lines) + "\n")
    return read_manifest(root / "manifest.csv")


# --- construction errors (no pipeline is built) -------------------------------------------------


def test_default_output_names(mixed):
    loader = Loader(mixed, batch_size=4, ops=["grid2x2"], resize=16, device="cpu")
    assert list(loader.output_names) == GRID_NAMES
    assert len(loader) == 6
    assert Loader(mixed, batch_size=4, device="cpu").output_names == ("image", "label")


def test_wrong_length_output_map(mixed):
    with pytest.raises(
        ValueError,
        match=r"output_map has 2 names but the loader has 6 outputs "
        r"\['image', 'grid2x2_0', 'grid2x2_1', 'grid2x2_2', 'grid2x2_3', 'label'\]",
    ):
        Loader(mixed, batch_size=4, ops=["grid2x2"], output_map=["a", "b"], device="cpu")


@pytest.mark.parametrize(
    ("names", "error", "match"),
    [
        (["x", "x"], ValueError, r"distinct non-empty strings, got \('x', 'x'\) \(\['x'\] more"),
        (["", "y"], ValueError, r"distinct non-empty strings.*an empty or blank name"),
        ([" ", "y"], ValueError, r"an empty or blank name"),
        ([b"x", "y"], TypeError, r"names \(str\).*bytes b'x' is not a str"),
        ([None, "y"], TypeError, r"NoneType None is not a str"),
        (["index", "y"], ValueError, r"\['index'\] are reserved for per-sample metadata"),
        (["x", "is_pad"], ValueError, r"\['is_pad'\] are reserved for per-sample metadata"),
        (["__info", "y"], ValueError,
         r"\['__info'\] are reserved for the loader's internal pipeline outputs \['__info'\]"),
    ],
)
def test_output_map_reserved_and_bad_names_fail_at_construction(mixed, names, error, match):
    with pytest.raises(error, match=match):
        Loader(mixed, batch_size=4, output_map=names, device="cpu")


def test_names_reserved_only_by_the_video_loader_are_free_here(mixed):
    with Loader(mixed, batch_size=4, output_map=["__clip", "start_frame"], device="cpu",
                workers=Workers(num_workers=0), resize=8) as loader:
        batch = next(iter(loader))
    assert batch["__clip"].shape == (4, 8, 8, 3) and batch["start_frame"].shape == (4,)


def test_device_cuda_without_gpu(mixed):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(ValueError, match=r"no CUDA GPU is visible; pass device='cpu'"):
        Loader(mixed, batch_size=4, device="cuda")
    with pytest.raises(ValueError, match=r"device='cpu'"):
        Loader(mixed, batch_size=4, device="cuda:1")


@pytest.mark.parametrize("device", ["bogus", "cuda:x", "tpu"])
def test_device_bogus(mixed, device):
    with pytest.raises(ValueError, match=r"device must be None, 'cpu', 'cuda', 'cuda:N'"):
        Loader(mixed, batch_size=4, device=device)


@pytest.mark.parametrize(("load", "error"), [
    (-0.1, ValueError), (1.5, ValueError), ("0.5", TypeError), (True, TypeError),
])
def test_hw_decoder_load_out_of_range(mixed, load, error):
    with pytest.raises(error, match=r"hw_decoder_load must be None .* in \[0, 1\]"):
        Loader(mixed, batch_size=4, device="cpu", workers=Workers(hw_decoder_load=load))


def test_hw_decoder_load_is_ignored_by_cpu_decoding(mixed):
    """It only shapes mixed decoding; a CPU loader with it set decodes exactly as without."""
    kw = dict(batch_size=8, device="cpu", shuffle=False, resize=16)
    with Loader(mixed, **kw) as a, Loader(mixed, workers=Workers(hw_decoder_load=1.0), **kw) as b:
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x["image"], y["image"])


@pytest.mark.gpu
def test_hw_decoder_load_extremes_decode_the_same_images(tmp_path):
    """All JPEGs to the hardware decoder (1.0) or none (0.0): the same samples in the same order,
    and pixels close to the CPU decoder's; the metadata arrives page-locked.

    The images are smooth and saved 4:4:4, so decoders differ only by IDCT and colour rounding.
    (A high-frequency 4:2:0 pattern differed from libjpeg-turbo by up to 77 levels, mean 3.3, on
    an H200: nvJPEG upsamples chroma without libjpeg's "fancy" filter.) The bound is loose on
    purpose: it catches a wrong, shifted or channel-swapped image (mean differences in the tens),
    not rounding.
    """
    root = tmp_path / "jpegs"
    root.mkdir()
    lines = []
    for i in range(20):  # one size (no resize, so no interpolation in the comparison)
        small = pattern_image(i, 12, 16)
        img = Image.fromarray(small).resize((128, 96), Image.BILINEAR)
        img.save(root / f"{i}.jpg", quality=95, subsampling=0)
        lines.append(f"{i}.jpg,{i}")
    (root / "m.txt").write_text("\n".join(lines) + "\n")
    jpegs = read_manifest(root / "m.txt")
    kw = dict(batch_size=8, shuffle=False, resize=None)
    with Loader(jpegs, device="cpu", **kw) as ref, \
            Loader(jpegs, device="cuda", workers=Workers(hw_decoder_load=0.0), **kw) as cuda_path, \
            Loader(jpegs, device="cuda", workers=Workers(hw_decoder_load=1.0), **kw) as hw_path:
        for r, c, h in zip(ref, cuda_path, hw_path, strict=True):
            assert torch.equal(r["index"], c["index"]) and torch.equal(r["index"], h["index"])
            # GPU loaders hand the metadata over page-locked (non_blocking copies stay async).
            assert c["index"].is_pinned() and c["is_pad"].is_pinned()
            assert c["label"].is_cuda and not r["label"].is_cuda
            for k in range(r["image"].shape[0]):
                want = r["image"][k].numpy().astype(int)
                for got in (c["image"][k].cpu().numpy(), h["image"][k].cpu().numpy()):
                    assert got.shape == want.shape
                    diff = np.abs(got.astype(int) - want)
                    assert diff.mean() < 2.0 and diff.max() <= 32, (k, diff.max(), diff.mean())


def test_unknown_op(mixed):
    with pytest.raises(KeyError, match=r"no op named 'nope'"):
        Loader(mixed, batch_size=4, ops=["nope"], device="cpu")


def test_drop_with_too_few_samples(mixed):
    with pytest.raises(ValueError, match=r"leaves no batch"):
        Loader(mixed, batch_size=16, sampling=Sampling(num_shards=2, shard_id=0, last_batch="drop"),
               device="cpu")


# --- real pipelines -----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_shards_two_epochs_end_to_end(mixed):
    loaders = [
        Loader(mixed, batch_size=4, ops=["grid2x2"], resize=(16, 20),
               sampling=Sampling(shard_id=s, num_shards=2, last_batch="pad"),
               device="cpu", workers=Workers(num_workers=1), seed=11)
        for s in range(2)
    ]
    try:
        orders = []
        for e in range(2):
            seen: list[int] = []
            pads = 0
            for s, loader in enumerate(loaders):
                assert loader.epoch == e
                batches = epoch(loader)
                assert len(batches) == len(loader) == 3
                for b in batches:
                    assert set(b) == {*GRID_NAMES, "index", "is_pad"}
                    for name in GRID_NAMES[:-1]:
                        assert b[name].shape == (4, 16, 20, 3) and b[name].dtype == torch.uint8
                    assert b["label"].dtype == torch.int64 and b["index"].dtype == torch.int64
                    assert b["is_pad"].dtype == torch.bool
                    idx = b["index"].numpy()
                    np.testing.assert_array_equal(b["label"].numpy(), mixed.labels[idx])
                    # The quadrants are not the whole image.
                    assert not torch.equal(b["grid2x2_0"], b["image"])
                    for i, pad in zip(idx.tolist(), b["is_pad"].tolist(), strict=True):
                        if pad:
                            pads += 1
                        else:
                            seen.append(i)
                plan = shard_plan(23, batch_size=4, shard_id=s, num_shards=2, epoch=e, seed=11)
                assert column(batches, "index") == plan.indices.tolist()
                assert [bool(p) for b in batches for p in b["is_pad"]] == plan.is_pad.tolist()
            assert sorted(seen) == list(range(23)), f"epoch {e}"
            assert pads == 1
            orders.append(seen)
        assert orders[0] != orders[1]
        assert {300, 70000, 7} == set(mixed.labels.tolist())
    finally:
        for loader in loaders:
            loader.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "sizes"), [("partial", [[4, 4, 4], [4, 4, 3]]), ("drop", [[4, 4], [4, 4]])]
)
def test_last_batch_counts(mixed, policy, sizes):
    seen: list[int] = []
    for s in range(2):
        with Loader(mixed, batch_size=4, resize=8,
                    sampling=Sampling(shard_id=s, num_shards=2, last_batch=policy),
                    device="cpu", workers=Workers(num_workers=1)) as loader:
            batches = epoch(loader)
            assert [len(b["index"]) for b in batches] == sizes[s]
            assert len(batches) == len(loader)
            for b in batches:
                assert b["image"].shape[0] == b["label"].shape[0] == len(b["index"])
                assert not b["is_pad"].any()
                np.testing.assert_array_equal(b["label"].numpy(), mixed.labels[b["index"].numpy()])
            seen += column(batches, "index")
    assert len(set(seen)) == len(seen)
    assert len(seen) == (23 if policy == "partial" else 16)


@pytest.mark.slow
@pytest.mark.parametrize("op_path", [None, "numpy"])
def test_exact_pixels_and_tiles(odd_png, op_path):
    kwargs = {} if op_path is None else {"op_runtime": OpRuntime(op_path=op_path)}
    with Loader(odd_png, batch_size=1, ops=["grid2x2"], resize=None, shuffle=False, device="cpu",
                workers=Workers(num_workers=1), **kwargs) as loader:
        if op_path is not None:
            assert loader.op_paths == {"grid2x2": op_path}
        batches = epoch(loader)
    assert len(batches) == N_ODD
    for i, b in enumerate(batches):
        assert list(b) == [*GRID_NAMES, "index", "is_pad"]
        assert int(b["index"][0]) == i and not bool(b["is_pad"][0])
        assert b["label"].dtype == torch.int64 and int(b["label"][0]) == ODD_LABELS[i]
        ref = pattern_image(i, *ODD)
        np.testing.assert_array_equal(b["image"][0].numpy(), ref)
        for k, tile in enumerate(grid_tiles(ref)):
            got = b[f"grid2x2_{k}"][0].numpy()
            assert got.shape == tile.shape, (i, k)
            np.testing.assert_array_equal(got, tile, err_msg=f"sample {i} tile {k}")


@pytest.mark.slow
def test_output_map_renames(odd_png):
    names = ["data0", "data1", "data2", "data3", "data4", "label"]
    with Loader(odd_png, batch_size=2, ops=["grid2x2"], output_map=names, shuffle=False,
                device="cpu", workers=Workers(num_workers=1)) as loader:
        assert loader.output_names == tuple(names)
        b = next(iter(loader))
    assert list(b) == [*names, "index", "is_pad"]
    ref = pattern_image(0, *ODD)
    np.testing.assert_array_equal(b["data0"][0].numpy(), ref)
    for k, tile in enumerate(grid_tiles(ref)):
        np.testing.assert_array_equal(b[f"data{k + 1}"][0].numpy(), tile)
    assert b["label"].tolist() == ODD_LABELS[:2]


@pytest.mark.slow
def test_random_op_reproducible_by_seed(odd_png):
    def run(seed):
        # The numpy path (the traced native path's draws are checked in test_trace.py).
        with Loader(odd_png, batch_size=4, ops=["random_hflip"], shuffle=False, seed=seed,
                    device="cpu", workers=Workers(num_workers=1),
                    op_runtime=OpRuntime(op_path="numpy")) as loader:
            return [torch.stack([b["random_hflip_0"] for b in epoch(loader)])]

    a, b, c = run(5), run(5), run(6)
    assert torch.equal(a[0], b[0])
    assert not torch.equal(a[0], c[0])
    # Each sample is flipped exactly as the numpy op flips it with that sample's generator.
    op = augment_ops.get("random_hflip")
    flat = a[0].reshape(N_ODD, *ODD, 3).numpy()
    flipped = 0
    for i in range(N_ODD):
        img = pattern_image(i, *ODD)
        (expected,) = op.apply(img, sample_rng(5, 0, i, name_salt("random_hflip")))
        np.testing.assert_array_equal(flat[i], expected, err_msg=f"sample {i}")
        flipped += not np.array_equal(expected, img)
    assert 0 < flipped < N_ODD


def plan_indices(epoch_: int) -> list[int]:
    return shard_plan(23, batch_size=4, epoch=epoch_, seed=3).indices.tolist()


@pytest.mark.slow
def test_break_mid_epoch_then_next_epoch_is_full(mixed):
    with Loader(mixed, batch_size=4, resize=8, device="cpu", workers=Workers(num_workers=1), seed=3,
                sampling=Sampling(last_batch="pad")) as loader:
        assert len(loader) == 6
        for k, b in enumerate(loader):
            assert b["index"].tolist() == plan_indices(0)[4 * k:4 * k + 4]
            if k == 1:
                break
        batches = epoch(loader)
        assert len(batches) == len(loader)
        assert column(batches, "index") == plan_indices(1)
        assert loader.epoch == 2
        assert column(epoch(loader), "index") == plan_indices(2)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [4, 5], ids=["second_to_last", "last"])
def test_break_near_epoch_end_then_next_epoch_is_full(mixed, stop):
    with Loader(mixed, batch_size=4, resize=8, device="cpu", workers=Workers(num_workers=1), seed=3,
                sampling=Sampling(last_batch="pad")) as loader:
        for k, _ in enumerate(loader):
            if k == stop:
                break
        batches = epoch(loader)
        assert len(batches) == len(loader)
        assert column(batches, "index") == plan_indices(1)
        assert loader.epoch == 2


@pytest.mark.slow
def test_watchdog_off_gives_the_same_batches(mixed):
    # The watchdog only changes which thread calls DALI; the batches must not change.
    runs = []
    for watchdog in (True, False):
        with Loader(mixed, batch_size=4, resize=8, ops=["random_hflip"], device="cpu",
                    workers=Workers(num_workers=1, watchdog=watchdog), seed=9) as loader:
            runs.append([{k: v.clone() for k, v in b.items()} for _ in range(2) for b in loader])
    assert len(runs[0]) == len(runs[1]) > 0
    for a, b in zip(*runs, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


# -- regressions found in review ------------------------------------------------------------------
CALLS = {"n": 0}


@augment_ops.augment_op(name="t_count_calls")
def _count_calls(img):
    CALLS["n"] += 1
    return img


@pytest.mark.slow
def test_break_then_iter_starts_next_epoch_without_reading_the_old_one(tmp_path):
    m = read_manifest(write_dataset(tmp_path, 40, fmt="png"))
    CALLS["n"] = 0
    with Loader(m, batch_size=4, ops=["t_count_calls"], resize=8, device="cpu",
                workers=Workers(num_workers=1),
                seed=2) as loader:
        for _ in loader:
            break
        second = epoch(loader)
    assert loader.epoch == 2
    assert column(second, "index") == shard_plan(40, batch_size=4, epoch=1,
                                                 seed=2).indices.tolist()
    # Finishing epoch 0 would make 80 calls. Now only what DALI had already prefetched of epoch 0
    # when the loop broke runs (the pipeline's and the reader's queues: 5 batches here), then
    # epoch 1's 40.
    assert CALLS["n"] < 80 and CALLS["n"] <= 40 + 6 * 4, CALLS["n"]


@pytest.mark.slow
def test_a_stale_epoch_iterator_cannot_take_the_next_epochs_batches(mixed):
    with Loader(mixed, batch_size=4, resize=8, device="cpu",
                workers=Workers(num_workers=0)) as loader:
        it0 = iter(loader)
        next(it0)
        it1 = iter(loader)
        first = next(it1)
        with pytest.raises(RuntimeError, match="start a new `for batch in loader:`"):
            next(it0)
        rest = list(it1)
    assert len(rest) + 1 == len(loader) and first["index"].shape[0] == 4


@pytest.mark.slow
def test_the_same_random_op_twice_draws_independently(odd_png):
    rc = augment_ops.get("random_crop").with_params(size=9)
    with Loader(odd_png, batch_size=5, ops=[rc, rc], device="cpu", workers=Workers(num_workers=0),
                seed=4,
                output_map=["image", "view1", "view2", "label"]) as loader:
        b = next(iter(loader))
    assert not torch.equal(b["view1"], b["view2"])  # two views, not one view twice


def test_seed_must_be_a_non_negative_int(mixed):
    for bad in (-1, 1.5, 2**63):
        with pytest.raises(ValueError, match="seed must be an int in"):
            Loader(mixed, batch_size=4, resize=8, device="cpu", seed=bad)


@pytest.mark.slow
def test_ctrl_c_mid_batch_then_resume_at_the_same_batch(tmp_path):
    import _thread
    import signal
    import sys
    import threading
    import time

    calls = []
    main = threading.main_thread().ident

    def main_waits_for_a_batch() -> bool:
        f = sys._current_frames().get(main)
        while f is not None:
            if f.f_code.co_name == "_watch":  # extsrc._dali.run: waiting for DALI's batch
                return True
            f = f.f_back
        return False

    @augment_ops.augment_op(name="t_slow", replace=True)
    def _slow(img):
        # Ctrl-C once, from DALI's thread, mid-epoch, at a moment the loop waits inside the
        # loader for a batch (Ctrl-C in the loop's own code is a `break`: see __iter__).
        calls.append(1)
        if len(calls) == 18:
            deadline = time.monotonic() + 10
            while not main_waits_for_a_batch() and time.monotonic() < deadline:
                time.sleep(0.001)
            _thread.interrupt_main()
        time.sleep(0.01)
        return img

    m = read_manifest(write_dataset(tmp_path, 48, fmt="png"))
    got = []
    # A test run started in the background by a non-interactive shell inherits SIGINT
    # ignored, and then interrupt_main() does nothing: Python's own handler, for this test.
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    # op_path="numpy": traced, the op would lose its side effects (not array code);
    # op_workers=0: it runs in this process, where the interrupt is.
    with Loader(m, batch_size=4, ops=["t_slow"], resize=8, device="cpu",
                workers=Workers(num_workers=1),
                seed=6, op_runtime=OpRuntime(op_path="numpy", op_workers=0)) as loader:
        try:
            with pytest.raises(KeyboardInterrupt):
                for b in loader:
                    got += b["index"].tolist()
        finally:
            signal.signal(signal.SIGINT, handler)
        assert loader.epoch == 0 and 0 < len(got) < 48
        for b in loader:  # the same epoch, from the batch that was interrupted
            got += b["index"].tolist()
    augment_ops.unregister("t_slow")
    assert got == shard_plan(48, batch_size=4, epoch=0, seed=6).indices.tolist()


def test_dali_seed_differs_per_shard_and_resume_point():
    from extsrc.graph.image import dali_seed

    seeds = {dali_seed(0, s, e, b) for s in range(4) for e in range(3) for b in range(3)}
    assert len(seeds) == 36 and all(0 <= x < 2**31 for x in seeds)
    assert dali_seed(5, 1, 2, 3) == dali_seed(5, 1, 2, 3)


def test_a_dali_the_watchdog_does_not_know_is_refused_with_the_versions(mixed, monkeypatch):
    import nvidia.dali

    from extsrc._dali import KNOWN_VERSIONS, check_version
    from extsrc.errors import DaliVersionError, ExtsrcError

    check_version()  # the installed DALI is a known one
    with pytest.raises(DaliVersionError, match=r"DALI 2\.99\.0 is not a version .*known: 2\.4\.x"):
        check_version("2.99.0")
    monkeypatch.setattr(nvidia.dali, "__version__", "2.99.0")
    with pytest.raises(DaliVersionError) as ei:
        Loader(mixed, batch_size=4, resize=8, device="cpu", workers=Workers(num_workers=1))
    err = ei.value
    assert err.found == "2.99.0" and err.known == KNOWN_VERSIONS and isinstance(err, ExtsrcError)
    assert "watchdog=False" in str(err)
    # Without worker processes, or without the watchdog, nothing private is read: it builds.
    Loader(mixed, batch_size=4, resize=8, device="cpu", workers=Workers(num_workers=0))
    Loader(mixed, batch_size=4, resize=8, device="cpu",
           workers=Workers(num_workers=1, watchdog=False))


@pytest.mark.slow
def test_an_epoch_owns_its_close_and_the_loop_continues_where_it_stopped(mixed):
    with Loader(mixed, batch_size=4, resize=8, device="cpu", workers=Workers(num_workers=1), seed=3,
                sampling=Sampling(last_batch="pad")) as loader:
        ep = iter(loader)
        first = [next(ep)["index"].tolist() for _ in range(2)]
        assert loader.running
        ep.close()  # DALI's threads and worker stop now
        assert not loader.running
        with pytest.raises(RuntimeError, match="start a new `for batch in loader:`"):
            next(ep)
        rest = [b["index"].tolist() for b in loader]  # the same epoch, from batch 2
        assert loader.epoch == 1
    assert [i for b in first + rest for i in b] == plan_indices(0)
