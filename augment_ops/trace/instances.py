"""Objects made before the trace, as traced code sees them.

An augmentation library often builds its ops once, at import: timm's RandAugment keeps
``AugmentOp`` objects in a module-level list, and an op calls one of them. Their methods must
run as traced copies (``int()`` of a per-sample value, PIL's calls), so traced code reads such
an object through a stand-in: an object of the traced copy of its class
(:meth:`augment_ops.trace.rebind.Rebinder.value`) holding what traced code reads in place of
the object's attributes.

The stand-in is read-only. The numpy path calls the real object once per sample, and the graph
keeps what the traced call computed at loader build: an op that changed its object's state (a
counter, a cache, a list it appends to) would see another object at the next sample than the
graph does. A write to the stand-in, or to a dict, list or set it holds, is refused with the
attribute's name; reading is all an op such as ``AugmentOp.__call__`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from augment_ops.trace.ir import TraceError

__all__ = ["ReadOnlyDict", "ReadOnlyList", "ReadOnlySet", "stand_in_object"]


def _refuse(owner: str, what: str) -> TraceError:
    return TraceError(
        f"{what} of {owner}, an object made before the op ran (a module-level object, made "
        "at import): the numpy path changes the real object at every sample, the traced graph "
        "would keep the state it had at loader build; keep what changes per call in local "
        "variables, or make the object in the op")


def _refuse_mutation(name: str, kind: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise _refuse(self._tracer_owner, f"{kind}.{name}() on {self._tracer_name}")
    method.__name__ = method.__qualname__ = name
    return method


class ReadOnlyDict(dict):
    """A dict attribute of an object made before the trace, read by traced code."""

    _tracer_owner = _tracer_name = ""


class ReadOnlyList(list):
    """A list attribute of an object made before the trace, read by traced code."""

    _tracer_owner = _tracer_name = ""


class ReadOnlySet(set):
    """A set attribute of an object made before the trace, read by traced code."""

    _tracer_owner = _tracer_name = ""


for _cls, _kind, _names in (
        (ReadOnlyDict, "dict", ("__setitem__", "__delitem__", "clear", "pop", "popitem",
                                "setdefault", "update", "__ior__")),
        (ReadOnlyList, "list", ("__setitem__", "__delitem__", "append", "extend", "insert",
                                "pop", "remove", "clear", "sort", "reverse", "__iadd__",
                                "__imul__")),
        (ReadOnlySet, "set", ("add", "discard", "remove", "pop", "clear", "update",
                              "difference_update", "intersection_update",
                              "symmetric_difference_update", "__ior__", "__iand__", "__isub__",
                              "__ixor__"))):
    for _name in _names:
        setattr(_cls, _name, _refuse_mutation(_name, _kind))


_READ_ONLY = {dict: ReadOnlyDict, list: ReadOnlyList, set: ReadOnlySet}

#: Containers nested deeper than this are left as they are (and the object is not stood in for).
_MAX_DEPTH = 8


def _read_only(v: Any, value: Callable[[Any], Any], owner: str, name: str, depth: int) -> Any:
    """``v`` as a stand-in's attribute ``name`` holds it: functions, classes and objects as
    traced code reads them (``value``), plain dicts, lists and sets as read-only copies whose
    items are in turn."""
    if depth > _MAX_DEPTH:
        raise _Unsupported
    kind = _READ_ONLY.get(type(v))
    if kind is None:
        return value(v)
    if kind is ReadOnlyDict:
        items: Any = {k: _read_only(x, value, owner, f"{name}[{k!r}]", depth + 1)
                      for k, x in v.items()}
    else:
        items = [_read_only(x, value, owner, f"{name}[...]", depth + 1) for x in v]
    copy = kind(items)
    copy._tracer_owner, copy._tracer_name = owner, name
    return copy


class _Unsupported(Exception):
    """An object the stand-in cannot hold (nested too deep): the real object is used."""


_FROZEN: dict[type, type] = {}


def _frozen_class(copy: type) -> type:
    """A subclass of the traced class copy ``copy`` whose objects refuse attribute writes."""
    held = _FROZEN.get(copy)
    if held is not None:
        return held

    def __setattr__(self: Any, name: str, v: Any) -> None:
        raise _refuse(_owner(self), f"self.{name} = ... (a write to an attribute)")

    def __delattr__(self: Any, name: str) -> None:
        raise _refuse(_owner(self), f"del self.{name}")

    frozen = type(copy)(copy.__name__, (copy,), {"__setattr__": __setattr__,
                                                 "__delattr__": __delattr__,
                                                 "__module__": copy.__module__})
    frozen.__qualname__ = copy.__qualname__
    _FROZEN[copy] = frozen
    return frozen


def _owner(obj: Any) -> str:
    return f"a {type(obj).__qualname__} object"


def stand_in_object(obj: Any, copy: type, value: Callable[[Any], Any],
                    remember: Callable[[Any], None]) -> Any:
    """The stand-in for ``obj``, an object of a class whose traced copy is ``copy``: an object
    of (a read-only subclass of) ``copy`` whose attributes are ``obj``'s as traced code reads
    them (``value``). ``remember(stand_in)`` is called before the attributes are filled, so an
    object that holds itself gets its stand-in. ``obj`` itself where it cannot be stood in
    for."""
    frozen = _frozen_class(copy)
    new = object.__new__(frozen)
    remember(new)
    owner = f"a {type(obj).__qualname__} object"
    try:
        attrs = {k: _read_only(v, value, owner, f"self.{k}", 0) for k, v in vars(obj).items()}
    except _Unsupported:
        remember(obj)
        return obj
    new.__dict__.update(attrs)
    return new
