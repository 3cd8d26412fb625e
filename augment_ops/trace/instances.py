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

Only an object whose state is plain (numbers, strings, numeric arrays, functions, classes and
such objects, in dicts, lists, tuples and sets: :func:`copyable_state`) is stood in for, so that
tracing changes nothing of the real object; one holding a random generator, an iterator, a file
or another object is used as it is (its methods run untraced, and the tracer refuses what they
cannot do). The numpy path calls the real object once per
sample, and the graph keeps what the traced calls computed at loader build: an op that changes
its object's state (a counter, a cache, a list it appends to) would meet another object at the
next sample than the graph was built from. So each stand-in's state, and that of the classes
copied with it, is compared after the trace with its state when made (:func:`changed`), and an
op that changed one is refused naming the attribute.
"""

from __future__ import annotations

import collections
import enum
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["changed", "check_unchanged", "converted", "copyable_state", "holds_object",
           "object_copyable", "snapshot", "stand_in_object"]

#: Containers nested deeper than this are taken as they are.
_MAX_DEPTH = 8


#: Values a stand-in holds as they are, compared by value or identity (:func:`snapshot`).
_PLAIN = (type(None), bool, int, float, complex, str, bytes, np.generic, np.dtype, slice,
          range, type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType,
          enum.Enum, np.ufunc)
#: Containers a stand-in copies, item by item.
_CONTAINERS = (dict, list, tuple, set, frozenset, collections.OrderedDict)


def copyable_state(v: Any, is_object: Callable[[Any], bool], depth: int = 0) -> bool:
    """Whether ``v`` (an object's attributes, as a dict) is made only of :data:`_PLAIN` values,
    numeric ndarrays and objects ``is_object`` accepts (stand-ins of their own), in
    :data:`_CONTAINERS`, within :data:`_MAX_DEPTH` levels: state a stand-in copies whole, so
    that tracing changes nothing of the real object and :func:`changed` sees every change."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(v, _PLAIN):
        return True
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biufc"
    if type(v) in _CONTAINERS:
        items = [*v.keys(), *v.values()] if isinstance(v, dict) else list(v)
        return all(copyable_state(x, is_object, depth + 1) for x in items)
    return depth > 0 and is_object(v)


def holds_object(v: Any, is_object: Callable[[Any], bool], depth: int = 0) -> bool:
    """Whether container ``v`` holds, at any depth, an object ``is_object`` accepts."""
    if depth > _MAX_DEPTH:
        return False
    if type(v) in _CONTAINERS:
        items = [*v.keys(), *v.values()] if isinstance(v, dict) else list(v)
        return any(holds_object(x, is_object, depth + 1) for x in items)
    return depth > 0 and is_object(v)


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


def object_copyable(v: Any, class_copyable: Callable[[type], bool]) -> bool:
    """Whether ``v`` is an object with attributes (not a class, function or module) of a class
    whose traced copy may stand in for it (``class_copyable``: timm's ``AugmentOp`` objects,
    made at import), and whose state a stand-in can copy and compare (:func:`copyable_state`).
    One holding a random generator, an iterator, a file or any other object is used as it
    is."""
    if isinstance(v, (type, types.FunctionType, types.ModuleType, types.MethodType)):
        return False
    try:
        attrs = object.__getattribute__(v, "__dict__")
    except AttributeError:
        return False
    if type(attrs) is not dict or not class_copyable(type(v)):
        return False
    if id(v) in _CHECKING:
        return True  # an object that holds itself, through others: checked where it began
    _CHECKING.add(id(v))
    try:
        return copyable_state(attrs, lambda x: object_copyable(x, class_copyable))
    finally:
        _CHECKING.discard(id(v))


#: The objects :func:`object_copyable` is looking into.
_CHECKING: set[int] = set()


def check_unchanged(objects: Iterable[tuple[Any, Any, dict[str, Any]]],
                    classes: Iterable[tuple[type, type]], class_state: dict[int, dict[str, Any]],
                    class_keys: dict[int, frozenset[str]], location: str) -> None:
    """Refuse an op that changed an object made before the trace (``objects``: (object,
    stand-in, snapshot of its attributes as made)) or a copied class's attributes
    (``classes``: (class, copy), with their snapshots and names as made): the numpy path
    would change the real one at every sample, which the traced graph cannot follow."""
    from augment_ops.trace.ir import TraceError

    for obj, stand, made in objects:
        if stand is obj:
            continue
        name = changed(made, vars(stand))
        if name is not None:
            raise TraceError(
                f"the op changes self.{name} of an object of class {type(obj).__qualname__} "
                "made before it ran (a module-level object, made at import): the numpy path "
                "changes the real object at every sample, while the traced graph keeps what "
                "the trace computed; keep what changes per call in local variables, or make "
                "the object in the op", location)
    for cls, copy in classes:
        made_cls = class_state.get(id(cls))
        if made_cls is None or copy is cls:
            continue
        # (names Python caches on a class, such as copyreg's __slotnames__, are not state)
        added = sorted(k for k in set(copy.__dict__) - class_keys[id(cls)]
                       if not (k.startswith("__") and k.endswith("__")))
        name = added[0] if added else changed(
            made_cls, {k: copy.__dict__[k] for k in made_cls if k in copy.__dict__})
        if name is not None:
            raise TraceError(
                f"the op changes {cls.__qualname__}.{name}, an attribute of a class: the numpy "
                "path changes the real class at every sample, while the traced graph keeps "
                "what the trace computed", location)
