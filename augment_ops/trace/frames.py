"""Where the user's code is: the instruction and the source text running in a frame, and the
array a ``STORE_SUBSCR`` there writes into (a per-sample value written into a small new array
makes the trace run again with that array traced: :func:`note_small_store`)."""

from __future__ import annotations

import dis
import re
import sys
import types
from typing import Any

import numpy as np

from augment_ops.trace.ir import _is_internal

__all__ = ["note_small_store"]

#: A dotted name at the start of a target (``cmin``, ``self.m``).
_DOTTED = re.compile(r"[A-Za-z_][\w]*(?:\s*\.\s*[A-Za-z_]\w*)*")


def _running(frame: types.FrameType, lasti: int) -> dis.Instruction | None:
    """The instruction running at ``lasti`` (which may point into its cache)."""
    ins = None
    for i in dis.get_instructions(frame.f_code):
        if i.offset > lasti:
            break
        ins = i
    return ins


def _instruction(frame: types.FrameType, lasti: int) -> str:
    """The name of the instruction running at ``lasti``."""
    ins = _running(frame, lasti)
    return ins.opname if ins is not None else ""


def _segment(frame: types.FrameType, lasti: int) -> str | None:
    """The source text of the instruction running at ``lasti`` (the target ``a[i]`` of a
    ``STORE_SUBSCR``)."""
    import linecache

    ins = _running(frame, lasti)
    pos = ins.positions if ins is not None else None
    if pos is None or None in (pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset):
        return None
    lines = [linecache.getline(frame.f_code.co_filename, k)
             for k in range(pos.lineno, pos.end_lineno + 1)]
    lines[-1] = lines[-1][:pos.end_col_offset]
    lines[0] = lines[0][pos.col_offset:]
    return "".join(lines).strip()


def _store_target(frame: types.FrameType, lasti: int) -> tuple[str, str, Any] | None:
    """For a ``STORE_SUBSCR`` at ``lasti`` into a concrete numpy array named by a dotted name
    (``cmin[0::2] = ...``, ``self.m[0] = ...``): its source text, the name and the array."""
    if _instruction(frame, lasti) != "STORE_SUBSCR":
        return None
    text = _segment(frame, lasti)
    m = _DOTTED.match(text or "")
    if m is None:
        return None
    name = re.sub(r"\s+", "", m.group(0))
    head, *rest = name.split(".")
    scope = {**frame.f_builtins, **frame.f_globals, **frame.f_locals}
    target = scope.get(head)
    for part in rest:
        target = getattr(target, part, None)
    if not isinstance(target, np.ndarray):  # (a traced array is not one)
        return None
    return text, name, target


def note_small_store(target: Any = None) -> None:
    """Where a per-sample value is being written into a small new array made in this trace
    (``target``; by default the array the innermost frame outside the tracer stores into), its
    call site is traced in the next attempt (:func:`augment_ops.trace.runs.trace_function`),
    whether or not the op goes on after the failed write (a ``try``/``except`` around it)."""
    from augment_ops.trace.ir import _TRACING

    session = _TRACING.active
    if session is None:
        return
    if target is None:
        frame = sys._getframe(1)
        while frame is not None and _is_internal(frame.f_code.co_filename):
            frame = frame.f_back
        found = _store_target(frame, frame.f_lasti) if frame is not None else None
        if found is None:
            return
        target = found[2]
    made = session.concrete_small.get(id(target))
    if made is not None and made[1] is target:
        session.retry_small = made[0]


