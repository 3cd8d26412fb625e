"""The names a traced function sees: ``int``, ``float``, ``min``, ``max``, ``len`` and ``type``
that take per-sample values, ``np`` without its global random state, ``math`` whose exact
functions take per-sample values, ``os`` without what ends the process, and the functions the op
calls, re-bound the same way.

A function's built-ins and globals are fixed when it is created, so the tracer runs a copy of the
op's function made with traced ones (:class:`Rebinder`). The functions that copy calls, in the
op's own files or in installed libraries, and the functions of the modules it names
(``fcrops.crop``), are copied the same way when the code first reads them (the globals are a
:class:`_TracedGlobals`), so ``int(h / 2)`` in a library's helper stays a per-sample value as it
does in the op. A class of those files that the code reads (``ScaleIntensity(minv=0)(img)``,
MONAI's and others' transform objects) is a traced copy too (:class:`_ClassCopy`): its methods,
and those of its bases, see the traced names as functions do. Not copied: numpy (whose
functions dispatch to traced arrays), the standard library (``math`` is replaced instead), the
tracer, C functions, and the methods of an object made before the trace (a module-level
instance) or of a class the copy could not stand in for (:func:`_class_copyable`): a per-sample
value reaching ``int()`` there is refused (:func:`augment_ops.trace.sym.concrete`).
"""

from __future__ import annotations

import abc
import builtins
import dis
import math
import numbers
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from augment_ops.state import RUNNING_BUILTINS, _codes, library_file
from augment_ops.trace.checks import add_guard
from augment_ops.trace.const_list import STANDS_FOR, stand_in
from augment_ops.trace.creation import CREATION, _holds_sym, np_asarray
from augment_ops.trace.cv2_api import library_handlers, wrap_library
from augment_ops.trace.facts import lower, upper
from augment_ops.trace.ir import _REGISTRY_FILE, Node, TraceError, _is_internal
from augment_ops.trace.lookup import NUMPY_CALLS, table_view
from augment_ops.trace.sym import (
    Sym,
    _py_float,
    _py_int,
    cast_node,
    is_instance,
    ufunc,
    value_class,
)


class _IntMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return is_instance(x, builtins.int)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _py_int(*args, **kwargs) if len(args) == 1 and not kwargs else builtins.int(
            *args, **kwargs)


class _FloatMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return is_instance(x, builtins.float)

    def __call__(cls, *args: Any) -> Any:
        return _py_float(*args) if args else 0.0


class _TypeMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, builtins.type)

    def __subclasscheck__(cls, c: Any) -> bool:
        return issubclass(c, builtins.type)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            return builtins.type(*args, **kwargs)
        x = args[0]
        t = value_class(x) if builtins.type(x) is Sym else builtins.type(x)
        t = STANDS_FOR.get(t, t)  # a list or tuple default, as the function sees it
        # the traced function's own int and float: type(5) is int holds there too; a numpy
        # scalar type is the real one, as np.int64 is where ``is`` compares it
        # (:func:`_identity_operand`): type(draw) is np.int64 holds
        return {builtins.int: _Int, builtins.float: _Float}.get(t, t)


class _Type(metaclass=_TypeMeta):
    """``type`` inside a traced function: ``type(traced value)`` is the class of the value numpy
    computes (``np.ndarray``, ``float`` ...), as ``isinstance`` sees it."""


class _Int(metaclass=_IntMeta):
    """``int`` inside a traced function: ``int(per-sample value)`` stays symbolic."""

    dtype = np.dtype(np.int64)  # as a dtype (astype(int)), numpy's int: int64


class _Float(metaclass=_FloatMeta):
    """``float`` inside a traced function."""

    dtype = np.dtype(np.float64)  # as a dtype (astype(float)), numpy's float: float64


_Int.__name__ = _Int.__qualname__ = "int"
_Float.__name__ = _Float.__qualname__ = "float"
numbers.Integral.register(_Int)
numbers.Real.register(_Float)


