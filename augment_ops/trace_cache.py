"""The process's cache of traced graphs, keyed by what a trace depends on, not by the op object.

A second loader with the same op, ``op.with_params`` of the same values, or a notebook cell run
again (a new function object of the same code) reuse the graph traced first. The key holds:

- the op's code: bytecode, constants, names and argument layout, recursively for the code objects
  nested in it (lambdas, comprehensions) and for the functions it calls through its globals;
- the values it reads: its globals (and the attributes of modules it reads that are not numpy's or
  the standard library's), closure cells, defaults, ``with_params`` parameters;
- the op's declaration (random, outputs, dtype, rank) and the versions of Python, numpy, DALI and
  extsrc.

A redefined op with other code or other values gets a graph of its own. A function reading a value
the key cannot describe (an object of a user's class, a function that is not Python code) is
cached per op object instead, as long as the op lives. A refusal (:class:`TraceError`) is reused
only where every function involved still starts at the same lines, since its message names the
source line. :func:`clear_trace_cache` empties the cache.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["MAX_CACHED_TRACES", "TraceCache", "clear_trace_cache", "op_key"]

#: The most traced graphs the process keeps (the least recently used go first).
MAX_CACHED_TRACES = 256


class _Unkeyable(Exception):
    """A value the key cannot describe by content."""


_SCALARS = (type(None), bool, int, str, bytes, complex, type(Ellipsis))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins", "numpy"}
_LIBRARY_DIRS = tuple(os.path.abspath(d) + os.sep for d in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
    os.path.dirname(np.__file__)))


def _is_library(module: Any) -> bool:
    """Whether ``module`` (a name) is numpy or the standard library, whose code the versions fix:
    not a user's module that happens to share a standard name (``code.py``, ``trace.py``)."""
    if not isinstance(module, str) or module.split(".")[0] not in _STDLIB:
        return False
    top = sys.modules.get(module.split(".")[0])
    path = getattr(top, "__file__", None)
    return path is None or os.path.abspath(path).startswith(_LIBRARY_DIRS)


@functools.cache
def _versions() -> tuple[str, ...]:
    from importlib import metadata

    def version(*names: str) -> str:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "?"

    # The imported DALI's own version: finding its distribution among all installed ones took
    # 0.05-0.09 s of a loader's first trace.
    dali = getattr(sys.modules.get("nvidia.dali"), "__version__", None) or next(
        (d.version for d in metadata.distributions()
         if (d.metadata["Name"] or "").lower().startswith("nvidia-dali")), "?")
    return (sys.version, np.__version__, dali, version("extsrc"))


def _code_key(code: types.CodeType) -> tuple:
    consts = tuple(_code_key(c) if isinstance(c, types.CodeType) else _value_key(c, None, set())
                   for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_flags, getattr(code, "co_exceptiontable", b""))


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})


