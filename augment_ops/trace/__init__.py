"""Trace an op's numpy function into a small graph (the IR) that DALI's operators can run.

At loader build the op's function runs once (or once per branch, see below) on symbolic proxies:
an image of per-sample height and width (HWC ``uint8``, 3 channels), per-sample scalars (its
shape values and the arithmetic on them) and, for a random op, a symbolic ``rng``. Each proxy
records what is done to it as a :class:`Node`; :mod:`augment_ops.trace.lower_dali` turns the nodes
into DALI operators. Nothing here imports DALI (the lowering imports it when it runs).

Result types follow numpy 2 (NEP 50) exactly: every operation asks numpy itself for the result
dtype on representative values, and the graph casts explicitly, so integer wrap-around and
float32/float64 promotion are numpy's. A Python ``if`` on a per-sample scalar (``if rng.random()
< p:``, ``if h > w:``) runs the function once per outcome (at most :data:`MAX_PATHS` paths) and
the outputs are merged per sample. Anything else (control flow on pixel values, a function numpy
cannot dispatch to the proxies, cv2 and PIL calls other than those :mod:`.cv2_api` and
:mod:`.pil_api` lower, scipy, global ``np.random``, ...) raises :class:`TraceError` naming the
construct and the user's source line; the op then runs on the numpy path.
"""

from __future__ import annotations

from typing import Any

from augment_ops.trace.facts import MAX_FACT_STEPS, fact_steps
from augment_ops.trace.ir import Guard, Node, Traced, TraceError
from augment_ops.trace.rng import DrawRng, noise_slots
from augment_ops.trace.runs import (
    MAX_PATHS,
    MAX_TRACE_SECONDS,
    _time_limit,
    _too_long,
    _TraceTimeout,
    trace_function,
)
from augment_ops.trace_cache import CACHE, PER_OP, clear_trace_cache, op_key

__all__ = [
    "MAX_FACT_STEPS",
    "MAX_PATHS",
    "MAX_TRACE_SECONDS",
    "DrawRng",
    "Guard",
    "Node",
    "TraceError",
    "Traced",
    "clear_trace_cache",
    "explain",
    "fact_steps",
    "trace_function",
    "trace_op",
    "traces",
]


# -- ops ---------------------------------------------------------------------------------------
_CACHE = PER_OP  # per op object: ops reading a value without a key (trace_cache)


def trace_op(op: Any) -> Traced:
    """The traced graph of a registered op; raises :class:`TraceError`, also for an op that
    reads or writes state outside its call (:mod:`augment_ops.state`), which is refused without
    running it.

    Traced once per process for the same code, values and parameters (another op object, a
    notebook cell run again): see :mod:`augment_ops.trace_cache` and
    :func:`augment_ops.clear_trace_cache`."""
    got: Traced | TraceError | None = _CACHE.get(op)
    if got is None and getattr(op, "on_clips", False):
        got = TraceError("an op on whole video clips (ndim=4) runs on the numpy path only")
        _CACHE[op] = got
    if got is None:
        from augment_ops.state import outside_state

        # Before running the op: tracing an op that reads or writes state outside its call
        # would freeze that state into the graph (and run the op's side effects). Checked at
        # every call until refused: a graph cached by content cannot know what else in the
        # module writes the values it read.
        found = outside_state(op.fn, dict(op.params))
        if found is not None:
            got = TraceError(*found)
            _CACHE[op] = got
    # This module's limits: setting augment_ops.trace.MAX_TRACE_SECONDS (...) takes effect.
    limits = (MAX_PATHS, MAX_FACT_STEPS, MAX_TRACE_SECONDS)
    key = op_key(op, limits) if got is None else None
    if got is None and key is not None:
        got = CACHE.get(key, lambda v: isinstance(v, TraceError))
    if got is None:
        try:
            with _time_limit(MAX_TRACE_SECONDS):
                got = trace_function(op.fn, params=dict(op.params), random=op.random,
                                     num_outputs=op.num_outputs, dtype=op.dtype, ndim=op.ndim,
                                     max_paths=MAX_PATHS, max_fact_steps=MAX_FACT_STEPS)
        except TraceError as e:
            got = e
        except _TraceTimeout as e:  # outside the op's own code (merging its branches)
            got = _too_long(e.seconds)
        if key is None:
            _CACHE[op] = got
        else:
            CACHE.put(key, got)
    if isinstance(got, TraceError):
        raise got
    return got


def traces(op: Any) -> bool:
    """Whether the op's numpy function lowers to DALI operators."""
    try:
        trace_op(op)
    except TraceError:
        return False
    return True


def explain(name_or_op: Any) -> str:
    """How the op's native path comes about, or why it has none.

    ``"native (hand-written)"``, ``"native (traced)"`` (with the module-level dicts and lists
    the graph keeps as constants, and :data:`NOISE_NOTE` for an op whose noise DALI's
    generator draws, and :data:`TABLE_NOTE` for one that reads per-sample tables, if any:
    ``"native (traced; ...)"``), or ``"numpy: <construct> at
    <file:line: code>"`` naming what kept the function from being traced, and the innermost line
    of user code inside the op or a function it calls where it happened (the op's own ``def``
    line for what only its outputs show); never the line that called the op.
    """
    from augment_ops.registry import get

    op = get(name_or_op)
    if op.on_clips:
        return "numpy: an op on whole video clips (ndim=4) runs on the numpy path only"
    if "native" in op.impls:
        return "native (hand-written)"
    try:
        traced = trace_op(op)
    except TraceError as e:
        return f"numpy: {e}"
    from augment_ops.state import outside_state

    baked: list[tuple[str, str]] = []
    outside_state(op.fn, dict(op.params), baked)
    notes = [f"{c} at {w}" for c, w in baked]
    if noise_slots(traced):
        notes.append(NOISE_NOTE)
    if any(n.op == "gather" for n in traced.nodes()):
        notes.append(TABLE_NOTE)
    if any(n.op == "equalize" for n in traced.nodes()):
        notes.append(EQUALIZE_NOTE)
    if any(n.op == "npsum" for n in traced.nodes()):
        notes.append(FLOAT_SUM_NOTE)
    if notes:
        return "native (traced; " + "; ".join(notes) + ")"
    return "native (traced)"


#: What :func:`explain` says of an op that draws arrays of noise.
NOISE_NOTE = ("its arrays of noise drawn by DALI's generator: numpy's distribution, other "
              "values than the numpy path's; the same values again for the same seed and "
              "starting point, other ones in a resumed run")

#: What :func:`explain` says of an op that equalizes as PIL does (augment_ops.trace.pil_equalize).
EQUALIZE_NOTE = ("PIL's equalize as one Python call per batch (numpy's bincount and take on the "
                 "CPU, torch's on the GPU), as DALI has no histogram operator")

#: What :func:`explain` says of an op that sums floats over the image (augment_ops.trace.pairwise).
FLOAT_SUM_NOTE = ("numpy's own float sums over the image (its means, variances), one Python call "
                  "per batch on the CPU (a GPU array is copied there first), as DALI's reductions "
                  "add in another order")

#: What :func:`explain` says of an op that reads per-sample tables (augment_ops.trace.gather).
TABLE_NOTE = ("a lookup table per sample, computed by numpy with the sample's draws and read at "
              "the pixels by one Python call per batch (numpy's take on the CPU, torch's on the "
              "GPU), as DALI has no operator that reads a per-sample table")