def _py_minmax(name: str) -> Callable[..., Any]:
    real = getattr(builtins, name)

    def f(*args: Any, **kwargs: Any) -> Any:
        items = list(args[0]) if len(args) == 1 else list(args)
        if kwargs or not builtins.any(isinstance(v, Sym) for v in items):
            # The items, not args: a single iterable argument (a generator) is used up above.
            return real(items, **kwargs) if len(args) == 1 else real(*args, **kwargs)
        out = items[0]
        for v in items[1:]:
            out = ufunc("minimum" if name == "min" else "maximum", out, v)
        return out
    return f


#: The most iterations a loop over ``range`` of a per-sample count is unrolled to.
MAX_UNROLL = 16


class _RangeMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        return isinstance(x, (builtins.range, _Unrolled))

    def __call__(cls, *args: Any) -> Any:
        if not builtins.any(isinstance(a, Sym) for a in args):
            return builtins.range(*args)
        return _unrolled(*args)


class _Range(metaclass=_RangeMeta):
    """``range`` inside a traced function: of a per-sample count (``range(rng.integers(1,
    4))``), a loop unrolled to the count's known bound, each further iteration a branch on the
    count (numpy runs the body that many times for the sample)."""


_Range.__name__ = _Range.__qualname__ = "range"


class _Unrolled:
    """A ``range`` of a per-sample count, as a loop iterates it (:func:`_unrolled`)."""

    def __init__(self, iterations: Callable[[], Iterator[Any]]) -> None:
        self._iterations = iterations

    def __iter__(self) -> Iterator[Any]:
        return self._iterations()


def _unrolled(*args: Any) -> _Unrolled:
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if isinstance(step, Sym) or step != 1:
        raise TraceError("range() of per-sample bounds with a step other than 1")
    for v in (start, stop):
        if isinstance(v, Sym) and (v.ndim or v.dtype.kind not in "iu"):
            raise TypeError(f"'{v.dtype}' object cannot be interpreted as an integer")
    count = ufunc("subtract", stop, start)
    lo, up = lower(count.node), upper(count.node)
    if up is None or up > MAX_UNROLL:
        raise TraceError(f"range() of a per-sample count the tracer cannot bound by "
                         f"{MAX_UNROLL} (the loop is unrolled once per iteration it may take; "
                         f"draw the count from a small range, or loop a constant number of "
                         f"times and skip iterations with an if)")
    sure = builtins.max(0, int(lo)) if lo is not None else 0

    def iterations() -> Iterator[Any]:
        i = start
        for k in builtins.range(int(up)):
            if k >= sure and not (i < stop):  # a branch: the samples whose count is k stop here
                return
            yield i
            i = i + 1
    return _Unrolled(iterations)


def _py_len(x: Any) -> Any:
    if isinstance(x, Sym) and x.ndim and isinstance(x.node.shape[0], Node):
        return Sym(x.node.shape[0])
    return builtins.len(x)


