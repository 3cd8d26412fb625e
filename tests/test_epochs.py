"""Where epochs begin and end: loops that stop after ``len(loader)`` batches, peeks, ``break``s
and ``set_epoch``, counted in pipeline builds and checked against drained epochs."""

from __future__ import annotations

import warnings

import pytest
import torch

from extsrc import Loader, Sampling, Workers

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")


def _loader(manifest, **kw) -> Loader:
    kw = {"batch_size": 5, "resize": 8, "workers": Workers(num_workers=0), "seed": 3, **kw}
    return Loader(manifest, **kw)


def _drained(manifest, epochs: int, **kw) -> list[torch.Tensor]:
    """The sample order of each epoch of a loader whose loops run to StopIteration."""
    with _loader(manifest, **kw) as loader:
        return [torch.cat([b["index"] for b in loader]) for _ in range(epochs)]


def _len_loop(loader: Loader) -> torch.Tensor:
    """``zip(range(len(loader)), loader)``: zip stops at the range's end without asking the
    loader for one more batch (strict=False on purpose)."""
    return torch.cat([b["index"] for _, b in zip(range(len(loader)), loader, strict=False)])


@pytest.mark.parametrize("workers", [0, 2])
def test_len_loops_are_finished_epochs(png_dataset, workers):
    """Lightning's and zip(range(len(loader)), loader)'s loops never ask for the batch after
    the last: each still ends its epoch, with one pipeline for all of them."""
    want = _drained(png_dataset, 3, workers=Workers(num_workers=workers))
    with _loader(png_dataset, workers=Workers(num_workers=workers)) as loader:
        got = []
        for _ in range(3):
            got.append(_len_loop(loader))
            assert loader.running
            assert loader.epoch == len(got)
        assert loader.pipeline_builds == 1
        assert loader.state_dict()["epoch"] == 3 and loader.state_dict()["batch"] == 0
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_drained_loops_build_once(png_dataset):
    with _loader(png_dataset) as loader:
        for _ in range(3):
            for _ in loader:
                pass
        assert loader.pipeline_builds == 1


def test_a_peek_starts_the_next_epoch_and_says_so(png_dataset):
    want = _drained(png_dataset, 2)
    with _loader(png_dataset) as loader:
        first = next(iter(loader))
        assert torch.equal(first["index"], want[0][:5])
        with pytest.warns(UserWarning, match=r"epoch 0 was left after 1 of 5 batches; this "
                                             r"iteration starts epoch 1.*set_epoch\(0\)"):
            epoch1 = torch.cat([b["index"] for b in loader])
        assert torch.equal(epoch1, want[1])
        assert loader.pipeline_builds == 2  # the part-way epoch's pipeline was stopped
        # Once per loader: a loop that breaks every epoch is not flooded with warnings.
        next(iter(loader))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            next(iter(loader))


def test_set_epoch_after_a_peek_reads_that_epoch_whole(png_dataset):
    want = _drained(png_dataset, 1)
    with _loader(png_dataset) as loader:
        next(iter(loader))
        loader.set_epoch(0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # chosen explicitly: no warning
            got = torch.cat([b["index"] for b in loader])
    assert torch.equal(got, want[0])


def test_set_epoch_like_distributed_sampler(png_dataset):
    """set_epoch(e) before every epoch keeps the pipeline; jumping elsewhere gives exactly
    that epoch's order."""
    want = _drained(png_dataset, 4)
    with _loader(png_dataset) as loader:
        for e in range(2):
            loader.set_epoch(e)
            assert torch.equal(torch.cat([b["index"] for b in loader]), want[e])
        loader.set_epoch(2)
        assert torch.equal(_len_loop(loader),
                           want[2])
        assert loader.pipeline_builds == 1
        loader.set_epoch(3)  # after a len() loop: still the epoch that comes next
        assert loader.pipeline_builds == 1 and loader.running
        assert torch.equal(torch.cat([b["index"] for b in loader]), want[3])
        loader.set_epoch(1)  # back: a restart there
        assert torch.equal(torch.cat([b["index"] for b in loader]), want[1])
        assert loader.pipeline_builds == 2


def test_set_epoch_checks_its_argument(png_dataset):
    with _loader(png_dataset) as loader:
        with pytest.raises(ValueError, match="epoch must be >= 0"):
            loader.set_epoch(-1)
        with pytest.raises(TypeError, match="epoch must be an int"):
            loader.set_epoch("1")  # type: ignore[arg-type]


def test_default_last_batch_is_partial_like_drop_last_false(png_dataset):
    """23 samples, batch 5: five batches, the last of 3, every sample once, nothing padded; on
    two shards both get the same number of batches (DDP ranks stay in step)."""
    with _loader(png_dataset) as loader:
        assert loader.config.sampling.last_batch == "partial"
        batches = list(loader)
    assert [len(b["index"]) for b in batches] == [5, 5, 5, 5, 3]
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(23))
    assert not any(bool(b["is_pad"].any()) for b in batches)
    shards = [_loader(png_dataset, sampling=Sampling(shard_id=s, num_shards=2)) for s in range(2)]
    seen = []
    for shard in shards:
        with shard:
            batches = list(shard)
        seen.append(len(batches))
        assert not any(bool(b["is_pad"].any()) for b in batches)
    assert seen[0] == seen[1] == len(shards[0])
