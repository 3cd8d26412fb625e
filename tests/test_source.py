"""ShardedSource: bytes, labels, identity of every sample; epochs; pickling; read errors; DALI."""

from __future__ import annotations

import os
import pickle
import types
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset

from extsrc._dali.build import build, overlaps
from extsrc.errors import SampleReadError
from extsrc.sources.images import INFO_COLUMNS, SOURCE_OUTPUTS, ReaderValues, ShardedSource
from extsrc.sources.manifest import Manifest
from extsrc.sources.sharding import shard_plan
from extsrc.sources.table import read_manifest

BIG_LABELS = [300, 70000, 2**40, 7, 255, 256]


def info(iteration: int, epoch_idx: int = 0) -> types.SimpleNamespace:
    return types.SimpleNamespace(iteration=iteration, epoch_idx=epoch_idx)


def per_sample(batch: tuple) -> tuple[list[np.ndarray], ...]:
    """The source's (bytes, labels, info) batch as per-sample lists:
    (bytes, label, index, epoch, is_pad)."""
    encoded, labels, infos = batch
    assert labels.dtype == np.int64 and infos.dtype == np.int64
    assert len(encoded) == len(labels) == len(infos)
    assert list(INFO_COLUMNS) == ["index", "epoch", "is_pad"]
    return (list(encoded), list(labels), list(infos[:, 0]), list(infos[:, 1]),
            [np.uint8(p) for p in infos[:, 2]])


def run_epoch(src: ShardedSource, epoch_idx: int = 0) -> list[tuple[list[np.ndarray], ...]]:
    out = []
    for it in range(len(src) + 1):
        try:
            out.append(per_sample(src(info(it, epoch_idx))))
        except StopIteration:
            break
    return out


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for ba, bb in zip(a, b, strict=True):
        assert len(ba) == len(bb) == len(SOURCE_OUTPUTS) + 2  # per_sample splits info in 3
        for col_a, col_b in zip(ba, bb, strict=True):
            assert len(col_a) == len(col_b)
            for x, y in zip(col_a, col_b, strict=True):
                assert x.dtype == y.dtype
                np.testing.assert_array_equal(x, y)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path, 11, fmt="mixed", label_fn=lambda i: BIG_LABELS[i % 6])


@pytest.fixture
def manifest(dataset: Path) -> Manifest:
    return read_manifest(dataset)


def test_outputs_are_file_bytes_and_int64_labels(manifest):
    src = ShardedSource(manifest, batch_size=4, shuffle=False)
    assert len(src) == 3  # ceil(11 / 4)
    seen = []
    for encoded, label, index, epoch, is_pad in run_epoch(src):
        assert len(encoded) == len(label) == len(index) == len(epoch) == len(is_pad) == 4
        for e, lab, i, ep, pad in zip(encoded, label, index, epoch, is_pad, strict=True):
            i = int(i)
            assert e.dtype == np.uint8 and e.ndim == 1
            assert e.tobytes() == Path(manifest.paths[i]).read_bytes()
            assert lab.dtype == np.int64 and lab.shape == ()
            assert int(lab) == BIG_LABELS[i % 6] == manifest.labels[i]
            assert index[0].dtype == np.int64 and ep.dtype == np.int64 and int(ep) == 0
            assert pad.dtype == np.uint8
            seen.append((i, bool(pad)))
    # 12 slots: the 11 samples in order, then sample 0 again marked as pad.
    assert seen == [(i, False) for i in range(11)] + [(0, True)]
    labels = {int(lab) for batch in run_epoch(src) for lab in batch[1]}
    assert {300, 70000, 2**40, 256}.issubset(labels)


def test_multi_column_labels_keep_int64(tmp_path):
    write_dataset(tmp_path, 3)
    paths = [tmp_path / "images" / f"{i:05d}.png" for i in range(3)]
    m = Manifest.from_lists(paths, [[300, 2**40], [70000, 1], [256, 0]])
    (_, label, *_), = run_epoch(ShardedSource(m, batch_size=3, shuffle=False))
    assert [lab.dtype for lab in label] == [np.int64] * 3
    assert [lab.tolist() for lab in label] == [[300, 2**40], [70000, 1], [256, 0]]


def test_len_and_stop_iteration_per_policy(manifest):
    # 11 samples, 2 shards, batch 2: pad/partial 3 batches, drop 2.
    for policy, nb in (("pad", 3), ("partial", 3), ("drop", 2)):
        for shard in range(2):
            src = ShardedSource(
                manifest, batch_size=2, shard_id=shard, num_shards=2, last_batch=policy, seed=5
            )
            assert len(src) == nb
            for epoch_idx in (0, 1):
                got = run_epoch(src, epoch_idx)
                assert len(got) == nb
                plan = shard_plan(11, batch_size=2, shard_id=shard, num_shards=2, epoch=epoch_idx,
                                  seed=5, last_batch=policy)
                flat = [int(i) for batch in got for i in batch[2]]
                assert flat == plan.indices.tolist()
                pads = [bool(p) for batch in got for p in batch[4]]
                assert pads == plan.is_pad.tolist()
                assert all(int(e) == epoch_idx for batch in got for e in batch[3])
            with pytest.raises(StopIteration):
                src(info(nb, 0))
            with pytest.raises(StopIteration):
                src(info(nb + 5, 3))