class _Forbidden(types.ModuleType):
    """A module stand-in whose attributes (global random generators) cannot be traced."""

    def __init__(self, what: str, why: str = "global random state; draw from the op's rng"
                 ) -> None:
        super().__init__(what)
        self._what, self._why = what, why

    def __getattr__(self, name: str) -> Any:
        raise TraceError(f"{self._what}.{name} ({self._why})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError(f"{self._what}() ({self._why})")


class _NumpyRandom(_Forbidden):
    """``np.random`` as traced code sees it: global random state refused, but
    ``np.random.default_rng(rng)`` of the op's own generator is that generator, as numpy hands
    back a Generator given to it (skimage's ``random_noise(image, rng=rng)``)."""

    def __init__(self) -> None:
        super().__init__("np.random")

    def __getattr__(self, name: str) -> Any:
        if name != "default_rng":
            return super().__getattr__(name)

        def default_rng(seed: Any = None) -> Any:
            from augment_ops.trace.rng import DrawRng

            if isinstance(seed, DrawRng):
                return seed
            raise TraceError("np.random.default_rng of a seed other than the op's rng (global "
                             "random state; draw from the op's rng)")
        return default_rng


class _StandIn(type):
    """A metaclass of classes that stand in for a real one in traced code
    (:meth:`_stands_for`): equal to it, as a key and in ``in`` (``image.dtype.type in
    (np.uint8, ...)``, ``{np.uint8: 255}[image.dtype.type]``, where the array's dtype gives
    the real type)."""

    def _stands_for(cls) -> type:
        raise NotImplementedError

    def __eq__(cls, other: Any) -> bool:
        return other is cls or other is type(cls)._stands_for(cls)

    def __ne__(cls, other: Any) -> bool:
        return other is not cls and other is not type(cls)._stands_for(cls)

    def __hash__(cls) -> int:
        return hash(type(cls)._stands_for(cls))


class _ScalarTypeMeta(_StandIn):
    """numpy scalar types (``np.uint8(x)``) that convert per-sample values symbolically and
    otherwise behave as the real type (as a dtype, in ``isinstance``)."""

    def _stands_for(cls) -> type:
        return cls.real

    def __instancecheck__(cls, x: Any) -> bool:
        return is_instance(x, cls.real)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], Sym):
            x = args[0]
            if x.node.weak and x.dtype.kind in "iuf" and np.dtype(cls.real).kind in "iu":
                # a Python int (a size) or float (a draw): numpy 2 truncates a float, then
                # raises OverflowError out of the type's range (np.uint8(-58.3)), ValueError
                # for NaN
                from augment_ops.trace.creation import _python_int_checks

                _python_int_checks(x, np.dtype(cls.real))
            if x.ndim and x.dtype == np.dtype(cls.real):
                return x  # numpy gives the array itself back (np.uint8(img) is img)
            # of an array, numpy's scalar type converts it as astype does
            return Sym(cast_node(x.node, cls.real))
        return cls.real(*args, **kwargs)


_SCALAR_TYPES: dict[type, type] = {}


def _scalar_type(real: type) -> type:
    if real not in _SCALAR_TYPES:
        _SCALAR_TYPES[real] = _ScalarTypeMeta(real.__name__, (), {"real": real,
                                                                 "dtype": np.dtype(real)})
    return _SCALAR_TYPES[real]


#: numpy functions whose first argument is one array-like (``np.any([a, b])``): numpy converts
#: a list there to an array, and so does :func:`_lists_converted`.
_ARRAY_LIKE_FIRST = frozenset({"any", "all", "sum", "mean", "max", "min", "amax", "amin", "clip",
                               "round", "around", "prod", "std", "var"})
_LIST_AWARE: dict[str, Callable[..., Any]] = {}


def _lists_converted(name: str, real: Any) -> Callable[..., Any]:
    """numpy function or ufunc ``real`` whose array-like arguments (every positional one of a
    ufunc, the first of :data:`_ARRAY_LIKE_FIRST`) may be lists or tuples holding per-sample
    values (``np.isnan([imin, imax])``, ``np.max([h, w])``): those converted as ``np.asarray``
    converts them, to a traced vector (numpy's own conversion would ask each value for a
    concrete array); the other calls are numpy's own. A ufunc's methods (``np.add.reduce``) and
    attributes are the ufunc's."""
    got = _LIST_AWARE.get(name)
    if got is not None:
        return got
    convert_all = isinstance(real, np.ufunc)

    def call(*args: Any, **kwargs: Any) -> Any:
        if builtins.any(_holds_sym(a) for a in (args if convert_all else args[:1])):
            # the ufunc's other sequences too, as numpy converts them (np.add([h, w], (0, 1)))
            args = tuple(np_asarray(a) if (convert_all or i == 0) and isinstance(a, (list, tuple))
                         else a for i, a in enumerate(args))
        return real(*args, **kwargs)

    wrapper: Any
    if convert_all:
        wrapper = _UfuncLists(real, call)
    else:
        wrapper = call
        call.__name__ = call.__qualname__ = name
        call.__wrapped__ = real  # type: ignore[attr-defined]
    _LIST_AWARE[name] = wrapper
    return wrapper


class _UfuncLists:
    """A ufunc as traced code calls it (:func:`_lists_converted`); its other attributes are the
    ufunc's own."""

    def __init__(self, real: np.ufunc, call: Callable[..., Any]) -> None:
        self._real, self._call = real, call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __repr__(self) -> str:
        return repr(self._real)


