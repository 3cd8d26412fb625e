"""Slices with a step other than 1 and -1 (``a[0::2]``) on an axis of a constant length, and
reversals (``a[::-1]``) of 1-D arrays of a constant length.

mmcv's ``bbox_clip`` fills the x and y bounds of a box with ``cmin[0::2] = w - 1`` and
``cmin[1::2] = h - 1``; detection code reads ``box[0::2]`` for the x coordinates. On an axis
whose length is known at trace time the slice picks known positions, so a read is the
stack of those positions (each an integer index; in numpy a view with gaps, which the layout of
float sums follows: :mod:`augment_ops.trace.pairwise`) and a write is one write per position,
each of the value's part numpy broadcasts there. An image axis of a per-sample length
(``img[::2]``) has no such positions and stays refused, as does a write through a view made by
such a slice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, TraceError, _new
from augment_ops.trace.pairwise import layout

__all__ = ["MAX_STRIDED", "read_strided", "strided_key", "write_strided"]

#: The most positions a strided slice may pick (each is one slice in the graph).
MAX_STRIDED = 64


def _step(s: Any) -> Any:
    return s.step if isinstance(s, slice) else None


def strided_key(n: Node, key: tuple) -> tuple[int, list[int], int] | None:
    """For a key of basic indexing (:func:`augment_ops.trace.indexing._basic_key`: no
    ``...``), the first slice with a step other than 1 and -1: ``(place in the key, the
    positions it picks, its axis in the result)``; None where there is none. Raises
    :class:`TraceError` where its axis' length is per-sample, a bound is, or it picks more than
    :data:`MAX_STRIDED` positions."""
    from augment_ops.trace.sym import Sym

    for q, k in enumerate(key):
        step = _step(k)
        if step is None or isinstance(step, Sym):
            continue
        axis = sum(1 for x in key[:q] if x is not None)
        length = n.shape[axis]
        if isinstance(step, (int, np.integer)) and (int(step) == 1 or (int(step) == -1 and (
                n.ndim > 1 or not isinstance(length, int)))):
            continue  # a reversal of a 1-D array of constant length is picked here too
        if not isinstance(length, int) or any(isinstance(b, Sym) for b in (k.start, k.stop)):
            raise TraceError(f"a slice step of {step} on an axis of per-sample length, or "
                             "with per-sample bounds (only 1 and -1 are lowered there; a step "
                             "on an axis of a constant length lowers)")
        try:
            picked = list(range(length))[slice(*(None if b is None else int(b)
                                                  for b in (k.start, k.stop, step)))]
        except (TypeError, ValueError) as e:
            raise type(e)(str(e)) from None  # numpy's errors for a step of 0 or a float bound
        if len(picked) > MAX_STRIDED:
            raise TraceError(f"a slice step of {step} picking {len(picked)} positions (up to "
                             f"{MAX_STRIDED} are lowered)")
        result_axis = sum(1 for x in key[:q] if x is None or isinstance(x, slice))
        return q, picked, result_axis
    return None


def read_strided(n: Node, key: tuple, found: tuple[int, list[int], int],
                 getitem: Callable[[Node, tuple], Node],
                 stack: Callable[[list[Node], int], Node]) -> Node:
    """``n[key]``: the picked positions, each by an integer index, stacked."""
    q, picked, axis = found
    if not picked:
        return getitem(n, (*key[:q], slice(0, 0), *key[q + 1:]))
    # each position by an integer index, stacked: operators the per-sample scalar stage
    # computes for a small array (augment_ops.trace.scalar_stage)
    parts = [getitem(n, (*key[:q], i, *key[q + 1:])) for i in picked]
    out = stack(parts, axis)
    if out.ndim <= 1:
        return out  # equally spaced elements: numpy sums them as a new array of them
    # numpy's result is a view with gaps (x[..., ::2]), which its float sums run over in its
    # own way (augment_ops.trace.pairwise): not the new array the stack would say it is
    base = layout(n)
    lay = None if base is None or len(base[0]) != out.ndim else (base[0], "gapped")
    return _new("laid", (out,), (lay,), out.dtype, out.shape)


def write_strided(key: tuple, value: Any, found: tuple[int, list[int], int],
                  selected_ndim: int, setitem: Callable[[tuple, Any], None]) -> None:
    """``a[key] = value``: one write per picked position of ``value``'s part there, as numpy
    broadcasts ``value`` over the ``selected_ndim`` axes the key selects."""
    from augment_ops.trace.creation import _holds_sym, np_array
    from augment_ops.trace.sym import Sym

    q, picked, axis = found
    if isinstance(value, (list, tuple)):
        value = np_array(value) if _holds_sym(value) else np.asarray(value)
    if isinstance(value, Sym):
        # numpy reads the whole value before it writes (a copy where it overlaps the target:
        # x[..., ::2] = x[..., ::-2]); a view of the target would see the first writes
        value = Sym(value._checked())
    shape = value.node.shape if isinstance(value, Sym) else np.shape(value)
    at = axis - (selected_ndim - len(shape))  # the value's axis facing the strided one
    size = shape[at] if at >= 0 else 1
    if not isinstance(size, int) or size not in (1, len(picked)):
        raise ValueError(f"could not broadcast input array from shape {tuple(shape)} into a "
                         f"selection of {len(picked)} along axis {axis}")
    for k, i in enumerate(picked):
        # the position by an integer index, and the value's part there without that axis
        part = value
        if at >= 0:
            part = value[(slice(None),) * at + (k if size != 1 else 0,)]
        setitem((*key[:q], i, *key[q + 1:]), part)
