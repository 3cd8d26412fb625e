"""The run-time checks of a trace: where the numpy function raises for some samples only.

:func:`add_guard` records a per-sample condition under which numpy raises as a :class:`Guard`
of the trace, restricted to the branch being traced; :func:`guard_path` does so for a branch
on which the op's own ``raise`` or ``assert`` fires. The native path evaluates the guards for
each batch and raises for the samples that meet one, naming the op, the manifest line and the
path (:func:`augment_ops.trace.lower_dali.emit`).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from augment_ops.trace.facts import _never, lower, sound, upper
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


#: The comparison that is true exactly where another is false.
_NEGATION = {"less": "greater_equal", "less_equal": "greater", "greater": "less_equal",
             "greater_equal": "less", "equal": "not_equal", "not_equal": "equal"}


def _holds(cond: Node, decision: bool) -> Node:
    """The per-sample bool that is true where ``cond`` took ``decision``."""
    if decision:
        return cond
    if cond.op == "bin" and cond.attrs[0] in _NEGATION:
        return _new("bin", cond.args, (_NEGATION[cond.attrs[0]], *cond.attrs[1:]), np.bool_, ())
    return _new("un", (cond,), ("logical_not",), np.bool_, ())


def _bare(n: Any) -> Any:
    """``n`` without casts to its own dtype (they change no value)."""
    while isinstance(n, Node) and n.op == "cast" and n.args[0].dtype == n.dtype:
        n = n.args[0]
    return n


def _at_most(a: Any, b: Any) -> bool:
    """Whether ``a <= b`` for every sample, by the form of the two: ``min(c, b) <= b``."""
    a, b = _bare(a), _bare(b)
    return a is b or (isinstance(a, Node) and a.op == "bin" and a.attrs[0] == "minimum"
                      and builtins.any(_bare(v) is b for v in a.args))


def _exceeds(a: Any, b: Any, by: int) -> bool:
    """Whether ``a >= b + by`` for every sample: ``b + q`` with ``q >= by`` (integers)."""
    a, b = _bare(a), _bare(b)
    if not (isinstance(a, Node) and a.op == "bin" and a.attrs[0] == "add"
            and np.dtype(a.dtype).kind in "iu"):
        return False
    # b + q may wrap around in a narrow type: its bounds must be known and inside the type
    # (64-bit sums of sizes and draws stay far inside theirs)
    if np.dtype(a.dtype).itemsize < 8 and (lower(a) is None or upper(a) is None
                                           or not sound(a)):
        return False
    for p, q in (a.args, a.args[::-1]):
        if _bare(p) is b and isinstance(q, Node):
            lo = lower(q)
            if lo is not None and lo >= by:
                return True
    return False


def _ruled_out(term: Node) -> bool:
    """Whether comparison ``term`` is false for every sample: by the bounds the tracer knows, or
    by the form of its sides (``x < min(c, x)``, ``x + c <= x`` with ``c >= 1``)."""
    if _never(term):
        return True
    if term.op != "bin" or term.attrs[0] not in ("less", "less_equal", "greater",
                                                 "greater_equal"):
        return False
    x, y = term.args if term.attrs[0] in ("less", "less_equal") else term.args[::-1]
    if term.attrs[0] in ("less", "greater"):  # x < y never holds where y <= x
        return _at_most(y, x) or _exceeds(x, y, 0)
    return _exceeds(x, y, 1)  # x <= y never holds where x >= y + 1


def guard_path(error: type[BaseException], message: str, location: str) -> bool:
    """The op raised ``error(message)`` from a ``raise`` or ``assert`` of its own code on the
    branch being traced: numpy raises it for the samples that take this branch, so the native
    path gets a :class:`Guard` for them (none where the tracer proves that no sample takes it).
    False where every sample takes the branch (the op raises on every image)."""
    session = _TRACING.active
    if session is None:  # pragma: no cover - per-sample values exist only while tracing
        raise TraceError("a per-sample value outside a trace")
    terms = []
    for cond, decision in zip(session.conds, session.decisions, strict=True):
        term = _holds(cond, decision)
        if _is_const(term):
            if not bool(term.value):
                return True
            continue
        if _ruled_out(term):
            return True
        terms.append(term)
    if not terms:
        return False
    # Terms on pixel values (``if img.max() > 250: raise``) are computed per sample in the
    # graph like any other value: the DALI operators compute them exactly.
    node = terms[0]
    for t in terms[1:]:
        node = _new("bin", (node, t), ("bitwise_and",), np.bool_, ())
    if not builtins.any(g.bad is node and g.message == message for g in session.guards):
        session.guards.append(Guard(node, error.__name__, message, location))
    return True