@functools.lru_cache(maxsize=1024)
def _names(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The global names, and the attribute names, the code and the code nested in it use
    (``np.rot90`` reads the attribute ``rot90``, not a global of that name)."""
    glob: set[str] = set()
    attrs: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in _GLOBAL_OPS:
            glob.add(ins.argval)
        elif isinstance(ins.argval, str) and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            attrs.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            g, a = _names(c)
            glob |= g
            attrs |= a
    return frozenset(glob), frozenset(attrs)


def _lines(code: types.CodeType) -> tuple:
    return (code.co_filename, code.co_firstlineno, tuple(code.co_lines()),
            *(_lines(c) for c in code.co_consts if isinstance(c, types.CodeType)))


def _function_key(fn: types.FunctionType, where: list | None, seen: set) -> tuple:
    code = fn.__code__
    # By the function object, not its code: closures made by one factory share their code and
    # differ in their cells, and each must be keyed with its own.
    if id(fn) in seen:  # recursion, or reached again: the function is keyed already
        return ("recursive", code.co_filename, code.co_name)
    seen.add(id(fn))
    if where is not None:
        where.append(_lines(code))
    names, attrs = _names(code)
    g = fn.__globals__
    refs = tuple((n, _global_key(g[n], attrs, where, seen)) for n in sorted(names) if n in g)
    cells = tuple(_value_key(c.cell_contents, where, seen) if _filled(c) else ("empty",)
                  for c in fn.__closure__ or ())
    return ("function", _code_key(code), refs, cells,
            _value_key(fn.__defaults__, where, seen), _value_key(fn.__kwdefaults__, where, seen))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _global_key(v: Any, names: frozenset[str], where: list | None, seen: set) -> Any:
    """A global's key: a module the code reads attributes of is keyed by those attributes'
    values (a constant in a user's config module), except numpy and the standard library."""
    if isinstance(v, types.ModuleType):
        mark = (id(v), id(names))  # a module reached again from the same code (pkg.sub.pkg)
        if _is_library(v.__name__) or mark in seen:
            return ("module", v.__name__)
        seen.add(mark)
        return ("module", v.__name__, tuple(
            (n, _global_key(getattr(v, n), names, where, seen)) for n in sorted(names)
            if hasattr(v, n)))
    return _value_key(v, where, seen)


#: What a library's name fixes: its functions (numpy's public ones are dispatcher objects) and
#: its types.
_NAMED = (types.BuiltinFunctionType, types.FunctionType, type, type(np.clip))


def _value_key(v: Any, where: list | None, seen: set) -> Any:
    t = type(v)
    if t in _SCALARS:
        return (t.__name__, v)
    if t is float:  # repr: nan equals itself, -0.0 differs from 0.0
        return ("float", repr(v))
    if t in (tuple, list):
        return (t.__name__, *(_value_key(x, where, seen) for x in v))
    if t in (set, frozenset):
        return (t.__name__, tuple(sorted(repr(_value_key(x, where, seen)) for x in v)))
    if t is dict:
        return ("dict", tuple(sorted((repr(_value_key(k, where, seen)),
                                      _value_key(x, where, seen)) for k, x in v.items())))
    if t is slice:
        return ("slice", *(_value_key(x, where, seen) for x in (v.start, v.stop, v.step)))
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            raise _Unkeyable
        # A digest keeps the key small for a large table; computed per lookup, like the rest.
        digest = hashlib.blake2b(np.ascontiguousarray(v).reshape(-1).view(np.uint8).data).digest()
        return ("ndarray", v.dtype.str, v.shape, digest)
    if isinstance(v, np.generic) and not isinstance(v, np.object_):
        return ("numpy", v.dtype.str, v.tobytes())
    if isinstance(v, np.dtype):
        return ("dtype", str(v), v.str)
    if isinstance(v, np.ufunc):
        return ("ufunc", v.__name__)
    if isinstance(v, types.ModuleType) and _is_library(v.__name__):
        return ("module", v.__name__)
    module = getattr(v, "__module__", None)
    if isinstance(v, _NAMED) and _is_library(module):
        # numpy's and the standard library's functions and types: fixed by the versions. Only
        # these: an instance of a library class (functools.partial, np.vectorize) carries values
        # its name does not say.
        return ("named", module, getattr(v, "__qualname__", None) or v.__name__)
    if isinstance(v, types.FunctionType):
        return _function_key(v, where, seen)
    if type(v).__name__ == "Op" and type(v).__module__ == "augment_ops.registry":
        return ("Op", _value_key(v.fn, where, seen), _value_key(v.params, where, seen))
    raise _Unkeyable


def op_key(op: Any, limits: tuple = ()) -> tuple[tuple, tuple] | None:
    """``(key, where)`` of a registered op's trace, or None where a value it reads has no key.

    ``key`` decides the graph (with the tracer's ``limits``); ``where`` is where its functions'
    lines are, which a refusal's message names."""
    fn = op.fn
    if not isinstance(fn, types.FunctionType):
        return None
    where: list = []
    try:
        key = ("op", _function_key(fn, where, set()), _value_key(tuple(op.params), None, set()),
               bool(op.random), int(op.num_outputs), np.dtype(op.dtype).str, int(op.ndim),
               _versions(), limits)
    except (_Unkeyable, RecursionError):
        return None
    return key, tuple(where)


class TraceCache:
    """Traced graphs and refusals by :func:`op_key`; thread-safe, bounded (least recently used
    out first)."""

    def __init__(self, max_entries: int = MAX_CACHED_TRACES) -> None:
        self._max = max_entries
        self._entries: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[tuple, tuple], is_refusal: Callable[[Any], bool]) -> Any:
        """The cached result, or None."""
        content, where = key
        with self._lock:
            got = self._entries.get(content)
            if got is None or (is_refusal(got[1]) and got[0] != where):
                self.misses += 1
                return None
            self._entries.move_to_end(content)
            self.hits += 1
            return got[1]

    def put(self, key: tuple[tuple, tuple], value: Any) -> None:
        content, where = key
        with self._lock:
            self._entries[content] = (where, value)
            self._entries.move_to_end(content)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


#: The process's cache (see :func:`augment_ops.trace.trace_op`).
CACHE = TraceCache()
#: Graphs (or refusals) per op object, for ops reading a value that has no key; the tracer
#: fills it, :func:`clear_trace_cache` empties it with :data:`CACHE`.
PER_OP: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def clear_trace_cache() -> None:
    """Forget every traced graph in this process: the next loader traces its ops again.

    Not needed for correctness (a changed op gets a new graph); it frees the memory, or makes a
    loader trace anew to time or debug the tracer."""
    CACHE.clear()
    PER_OP.clear()