class _NumpyProxy(types.ModuleType):
    """``numpy`` as the traced function sees it: all of numpy except the global ``np.random``,
    with scalar types that accept per-sample values."""

    def __init__(self) -> None:
        super().__init__("numpy")

    def __getattr__(self, name: str) -> Any:
        if name == "random":
            return _NumpyRandom()
        # lookup tables and PIL images first (augment_ops.trace.lookup, .pil_api): their
        # np.array / np.asarray hand everything else to numpy_api's
        if name in NUMPY_CALLS:
            return NUMPY_CALLS[name]
        if name in CREATION:
            return CREATION[name]
        v = getattr(np, name)
        if isinstance(v, np.ufunc) or name in _ARRAY_LIKE_FIRST:
            return _lists_converted(name, v)
        if isinstance(v, type) and issubclass(v, np.generic) and v.__module__ == "numpy" and \
                _concrete_kind(v) in tuple("biuf"):
            # ``image.dtype.type is np.uint8`` (skimage's adjust_gamma) compares with the real
            # type that the array's dtype gives: a stand-in there would take the other branch
            frame = sys._getframe(1)
            if _identity_operand(frame.f_code, frame.f_lasti):
                return v
            return _scalar_type(v)
        return v


#: ``(code, offset)``: whether the attribute read at that offset is an operand of ``is``.
_IDENTITY_OPERANDS: dict[tuple[types.CodeType, int], bool] = {}
_SIMPLE_LOADS = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME"})


def _identity_operand(code: types.CodeType, offset: int) -> bool:
    """Whether the attribute read at bytecode ``offset`` of ``code`` is an operand of ``is`` /
    ``is not``: ``x is np.uint8``, or ``np.uint8 is x`` with a plain name or constant ``x``."""
    key = (code, offset)
    found = _IDENTITY_OPERANDS.get(key)
    if found is None:
        ops = [(i.offset, i.opname) for i in dis.get_instructions(code)]
        at = next((k for k, (o, _) in enumerate(ops) if o == offset), None)
        after = [name for _, name in ops[at + 1:at + 3]] if at is not None else []
        found = bool(after) and (after[0] == "IS_OP" or (
            len(after) == 2 and after[0] in _SIMPLE_LOADS and after[1] == "IS_OP"))
        _IDENTITY_OPERANDS[key] = found
    return found


def _concrete_kind(t: type) -> str:
    """The dtype kind of numpy scalar type ``t``; "" for an abstract one (``np.floating``,
    ``np.integer``: classes for ``isinstance``, not dtypes)."""
    try:
        return np.dtype(t).kind
    except TypeError:
        return ""


#: Functions of ``os`` that end or replace the process, refused where the op names them.
_ENDS_PROCESS = ("_exit", "abort", "kill", "killpg", "fork", "forkpty", "system", "execv",
                 "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe")


class _OsProxy(types.ModuleType):
    """``os`` as the traced function sees it: all of ``os`` except what ends the process."""

    def __init__(self) -> None:
        super().__init__("os")

    def __getattr__(self, name: str) -> Any:
        if name in _ENDS_PROCESS:
            raise TraceError(f"os.{name} (it would end or replace the process at loader build)")
        return getattr(os, name)


def _math_exact(name: str) -> Callable[[Any], Any]:
    """``math.<name>`` of a per-sample value, as the numpy function that computes the same
    correctly rounded result (``sqrt``) or integer (``floor``, ``ceil``, ``trunc``)."""
    def f(x: Any) -> Any:
        if name == "sqrt":
            x = _py_float(x)
            # math raises where numpy gives NaN: a check raises it for those samples
            add_guard(ufunc("less", x, 0.0).node, ValueError, "math domain error")
            return _py_float(np.sqrt(x))
        if name == "fabs":
            return _py_float(abs(_py_float(x)))
        if name in ("floor", "ceil", "trunc"):
            v = x if x.dtype.kind in "iub" else getattr(np, name)(_py_float(x))
            return _py_int(v)
        return getattr(np, name)(_py_float(x))  # isfinite, isinf, isnan: a bool
    return f


