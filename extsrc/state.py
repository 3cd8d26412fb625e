"""Resume states: what ``Loader.state_dict()`` returns and ``Loader.load_state_dict()`` checks.

A state is plain JSON::

    {"version": 1, "epoch": 3, "batch": 120, "config": {...}}

``epoch`` and ``batch`` say where the next batch comes from (batch ``batch`` of epoch ``epoch``,
0-based). ``config`` is everything that decides which samples land in which batch and what the
random ops draw: batch size, shard, seed, shuffle, last-batch policy, the manifest's content
fingerprint and size, the ops and transforms with their parameters, resize and stages. Because
the sample order is a pure function of (seed, epoch) and every random op's generator a pure
function of (seed, epoch, sample index), the same config and position give exactly the batches
an uninterrupted run would have given. A state saved under any other config is refused with the
list of fields that differ.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Mapping
from typing import Any

from extsrc.errors import StateMismatchError

__all__ = ["STATE_VERSION", "check_state", "make_state"]

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


def make_state(epoch: int, batch: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-serialisable state."""
    return {"version": STATE_VERSION, "epoch": int(epoch), "batch": int(batch),
            "config": dict(config)}


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def check_state(
    state: Any, config: Mapping[str, Any], num_batches: int
) -> tuple[int, int]:
    """Validate ``state`` against this loader's ``config``; return ``(epoch, batch)`` as saved
    (``batch`` may equal ``num_batches``: :class:`~extsrc.position.ReadPosition` rolls it over).

    Raises :class:`~extsrc.errors.StateMismatchError` for a malformed state or one saved under a
    different configuration (the message lists every field that differs).
    """
    if not isinstance(state, Mapping):
        raise StateMismatchError(
            f"a loader state must be the dict from Loader.state_dict(), got {type(state).__name__}"
        )
    missing = [k for k in ("version", "epoch", "batch", "config") if k not in state]
    if missing:
        raise StateMismatchError(
            f"not a loader state: keys {missing} are missing (expected the dict from "
            "Loader.state_dict(), e.g. saved with json.dump)"
        )
    if state["version"] != STATE_VERSION:
        raise StateMismatchError(
            f"loader state version {state['version']!r} is not supported (this extsrc writes "
            f"version {STATE_VERSION})"
        )
    epoch, batch = state["epoch"], state["batch"]
    for name, v in (("epoch", epoch), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise StateMismatchError(f"loader state: {name} must be an int >= 0, got {v!r}")
    saved = state["config"]
    if not isinstance(saved, Mapping):
        raise StateMismatchError("loader state: 'config' must be a dict")
    # Compare through JSON so a state that went through json.dump/json.load matches.
    mine = json.loads(json.dumps(dict(config)))
    diffs = []
    for key in sorted(set(mine) | set(saved)):
        a, b = saved.get(key, "<absent>"), mine.get(key, "<absent>")
        if a != b:
            if key == "manifest":
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
    if batch > num_batches:
        raise StateMismatchError(
            f"loader state: batch {batch} is past the end of an epoch ({num_batches} batches)"
        )
    return epoch, batch
