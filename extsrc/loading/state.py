"""Resume states: what ``Loader.state_dict()`` returns and ``Loader.load_state_dict()`` checks.

A state is plain JSON::

    {"version": 1, "epoch": 3, "batch": 120, "config": {...}}

``epoch`` and ``batch`` say where the next batch comes from (batch ``batch`` of epoch ``epoch``,
0-based). ``config`` is everything that decides which samples land in which batch and what the
random ops draw: batch size, shard, seed, shuffle, last-batch policy, the manifest's content
fingerprint and size, the ops and transforms with their parameters, resize and stages, and the
sharding arithmetic (``"sharding"``: ``"balanced"``; a state without it, written before shards
were balanced, resumes where its plan is still the same and is refused naming the epoch to
restart where the ``"pad"`` plan moved samples between shards). Because
the sample order is a pure function of (seed, epoch) and every random op's generator a pure
function of (seed, epoch, sample index), the same config and position give exactly the batches
an uninterrupted run would have given. A state saved under any other config is refused with the
list of fields that differ.

Every field is checked before any is used (:func:`check_fields`): exactly these four keys,
``version`` the int this extsrc writes, ``epoch`` and ``batch`` ints (numpy integers too; never
bools or floats) in range, ``config`` a dict with string keys; a value JSON cannot hold compares
unequal. A refusal is a :class:`~extsrc.errors.StateMismatchError` naming the field, and the
loader's position is left as it was.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from extsrc._util.argcheck import check_int
from extsrc.errors import StateMismatchError
from extsrc.sources.sharding import pad_plan_unchanged_by_balancing

__all__ = [
    "FILLED_IN_ORDER", "SHARDING", "STATE_VERSION", "Resumable", "check_state",
    "loader_state_config", "make_state", "resume_point",
]

STATE_VERSION = 1


def _json_safe(value: Any) -> Any:
    """``value`` if JSON keeps it exactly, else its ``repr`` (stable for numbers, strings...)."""
    try:
        if json.loads(json.dumps(value)) == value:
            return value
    except (TypeError, ValueError):
        pass
    return repr(value)


def describe_ops(ops: Any) -> list[dict[str, Any]]:
    """Names and bound parameters of ops, JSON-safe, for a config fingerprint."""
    return [
        {"name": op.name, "params": {k: _json_safe(v) for k, v in op.params}} for op in ops
    ]


def describe_stages(stages: Any) -> list[dict[str, Any]]:
    """Names and parameters of stages, JSON-safe, for a config fingerprint: a dataclass (the
    presets) by its fields, a ``functools.partial`` by its arguments, another object by its
    attributes, a function by its qualified name only."""
    out = []
    for s in stages:
        if dataclasses.is_dataclass(s) and not isinstance(s, type):
            params = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
        elif isinstance(s, functools.partial):
            params = {"func": getattr(s.func, "__qualname__", repr(s.func)), "args": s.args,
                      "keywords": s.keywords}
        elif inspect.isroutine(s) or isinstance(s, type):
            params = {}
        else:
            params = dict(vars(s)) if hasattr(s, "__dict__") else {}
        name = getattr(s, "__qualname__", None) or type(s).__qualname__
        out.append({"name": name, "params": {k: _json_safe(v) for k, v in params.items()}})
    return out


def loader_state_config(config: Any, num_samples: int, fingerprint: str,
                        indices: Any) -> dict[str, Any]:
    """What a resume state of a loader with ``config`` (a
    :class:`~extsrc.loading.config.LoaderConfig`) must match: everything that decides which
    samples each batch holds and their pixels. ``num_samples`` and ``fingerprint``: the
    manifest's; ``indices``: the samples read (``None``: all)."""
    c = config
    state = {
        "batch_size": c.batch_size,
        "shard_id": c.sampling.shard_id,
        "num_shards": c.sampling.num_shards,
        "seed": c.seed,
        "shuffle": c.shuffle,
        "last_batch": c.sampling.last_batch,
        "run_length": c.sampling.run_length if c.shuffle else 1,  # no shuffle: no runs
        "num_samples": num_samples if indices is None else len(indices),
        "manifest": fingerprint,
        "ops": describe_ops(c.ops),
        "transforms": describe_ops(c.transforms),
        "resize": None if c.resize is None else list(c.resize),
        # Which pixels a resized image keeps; layout, dtype and normalize only present them.
        "resize_mode": c.format.resize_mode,
        "stages": describe_stages(c.stages),
        "sharding": SHARDING,  # which arithmetic placed the samples (extsrc.sources.sharding)
    }
    if indices is not None:  # on_error="skip": which samples are read counts too
        state["indices"] = hashlib.sha256(indices.tobytes()).hexdigest()
    return state


