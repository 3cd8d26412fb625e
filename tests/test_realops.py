"""The tracer against augmentations copied from public libraries (``tests/realops``).

For every op of the corpus: the trace lowers it or refuses it as the op's ``EXPECT`` entry says
(a regression, a mistrace, and an op that newly lowers all fail until the entry is updated); a
refusal is a :class:`TraceError` whose location names a line of the op's own source file, never
another exception leaking out of the tracer (but for the ops of a module's
``KNOWN_REFUSAL_FAILURES``, strict expected failures). A lowered op's traced graph, run by a
real CPU DALI pipeline, equals the numpy function exactly on images of odd, even and 1-pixel
sizes, with a random op's draws fixed (``counter_rng`` replays the native path's counter-based
draws on numpy); and a random op's outcomes over many samples follow the same distribution on
both paths (the native path's counter draws against the numpy path's ``np.random.Generator``).

Every check runs over the three sets: the corpus (``tests/realops``, the ops the tracer is
extended against; test ids ``corpus-<op>``), the held-out set (``tests/realops_holdout``, ops
chosen as users pick them, to measure the tracer on code nobody tuned it for; ids
``holdout-<op>``) and the blind set (``tests/realops_blind``, ops of libraries neither other set
draws on, chosen without looking at what the tracer lowers; ids ``blind-<op>``).
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import os
import re
from collections import Counter

import numpy as np
import pytest
import realops
import realops_blind
import realops_holdout
from helpers import NOISE_FILLS, noise_filled, run_traced, scalar_draws

from augment_ops.lower_dali import check_layout
from augment_ops.registry import OpContractError
from augment_ops.trace import TraceError, scalar_stage, trace_op
from augment_ops.trace.rng import noise_slots
from extsrc.ops_runtime.seeding import counter_rng, name_salt, sample_rng

SEED = 11
# Each set: its ops, their EXPECT entries, their KNOWN_FAILURES, and the least number of ops
# and of libraries it must hold.
SETS = {
    "corpus": (realops.corpus(), realops.expected(), realops.known_failures(), 45, 6),
    "holdout": (realops_holdout.holdout(), realops_holdout.expected(),
                realops_holdout.known_failures(), 24, 6),
    "blind": (realops_blind.blind(), realops_blind.expected(), realops_blind.known_failures(),
              30, 5),
}
# (set name, op) for every op of every set; op names are unique across the sets (checked below),
# so the merged tables answer for any of them.
ENTRIES = [(name, r) for name, (ops, *_) in SETS.items() for r in ops]
TABLE = {k: v for _, table, _, _, _ in SETS.values() for k, v in table.items()}
BROKEN = {k: v for _, _, broken, _, _ in SETS.values() for k, v in broken.items()}
# Refused ops whose refusal is known to break its contract (it names no line of the op's
# source): op -> what goes wrong.
BAD_REFUSALS = {k: v for package, modules in [("realops", realops.MODULES),
                                               ("realops_holdout", realops_holdout.MODULES),
                                               ("realops_blind", realops_blind.MODULES)]
                for k, v in realops.known_failures(package, modules,
                                                   "KNOWN_REFUSAL_FAILURES").items()}
LOWERED = [(s, r) for s, r in ENTRIES if TABLE.get(r.name) == "lowers"]
RANDOM_LOWERED = [(s, r) for s, r in LOWERED if r.op.random]


def _params(entries, broken: dict[str, str] = BROKEN) -> list:
    """``entries`` (set name, op) as parameters with ids ``<set>-<op>``, the ops of ``broken``
    (the ``KNOWN_FAILURES`` tables by default) as strict expected failures."""
    return [pytest.param(r, id=f"{s}-{r.name}",
                         marks=pytest.mark.xfail(reason=broken[r.name], strict=True))
            if r.name in broken else pytest.param(r, id=f"{s}-{r.name}")
            for s, r in entries]


# Odd and even sizes, 1-pixel rows and columns, a 1x1 image (where the op allows it).
SIZES = [(1, 1), (1, 6), (5, 1), (2, 3), (7, 5), (12, 17), (16, 9)]
# Distribution check: samples per path, and the largest difference allowed between the two
# paths' frequencies of an outcome (discrete outcomes) or between the empirical distributions
# of the output's mean pixel value (two-sample Kolmogorov-Smirnov statistic). With 400 samples a
# side, the KS statistic of two samples of one continuous distribution exceeds 0.138 with
# probability 0.001, and the frequencies of one outcome (any probability) differ by more than
# 0.12 with probability below 0.001.
DIST_SAMPLES = 400
DIST_SIZES = [(9, 14), (33, 40)]
DIST_TOL = {"frequency": 0.12, "ks": 0.138}
# An outcome one path gives c times and the other never: were its probability the same on both
# paths, the other would miss it with probability about 2**-c (each of the c + 0 samples of it
# falls on either path alike). Rare outcomes (a lighting op's sum that crosses an integer) may
# be missed by chance; one seen more often than this on one path alone is a real difference.
DIST_ONE_SIDED = 9


def _source_file(fn) -> str:
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return inspect.getsourcefile(fn)


@pytest.mark.parametrize("which", list(SETS))
def test_a_set_spans_libraries_and_every_op_has_an_expectation(which):
    ops, table, broken, least_ops, least_libraries = SETS[which]
    assert len(ops) >= least_ops
    assert len({r.library for r in ops}) >= least_libraries
    names = [r.name for r in ops]
    assert len(names) == len(set(names))
    lowered = {r.name for r in ops if table.get(r.name) == "lowers"}
    assert set(broken) <= lowered, "a known failure of an op that is refused"
    bad_refusals = set(BAD_REFUSALS) & set(names)
    assert not bad_refusals & lowered, "a known failure of a refusal of an op that lowers"
    assert set(names) == set(table), {
        "without an EXPECT entry": sorted(set(names) - set(table)),
        "in EXPECT but not in the set": sorted(set(table) - set(names))}
    for value in table.values():
        assert value == "lowers" or value.startswith("refuses: "), value


def _origin(source: str) -> tuple[str, str]:
    """The file (its name) and the function a source names first, without repository, version
    or the notes in parentheses: "pkg/functional.py: solarize (Solarize)" ->
    ("functional.py", "solarize")."""
    m = re.search(r"([\w./-]+\.[A-Za-z]+):? ([^;(]+)", source)
    assert m, f"a source naming no file and function: {source!r}"
    return m.group(1).rsplit("/", 1)[-1], m.group(2).strip()


@pytest.mark.parametrize(("which", "earlier"), [("holdout", ("corpus",)),
                                                ("blind", ("corpus", "holdout"))])
def test_the_held_out_ops_are_new(which, earlier):
    """No op of the held-out set is in the corpus, and no op of the blind set is in either: not
    by name, not by the function copied."""
    ops = SETS[which][0]
    before = [r for s in earlier for r in SETS[s][0]]
    assert not {r.name for r in before} & {r.name for r in ops}
    taken = {_origin(r.source) for r in before}
    again = [r.name for r in ops if _origin(r.source) in taken]
    assert not again, f"{which} ops copied from a function of {earlier}: {again}"


@pytest.mark.parametrize("entry", _params(ENTRIES, BAD_REFUSALS))
def test_trace_lowers_or_refuses_as_the_table_says(entry):
    op, want = entry.op, TABLE[entry.name]
    try:
        trace_op(op)
    except TraceError as e:  # any other exception fails the test: it leaked from the tracer
        assert want.startswith("refuses: "), f"{entry.name} is refused, EXPECT says {want!r}: {e}"
        assert re.search(want[len("refuses: "):], str(e)), (want, str(e))
        m = re.match(r"^(.*?):(\d+)(?:: (.*))?$", e.location)
        assert m, f"the refusal names no source line: {e.location!r}"
        path, line, code = m.group(1), int(m.group(2)), m.group(3)
        # the op's own file, or a helper of the corpus it calls (imgaug's apply_lut)
        assert path == _source_file(op.fn) or os.path.dirname(os.path.dirname(path)) == \
            os.path.dirname(os.path.abspath(__file__)), (path, e.location)
        assert code and code == linecache.getline(path, line).strip(), e.location
    else:
        assert want == "lowers", f"{entry.name} lowers, EXPECT says {want!r}: set it to 'lowers'"


def _run_native(traced, op, imgs: list[np.ndarray], index: np.ndarray,
                epoch: np.ndarray, gpu: bool = False) -> list[tuple[np.ndarray, ...]]:
    """``traced`` run by a DALI CPU pipeline (``gpu``: on GPU 0) on ``imgs`` (one batch, sample k
    being manifest sample ``index[k]`` in ``epoch[k]``): each sample's outputs."""
    return run_traced(traced, imgs, scalar_draws(traced, SEED, name_salt(op.name), index, epoch),
                      gpu=gpu)


