"""Resume (Loader.state_dict / load_state_dict) and determinism, with shuffling and random ops.

A resumed loader must yield exactly the batches an uninterrupted run still had due (same order,
same random op results) and refuse a state saved under another configuration; the same seed must
give the same batches whatever the number of worker processes, and epochs must differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset

import augment_ops
from extsrc import Loader, Manifest, Sampling, Workers, read_manifest
from extsrc.errors import ExtsrcError, StateMismatchError

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

N, BATCH = 14, 3  # 5 batches per epoch, the last one padded
CROP = augment_ops.get("random_crop").with_params(size=12)
CONFIG = dict(batch_size=BATCH, ops=["random_hflip", CROP], resize=16, shuffle=True, seed=7,
              device="cpu", workers=Workers(num_workers=0))


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("resume"), N, fmt="mixed")


def as_numpy(batch: dict) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in batch.items()}


def take(loader: Loader, limit: int | None = None) -> list[dict[str, np.ndarray]]:
    out = []
    for b in loader:
        out.append(as_numpy(b))
        if limit is not None and len(out) == limit:
            break
    return out


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=f"batch {k} {key!r}")


@pytest.fixture(scope="module")
def reference(manifest) -> list[list[dict]]:
    """Two epochs of an uninterrupted run."""
    with Loader(manifest, **CONFIG) as loader:
        assert len(loader) == 5
        return [take(loader), take(loader)]


@pytest.mark.parametrize(("epoch", "done", "workers"), [
    (0, 0, 0), (0, 1, 0), (0, 4, 0), (1, 2, 0), (0, 1, 2),
], ids=["after_0", "after_1", "all_but_one", "epoch1_after_2", "after_1_workers"])
def test_resume_gives_exactly_the_batches_still_due(manifest, reference, epoch, done, workers):
    with Loader(manifest, **CONFIG) as first:
        for _ in range(epoch):
            take(first)
        got = take(first, done) if done else []
        assert_same(got, reference[epoch][:done])
        state = first.state_dict()
    assert state["epoch"] == epoch and state["batch"] == done and state["version"] == 1
    state = json.loads(json.dumps(state))  # JSON-serialisable, and survives a round trip
    with Loader(manifest, **{**CONFIG, "workers": Workers(num_workers=workers)}) as resumed:
        resumed.load_state_dict(state)
        rest = take(resumed)
        assert_same(rest, reference[epoch][done:])
        assert resumed.epoch == epoch + 1
        if epoch == 0:
            assert_same(take(resumed), reference[1])  # then whole epochs, as uninterrupted


def test_state_at_epoch_end_points_at_next_epoch(manifest, reference):
    with Loader(manifest, **CONFIG) as loader:
        for k, _ in enumerate(loader):
            if k == len(loader) - 1:
                assert loader.state_dict()["epoch"] == 1
                assert loader.state_dict()["batch"] == 0
        assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batch"] == 0


def test_load_state_dict_between_epochs_on_a_used_loader(manifest, reference):
    with Loader(manifest, **CONFIG) as loader:
        take(loader, 2)
        state = loader.state_dict()
        take(loader)  # rest of epoch 0
        take(loader)  # epoch 1
        loader.load_state_dict(state)  # back to epoch 0, batch 2
        assert_same(take(loader), reference[0][2:])


def test_stale_iterator_after_load_state_dict_stops(manifest):
    with Loader(manifest, **CONFIG) as loader:
        it = iter(loader)
        next(it)
        loader.load_state_dict(loader.state_dict())
        with pytest.raises(RuntimeError, match="start a new `for batch in loader:`"):
            next(it)


@pytest.mark.parametrize(("change", "field"), [
    ({"batch_size": 4}, "batch_size: 3 in the state, 4 here"),
    ({"seed": 8}, "seed: 7 in the state, 8 here"),
    ({"sampling": Sampling(num_shards=2, shard_id=1)}, "num_shards: 1 in the state, 2 here"),
    ({"shuffle": False}, "shuffle: true in the state, false here"),
    ({"ops": ["random_hflip", augment_ops.get("random_crop").with_params(size=10)]}, "ops: "),
    ({"sampling": Sampling(last_batch="drop")}, "last_batch: 'partial' in the state, 'drop' here"),
    ({"sampling": Sampling(run_length=4)}, "run_length: 1 in the state, 4 here"),
])
def test_state_from_another_configuration_is_refused(manifest, change, field):
    state = Loader(manifest, **CONFIG).state_dict()
    other = Loader(manifest, **{**CONFIG, **change})
    with pytest.raises(StateMismatchError, match="saved under a different configuration") as ei:
        other.load_state_dict(state)
    assert field in str(ei.value)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, ExtsrcError)


def test_state_from_a_stage_with_other_parameters_is_refused(manifest):
    from extsrc import TrainPreset

    base = {k: v for k, v in CONFIG.items() if k != "resize"}
    state = Loader(manifest, **base, stages=[TrainPreset(crop=192)]).state_dict()
    assert state["config"]["stages"][0]["params"]["crop"] == 192
    state = json.loads(json.dumps(state))
    Loader(manifest, **base, stages=[TrainPreset(crop=192)]).load_state_dict(state)  # same: fine
    other = Loader(manifest, **base, stages=[TrainPreset(crop=224)])
    with pytest.raises(StateMismatchError, match=r"stages: .*192.* in the state, .*224.* here"):
        other.load_state_dict(state)


def test_state_from_other_manifest_content_is_refused(manifest, tmp_path):
    state = Loader(manifest, **CONFIG).state_dict()
    m = read_manifest(manifest)
    labels = m.labels.copy()
    labels[3] += 1
    relabelled = Manifest.from_lists(list(m.paths), labels)
    with pytest.raises(StateMismatchError, match=r"manifest: content differs"):
        Loader(relabelled, **CONFIG).load_state_dict(state)
    # Same samples from a moved manifest file (other source, other lines) resume fine.
    moved = tmp_path / "moved.csv"
    moved.write_text("# a comment\npath,label\n" + "".join(
        f"{p},{lab}\n" for p, lab in zip(m.paths, m.labels, strict=True)))
    Loader(moved, **CONFIG).load_state_dict(state)


def _state_without_sharding(loader: Loader, batch: int) -> dict:
    """A state as extsrc wrote it before shards were balanced: no "sharding" in the config."""
    state = loader.state_dict()
    assert state["config"].pop("sharding") == "balanced"
    return {**state, "batch": batch}


@pytest.mark.parametrize(("shards", "last_batch", "still_valid"), [
    (2, "pad", False),     # 14 samples, 2 x 3: 6 + 6 + 2 then, 7 + 7 now: the plan moved
    (1, "pad", True),      # one shard: nothing to balance
    (2, "partial", True),  # "partial" was balanced already
    (2, "drop", True),     # so was "drop"
    (5, "pad", True),      # 14 = 3 + 3 + 3 + 3 + 2, filled in order or balanced
    (7, "pad", False),     # 3 + 3 + 3 + 3 + 2 + 0 + 0 then, 2 each now
])
def test_state_written_before_shards_were_balanced(manifest, shards, last_batch, still_valid):
    kw = {**CONFIG, "sampling": Sampling(num_shards=shards, shard_id=shards - 1,
                                         last_batch=last_batch)}
    with Loader(manifest, **kw) as loader:
        state = json.loads(json.dumps(_state_without_sharding(loader, 1)))
        due = (0, 1) if len(loader) > 1 else (1, 0)  # batch 1 of 1: the next epoch's start
        if still_valid:
            loader.load_state_dict(state)
            assert loader.position.due() == due
            return
        with pytest.raises(StateMismatchError,
                           match=r"sharding: the state comes from an extsrc whose "
                                 r"last_batch='pad' filled the shards in order .* "
                                 r"loader\.set_epoch\(0\) reads epoch 0 again"):
            loader.load_state_dict(state)
        assert loader.position.due() == (0, 0)  # left where it was
        state["config"]["sharding"] = "balanced"  # a state this extsrc wrote resumes
        loader.load_state_dict(state)
        assert loader.position.due() == due


@pytest.mark.parametrize(("state", "match"), [
    ([1, 2], "must be the dict from Loader.state_dict"),
    ({"epoch": 0}, r"keys \['version', 'batch', 'config'\] are missing"),
    ({"version": 2, "epoch": 0, "batch": 0, "config": {}}, "version 2 is not supported"),
    ({"version": 1, "epoch": -1, "batch": 0, "config": {}}, "epoch must be an int >= 0"),
])
def test_malformed_state_is_refused(manifest, state, match):
    with pytest.raises(StateMismatchError, match=match):
        Loader(manifest, **CONFIG).load_state_dict(state)


def test_batch_past_the_epoch_is_refused(manifest):
    loader = Loader(manifest, **CONFIG)
    state = loader.state_dict()
    state["batch"] = 6
    with pytest.raises(StateMismatchError, match=r"batch 6 is past the end of an epoch \(5"):
        loader.load_state_dict(state)


# -- determinism -------------------------------------------------------------------------------


def test_same_seed_same_batches_whatever_the_workers_and_epochs_differ(manifest, reference):
    kw = {**CONFIG, "workers": Workers(num_workers=2, start_method="fork")}
    with Loader(manifest, **kw) as loader:
        two_workers = [take(loader), take(loader)]
    for e in range(2):
        assert_same(two_workers[e], reference[e])
    e0, e1 = reference
    order = [np.concatenate([b["index"] for b in ep]) for ep in (e0, e1)]
    assert not np.array_equal(order[0], order[1])  # another order
    assert sorted(order[0][:N]) == sorted(order[1][:N]) == list(range(N))

    def by_sample(ep: list[dict], key: str) -> dict[int, np.ndarray]:
        return {int(i): b[key][k] for b in ep for k, i in enumerate(b["index"])}

    for key in ("random_crop_0", "random_hflip_0"):
        a, b = by_sample(e0, key), by_sample(e1, key)
        assert any(not np.array_equal(a[i], b[i]) for i in range(N)), key  # other draws
    # ... while the un-augmented image of each sample is the same in both epochs.
    a, b = by_sample(e0, "image"), by_sample(e1, "image")
    assert all(np.array_equal(a[i], b[i]) for i in range(N))


def test_a_state_written_before_run_length_existed_resumes_a_loader_without_runs(manifest):
    """States from an extsrc without ``Sampling(run_length=)`` shuffled single samples: they
    resume a loader with ``run_length=1`` and are refused by one with runs."""
    with Loader(manifest, **CONFIG) as loader:
        it = iter(loader)
        next(it)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["config"].pop("run_length") == 1
    with Loader(manifest, **CONFIG) as same:
        same.load_state_dict(state)
    with Loader(manifest, **{**CONFIG, "sampling": Sampling(run_length=2)}) as runs, \
            pytest.raises(StateMismatchError, match="run_length: 1 in the state, 2 here"):
        runs.load_state_dict(state)