def test_epochs_reorder(manifest):
    src = ShardedSource(manifest, batch_size=11, seed=1)
    e0 = [int(i) for i in src(info(0, 0))[2][:, 0]]
    e1 = [int(i) for i in src(info(0, 1))[2][:, 0]]
    assert sorted(e0) == sorted(e1) == list(range(11))
    assert e0 != e1
    # Back to epoch 0 (cache replaced): same order again.
    assert [int(i) for i in src(info(0, 0))[2][:, 0]] == e0


def test_pickle_round_trip(manifest):
    src = ShardedSource(manifest, batch_size=3, shard_id=1, num_shards=2, seed=9,
                        last_batch="partial")
    src(info(0, 0))  # fill the plan cache before pickling
    clone = pickle.loads(pickle.dumps(src))
    assert isinstance(clone, ShardedSource) and len(clone) == len(src)
    assert clone.manifest == manifest
    for epoch_idx in (0, 1):
        assert_batches_equal(run_epoch(clone, epoch_idx), run_epoch(src, epoch_idx))


def test_reader_values_follow_the_source_outputs_and_pickle(manifest):
    """A traced random op's draw scalars, computed beside the bytes: random_hflip's flip flag is
    its branch condition ``counter_uniform(...) < p`` for each sample of the batch, whichever
    process (a pickled copy, as DALI's readers get) computes it."""
    import augment_ops
    from extsrc.ops_runtime.native import native_sample_scalars
    from extsrc.ops_runtime.seeding import counter_uniform, op_salt

    program = native_sample_scalars(augment_ops.get("random_hflip").with_params(p=0.5), seed=5)
    src = ReaderValues(ShardedSource(manifest, batch_size=4, seed=1, start_epoch=2), [program])
    assert len(src) == len(src.source)
    seen = []
    for b in range(len(src)):
        out = src(info(b))
        assert len(out) == len(SOURCE_OUTPUTS) + 1
        rows, (flip,) = out[2], out[3:]
        expected = counter_uniform(5, rows[:, 1], rows[:, 0], op_salt("random_hflip"), 0) < 0.5
        # the branch condition as fn.flip's per-sample flag (augment_ops.trace.lower_patterns)
        assert flip.dtype == np.int32 and flip.shape == (len(rows),)
        np.testing.assert_array_equal(flip, expected.astype(np.int32))
        assert (rows[:, 1] == 2).all()
        seen += expected.tolist()
    assert set(seen) == {True, False}  # both outcomes met, so a flipped flag would show
    out = src(info(1))
    again = pickle.loads(pickle.dumps(src))(info(1))
    for a, b in zip(out[1:], again[1:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_start_epoch_and_start_batch_shift(manifest):
    full = ShardedSource(manifest, batch_size=2, seed=3)
    nb = len(full)  # 6
    resumed = ShardedSource(manifest, batch_size=2, seed=3, start_epoch=2, start_batch=4)
    # DALI's first epoch (epoch_idx 0) resumes at batch 4 of epoch 2 ...
    got = run_epoch(resumed, 0)
    assert len(got) == nb - 4
    assert_batches_equal(got, [per_sample(full(info(b, 2))) for b in range(4, nb)])
    assert all(int(e) == 2 for batch in got for e in batch[3])
    # ... and the next one is the whole of epoch 3.
    assert_batches_equal(run_epoch(resumed, 1), run_epoch(full, 3))
    assert resumed.position(0, 0) == (2, 4)
    assert resumed.position(1, 1) == (3, 1)
    # start_batch == len: the resumed epoch is already over.
    done = ShardedSource(manifest, batch_size=2, start_batch=nb)
    with pytest.raises(StopIteration):
        done(info(0, 0))
    assert len(run_epoch(done, 1)) == nb


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(start_batch=7), r"start_batch in \[0, 6\], got 0, 7"),
        (dict(start_batch=-1), r"start_batch in \[0, 6\]"),
        (dict(start_epoch=-1), r"start_epoch must be >= 0"),
        (dict(batch_size=0), r"batch_size must be >= 1"),
        (dict(shard_id=3, num_shards=2), r"shard_id must be in \[0, num_shards=2\)"),
        (dict(last_batch="nope"), r"last_batch must be one of"),
    ],
)
def test_bad_arguments(manifest, kwargs, match):
    args = dict(batch_size=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ShardedSource(manifest, **args)


def test_not_a_manifest():
    with pytest.raises(TypeError, match=r"needs an extsrc.Manifest"):
        ShardedSource(["a.png"], batch_size=1)


def test_drop_with_too_few_samples(manifest):
    with pytest.raises(ValueError, match=r"last_batch='drop' leaves no batch: 11 samples .* = 12"):
        ShardedSource(manifest, batch_size=6, num_shards=2, last_batch="drop")


def _break(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize(
    ("how", "match"),
    [("missing", "file not found"), ("empty", r"is empty \(0 bytes\)"), ("dir", "is a directory")],
)
def test_read_errors_name_line_and_path(dataset, manifest, how, match):
    bad = 5  # manifest index 5 is on line 7 (line 1 is the header)
    path = Path(manifest.paths[bad])
    _break(path, how)
    src = ShardedSource(manifest, batch_size=1, shuffle=False)
    for b in range(bad):
        src(info(b))  # the samples before it still read
    with pytest.raises(SampleReadError, match=match) as ei:
        src(info(bad))
    msg = str(ei.value)
    assert f"{dataset} line 7" in msg
    assert str(path) in msg
    assert isinstance(ei.value, OSError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable files")
def test_unreadable_file(manifest):
    path = Path(manifest.paths[0])
    path.chmod(0)
    try:
        with pytest.raises(SampleReadError, match=r"line 2: .*00000.*\[unreadable\]"):
            ShardedSource(manifest, batch_size=1, shuffle=False)(info(0))
    finally:
        path.chmod(0o644)


# --- inside a real DALI pipeline ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_parallel_external_source_in_dali(manifest, start_method):
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    batch_size = 4
    src = ShardedSource(manifest, batch_size=batch_size, seed=2, shard_id=1, num_shards=2)
    pipe = Pipeline(
        batch_size=batch_size, num_threads=1, device_id=None, py_num_workers=2,
        py_start_method=start_method, prefetch_queue_depth=2,
    )
    with pipe:
        outs = fn.external_source(
            source=src, num_outputs=3, batch=True, batch_info=True, parallel=True
        )
        pipe.set_outputs(*outs)
    # spawn: the readers start on another thread while DALI builds its operators
    assert overlaps(pipe) == (start_method == "spawn")
    build(pipe)
    try:
        for epoch in range(2):
            plan = shard_plan(11, batch_size=batch_size, shard_id=1, num_shards=2, epoch=epoch,
                              seed=2)
            got_index, got_pad = [], []
            for _ in range(len(src)):
                encoded, label, infos = pipe.run()
                for k in range(len(infos)):
                    row = np.asarray(infos.at(k))
                    i = int(row[0])
                    data = np.asarray(encoded.at(k))
                    assert data.dtype == np.uint8
                    assert data.tobytes() == Path(manifest.paths[i]).read_bytes()
                    lab = np.asarray(label.at(k))
                    assert lab.dtype == np.int64 and int(lab) == BIG_LABELS[i % 6]
                    assert int(row[1]) == epoch
                    got_index.append(i)
                    got_pad.append(bool(row[2]))
            assert got_index == plan.indices.tolist()
            assert got_pad == plan.is_pad.tolist()
            with pytest.raises(StopIteration):
                pipe.run()
            pipe.reset()
    finally:
        del pipe


# --- worker processes exit with their parent (case 7) ---------------------------------------------

ORPHAN_SCRIPT = r"""
import json, os, sys, time
from pathlib import Path
import extsrc

def children():
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(d))
    return out

if __name__ == "__main__":
    loader = extsrc.Loader(sys.argv[1], batch_size=2, resize=16, device="cpu",
                           workers=extsrc.Workers(num_workers=2, start_method=sys.argv[2]))
    it = iter(loader)
    next(it)
    print(json.dumps(children()), flush=True)
    time.sleep(600)  # killed by the test long before
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "start_method"), [("SIGKILL", "fork"), ("SIGTERM", "spawn")])
def test_workers_exit_when_the_main_process_is_killed(tmp_path, sig, start_method):
    """Case 7: reader processes lived on, reparented, for minutes after the main process died."""
    import json
    import select
    import signal
    import subprocess
    import sys
    import time

    mpath = write_dataset(tmp_path, 12, fmt="jpg")
    script = tmp_path / "main.py"
    script.write_text(ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), str(mpath), start_method],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    workers: list[int] = []
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # printed after one batch
        assert ready, "the loader produced no batch in 120 s"
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        workers = json.loads(line)
        assert len(workers) >= 2, workers  # the 2 DALI workers (+ spawn's resource tracker)
        proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in workers if _alive(p)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for p in workers:  # no leak if the test fails
            if _alive(p):
                os.kill(p, signal.SIGKILL)
