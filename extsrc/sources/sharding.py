"""Sharding arithmetic: which manifest indices each shard reads in each epoch, in which order.

Everything here is a pure function of its arguments. Every other part of the package (the source
that DALI calls, the loader, the distributed helpers) asks these functions rather than slicing
lists itself, so there is exactly one place where a sample can be lost or duplicated.

How one epoch is laid out, for ``N`` samples, ``S`` shards and batch size ``B``:

1. Every shard computes the same permutation of ``range(N)`` from ``(seed, epoch)`` (or the identity
   when ``shuffle=False``); with runs (:func:`run_starts`), a permutation of runs of neighbouring
   samples, each run kept together.
2. The permutation is cut into ``S`` disjoint contiguous parts, one per shard, balanced: their
   sizes differ by at most one (``"pad"`` and ``"partial"``, as torch's ``DistributedSampler``
   splits), or all ``nb * B`` (``"drop"``, full batches only).
3. Every shard yields the same number of batches ``nb``, so DDP ranks never wait on each other.

The ``last_batch`` policy says what happens when ``N`` is not a multiple of ``S * B``. With
``N=7, S=1, B=2`` and no shuffle:

============  =====================================  ======================================
policy        batches                                 notes
============  =====================================  ======================================
``"pad"``     ``[0 1] [2 3] [4 5] [6 0]``             repeats from the start of the epoch's
                                                      order fill the last batches; every
                                                      sample is read; repeats are marked pad
``"drop"``    ``[0 1] [2 3] [4 5]``                   samples that would not fill equal
                                                      full batches on every shard are left out
``"partial"`` ``[0 1] [2 3] [4 5] [6]``               the last batch may be short
============  =====================================  ======================================

Under sharding, with ``N=200, S=2, B=64``: ``"pad"`` gives each shard 100 samples and 28
repeats (2 full batches); ``"partial"`` 100 samples (batches of 64 and 36); ``"drop"`` 64
samples (1 batch), 72 left out, the fewest that full, equal batches allow. The repeats of
``"pad"`` continue the epoch's order from its start and are handed out to the shards in order,
so a sample is repeated at most once more than any other.

``"partial"`` also keeps batch counts equal across shards. When the samples cannot be split so
that every shard's last batch holds at least one sample (e.g. ``N=9, S=2, B=4``: 5+4 samples
would give 2 and 1 batches), the shorter shards get one pad sample, marked as such, in their last
batch. That is the only case in which ``"partial"`` repeats a sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from extsrc._util.argcheck import check_int

__all__ = ["LastBatch", "ShardPlan", "epoch_permutation", "run_starts", "shard_indices",
           "shard_plan"]

LastBatch = Literal["pad", "drop", "partial"]
_LAST_BATCH_POLICIES: tuple[str, ...] = get_args(LastBatch)


@dataclass(frozen=True)
class ShardPlan:
    """What one shard reads in one epoch.

    ``indices[i]`` is the manifest index of the i-th sample the shard reads; ``is_pad[i]`` marks a
    repeat added only to even out batches (metrics should ignore it); ``batch_offsets`` has
    ``num_batches + 1`` entries and batch ``b`` is ``indices[batch_offsets[b]:batch_offsets[b+1]]``.
    """

    indices: np.ndarray
    is_pad: np.ndarray
    batch_offsets: np.ndarray

    @property
    def num_batches(self) -> int:
        return len(self.batch_offsets) - 1

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices and pad flags of batch ``b`` (0-based)."""
        lo, hi = int(self.batch_offsets[b]), int(self.batch_offsets[b + 1])
        return self.indices[lo:hi], self.is_pad[lo:hi]


