"""A list or tuple default value of a traced function (:class:`ConstList`, :class:`ConstTuple`):
the list or tuple as it is, whose item at a per-sample index (``sizes[rng.integers(0,
len(sizes))]``) is picked among its constants per sample, as Python indexes it for each sample
on the numpy path.

:mod:`augment_ops.state` lets an op read a tuple of constants, and a list default of constants
that its function only reads (the object then never changes);
:class:`augment_ops.trace.rebind.Rebinder` gives the traced copy of the function a stand-in of
the same items in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from augment_ops.trace.combine import _where, select
from augment_ops.trace.facts import lower, sound
from augment_ops.trace.ir import TraceError
from augment_ops.trace.sym import Sym, cast_node, raise_where, value_class

__all__ = ["STANDS_FOR", "ConstList", "ConstTuple", "const_item", "stand_in"]


class ConstList(list):
    """A list default of constants as the traced function sees it: ``isinstance(x, list)`` and
    every list operation as for the list itself; an item at a per-sample int index is
    :func:`const_item`."""

    def __getitem__(self, key: Any) -> Any:
        if type(key) is Sym:
            return const_item(self, key, "list")
        return list.__getitem__(self, key)


class ConstTuple(tuple):
    """A tuple default as the traced function sees it: the tuple, whose item at a per-sample
    int index is :func:`const_item`."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        if type(key) is Sym:
            return const_item(self, key, "tuple")
        return tuple.__getitem__(self, key)


#: The class each stand-in stands in for (what ``type(x)`` gives the traced function).
STANDS_FOR = {ConstList: list, ConstTuple: tuple}


def stand_in(v: Any) -> Any:
    """A :class:`ConstList` or :class:`ConstTuple` of the items of ``v`` where ``v`` is a list or
    a tuple, else ``v``."""
    if type(v) is list:
        return ConstList(v)
    return ConstTuple(v) if type(v) is tuple else v


def _number_kind(v: Any) -> tuple[np.dtype, bool] | None:
    """``(dtype, weak)`` of a number a DALI graph computes (a Python ``bool``, ``int`` within
    int64 or ``float``, weak; a numpy scalar of up to 8 bytes, not float16), else None."""
    if type(v) in (bool, int, float):
        if type(v) is int and not -2**63 <= v < 2**63:
            return None
        return np.dtype({bool: np.bool_, int: np.int64, float: np.float64}[type(v)]), True
    if isinstance(v, np.generic) and v.dtype.kind in "biuf" and v.dtype.itemsize <= 8 and \
            v.dtype != np.float16:
        return v.dtype, False
    return None


def _columns(items: Sequence[Any], what: str) -> tuple[list[tuple[np.ndarray, bool]], bool]:
    """The items as columns ``(values, weak)``: one for numbers of one type, one per position
    for tuples of such numbers of one length; and whether the items are tuples. Refuses
    others: which type or object a sample gets would differ per sample."""
    rows = [tuple(v) if type(v) is tuple else (v,) for v in items]
    tuples = all(type(v) is tuple for v in items)
    columns = []
    if (tuples or not any(type(v) is tuple for v in items)) and rows[0] and \
            all(len(r) == len(rows[0]) for r in rows):
        for position in zip(*rows, strict=True):
            kinds = {_number_kind(v) for v in position}
            if len(kinds) != 1 or None in kinds:
                break
            ((dtype, weak),) = kinds
            columns.append((np.array(position, dtype=dtype), weak))
        else:
            return columns, tuples
    shown = sorted({type(v).__name__ if type(v) is not tuple else
                    "tuple of " + "/".join(sorted({type(x).__name__ for x in v}))
                    for v in items})
    raise TraceError(
        f"a {what} of {', '.join(shown)} values indexed by a per-sample value (only numbers of "
        "one type, or tuples of such numbers of one length, are picked per sample: the type or "
        "object each sample gets would otherwise differ, while a DALI graph computes numbers; "
        "draw an index, k = rng.integers(n), and branch on it, if k == 0: ...)")


def _type_name(key: Sym) -> str:
    """The name Python's error gives the class of ``key``'s value (``numpy.float64``)."""
    cls = value_class(key)
    return f"numpy.{cls.__name__}" if cls.__module__ == "numpy" else cls.__name__


def const_item(items: Sequence[Any], key: Sym, what: str = "list") -> Any:
    """``items[key]`` of constant ``items`` (a ``what``, ``"list"`` or ``"tuple"``) at the
    per-sample index ``key``, as Python indexes it for each sample: negative indices count from
    the end, and an index outside ``-len..len - 1`` raises ``IndexError`` for its sample (a
    run-time check, none where the tracer's bounds of ``key`` rule it out). An item is a
    per-sample number, or a tuple of them for tuple items; a Python number stays one."""
    if key.ndim:
        raise TypeError("only integer scalar arrays can be converted to a scalar index")
    if key.dtype.kind not in "iu" and not (key.dtype.kind == "b" and key.node.weak):
        # Python's bool is an int; numpy's bool, and floats, are no index
        raise TypeError(f"{what} indices must be integers or slices, not {_type_name(key)}")
    n, message = len(items), f"{what} index out of range"
    if n == 0:
        raise IndexError(message)
    columns, tuples = _columns(items, what)
    wide = key.dtype == np.uint64
    if wide:  # compared before the cast below, which wraps past 2**63 - 1
        raise_where(key >= n, IndexError, message)
    # as Python compares the index with the length: in int64, which holds -n and n whatever
    # the key's own dtype (an int8 or uint8 draw, a Python bool)
    key = Sym(cast_node(key.node, np.int64, weak=key.node.weak))
    if not wide:
        raise_where(key >= n, IndexError, message)
        raise_where(key < -n, IndexError, message)
    lo = lower(key.node) if sound(key.node) else None
    if lo is None or lo < 0:
        key = _where(key < 0, key + n, key)  # -1 is the last item
    picked = [select(key, values, weak) for values, weak in columns]
    return tuple(picked) if tuples else picked[0]

