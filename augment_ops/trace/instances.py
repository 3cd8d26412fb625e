"""Objects made before the trace, as traced code sees them.

An augmentation library often builds its ops once, at import: timm's RandAugment keeps
``AugmentOp`` objects in a module-level table, and an op calls one of them. Their methods must
run as traced copies (``int()`` of a per-sample value, PIL's calls), so traced code reads such
an object through a stand-in: an object of the traced copy of its class
(:meth:`augment_ops.trace.rebind.Rebinder.value`), which ``type(self) is Op``, ``isinstance``
and ``self.__class__`` see as the class, holding copies of the object's attributes as traced
code reads them (functions as traced copies, other such objects as their stand-ins, containers
and arrays copied). Every route to the object gives the one stand-in: a module's name for it,
and the lists, tuples and dicts of the module that hold it (as values or keys), so ``OP in
OPS`` and ``OPS[0] is OP`` answer as they do for the real object.

Tracing changes nothing of the real object. But the numpy path calls the real object once per
sample, and the graph keeps what the traced calls computed at loader build: an op that changes
its object's state (a counter, a cache, a list it appends to) would meet another object at the
next sample than the graph was built from. So each stand-in's state, and that of the classes
copied with it, is compared after the trace with its state when made (:func:`changed`), and an
op that changed one is refused naming the attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["changed", "converted", "snapshot", "stand_in_object"]

#: Containers nested deeper than this are taken as they are.
_MAX_DEPTH = 8


def converted(v: Any, value: Callable[[Any], Any], depth: int = 0) -> Any:
    """``v`` as a stand-in (or a class copy) holds it: functions, classes and objects as traced
    code reads them (``value``), dicts, lists, tuples and sets copied with their items (and a
    dict's keys) converted in turn, ndarrays copied."""
    if depth > _MAX_DEPTH:
        return v
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, dict):
        out = {converted(k, value, depth + 1): converted(x, value, depth + 1)
               for k, x in v.items()}
        return out if type(v) is dict else _same_type(v, out)
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [converted(x, value, depth + 1) for x in v]
        return type(v)(items) if type(v) in (list, tuple, set, frozenset) else \
            _same_type(v, items)
    return value(v)


def _same_type(v: Any, items: Any) -> Any:
    """A container of ``v``'s own type (``OrderedDict``, a list subclass) holding ``items``, or
    ``v`` itself where that type cannot be made from them (a named tuple)."""
    try:
        return type(v)(items)
    except TypeError:
        return v


def snapshot(v: Any, depth: int = 0) -> Any:
    """A comparable record of ``v``'s state: containers and arrays by content, numbers and
    strings by value (NaN included), anything else (functions, stand-ins, other objects) by
    identity."""
    if depth > _MAX_DEPTH:
        return ("id", id(v))
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, dict):
        return ("dict", type(v), tuple((snapshot(k, depth + 1), snapshot(x, depth + 1))
                                       for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, type(v), tuple(snapshot(x, depth + 1) for x in v))
    if isinstance(v, (set, frozenset)):
        return ("set", type(v), frozenset(snapshot(x, depth + 1) for x in v))
    if isinstance(v, float):
        return ("float", repr(v))
    if v is None or isinstance(v, (bool, int, complex, str, bytes, np.generic)):
        return ("value", type(v), repr(v))
    return ("id", id(v))


def changed(before: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The first attribute whose :func:`snapshot` differs between ``before`` and ``now`` (an
    object's or a class's namespace), or None."""
    for name in sorted(set(before) | set(now)):
        if name not in now or name not in before or snapshot(now[name]) != before[name]:
            return name
    return None


def stand_in_object(obj: Any, copy: type, value: Callable[[Any], Any],
                    remember: Callable[[Any], None]) -> tuple[Any, dict[str, Any]]:
    """The stand-in for ``obj``, an object of a class whose traced copy is ``copy``, and the
    :func:`snapshot` of its attributes as made. ``remember(stand_in)`` is called before the
    attributes are converted, so an object that holds itself gets its stand-in."""
    new = object.__new__(copy)
    remember(new)
    attrs = {k: converted(v, value) for k, v in vars(obj).items()}
    object.__getattribute__(new, "__dict__").update(attrs)
    return new, {k: snapshot(v) for k, v in attrs.items()}