def _images(sizes) -> list[np.ndarray]:
    """Random images (every value from 0 to 255 likely), with a black and a white pixel."""
    imgs = []
    for k, (h, w) in enumerate(sizes):
        img = np.random.default_rng(k).integers(0, 256, (h, w, 3), dtype=np.uint8)
        img.reshape(-1)[0] = 0
        img.reshape(-1)[-1] = 255
        imgs.append(img)
    return imgs


@pytest.mark.parametrize("scalars", ["dali", "numpy"])
@pytest.mark.parametrize("entry", _params(LOWERED))
def test_a_lowered_op_equals_numpy_in_a_dali_pipeline(entry, scalars, monkeypatch):
    """``scalars``: the op's per-sample scalars computed by DALI's operators, or all by numpy in
    one operator (:mod:`augment_ops.trace.scalar_stage`), whatever their number."""
    monkeypatch.setattr(scalar_stage, "STAGE_MIN_OPERATORS", 10**9 if scalars == "dali" else 0)
    _check_lowered(entry.op, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("entry", _params(LOWERED))
def test_a_lowered_op_on_gpu_equals_numpy(entry):
    """The same on the GPU, whose operators (division, ``%``, casts, the image operators) are
    not the CPU's code."""
    _check_lowered(entry.op, gpu=True)


def _check_lowered(op, gpu: bool) -> None:
    """For an op that draws arrays of noise (DALI's generator on the native path, no replay on
    numpy), once per ``NOISE_FILLS``, the noise a constant on both paths, so that everything
    the op computes around it is checked exactly; test_a_lowered_random_op_draws_like_numpy
    checks the noise itself."""
    traced = trace_op(op)
    for fills in NOISE_FILLS if noise_slots(traced) else [None]:
        with noise_filled(fills) as filled:
            _check_lowered_with(op, traced, gpu, filled)


def _check_lowered_with(op, traced, gpu: bool, filled: noise_filled) -> None:
    """``_check_lowered``, with noise as ``filled`` fills it."""
    noise = None if filled.fills is None else filled.noise
    sizes = [s for s in SIZES if min(s) >= op.min_size]
    imgs = _images(sizes) * 2  # each size twice: as two samples, in two epochs
    n = len(imgs)
    index = np.arange(n, dtype=np.int64) * 7 + 3
    epoch = (np.arange(n) >= n // 2).astype(np.int64)
    refs = []
    for k, img in enumerate(imgs):
        rng = counter_rng(SEED, int(epoch[k]), int(index[k]), name_salt(op.name), noise,
                          noise_slots(traced))
        try:
            refs.append(filled.apply(op, img, rng if op.random else None))
        except OpContractError as e:  # an empty output: the native path checks its shape
            assert "is empty" in str(e) and check_layout(traced).outputs, (img.shape, e)
            refs.append(None)
        except Exception:  # numpy raises for this image: the trace must have a guard for it
            assert traced.guards, f"numpy raises on {img.shape}, the trace has no guard"
            refs.append(None)
    keep = [k for k, r in enumerate(refs) if r is not None]
    assert len(keep) >= 4, "numpy raises on most sizes: give this op a smaller parameter"
    outs = _run_native(traced, op, [imgs[k] for k in keep], index[keep], epoch[keep], gpu=gpu)
    for k, got in zip(keep, outs, strict=True):
        assert len(got) == len(refs[k]) == op.num_outputs
        for j, (g, r) in enumerate(zip(got, refs[k], strict=True)):
            where = f"{op.name} output {j} on {imgs[k].shape}, index {index[k]}"
            assert g.dtype == r.dtype and g.shape == r.shape, (where, g.dtype, g.shape, r.shape)
            if op.tolerance:
                np.testing.assert_allclose(g, r, atol=op.tolerance, rtol=0, err_msg=where)
            else:
                np.testing.assert_array_equal(g, r, err_msg=where)


def _outcome(outputs: tuple[np.ndarray, ...]) -> str:
    h = hashlib.sha1()
    for o in outputs:
        h.update(repr((o.shape, o.dtype.str)).encode())
        h.update(np.ascontiguousarray(o).tobytes())
    return h.hexdigest()


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical
    distribution functions."""
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


@pytest.mark.parametrize("entry", _params(RANDOM_LOWERED))
def test_a_lowered_random_op_draws_like_numpy(entry):
    """Over many samples of one image, the native path's outcomes (counter-based draws) and the
    numpy path's (``np.random.Generator``) match: the same set of outcomes (but for rare ones,
    ``DIST_ONE_SIDED``) with frequencies within ``DIST_TOL['frequency']`` where they are few,
    else the output's mean pixel value distributed alike within ``DIST_TOL['ks']``."""
    op = entry.op
    traced = trace_op(op)
    index = np.arange(DIST_SAMPLES, dtype=np.int64)
    epoch = np.zeros(DIST_SAMPLES, dtype=np.int64)
    salt = name_salt(op.name)
    # The smallest image of DIST_SIZES on which numpy runs for every sample (yolov5's cutout
    # draws rng.integers(1, int(h / 32)), which numpy refuses below 32 pixels).
    for size in DIST_SIZES:
        img = _images([size])[0]
        try:
            numpy_path = [op.apply(img, sample_rng(SEED, 0, int(i), salt)) for i in index]
            break
        except ValueError:
            if size == DIST_SIZES[-1]:
                raise
    native = _run_native(traced, op, [img] * DIST_SAMPLES, index, epoch)
    a = Counter(_outcome(o) for o in native)
    b = Counter(_outcome(o) for o in numpy_path)
    if len(a) <= 24 and len(b) <= 24:
        one_sided = {k: a[k] + b[k] for k in set(a) ^ set(b)}
        assert all(c <= DIST_ONE_SIDED for c in one_sided.values()), (
            f"outcomes only one path gives: {one_sided}")
        worst = max(abs(a[k] - b[k]) for k in a) / DIST_SAMPLES
        assert worst <= DIST_TOL["frequency"], (worst, a, b)
    else:
        def means(outs):
            return np.array([np.mean([o.astype(np.float64).mean() for o in out])
                             for out in outs])
        d = _ks(means(native), means(numpy_path))
        assert d <= DIST_TOL["ks"], d