#: ``math`` functions that numpy computes exactly alike on a per-sample value.
_MATH_EXACT = {name: _math_exact(name) for name in ("sqrt", "fabs", "floor", "ceil", "trunc",
                                                    "isfinite", "isinf", "isnan")}


class _MathProxy(types.ModuleType):
    """``math`` as traced code sees it: :data:`_MATH_EXACT` take per-sample values; the others
    (``exp``, ``log``, ``sin``...) are refused on one, as the C library's result and numpy's may
    differ in the last bit; on concrete numbers, all are ``math``'s own."""

    def __init__(self) -> None:
        super().__init__("math")

    def __getattr__(self, name: str) -> Any:
        real = getattr(math, name)
        if not callable(real):
            return real
        traced = _MATH_EXACT.get(name)

        def f(*args: Any, **kwargs: Any) -> Any:
            if not builtins.any(isinstance(a, Sym) for a in (*args, *kwargs.values())):
                return real(*args, **kwargs)
            if traced is None or len(args) != 1 or kwargs:
                raise TraceError(
                    f"math.{name} of a per-sample value (the C library's {name} and numpy's "
                    "may differ in the last bit, so DALI cannot reproduce it exactly"
                    + (f"; np.{name} would lower" if hasattr(np, name) else "") + ")")
            return traced(args[0])
        f.__name__ = f.__qualname__ = name
        return f


_MATH = _MathProxy()  # stateless: one for every read of math


def _stdlib(filename: str) -> bool:
    """Whether ``filename`` is the standard library's (not an installed package's)."""
    from augment_ops.libfiles import stdlib_file

    return stdlib_file(filename)


def _copied(fn: Any) -> bool:
    """Whether the tracer runs a copy of Python function ``fn`` with the traced names."""
    if not isinstance(fn, types.FunctionType):
        return False
    f = fn.__code__.co_filename
    return not (_is_internal(f) or os.path.abspath(f) == _REGISTRY_FILE or _stdlib(f))


def _proxied(mod: Any) -> bool:
    """Whether module ``mod``'s functions are read through a :class:`_ModuleProxy`: a Python
    module of the user's or of an installed library (not numpy's, the standard library's or
    the tracer's)."""
    f = vars(mod).get("__file__")  # not getattr: a module's __getattr__ may compute anything
    if type(mod) is not types.ModuleType or not isinstance(f, str) or not f.endswith(".py"):
        return False  # the tracer's own stand-ins (np, os), C extensions, namespace packages
    return not _is_internal(f) and not _stdlib(f) and not (
        mod.__name__ == "augment_ops" or mod.__name__.startswith("augment_ops."))


class _ModuleProxy(types.ModuleType):
    """A module as traced code sees it: its Python functions are traced copies."""

    def __init__(self, real: types.ModuleType, rebinder: Rebinder) -> None:
        super().__init__(real.__name__, real.__doc__)
        self._real, self._rebinder = real, rebinder

    def __getattr__(self, name: str) -> Any:
        return self._rebinder.value(getattr(self._real, name))


class _ClassCopy(_StandIn):
    """The metaclass of a traced copy of a class (:meth:`Rebinder.value`): a subclass of the
    real class whose methods are traced copies. It stands in for the real class where traced
    code compares classes: ``isinstance(obj, Cls)`` holds for an object of the real class made
    before the trace, and the copy equals the real class (as a key, in ``==`` and ``in``)."""

    _tracer_real: type

    def _stands_for(cls) -> type:
        return cls._tracer_real

    def __instancecheck__(cls, x: Any) -> bool:
        return type.__instancecheck__(cls, x) or isinstance(x, cls._tracer_real)

    def __subclasscheck__(cls, c: Any) -> bool:
        return type.__subclasscheck__(cls, c) or issubclass(c, cls._tracer_real)


#: Attributes of a class's namespace that Python or ``abc.ABCMeta`` makes for each class (not
#: copied: the copy gets its own).
_CLASS_OWN = frozenset({"__dict__", "__weakref__", "_tracer_real", "_abc_impl",
                        "__abstractmethods__"})


class _ABCClassCopy(_ClassCopy, abc.ABCMeta):
    """The metaclass of a traced copy of an abstract base class or of a subclass of one (an
    ``abc.ABC`` transform base, as MONAI's ``Transform`` is)."""


