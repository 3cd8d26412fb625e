"""Tests for extsrc.loading.distributed: rank detection, sharding defaults, a real 3-process gloo
run."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from helpers import write_dataset

import extsrc.loading.distributed as xd
from extsrc import Sampling, Workers
from extsrc.loading.distributed import DistInfo, detect, resolve_sharding

WORLD = 3
N_SAMPLES = 29  # divides evenly by nothing the test uses
BATCH = 4
EPOCHS = 2
POLICIES = ("pad", "partial", "drop")


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xd, "cuda_device_count", lambda: 0)


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xd, "cuda_device_count", lambda: 4)


# ------------------------------------------------------------------------------------------
# detect


def test_detect_no_env_is_single_process(no_gpu: None) -> None:
    assert detect({}) == DistInfo(0, 1, 0)
    assert not detect({}).is_distributed


def test_detect_torchrun_env(no_gpu: None) -> None:
    info = detect({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
    assert info == DistInfo(rank=5, world_size=8, local_rank=1)
    assert info.is_distributed


def test_detect_strips_whitespace(no_gpu: None) -> None:
    assert detect({"RANK": " 1 ", "WORLD_SIZE": "2\n"}) == DistInfo(1, 2, 0)


def test_detect_local_rank_fallback_uses_gpu_count(four_gpus: None) -> None:
    # Two nodes of four GPUs, no LOCAL_RANK: global rank 6 is GPU 2 of its node.
    assert detect({"RANK": "6", "WORLD_SIZE": "8"}) == DistInfo(6, 8, 2)


def test_detect_local_rank_fallback_without_gpu(no_gpu: None) -> None:
    assert detect({"RANK": "6", "WORLD_SIZE": "8"}) == DistInfo(6, 8, 0)


@pytest.mark.parametrize(
    ("env", "pattern"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, r"RANK='x' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "two"}, r"WORLD_SIZE='two' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": ""}, r"WORLD_SIZE='' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "a"}, r"LOCAL_RANK='a' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, r"LOCAL_RANK must be >= 0"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, r"RANK=2 is out of range.*WORLD_SIZE=2"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, r"RANK=-1 is out of range"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, r"WORLD_SIZE must be >= 1, got 0"),
        ({"RANK": "0"}, r"RANK is set but WORLD_SIZE is not"),
        ({"WORLD_SIZE": "4"}, r"WORLD_SIZE is set but RANK is not"),
    ],
)
def test_detect_bad_env(no_gpu: None, env: dict[str, str], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        detect(env)


def test_detect_defaults_to_os_environ(no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert detect() == DistInfo(1, 3, 1)


# ------------------------------------------------------------------------------------------
# resolve_sharding


def test_resolve_takes_global_rank_as_shard(no_gpu: None) -> None:
    assert resolve_sharding(None, None, None, DistInfo(5, 8, 1)) == (5, 8, None)


def test_resolve_single_process_defaults(four_gpus: None) -> None:
    # One process: shard 0 of 1, and the device is left for resolve_device (GPU 0 or CPU).
    assert resolve_sharding(None, None, None, DistInfo()) == (0, 1, None)


def test_resolve_places_on_local_gpu_not_global_rank(four_gpus: None) -> None:
    assert resolve_sharding(None, None, None, DistInfo(6, 8, 2)) == (6, 8, 2)


def test_resolve_keeps_explicit_device(four_gpus: None) -> None:
    assert resolve_sharding(None, None, "cpu", DistInfo(6, 8, 2)) == (6, 8, "cpu")
    assert resolve_sharding(None, None, 3, DistInfo(6, 8, 2)) == (6, 8, 3)


def test_resolve_no_gpu_leaves_device(no_gpu: None) -> None:
    assert resolve_sharding(None, None, None, DistInfo(1, 2, 1)) == (1, 2, None)


def test_resolve_local_rank_without_its_gpu(four_gpus: None) -> None:
    with pytest.raises(ValueError, match=r"local rank 5 has no GPU.*only 4 GPU"):
        resolve_sharding(None, None, None, DistInfo(5, 8, 5))


def test_resolve_keeps_explicit_shards(no_gpu: None) -> None:
    assert resolve_sharding(2, 4, None, DistInfo()) == (2, 4, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_sharding(1, 2, "cpu", DistInfo(1, 2, 0)) == (1, 2, "cpu")


def test_resolve_warns_on_num_shards_not_world_size(no_gpu: None) -> None:
    with pytest.warns(UserWarning, match=r"num_shards=1 but the process group has world size 4"):
        assert resolve_sharding(0, 1, None, DistInfo(2, 4, 2)) == (0, 1, None)


@pytest.mark.parametrize(("shard_id", "num_shards", "given"), [(1, None, "shard_id"),
                                                               (None, 4, "num_shards")])
def test_resolve_needs_both(no_gpu: None, shard_id, num_shards, given: str) -> None:
    with pytest.raises(ValueError, match=rf"{given} was given but .* pass both"):
        resolve_sharding(shard_id, num_shards, None, DistInfo(0, 2, 0))


def test_loader_picks_up_torchrun_env(
    no_gpu: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from extsrc import Loader

    manifest = write_dataset(tmp_path, 7, fmt="png")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "0")
    loader = Loader(manifest, batch_size=2, device="cpu")  # nothing built until iterated
    assert (loader.config.sampling.shard_id, loader.config.sampling.num_shards) == (2, 3)
    assert loader.source.shard_id == 2 and len(loader) == 2
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match="RANK=3 is out of range"):
        Loader(manifest, batch_size=2, device="cpu")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="shard_id was given but num_shards was not"):
        Loader(manifest, batch_size=2, device="cpu", sampling=Sampling(shard_id=1))


# ------------------------------------------------------------------------------------------
# a real process group: 3 gloo processes, every last_batch policy, two epochs each


def _ddp_worker(rank: int, world: int, init_method: str, manifest: str, out: str) -> None:
    """One rank: build loaders without shard arguments and gather what every rank read."""
    import torch.distributed as dist

    from extsrc import Loader

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        results: dict[str, list] = {}
        for policy in POLICIES:
            loader = Loader(
                manifest, batch_size=BATCH, resize=16, device="cpu",
                workers=Workers(num_workers=0, num_threads=1),
                seed=5, sampling=Sampling(last_batch=policy),
            )
            mine = {
                "shard": [loader.config.sampling.shard_id, loader.config.sampling.num_shards],
                "device": loader.device,
                "len": len(loader),
                "epochs": [],
            }
            for _ in range(EPOCHS):
                batches = []
                for batch in loader:
                    batches.append(list(zip(batch["index"].reshape(-1).tolist(),
                                            batch["is_pad"].reshape(-1).tolist(), strict=True)))
                mine["epochs"].append(batches)
            loader.close()
            gathered: list = [None] * world
            dist.all_gather_object(gathered, mine)
            results[policy] = gathered
        if rank == 0:
            Path(out).write_text(json.dumps(results))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_three_gloo_ranks_partition_every_epoch(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    from extsrc.sources.sharding import shard_plan

    manifest = write_dataset(tmp_path, N_SAMPLES, fmt="png")
    out = tmp_path / "gathered.json"
    # A file store instead of a TCP port: no free-port race with parallel test runs.
    init_method = (tmp_path / "store").as_uri()
    env_keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.pop(k) for k in env_keys if k in os.environ}
    try:
        mp.start_processes(
            _ddp_worker, args=(WORLD, init_method, str(manifest), str(out)), nprocs=WORLD,
            join=True, start_method="spawn",
        )
    finally:
        os.environ.update(saved)

    results = json.loads(out.read_text())
    assert set(results) == set(POLICIES)
    for policy, ranks in results.items():
        assert [r["shard"] for r in ranks] == [[k, WORLD] for k in range(WORLD)], policy
        assert all(r["device"] == "cpu" for r in ranks)
        lens = {r["len"] for r in ranks}
        assert len(lens) == 1, f"{policy}: len(loader) differs across ranks: {lens}"
        orders = []
        for epoch in range(EPOCHS):
            counts = [len(r["epochs"][epoch]) for r in ranks]
            assert counts == [ranks[0]["len"]] * WORLD, (
                f"{policy} epoch {epoch}: batch counts {counts} differ across ranks"
            )
            real: list[int] = []
            pads = 0
            for k, r in enumerate(ranks):
                samples = [s for b in r["epochs"][epoch] for s in b]
                plan = shard_plan(N_SAMPLES, batch_size=BATCH, shard_id=k, num_shards=WORLD,
                                  epoch=epoch, seed=5, last_batch=policy)
                assert [i for i, _ in samples] == plan.indices.tolist(), (policy, epoch, k)
                assert [bool(p) for _, p in samples] == plan.is_pad.tolist(), (policy, epoch, k)
                assert all(len(b) <= BATCH for b in r["epochs"][epoch])
                real += [i for i, p in samples if not p]
                pads += sum(1 for _, p in samples if p)
            assert len(real) == len(set(real)), f"{policy} epoch {epoch}: a sample read twice"
            if policy == "drop":
                assert pads == 0
                assert set(real) <= set(range(N_SAMPLES))
                assert len(real) == WORLD * ranks[0]["len"] * BATCH  # 24 of 29, full batches
            else:
                assert sorted(real) == list(range(N_SAMPLES)), f"{policy} epoch {epoch}"
            if policy == "pad":
                assert pads == WORLD * ranks[0]["len"] * BATCH - N_SAMPLES
            orders.append(real)
        assert orders[0] != orders[1], f"{policy}: both epochs read the same order"
