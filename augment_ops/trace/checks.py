"""The run-time checks of a trace: where the numpy function raises for some samples only.

:func:`add_guard` records a per-sample condition under which numpy raises as a :class:`Guard`
of the trace, restricted to the branch being traced; the native path evaluates the guards for
each batch and raises for the samples that meet one, naming the op, the manifest line and the
path (:func:`augment_ops.trace.lower_dali.emit`).
"""

from __future__ import annotations

import builtins

import numpy as np

from augment_ops.trace.facts import _never
from augment_ops.trace.ir import _TRACING, Guard, Node, TraceError, _is_const, _new, _user_location


def add_guard(bad: Node, error: type[Exception], message: str) -> None:
    """Raise ``error(message)`` for the samples where bool scalar ``bad`` holds: now where it
    holds for every sample on this branch, at run time (a :class:`Guard`) where it may hold
    for some; nothing where the bounds the tracer knows rule it out."""
    session = _TRACING.active
    if session is None:  # pragma: no cover - per-sample values exist only while tracing
        raise TraceError("a per-sample value outside a trace")
    if _never(bad):  # rng.integers(0, h): the bounds the tracer knows rule it out
        return
    if bad.pixel:
        raise TraceError(f"a check numpy makes ({error.__name__}: {message}) on a value computed "
                         "from pixel values")
    node = bad
    for cond, decision in zip(session.conds, session.decisions, strict=True):
        on_path = cond if decision else _new("un", (cond,), ("logical_not",), np.bool_, ())
        node = _new("bin", (node, on_path), ("bitwise_and",), np.bool_, ())
    if _is_const(node):
        if bool(node.value):
            raise error(message)
        return
    if not builtins.any(g.bad is node and g.message == message for g in session.guards):
        session.guards.append(Guard(node, error.__name__, message, _user_location()[0]))