def _class_copyable(cls: type) -> bool:
    """Whether a traced copy of class ``cls`` may stand in for it: a plain or abstract class
    (metaclass ``type`` or ``abc.ABCMeta``; no ``__slots__``; no ``__init_subclass__`` hook,
    which a new subclass would run, as a registry of subclasses does) of the user's files or an
    installed library's, whose bases are ``object``, ``abc.ABC`` or such classes in turn.
    Enums, exceptions, subclasses of built-in types and C classes are used as they are."""
    if type(cls) not in (type, abc.ABCMeta) or cls is object:
        return False
    mod = sys.modules.get(cls.__module__)
    f = vars(mod).get("__file__") if isinstance(mod, types.ModuleType) else None
    if not isinstance(f, str) or not f.endswith(".py") or _is_internal(f) or \
            os.path.abspath(f) == _REGISTRY_FILE or _stdlib(f):
        return False
    own = vars(cls)
    if "__slots__" in own or "__init_subclass__" in own:
        return False
    return all(b in (object, abc.ABC) or _class_copyable(b) for b in cls.__bases__)


class _TracedGlobals(dict):
    """A module's globals as its traced copies see them: what :func:`_patched` replaces,
    replaced at once; functions and modules when the code first reads them (``LOAD_GLOBAL``
    reads a dict subclass through ``__getitem__``), so only what the op runs is copied."""

    def __init__(self, real: dict[str, Any], rebinder: Rebinder) -> None:
        super().__init__(_patched(real))
        self._rebinder = rebinder
        self._done: set[str] = set()

    def __getitem__(self, name: str) -> Any:
        v = dict.__getitem__(self, name)
        if name not in self._done:
            self._done.add(name)
            v = self._rebinder.value(v)
            dict.__setitem__(self, name, v)
        return v


#: Built-in types ``type(x) is T`` compares with (the traced ``type`` gives a default's
#: stand-in the type of the default).
_BUILTIN_TYPES = frozenset({"list", "tuple", "dict", "set", "frozenset", "int", "float", "str",
                            "bytes", "bool", "type"})


def _identity_free(code: types.CodeType) -> bool:
    """Whether ``code`` (and the code nested in it) asks for no object's identity but ``None``'s
    and a built-in type's: no ``is`` but ``x is None``, ``None is x`` and ``type(x) is list``,
    no ``id()``. A list or tuple default's stand-in
    (:func:`augment_ops.trace.const_list.stand_in`) is another object, so ``sizes is DEFAULT``
    would change its answer; such a function keeps its defaults."""
    for c in _codes(code):
        listing = [i for i in dis.get_instructions(c) if i.opname not in ("CACHE", "NOP")]
        for at, ins in enumerate(listing):
            if ins.opname == "LOAD_GLOBAL" and ins.argval == "id":
                return False
            if ins.opname != "IS_OP":
                continue
            near = listing[max(at - 2, 0):at]
            if not any((i.opname == "LOAD_CONST" and i.argval is None) or (
                    i.opname == "LOAD_GLOBAL" and i.argval in _BUILTIN_TYPES) for i in near):
                return False
    return True


#: The most items of a dict of functions whose functions are copied when the op reads it.
_MAX_DICT_OF_FUNCTIONS = 512


