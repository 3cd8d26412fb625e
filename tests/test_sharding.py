"""Sharding arithmetic: a property test over every policy plus pinned tables and argument errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extsrc.sources.sharding import (
    epoch_permutation,
    pad_plan_unchanged_by_balancing,
    run_starts,
    shard_indices,
    shard_plan,
)

POLICIES = ("pad", "drop", "partial")


def all_plans(n, *, num_shards, batch_size, policy, seed, epoch, shuffle=True):
    return [
        shard_plan(
            n, batch_size=batch_size, shard_id=s, num_shards=num_shards, epoch=epoch,
            shuffle=shuffle, seed=seed, last_batch=policy,
        )
        for s in range(num_shards)
    ]


def epoch_order(plans):
    """Non-pad entries of every shard, concatenated in shard order."""
    return np.concatenate([p.indices[~p.is_pad] for p in plans])


@settings(
    max_examples=200, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    n=st.integers(1, 500),
    num_shards=st.integers(1, 8),
    batch_size=st.integers(1, 64),
    policy=st.sampled_from(POLICIES),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 1000),
    shuffle=st.booleans(),
)
def test_shard_plan_properties(n, num_shards, batch_size, policy, seed, epoch, shuffle):
    kw = dict(num_shards=num_shards, batch_size=batch_size, policy=policy, seed=seed)
    plans = all_plans(n, epoch=epoch, shuffle=shuffle, **kw)
    perm = epoch_permutation(n, seed=seed, epoch=epoch, shuffle=shuffle)
    assert sorted(perm.tolist()) == list(range(n))

    # Every shard yields the same number of batches.
    nbs = {p.num_batches for p in plans}
    assert len(nbs) == 1, nbs
    nb = nbs.pop()

    for s, p in enumerate(plans):
        assert p.indices.dtype == np.int64
        assert p.is_pad.dtype == np.bool_
        assert len(p.indices) == len(p.is_pad) == int(p.batch_offsets[-1])
        assert int(p.batch_offsets[0]) == 0
        assert len(p.batch_offsets) == nb + 1
        sizes = np.diff(p.batch_offsets)
        if policy == "partial":
            assert (sizes[:-1] == batch_size).all(), (s, sizes)
            assert 1 <= sizes[-1] <= batch_size, (s, sizes)
        else:
            assert (sizes == batch_size).all(), (s, sizes)
        # batch(b) is the b-th slice of the plan.
        if nb:
            idx, pad = p.batch(nb - 1)
            lo = int(p.batch_offsets[nb - 1])
            np.testing.assert_array_equal(idx, p.indices[lo:])
            np.testing.assert_array_equal(pad, p.is_pad[lo:])
        # shard_indices is the plan's indices.
        np.testing.assert_array_equal(
            shard_indices(n, batch_size=batch_size, shard_id=s, num_shards=num_shards,
                          epoch=epoch, shuffle=shuffle, seed=seed, last_batch=policy),
            p.indices,
        )
        assert ((p.indices >= 0) & (p.indices < n)).all()

    # Non-pad entries: pairwise disjoint across (and within) shards.
    real = epoch_order(plans)
    assert len(np.unique(real)) == len(real), "a non-pad sample is read twice"

    if policy in ("pad", "partial"):
        # Every sample is read exactly once (pads aside), and shards are the permutation in order.
        np.testing.assert_array_equal(real, perm)
    else:
        kept = nb * num_shards * batch_size
        assert n - kept < num_shards * batch_size
        assert not any(p.is_pad.any() for p in plans)
        np.testing.assert_array_equal(real, perm[:kept])

    # Balance: the shards' samples (pads aside) differ in number by at most one, as with
    # DistributedSampler; under "drop" every shard reads the same nb * B samples.
    real_counts = [int((~p.is_pad).sum()) for p in plans]
    if policy == "drop":
        assert set(real_counts) <= {nb * batch_size}
    else:
        assert max(real_counts) - min(real_counts) <= 1, real_counts
        assert sorted(real_counts, reverse=True) == real_counts  # the first shards the larger

    # Pads only end a shard's plan: no sample after the first repeat.
    for p in plans:
        first_pad = np.flatnonzero(p.is_pad)
        if len(first_pad):
            assert p.is_pad[first_pad[0]:].all()

    # Pad entries continue the epoch permutation from its start (cyclically when N < S*B),
    # handed out to the shards in order; so a sample is repeated at most once more than another.
    n_pad = sum(int(p.is_pad.sum()) for p in plans)
    if policy == "pad":
        assert n_pad == nb * num_shards * batch_size - n
        repeats = np.concatenate([p.indices[p.is_pad] for p in plans])
        np.testing.assert_array_equal(repeats, perm[np.arange(n_pad) % n])
        reads = np.bincount(np.concatenate([p.indices for p in plans]), minlength=n)
        assert reads.max() - reads.min() <= 1
        # Repeats only fill batches: the fewest batches that hold the largest shard's samples.
        assert nb == -(-max(real_counts) // batch_size)
    elif policy == "partial":
        for p in plans:
            assert p.is_pad.sum() <= 1
            if p.is_pad.any():
                assert p.is_pad[-1] and p.indices[-1] == perm[0]
        assert n_pad < num_shards

    # Same (seed, epoch): same plans.
    again = all_plans(n, epoch=epoch, shuffle=shuffle, **kw)
    for a, b in zip(plans, again, strict=True):
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.is_pad, b.is_pad)
        np.testing.assert_array_equal(a.batch_offsets, b.batch_offsets)

    if not shuffle:
        np.testing.assert_array_equal(perm, np.arange(n))
        np.testing.assert_array_equal(real, np.arange(len(real)))
    elif len(real) >= 3:
        # A different epoch reorders; N=3 repeats an order with chance 1/6, so look at several.
        others = [
            epoch_order(all_plans(n, epoch=epoch + k, **kw)) for k in range(1, 9)
        ]
        assert any(not np.array_equal(real, o) for o in others)
        if n >= 10:  # two seeds give the same order with chance 1/n!
            other_seed = epoch_permutation(n, seed=seed + 1, epoch=epoch, shuffle=True)
            assert not np.array_equal(perm, other_seed)


def batches(plan):
    return [plan.batch(b)[0].tolist() for b in range(plan.num_batches)]


def pads(plan):
    return [plan.batch(b)[1].tolist() for b in range(plan.num_batches)]


@pytest.mark.parametrize(
    ("policy", "expected", "expected_pad"),
    [
        ("pad", [[0, 1], [2, 3], [4, 5], [6, 0]], [[0, 0], [0, 0], [0, 0], [0, 1]]),
        ("drop", [[0, 1], [2, 3], [4, 5]], [[0, 0], [0, 0], [0, 0]]),
        ("partial", [[0, 1], [2, 3], [4, 5], [6]], [[0, 0], [0, 0], [0, 0], [0]]),
    ],
)
def test_docstring_table(policy, expected, expected_pad):
    p = shard_plan(7, batch_size=2, num_shards=1, shuffle=False, last_batch=policy)
    assert batches(p) == expected
    assert pads(p) == [[bool(v) for v in row] for row in expected_pad]


def test_partial_gives_short_shard_one_pad():
    # N=9, S=2, B=4: 5 + 4 samples; shard 1 gets one pad so both shards yield 2 batches.
    p0 = shard_plan(9, batch_size=4, shard_id=0, num_shards=2, shuffle=False, last_batch="partial")
    p1 = shard_plan(9, batch_size=4, shard_id=1, num_shards=2, shuffle=False, last_batch="partial")
    assert batches(p0) == [[0, 1, 2, 3], [4]]
    assert pads(p0) == [[False] * 4, [False]]
    assert batches(p1) == [[5, 6, 7, 8], [0]]
    assert pads(p1) == [[False] * 4, [True]]


def test_drop_can_leave_no_batch():
    p = shard_plan(5, batch_size=4, shard_id=1, num_shards=2, last_batch="drop")
    assert p.num_batches == 0 and len(p.indices) == 0


def test_pad_tiny_dataset_fills_every_batch():
    # N < S*B: one sample for each of the first two shards, the repeats continue cyclically.
    plans = all_plans(2, num_shards=3, batch_size=2, policy="pad", seed=0, epoch=0, shuffle=False)
    assert [p.indices.tolist() for p in plans] == [[0, 0], [1, 1], [0, 1]]
    assert [p.is_pad.tolist() for p in plans] == [[False, True], [False, True], [True, True]]


@pytest.mark.parametrize("policy", POLICIES)
def test_ddp_shards_are_balanced_like_distributed_sampler(policy):
    """200 samples, batch 64, 2 ranks: 100 samples per rank (DistributedSampler's split), not
    128 and 72 plus 56 repeats."""
    plans = all_plans(200, num_shards=2, batch_size=64, policy=policy, seed=3, epoch=1)
    real = [int((~p.is_pad).sum()) for p in plans]
    sizes = [np.diff(p.batch_offsets).tolist() for p in plans]
    assert {"pad": [100, 100], "partial": [100, 100], "drop": [64, 64]}[policy] == real
    assert {"pad": [[64, 64]] * 2, "partial": [[64, 36]] * 2, "drop": [[64]] * 2}[policy] == sizes
    assert [int(p.is_pad.sum()) for p in plans] == ([28, 28] if policy == "pad" else [0, 0])
    perm = epoch_permutation(200, seed=3, epoch=1, shuffle=True)
    if policy == "pad":
        np.testing.assert_array_equal(plans[0].indices, np.concatenate([perm[:100], perm[:28]]))
        np.testing.assert_array_equal(plans[1].indices,
                                      np.concatenate([perm[100:], perm[28:56]]))


def fill_first_pad_plan(n, *, batch_size, shard_id, num_shards, perm):
    """The "pad" arithmetic that filled the shards in order (nb * B samples each, the last
    shards short, padded from the start of the epoch's order): what resume states written
    before balancing were positioned in."""
    nb = -(-n // (num_shards * batch_size))
    per_shard = nb * batch_size
    lo = shard_id * per_shard
    return np.resize(perm, num_shards * per_shard)[lo:lo + per_shard], \
        np.arange(lo, lo + per_shard) >= n


@settings(max_examples=300, deadline=None, database=None)
@given(n=st.integers(1, 300), num_shards=st.integers(1, 6), batch_size=st.integers(1, 40),
       policy=st.sampled_from(POLICIES))
def test_pad_plan_unchanged_by_balancing_says_when_old_states_still_hold(
        n, num_shards, batch_size, policy):
    unchanged = pad_plan_unchanged_by_balancing(
        n, batch_size=batch_size, num_shards=num_shards, last_batch=policy)
    if policy != "pad":
        assert unchanged
        return
    perm = epoch_permutation(n, seed=1, epoch=0, shuffle=True)
    same = True
    for s in range(num_shards):
        new = shard_plan(n, batch_size=batch_size, shard_id=s, num_shards=num_shards, seed=1,
                         last_batch="pad")
        old_idx, old_pad = fill_first_pad_plan(n, batch_size=batch_size, shard_id=s,
                                               num_shards=num_shards, perm=perm)
        same &= np.array_equal(new.indices, old_idx) and np.array_equal(new.is_pad, old_pad)
    assert unchanged == same
    if num_shards == 1 or n % (num_shards * batch_size) == 0:
        assert unchanged


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(shard_id=2, num_shards=2), ValueError, r"shard_id must be in \[0, num_shards=2\)"),
        (dict(shard_id=-1, num_shards=2), ValueError, r"shard_id must be in"),
        (dict(last_batch="fill"), ValueError, r"last_batch must be one of .*'fill'"),
        (dict(batch_size=0), ValueError, r"batch_size must be >= 1, got 0"),
        (dict(num_shards=0, shard_id=0), ValueError, r"num_shards must be >= 1"),
        (dict(epoch=-1), ValueError, r"epoch must be >= 0"),
        (dict(batch_size=2.0), TypeError, r"batch_size must be an int"),
        (dict(shard_id=True), TypeError, r"shard_id must be an int"),
    ],
)
def test_argument_errors(kwargs, exc, match):
    args = dict(batch_size=2, shard_id=0, num_shards=1)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        shard_plan(10, **args)
    with pytest.raises(exc, match=match):
        shard_indices(10, **args)


def test_empty_dataset_refused():
    with pytest.raises(ValueError, match=r"num_samples must be >= 1, got 0"):
        shard_plan(0, batch_size=1)


# -- runs of neighbouring samples ---------------------------------------------------------------


@settings(max_examples=200, deadline=None, database=None)
@given(
    groups=st.lists(st.integers(0, 3), min_size=1, max_size=80),
    run_length=st.integers(1, 9),
    data=st.data(),
)
def test_run_starts_cut_each_stretch_at_its_phase_and_never_across_groups(groups, run_length,
                                                                          data):
    """Group values per sample (tar shards; a value may come back later, A B A): each stretch
    of one value, with its phase, has a run start at its first sample and wherever the place
    in the stretch minus the phase is a multiple of ``run_length``, and nowhere else."""
    first = [i for i in range(len(groups)) if i == 0 or groups[i] != groups[i - 1]]
    phases = data.draw(st.lists(st.integers(0, run_length - 1), min_size=len(first),
                                max_size=len(first)))
    starts = run_starts(len(groups), run_length, np.array(groups), np.array(phases))
    stretch = np.searchsorted(first, np.arange(len(groups)), side="right") - 1
    expected = [i for i in range(len(groups)) if i == first[stretch[i]]
                or (i - first[stretch[i]] - phases[stretch[i]]) % run_length == 0]
    assert starts.tolist() == expected
    lengths = np.diff(np.append(starts, len(groups)))
    assert lengths.max() <= run_length
    assert all(len(set(groups[a:a + n])) == 1 for a, n in zip(starts, lengths, strict=True))
    # Without phases every stretch is cut from its start.
    plain = run_starts(len(groups), run_length, np.array(groups))
    assert plain.tolist() == [i for i in range(len(groups))
                              if (i - first[stretch[i]]) % run_length == 0]


@settings(max_examples=200, deadline=None, database=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    run_length=st.integers(2, 9),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 5),
)
def test_runs_come_whole_in_the_epoch_order(sizes, run_length, seed, epoch):
    """The epoch visits every sample once; a sample is followed by its neighbour in the same
    group except where a run ends: at most one run end per ``run_length`` samples of a group
    (plus one, for the cut at the phase)."""
    groups = np.repeat(np.arange(len(sizes)), sizes)
    n = len(groups)
    order = epoch_permutation(n, seed=seed, epoch=epoch, shuffle=True, run_length=run_length,
                              groups=groups).tolist()
    assert sorted(order) == list(range(n))
    follows = dict(itertools.pairwise(order))
    cut = sum(1 for i in range(n - 1) if groups[i] == groups[i + 1] and follows.get(i) != i + 1)
    assert cut <= sum(-(-size // run_length) for size in sizes)


def test_runs_change_by_seed_and_epoch_and_leave_the_single_sample_order_alone():
    kw = dict(shuffle=True, run_length=10)
    a = epoch_permutation(100, seed=1, epoch=0, **kw)
    assert a.tolist() != list(range(100))
    assert a.tolist() == epoch_permutation(100, seed=1, epoch=0, **kw).tolist()
    assert a.tolist() != epoch_permutation(100, seed=1, epoch=1, **kw).tolist()
    assert a.tolist() != epoch_permutation(100, seed=2, epoch=0, **kw).tolist()
    # Without runs the order is the one extsrc always computed (resume states depend on it).
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([1, 0])))
    assert epoch_permutation(100, seed=1, epoch=0, shuffle=True).tolist() == \
        rng.permutation(100).tolist()
    assert epoch_permutation(100, seed=1, epoch=0, shuffle=False, run_length=10).tolist() == \
        list(range(100))


def test_runs_as_long_as_a_group_still_make_other_batches_each_epoch():
    """Groups of 8, runs of 8 and batches of 8: the phase cuts each group at another place each
    epoch, so the batches are not the same sets of samples every epoch."""
    groups = np.repeat(np.arange(6), 8)

    def batches(epoch: int) -> set[frozenset[int]]:
        order = epoch_permutation(48, seed=3, epoch=epoch, shuffle=True, run_length=8,
                                  groups=groups)
        return {frozenset(order[k:k + 8].tolist()) for k in range(0, 48, 8)}

    seen = [batches(e) for e in range(4)]
    assert any(a != b for a, b in itertools.pairwise(seen))
    assert len(set().union(*seen)) > 6


def test_run_arguments_are_checked():
    with pytest.raises(ValueError, match="run_length"):
        run_starts(10, 0)
    with pytest.raises(ValueError, match="run_length"):
        epoch_permutation(10, seed=0, epoch=0, shuffle=True, run_length=0)
    with pytest.raises(ValueError, match=r"one value per sample \(10\)"):
        run_starts(10, 2, np.zeros(9))