def check_seed(seed: object) -> None:
    """The one check of a seed: an int in ``[0, 2**63)`` (it seeds numpy's ``SeedSequence``, the
    random ops and, hashed, DALI)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed < 2**63:
        raise ValueError(
            f"seed must be an int in [0, 2**63), got {seed!r}; it seeds the shuffle, the random "
            "ops and DALI"
        )


def check_last_batch(last_batch: object) -> None:
    """The one check of a last-batch policy."""
    if last_batch not in _LAST_BATCH_POLICIES:
        raise ValueError(
            f"last_batch must be one of {list(_LAST_BATCH_POLICIES)}, got {last_batch!r}"
        )


def check_args(
    num_samples: int, batch_size: int, shard_id: int, num_shards: int, epoch: int, last_batch: str
) -> None:
    """Every argument of a shard plan, checked once (the source and the loader call it too)."""
    for name, value in (("num_samples", num_samples), ("batch_size", batch_size),
                        ("shard_id", shard_id), ("num_shards", num_shards), ("epoch", epoch)):
        check_int(value, name)
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}; is the manifest empty?")
    check_int(batch_size, "batch_size", minimum=1)
    check_int(num_shards, "num_shards", minimum=1)
    if not 0 <= shard_id < num_shards:
        raise ValueError(
            f"shard_id must be in [0, num_shards={num_shards}), got {shard_id}; shard_id is the "
            "global rank, not the local GPU index"
        )
    check_int(epoch, "epoch", minimum=0)
    check_last_batch(last_batch)


def run_starts(num_samples: int, run_length: int, groups: np.ndarray | None = None,
               phases: np.ndarray | None = None) -> np.ndarray:
    """Where the runs of ``run_length`` neighbouring samples start (``int64``, ascending, the
    first 0), for :func:`epoch_permutation`.

    A run never crosses a change of ``groups`` (one value per sample, e.g. the tar shard each
    sample is in; ``None``: one group): the samples are cut every ``run_length`` within each
    stretch of equal group values, counted from ``phases[k]`` (one per stretch, in
    ``[0, run_length)``; ``None``: 0) into stretch ``k``, so its first and last runs may be
    shorter.
    """
    check_int(run_length, "run_length", minimum=1)
    positions = np.arange(num_samples, dtype=np.int64)
    # Inside a stretch a run starts every run_length samples, counted from the stretch's
    # start plus its phase.
    stretch = _stretches(num_samples, groups)
    changed = np.ones(num_samples, dtype=bool)
    changed[1:] = stretch[1:] != stretch[:-1]
    stretch_start = positions[changed][stretch]
    shift = 0 if phases is None else np.asarray(phases, dtype=np.int64)[stretch]
    return positions[changed | ((positions - stretch_start - shift) % run_length == 0)]


def _stretches(num_samples: int, groups: np.ndarray | None) -> np.ndarray:
    """The stretch of equal ``groups`` values each sample is in, numbered from 0 (a new
    stretch wherever the value changes; ``None``: all in stretch 0)."""
    if groups is None:
        return np.zeros(num_samples, dtype=np.int64)
    groups = np.asarray(groups)
    if groups.shape != (num_samples,):
        raise ValueError(f"groups must hold one value per sample ({num_samples}), got shape "
                         f"{groups.shape}")
    stretch = np.zeros(num_samples, dtype=np.int64)
    stretch[1:] = np.cumsum(groups[1:] != groups[:-1])
    return stretch


def epoch_permutation(num_samples: int, *, seed: int, epoch: int, shuffle: bool,
                      run_length: int = 1, groups: np.ndarray | None = None) -> np.ndarray:
    """The order in which an epoch visits all samples; identical on every shard and process.

    ``run_length`` > 1: shuffle runs of that many neighbouring samples instead of single
    samples (:func:`run_starts`, never across a change of ``groups``, cut at a random phase
    in each stretch that differs by epoch, so that runs as long as a batch still mix other
    samples each epoch). The runs come in a random order, each run's samples in their own
    order: a batch is mostly whole runs (a tar shard's consecutive members, one request),
    cut where a batch or a rank's part ends.
    """
    check_seed(seed)
    check_int(run_length, "run_length", minimum=1)
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    # SeedSequence mixes (seed, epoch) so that neighbouring seeds and epochs are unrelated.
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(epoch)])))
    if run_length == 1:
        return rng.permutation(num_samples).astype(np.int64)
    stretch = _stretches(num_samples, groups)
    stretches = int(stretch[-1]) + 1 if num_samples else 0
    runs = run_starts(num_samples, run_length, groups,
                      rng.integers(0, run_length, size=stretches))
    lengths = np.diff(np.append(runs, num_samples))
    order = rng.permutation(len(runs))
    starts, lengths = runs[order], lengths[order]
    # Sample k of the result is run r's start plus its place in that run: k minus the number
    # of samples in the runs before r.
    before = np.cumsum(lengths) - lengths
    return np.repeat(starts - before, lengths) + np.arange(num_samples, dtype=np.int64)


def num_batches_per_shard(
    num_samples: int, *, batch_size: int, num_shards: int = 1, last_batch: LastBatch = "pad"
) -> int:
    """Batches every shard yields per epoch (the same on every shard, by construction)."""
    check_args(num_samples, batch_size, 0, num_shards, 0, last_batch)
    per_round = num_shards * batch_size
    if last_batch == "drop":
        return num_samples // per_round
    return math.ceil(num_samples / per_round)


def shard_plan(
    num_samples: int,
    *,
    batch_size: int,
    shard_id: int = 0,
    num_shards: int = 1,
    epoch: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    last_batch: LastBatch = "pad",
    run_length: int = 1,
    groups: np.ndarray | None = None,
) -> ShardPlan:
    """The full plan (indices, pad flags, batch boundaries) of one shard in one epoch.

    See the module docstring for the policies. With ``"drop"`` the plan may hold zero batches
    when ``num_samples < num_shards * batch_size``. ``run_length`` and ``groups``: see
    :func:`epoch_permutation`.
    """
    check_args(num_samples, batch_size, shard_id, num_shards, epoch, last_batch)
    perm = epoch_permutation(num_samples, seed=seed, epoch=epoch, shuffle=shuffle,
                             run_length=run_length, groups=groups)
    nb = num_batches_per_shard(
        num_samples, batch_size=batch_size, num_shards=num_shards, last_batch=last_batch
    )

    if last_batch == "drop":
        # Full batches only: every shard reads nb * B samples, the fewest left out (< S * B).
        per_shard = nb * batch_size
        lo = shard_id * per_shard
        offsets = np.arange(nb + 1, dtype=np.int64) * batch_size
        return ShardPlan(perm[lo:lo + per_shard].astype(np.int64), np.zeros(per_shard, bool),
                         offsets)

    # "pad" and "partial": the permutation split as evenly as possible (sizes q or q+1).
    start, count = balanced_part(num_samples, shard_id, num_shards)
    indices = perm[start:start + count]
    if last_batch == "pad":
        # Every shard fills nb full batches. The repeats continue the epoch's order from its
        # start, cyclically (tiny datasets, N < S*B, fill every batch too), handed out to the
        # shards in order: shard s takes them from position s*nb*B - start, the repeats the
        # shards before it took.
        need = nb * batch_size - count
        first = shard_id * nb * batch_size - start
        repeats = perm[np.arange(first, first + need) % num_samples]
        indices = np.concatenate([indices, repeats])
        is_pad = np.arange(nb * batch_size) >= count
        offsets = np.arange(nb + 1, dtype=np.int64) * batch_size
        return ShardPlan(indices.astype(np.int64), is_pad, offsets)

    # "partial": make sure no shard's last batch is empty by adding one marked pad sample where
    # needed.
    is_pad = np.zeros(count, dtype=bool)
    if count <= (nb - 1) * batch_size:
        indices = np.concatenate([indices, perm[:1]])
        is_pad = np.concatenate([is_pad, [True]])
    n = len(indices)
    offsets = np.minimum(np.arange(nb + 1, dtype=np.int64) * batch_size, n)
    return ShardPlan(indices.astype(np.int64), is_pad, offsets)


def balanced_part(num_samples: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    """``(start, count)`` of shard ``shard_id``'s contiguous part of the epoch's order: the first
    ``num_samples % num_shards`` shards hold one sample more than the others."""
    q, r = divmod(num_samples, num_shards)
    return shard_id * q + min(shard_id, r), q + (1 if shard_id < r else 0)


def pad_plan_unchanged_by_balancing(
    num_samples: int, *, batch_size: int, num_shards: int, last_batch: str
) -> bool:
    """Whether this configuration reads exactly the same plan as extsrc 0.1's ``"pad"``
    arithmetic, which filled the shards in order (``nb * B`` samples each, the last shards
    short and padded): always for ``"partial"`` and ``"drop"``, and for ``"pad"`` when the
    filled-in-order sizes are the balanced ones. Resume states written before shards were
    balanced (:mod:`extsrc.loading.state`) are valid exactly then."""
    if last_batch != "pad":
        return True
    per_shard = num_batches_per_shard(num_samples, batch_size=batch_size, num_shards=num_shards,
                                      last_batch="pad") * batch_size
    return all(
        min(max(num_samples - s * per_shard, 0), per_shard)
        == balanced_part(num_samples, s, num_shards)[1]
        for s in range(num_shards)
    )


def shard_indices(
    num_samples: int,
    *,
    batch_size: int,
    shard_id: int = 0,
    num_shards: int = 1,
    epoch: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    last_batch: LastBatch = "pad",
    run_length: int = 1,
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """Manifest indices that shard ``shard_id`` reads in ``epoch``, in reading order.

    Every shard permutes with the same ``(seed, epoch)`` and takes a disjoint part; every shard gets
    the same number of batches. Consecutive runs of ``batch_size`` entries form the batches (the
    last one shorter under ``"partial"``). Use :func:`shard_plan` to also get the pad flags.
    """
    return shard_plan(
        num_samples, batch_size=batch_size, shard_id=shard_id, num_shards=num_shards,
        epoch=epoch, shuffle=shuffle, seed=seed, last_batch=last_batch, run_length=run_length,
        groups=groups,
    ).indices