class Rebinder:
    """The traced copies of the functions one trace runs, each made once: the op's function and,
    as the code reads them, the functions it calls (:class:`_TracedGlobals`), each with its own
    module's globals, and the functions its closures hold (a decorator's wrapped function)."""

    def __init__(self) -> None:
        self._functions: dict[int, tuple[Any, Any]] = {}  # id(fn): (fn, copy)
        self._globals: dict[int, tuple[dict, dict]] = {}  # id(module dict): (dict, traced)
        self._modules: dict[int, tuple[Any, Any]] = {}  # id(module): (module, proxy)
        self._classes: dict[int, tuple[type, type]] = {}  # id(class): (class, copy)
        self._libs = library_handlers()

    def op(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The copy of the op's function ``fn`` that the tracer runs."""
        if not isinstance(fn, types.FunctionType):
            raise TraceError(f"the op is a {type(fn).__name__}, not a Python function")
        return self._copy(fn)

    def value(self, v: Any) -> Any:
        """What traced code reads in place of ``v`` (a function, a module), else ``v``."""
        if callable(v) and id(v) in self._libs and self._libs[id(v)][0] is v:
            return wrap_library(*self._libs[id(v)])  # albucore.sz_lut: lowered as it is
        if _copied(v):
            return self._copy(v)
        if isinstance(v, type) and _class_copyable(v):
            return self._class(v)
        if isinstance(v, types.BuiltinFunctionType) and getattr(v, "__self__", None) is math:
            return getattr(_MATH, v.__name__)  # from math import sqrt
        if type(v) is dict and len(v) <= _MAX_DICT_OF_FUNCTIONS and any(
                _copied(x) or (isinstance(x, type) and _class_copyable(x)) for x in v.values()):
            # A table of functions the op picks from (timm's NAME_TO_OP, RandAugment's op
            # lists): the functions it calls through it run as traced copies too. A new dict of
            # the same items; the op only reads it (augment_ops.state refuses a write to it).
            held = self._modules.get(id(v))
            if held is None:
                table = {k: self.value(x) if not isinstance(x, dict) else x
                         for k, x in v.items()}
                held = self._modules[id(v)] = (v, table)
            return held[1]
        if isinstance(v, types.ModuleType):
            if v is math:
                return _MATH
            if _proxied(v):
                held = self._modules.get(id(v))
                if held is None:
                    held = self._modules[id(v)] = (v, _ModuleProxy(v, self))
                return held[1]
        return v

    def _copy(self, fn: types.FunctionType) -> types.FunctionType:
        held = self._functions.get(id(fn))
        if held is not None:
            return held[1]
        g = self._globals.get(id(fn.__globals__))
        if g is None:
            g = self._globals[id(fn.__globals__)] = (fn.__globals__,
                                                     _TracedGlobals(fn.__globals__, self))
        cells = tuple(types.CellType() for _ in fn.__closure__ or ())
        defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
        if not library_file(fn.__code__.co_filename) and _identity_free(fn.__code__):
            # a list default (which the op's function only reads: augment_ops.state) or tuple
            # default indexed by a per-sample value: sizes[rng.integers(0, len(sizes))]
            defaults = tuple(map(stand_in, defaults)) if defaults else defaults
            kwdefaults = {k: stand_in(v) for k, v in kwdefaults.items()} if kwdefaults else \
                kwdefaults
        f = types.FunctionType(fn.__code__, g[1], fn.__name__, defaults, cells or None)
        # cached before its closure is filled: a closure may hold the function itself
        self._functions[id(fn)] = (fn, f)
        for cell, held in zip(cells, self._closure(fn), strict=True):
            if held is not _EMPTY:
                cell.cell_contents = held
        f.__kwdefaults__ = kwdefaults
        f.__qualname__ = fn.__qualname__
        f.__dict__.update(fn.__dict__)
        return f

    def _class(self, cls: type) -> type:
        """The traced copy of class ``cls``: a subclass of it (an object of it is an object of
        ``cls`` for code that is not copied) whose bases are the copies of ``cls``'s bases, so
        that ``super()`` in a copied method reaches the copied method of the base, and whose
        functions, static, class methods and properties, its own and its bases', are traced
        copies. A method's ``__class__`` (zero-argument ``super()``) is the copy."""
        held = self._classes.get(id(cls))
        if held is not None:
            return held[1]
        bases = tuple(self._class(b) for b in cls.__bases__ if b not in (object, abc.ABC))
        ns = {k: v for k, v in vars(cls).items() if k not in _CLASS_OWN}
        plain = {k: v for k, v in ns.items() if not self._method_like(v)}
        meta = _ABCClassCopy if type(cls) is abc.ABCMeta else _ClassCopy
        try:
            if any(type(b) not in (_ClassCopy, _ABCClassCopy) for b in bases):
                raise TypeError("a base is used as it is")
            copy = meta(cls.__name__, (*bases, cls), {**plain, "_tracer_real": cls})
        except TypeError:
            # no copy: a base could not be copied, or the copies' bases have no consistent
            # order (a multiple-inheritance diamond); the class is used as it is
            self._classes[id(cls)] = (cls, cls)
            return cls
        copy.__qualname__ = cls.__qualname__
        # cached before its methods are copied: their __class__ cells name the class itself
        self._classes[id(cls)] = (cls, copy)
        for k, v in ns.items():
            if k not in plain:
                type.__setattr__(copy, k, self._method(v))
        if meta is _ABCClassCopy:  # abstract as the real class is (computed before the methods)
            abc.update_abstractmethods(copy)
        return copy

    @staticmethod
    def _method_like(v: Any) -> bool:
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        elif isinstance(v, property):
            return any(_copied(f) for f in (v.fget, v.fset, v.fdel))
        return _copied(v)

    def _method(self, v: Any) -> Any:
        """A traced copy of a class's function, static or class method or property."""
        if isinstance(v, (staticmethod, classmethod)):
            return type(v)(self.value(v.__func__))
        if isinstance(v, property):
            return property(*(self.value(f) if f is not None else None
                              for f in (v.fget, v.fset, v.fdel)), v.__doc__)
        return self.value(v)

    def _closure(self, fn: types.FunctionType) -> list[Any]:
        """What ``fn``'s closure cells hold, functions copied and modules proxied too
        (``functools.wraps``' ``__wrapped__``, a factory's inner function): a decorated op's own
        code then sees the traced names, as an undecorated one does. :data:`_EMPTY` for an
        empty cell."""
        held = []
        for cell in fn.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                held.append(_EMPTY)
                continue
            held.append(self.value(v))
        return held


#: An empty closure cell's content.
_EMPTY = object()


def _patched(g: dict[str, Any]) -> dict[str, Any]:
    """A copy of module globals ``g`` with the traced ``np``, ``os`` and built-ins, the library
    helpers the tracer lowers (:func:`~augment_ops.trace.cv2_api.library_handlers`), constant
    tables as lookup tables, and global random state refused."""
    import random as py_random

    ends = {id(getattr(os, n)): n for n in _ENDS_PROCESS if hasattr(os, n)}
    libs = library_handlers()
    # ``from numpy import asarray``: numpy's array makers do not dispatch to a traced array, so
    # the names bound to them are the traced np's, as ``np.asarray`` is
    makers = {id(getattr(np, n)): n for n in (*NUMPY_CALLS, *CREATION) if hasattr(np, n)}
    g = dict(g)
    for k, v in list(g.items()):
        if v is np:
            g[k] = _NumpyProxy()
        elif id(v) in makers and v is getattr(np, makers[id(v)]):
            g[k] = NUMPY_CALLS.get(makers[id(v)], CREATION.get(makers[id(v)]))
        elif callable(v) and id(v) in libs and libs[id(v)][0] is v:
            g[k] = wrap_library(*libs[id(v)])
        elif table_view(v) is not None:  # a read-only constant table: LUT[img] traces
            g[k] = table_view(v)
        elif v is os:
            g[k] = _OsProxy()
        elif id(v) in ends and v is getattr(os, ends[id(v)]):
            g[k] = _Forbidden(f"os.{ends[id(v)]}", "it would end or replace the process at "
                              "loader build")
        elif v is np.random or v is py_random:
            g[k] = _Forbidden(k)
        elif callable(v) and not isinstance(v, type) and (
                (getattr(v, "__module__", None) or "").startswith("numpy.random")
                or getattr(v, "__module__", None) == "random"
                or isinstance(getattr(v, "__self__", None),
                              (py_random.Random, np.random.RandomState))):
            g[k] = _Forbidden(f"{k}")
    b = dict(vars(builtins))
    b.update(int=_Int, float=_Float, min=_py_minmax("min"), max=_py_minmax("max"),
             len=_py_len, type=_Type, range=_Range)
    # Refused where the trace reaches them, not wherever they stand (augment_ops.state).
    b.update({name: _Forbidden(name, "it runs code that may read or write state outside the "
                                     "op; the traced graph would keep the value it had at "
                                     "loader build")
              for name in RUNNING_BUILTINS})
    g["__builtins__"] = b
    return g