def resume_point(state: Any, expected: Mapping[str, Any], config: Any, num_samples: int,
                 num_batches: int) -> tuple[int, int]:
    """:func:`check_state` of ``state`` against ``expected`` (:func:`loader_state_config`), for a
    loader reading ``num_samples`` samples with ``config``: a state
    without ``"sharding"`` (written before shards were balanced) stands for
    :data:`FILLED_IN_ORDER` where that changed its ``last_batch="pad"`` plan
    (:func:`~extsrc.sources.sharding.pad_plan_unchanged_by_balancing`)."""
    unchanged = pad_plan_unchanged_by_balancing(
        num_samples, batch_size=config.batch_size, num_shards=config.sampling.num_shards,
        last_batch=config.sampling.last_batch)
    return check_state(state, expected, num_batches, implied={
        "sharding": SHARDING if unchanged else FILLED_IN_ORDER,
        "run_length": 1})  # states written before runs shuffled single samples


def make_state(epoch: int, batch: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-serialisable state."""
    return {"version": STATE_VERSION, "epoch": int(epoch), "batch": int(batch),
            "config": dict(config)}


def _as_json(v: Any) -> Any:
    """``v`` as JSON gives it back, or ``"<not JSON: repr>"``."""
    try:
        return json.loads(json.dumps(v))
    except (TypeError, ValueError):
        return f"<not JSON: {_short_repr(v)}>"


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


#: The keys of a state, and the largest epoch a state may hold (an epoch number beyond it is
#: a corrupted state, not a training run).
STATE_KEYS: tuple[str, ...] = ("version", "epoch", "batch", "config")
MAX_EPOCH = 2**31 - 1


def check_fields(
    state: Any, num_batches: int | None = None
) -> tuple[int, int, Mapping[str, Any]]:
    """Every field of ``state`` checked before any is used, each refusal naming the field:
    a mapping with exactly :data:`STATE_KEYS`; ``version`` the int :data:`STATE_VERSION`;
    ``epoch`` an int in ``[0, MAX_EPOCH]``; ``batch`` an int in ``[0, num_batches]``
    (``num_batches``: the next epoch's start; ``None``: ``MAX_EPOCH``, for a state whose
    configuration is still to be compared); ``config`` a mapping with string keys. Integers
    may be numpy integers (a state kept in an array); bools and floats are refused.
    Returns ``(epoch, batch, config)``."""
    if not isinstance(state, Mapping):
        raise StateMismatchError(
            f"a loader state must be the dict from Loader.state_dict(), got {type(state).__name__}"
        )
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        hint = (f" (this dict holds {_keys(state)}: pass the loader's part of the checkpoint)"
                if state else "")
        raise StateMismatchError(
            f"not a loader state: keys {missing} are missing (expected the dict from "
            f"Loader.state_dict(), e.g. saved with json.dump){hint}"
        )
    extra = [k for k in state if k not in STATE_KEYS]
    if extra:
        raise StateMismatchError(
            f"loader state: unexpected keys {_keys(extra)} (a state holds exactly "
            f"{list(STATE_KEYS)}); pass the dict from Loader.state_dict() unchanged"
        )
    version = state["version"]
    if not _is_int(version) or version != STATE_VERSION:
        raise StateMismatchError(
            f"loader state version {_short_repr(version)} is not supported (this extsrc writes "
            f"version {STATE_VERSION})"
        )
    limits = {"epoch": (MAX_EPOCH, "epochs are counted from 0"),
              "batch": (MAX_EPOCH, "batches are counted from 0") if num_batches is None else
                       (num_batches, f"an epoch here has {num_batches} batches")}
    values = {}
    for name, (top, meaning) in limits.items():
        v = state[name]
        if not _is_int(v):
            raise StateMismatchError(
                f"loader state: {name} must be an int >= 0, got {type(v).__name__} "
                f"{_short_repr(v)}"
            )
        if not 0 <= v <= top:
            past = " is past the end of an epoch" if name == "batch" and v > top else ""
            raise StateMismatchError(
                f"loader state: {name} must be an int >= 0 and <= {top:,} ({meaning}), got "
                f"{int(v):,}" + (f"; batch {int(v)}{past} ({num_batches} batches)" if past else "")
            )
        values[name] = int(v)
    saved = state["config"]
    if not isinstance(saved, Mapping):
        raise StateMismatchError(
            f"loader state: 'config' must be a dict, got {type(saved).__name__}"
        )
    bad_keys = [k for k in saved if not isinstance(k, str)]
    if bad_keys:
        raise StateMismatchError(
            f"loader state: 'config' keys must be strings, got {_short_repr(bad_keys[0])}"
        )
    return values["epoch"], values["batch"], saved


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _short_repr(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _keys(keys: Any) -> str:
    shown_keys = [_short_repr(k) for k in list(keys)[:8]]
    return "[" + ", ".join(shown_keys) + (", ..." if len(keys) > 8 else "") + "]"


#: The ``"sharding"`` config value: the arithmetic of :mod:`extsrc.sources.sharding` that placed the
#: samples. States written before the key existed lack it; for them the loader says which
#: value they imply (:data:`FILLED_IN_ORDER` where the ``"pad"`` plan then differed).
SHARDING = "balanced"
FILLED_IN_ORDER = "filled in order"


def check_state(
    state: Any, config: Mapping[str, Any], num_batches: int,
    implied: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """Validate ``state`` against this loader's ``config``; return ``(epoch, batch)`` as saved
    (``batch`` may equal ``num_batches``: :class:`~extsrc.loading.position.ReadPosition` rolls it
    over).

    ``implied`` gives the value that a config key stands for in a state written before the key
    existed (``{"sharding": ...}``); such a state is then compared as if it held that value.

    Raises :class:`~extsrc.errors.StateMismatchError` for a malformed state or one saved under a
    different configuration (the message lists every field that differs).
    """
    epoch, batch, saved = check_fields(state)
    # Compare through JSON so a state that went through json.dump/json.load matches; a value
    # JSON cannot hold (a corrupted state) compares unequal, by its repr.
    mine = json.loads(json.dumps(dict(config)))
    saved = {k: _as_json(v) for k, v in saved.items()}
    saved = {**{k: v for k, v in (implied or {}).items() if k not in saved}, **saved}
    diffs = []
    for key in sorted(set(mine) | set(saved)):
        a, b = saved.get(key, "<absent>"), mine.get(key, "<absent>")
        if a != b:
            if key == "sharding" and a == FILLED_IN_ORDER:
                diffs.append(
                    "sharding: the state comes from an extsrc whose last_batch='pad' filled "
                    "the shards in order (the first shards full, the last short and padded); "
                    "shards now hold balanced parts of the epoch, so the batches still due "
                    "differ. Resume at an epoch start "
                    f"instead: loader.set_epoch({epoch}) reads epoch {epoch} again from its "
                    f"start, loader.set_epoch({epoch + 1}) goes on with the next one"
                )
            elif key == "manifest":
                diffs.append(
                    "manifest: content differs (paths, labels or order; fingerprint "
                    f"{str(a)[:12]}... in the state, {str(b)[:12]}... here)"
                )
            else:
                diffs.append(f"{key}: {_short(a)} in the state, {_short(b)} here")
    if diffs:
        raise StateMismatchError(
            "this loader state was saved under a different configuration, so resuming would "
            "not give the batches that were still due: " + "; ".join(diffs) + ". Build the "
            "Loader exactly as for the saved run (same manifest, batch_size, shards, seed, "
            "ops...), or start a fresh run without load_state_dict()"
        )
    # After the comparison: under another configuration the epoch has another length.
    check_fields(state, num_batches)
    return epoch, batch


class Resumable:
    """The methods of the loaders (:class:`~extsrc.loading.loader.Loader` and its subclasses)
    that read or move where the next batch comes from: :attr:`epoch`, :meth:`set_epoch`, and the
    resume methods. A loader brings its ``config``, ``manifest``, ``source``, ``position``, the
    indices it reads (``_indices``, ``None``: all), the epoch under way (``_epoch``, ``None``:
    none) and ``_conclude()``, which settles it, ``len()`` (batches per epoch) and ``close()``;
    a subclass whose samples depend on more adds that to :meth:`_state_config`."""

    config: Any
    manifest: Any
    source: Any
    position: Any
    _indices: Any
    _epoch: Any
    _conclude: Callable[[], None]
    close: Callable[[], None]
    __len__: Callable[[], int]

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (after a loop that took every batch of epoch
        ``e``, ``e + 1``; after one left part-way, still ``e``: the next ``iter()`` abandons
        the rest of it, see :meth:`~extsrc.loading.loader.Loader.__iter__`)."""
        return self.position.due()[0]

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` from its first batch (its shuffle and its
        random op results), as ``DistributedSampler.set_epoch`` does.

        Setting the epoch that comes next anyway (``set_epoch(e)`` before every epoch ``e`` of
        a loop that reads whole epochs) keeps the pipeline; any other epoch, or the current
        one after a part-way loop, restarts it there (one build, nothing read twice).
        """
        check_int(epoch, "epoch", minimum=0)
        self._conclude()
        current = self._epoch
        if self.position.due() == (epoch, 0) and (current is None or not current.started):
            return
        self.close()
        self.position.move_to(epoch, 0)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands, as a JSON-serialisable dict (see :mod:`extsrc.loading.state`).

        ``{"version": 1, "epoch": e, "batch": b, "config": {...}}``: the next batch is batch
        ``b`` of epoch ``e`` (``b`` batches of the epoch were yielded). Save it with your model
        checkpoint; a Loader built the same way resumes from it with :meth:`load_state_dict`.
        Taken after a ``break``, it points at the rest of the interrupted epoch (while this
        loader's next ``for`` would start the next epoch).
        """
        epoch, batch = self.position.due()
        return make_state(epoch, batch, self._state_config())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next ``for batch in loader`` yields exactly the
        batches that were still due (same order, same random op results), then whole epochs.
        DALI's own randomness (the presets' crops and flips) is seeded per shard and resume
        point: reproducible for the same start, but not bit-identical to an uninterrupted run.

        Call it before iterating or between epochs. A state from another configuration (batch
        size, shards, seed, shuffle, last_batch, manifest content, ops, resize, stages and their
        parameters, resize_mode) raises :class:`~extsrc.errors.StateMismatchError` listing what
        differs; ``layout``, ``dtype`` and ``normalize`` may change between runs. So does a
        state saved before shards were balanced where its ``last_batch="pad"`` plan differs
        (:func:`~extsrc.sources.sharding.pad_plan_unchanged_by_balancing`), naming the epoch to
        restart.
        """
        src = self.source
        samples = len(self.manifest) if src.indices is None else len(src.indices)
        epoch, batch = resume_point(state, self._state_config(), self.config, samples, len(self))
        self.close()
        self.position.move_to(epoch, batch)

    def _state_config(self) -> dict[str, Any]:
        return loader_state_config(self.config, len(self.manifest), self.manifest.fingerprint(),
                                   self._indices)
