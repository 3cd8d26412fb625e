"""Which state outside its own call an op reads or writes, found in its bytecode before tracing.

Tracing runs the op once at loader build and keeps what it computed as constants of the graph;
the numpy path runs the op again for every sample. The two agree only if the op depends on its
image, its ``rng`` and its parameters alone. :func:`outside_state` finds where an op's function,
or a Python function it calls (found through its globals, closure, defaults and parameters, and
attributes of modules it names), does not:

- writes a global (``global n; n += 1``), a closure variable (``nonlocal``), or an attribute
  (``obj.x = ...``) of an object not seen made in the same call (``t = Cls(a, k=b)`` then
  ``t.x = ...`` is allowed where every assignment of ``t`` is such a call of a class that makes a
  new object: the object is made anew at every call, so nothing of it is frozen);
- reads a global, closure variable, module attribute or default value that is not a constant:
  a list, dict, set, bytearray, writable ndarray, an object with state (a method of one,
  ``os.environ``), or a global or closure variable that another function of its module writes
  (a module-level dict, list or set that no function of its module writes and that the
  op only reads, such as albucore's ``MAX_VALUES_BY_DTYPE[img.dtype]``, is kept as a
  constant);
- calls a built-in that reads or writes the world: ``open``, ``input``, ``eval``, ``exec``,
  ``globals``, ``setattr``, ``delattr``, ``breakpoint``;
- draws from global random state (``random.random``, a method of a ``random.Random`` or
  ``np.random.RandomState``).

Constants are ``None``, numbers, strings, bytes, numpy scalars and dtypes, read-only ndarrays,
modules, classes, functions (looked into in turn), ufuncs and built-in functions of modules,
enum members, and tuples, frozensets, ``functools.partial`` objects and frozen dataclasses (ops
among them) made of constants. numpy's own modules and functions are not looked into (the tracer
refuses ``np.random`` when the op runs), nor are functions of installed libraries (the tracer
refuses what it cannot lower of them). Nothing here imports DALI or runs the op.
"""

from __future__ import annotations

import abc
import builtins
import dataclasses
import dis
import enum
import functools
import linecache
import os
import random
import sys
import sysconfig
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["library_file", "outside_state"]

#: Built-ins whose call reads or writes state outside the op.
_WORLD_BUILTINS = frozenset({"open", "input", "eval", "exec", "globals", "setattr", "delattr",
                             "breakpoint"})
#: The most functions looked into for one op (the op's own code and what it calls).
_MAX_FUNCTIONS = 200
_KEEPS = "the traced graph would keep the value it had at loader build"
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib", "purelib",
                                                              "platlib")
                       if (p := sysconfig.get_paths().get(k))})

Finding = tuple[str, str]  # (construct, "file:line: code")


def _where(code: types.CodeType, line: int | None) -> str:
    line = line or code.co_firstlineno
    text = linecache.getline(code.co_filename, line).strip()
    return f"{code.co_filename}:{line}: {text}" if text else f"{code.co_filename}:{line}"


def library_file(filename: str) -> bool:
    """Whether ``filename`` is numpy's, the standard library's or an installed library's (not
    the user's own code, which may also be a notebook cell or ``exec``'s ``<string>``)."""
    if filename.startswith("<frozen"):
        return True
    f = os.path.abspath(filename)
    return f.startswith(_NUMPY_DIR) or f.startswith(_LIBRARY_DIRS)


def _is_library(code: types.CodeType) -> bool:
    return library_file(code.co_filename)


def _is_numpy(obj: Any) -> bool:
    mod = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return isinstance(mod, str) and (mod == "numpy" or mod.startswith("numpy."))


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the lambdas, comprehensions and functions defined inside it."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _random_state(v: Any) -> bool:
    return isinstance(getattr(v, "__self__", None), (random.Random, np.random.RandomState))


def _not_constant(v: Any, functions: list[Any], depth: int = 0) -> str | None:
    """Why ``v`` is not a constant (``None`` if it is); functions met are appended to
    ``functions`` to be looked into."""
    if v is None or v is Ellipsis or isinstance(v, (bool, int, float, complex, str, bytes, range,
                                                    np.generic, np.dtype, enum.Enum, slice)):
        return None
    if isinstance(v, (types.ModuleType, type, np.ufunc)):
        return None
    if isinstance(v, types.FunctionType):
        functions.append(v)
        return None
    if isinstance(v, np.ndarray):
        return None if not v.flags.writeable else (
            "a writable ndarray (make it read-only: arr.setflags(write=False))")
    if isinstance(v, (list, dict, set, bytearray)):
        return f"a {type(v).__name__}, which can change (make it a tuple or a parameter)"
    if depth > 8:
        return f"a {type(v).__name__} nested too deep to check"
    if isinstance(v, (tuple, frozenset)):
        return next((f"a {type(v).__name__} holding {r}" for x in v
                     if (r := _not_constant(x, functions, depth + 1))), None)
    if isinstance(v, functools.partial):
        return next((f"a functools.partial of {r}" for x in (v.func, *v.args,
                                                            *v.keywords.values())
                     if (r := _not_constant(x, functions, depth + 1))), None)
    if isinstance(v, (types.BuiltinFunctionType, types.MethodType, types.MethodWrapperType)):
        owner = getattr(v, "__self__", None)
        if owner is None or isinstance(owner, (types.ModuleType, type)):
            return None
        if isinstance(v, types.MethodType) and isinstance(v.__func__, types.FunctionType):
            functions.append(v.__func__)
        r = _not_constant(owner, functions, depth + 1)
        return None if r is None else f"a method of {r}"
    if dataclasses.is_dataclass(v) and v.__dataclass_params__.frozen:  # type: ignore[union-attr]
        for f in dataclasses.fields(v):
            r = _not_constant(getattr(v, f.name), functions, depth + 1)
            if r is not None:
                return f"a frozen {type(v).__name__} whose {f.name} is {r}"
        return None
    return f"a {type(v).__module__}.{type(v).__qualname__} object, which has state"


def _module_functions(g: dict[str, Any]) -> list[types.FunctionType]:
    """The functions of the module of globals ``g``: those defined in it, and the methods of
    the classes defined in it."""
    functions: list[types.FunctionType] = []
    for v in list(g.values()):
        if isinstance(v, types.FunctionType) and v.__globals__ is g:
            functions.append(v)
        elif isinstance(v, type) and v.__module__ == g.get("__name__"):
            functions += [m for m in vars(v).values() if isinstance(m, types.FunctionType)]
    return functions


def _module_writes(g: dict[str, Any], names: set[str]) -> dict[str, str]:
    """Of ``names``, those some function of the module of globals ``g`` writes (as a global, or
    as a closure variable with ``nonlocal``), with the writer's name."""
    found: dict[str, str] = {}
    for fn in _module_functions(g):
        for code in _codes(fn.__code__):
            hit = names & (set(code.co_names) | set(code.co_freevars))
            if not hit:
                continue
            for ins in dis.get_instructions(code):
                if ins.argval in hit and (ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") or (
                        ins.opname in ("STORE_DEREF", "DELETE_DEREF")
                        and ins.argval in code.co_freevars)):
                    found.setdefault(ins.argval, f"{code.co_qualname}()")
    return found


def _look_into(fn: types.FunctionType, params: dict[str, Any],
               functions: list[Any], baked: list[Finding] | None = None) -> Finding | None:
    """The first read or write of outside state in ``fn`` itself (its defaults, its code and the
    code nested in it); the functions it calls are appended to ``functions``."""
    found = _default_reads(fn, params, functions, baked)
    if found is not None:
        return found
    # parameter values are the op's arguments, not outside state; functions among them are
    # looked into as functions the op calls
    functions.extend(v for v in params.values() if isinstance(v, types.FunctionType))
    scan = _Scan(fn, functions)
    for code in _codes(fn.__code__):
        found = scan.instructions(code)
        if found is not None:
            return found
    if baked is not None:
        baked.extend(scan.baked)
    return scan.read_what_the_module_writes()


def _default_reads(fn: types.FunctionType, params: dict[str, Any],
                   functions: list[Any], baked: list[Finding] | None = None) -> Finding | None:
    """A default value of a parameter the op's parameters do not bind that is not a constant.

    A list or dict default made of constants that the function only reads (each use of the
    parameter a subscript, ``in``, iteration or a reading method; no name bound to it, no call
    given it) is one: the object is reachable only through the function, which never changes
    it, so every call sees the value the trace saw. It is appended to ``baked``."""
    top = fn.__code__
    names = top.co_varnames[:top.co_argcount + top.co_kwonlyargcount]
    defaults = dict(zip(names[top.co_argcount - len(fn.__defaults__ or ()):top.co_argcount],
                        fn.__defaults__ or (), strict=True))
    defaults.update(fn.__kwdefaults__ or {})
    for name, v in defaults.items():
        if name in params or name == "rng":
            continue
        r = _not_constant(v, functions)
        if r is not None and _read_only_default(fn, name, v, functions):
            if baked is not None:
                baked.append((f"the default value of '{name}' (a {type(v).__name__} the "
                              "function only reads) read as a constant",
                              _where(top, _parameter_line(top, name))))
            continue
        if r is not None:
            return (f"a read of the default value of '{name}', {r}; {_KEEPS}",
                    _where(top, _parameter_line(top, name)))
    return None


def _read_only_default(fn: types.FunctionType, name: str, v: Any, functions: list[Any]
                       ) -> bool:
    """Whether default ``v`` of parameter ``name`` is a list or dict of constants that ``fn``
    only reads (see :func:`_default_reads`)."""
    if not isinstance(v, (list, dict)):
        return False
    items = tuple(v) if isinstance(v, list) else (*v.keys(), *v.values())
    if _not_constant(items, functions) is not None:
        return False
    top = fn.__code__
    if name in top.co_cellvars:  # captured by a nested function: its uses are not all here
        return False
    listing = list(dis.get_instructions(top))
    return all(_only_read(listing, at) for at, ins in enumerate(listing)
               if ins.argval == name and ins.opname.startswith("LOAD_FAST"))


def _parameter_line(code: types.CodeType, name: str) -> int:
    """The line of the ``def`` (from the line ``code`` starts at, a decorator's) that declares
    parameter ``name``; the ``def`` line, or the first line, where not found."""
    import re

    declares = re.compile(rf"(?:\(|,|^)\s*\*{{0,2}}{re.escape(name)}\s*[:=,)]")
    first_def = None
    for line in range(code.co_firstlineno, code.co_firstlineno + 60):
        text = linecache.getline(code.co_filename, line)
        if not text:
            break
        if first_def is None and re.match(r"\s*(async\s+)?def\s", text):
            first_def = line
        if first_def is not None and declares.search(text):
            return line
        if first_def is not None and text.rstrip().endswith(":") and "def" not in text and \
                line > first_def and ")" in text:
            break
    return first_def or code.co_firstlineno


#: (items popped, items pushed) of the instructions a subscript's key may be made of.
_KEY_PARTS = {"LOAD_FAST": (0, 1), "LOAD_CONST": (0, 1), "LOAD_DEREF": (0, 1),
              "LOAD_NAME": (0, 1), "LOAD_ATTR": (1, 1), "BINARY_OP": (2, 1),
              "BINARY_SUBSCR": (2, 1), "UNARY_NEGATIVE": (1, 1), "BUILD_TUPLE": (None, 1)}
#: Built-ins that read their one argument and keep no reference to it.
_READING_BUILTINS = frozenset({"len", "tuple", "sorted", "min", "max", "sum", "any", "all",
                               "frozenset"})
#: Methods of a dict or list that read it.
_READ_METHODS = frozenset({"get", "keys", "values", "items", "copy", "index", "count",
                           "__getitem__", "__contains__", "__len__"})


def _only_read(listing: list[dis.Instruction], at: int) -> bool:
    """Whether the value that instruction ``listing[at]`` loads is only read where it is used:
    subscripted (``X[key]``, the key made of loads, attributes and arithmetic), tested with
    ``in``, iterated, or a reading method of it looked up (``X.get``). Anything else (an
    argument of a call, a name bound to it, ``X[k] = v``) may write it."""
    above = 0  # items on the stack above the value
    for ins in listing[at + 1:]:
        if ins.opname == "LOAD_GLOBAL":
            pops, pushes = 0, 1 + (ins.arg & 1)
        elif ins.opname == "BUILD_TUPLE":
            pops, pushes = ins.arg, 1
        elif ins.opname in _KEY_PARTS:
            pops, pushes = _KEY_PARTS[ins.opname]
        elif ins.opname in ("CACHE", "NOP", "EXTENDED_ARG"):
            continue
        else:
            pops, pushes = None, 0
        if pops is not None and pops <= above:
            above += pushes - pops
            continue
        # this instruction uses the value
        if ins.opname == "BINARY_SUBSCR":
            return above == 1
        if ins.opname in ("CONTAINS_OP", "GET_ITER"):
            return above == 0
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            return above == 0 and ins.argval in _READ_METHODS
        if ins.opname in ("PRECALL", "CALL") and above == 0 and ins.arg == 1 and at > 0:
            # the only argument of a built-in that reads it: len(X), tuple(X), sorted(X) ...
            f = listing[at - 1]
            return f.opname == "LOAD_GLOBAL" and f.argval in _READING_BUILTINS
        return False
    return False


def _module_writer(v: Any, own: dict[str, Any]) -> str | None:
    """``"f() of module m"`` for a function of a module holding ``v`` as a global (a loaded
    module, or ``own``, the globals of the function reading it) that may write it (uses it
    otherwise than :func:`_only_read` allows, or rebinds the name); ``None`` if no code of those
    modules does. Code at a module's top level has run before the op is traced."""
    spaces = [own] + [getattr(m, "__dict__", None) for m in list(sys.modules.values())]
    for g in spaces:
        if not isinstance(g, dict):
            continue
        names = {k for k, x in list(g.items()) if x is v}
        if not names:
            continue
        for fn in _module_functions(g):
            for code in _codes(fn.__code__):
                if not names & set(code.co_names):
                    continue
                listing = list(dis.get_instructions(code))
                for at, ins in enumerate(listing):
                    if ins.argval in names and (
                            ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") or (
                                ins.opname == "LOAD_GLOBAL" and not _only_read(listing, at))):
                        return f"{code.co_qualname}() of {g.get('__name__', 'its module')}"
    return None


#: Instructions that change no stack and no state.
_NO_EFFECT = frozenset({"CACHE", "NOP", "EXTENDED_ARG", "KW_NAMES", "PRECALL", "RESUME"})
#: Instructions that push one value and pop none: a call's arguments made of them alone.
_PLAIN_LOADS = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_GLOBAL"})


def _before(listing: list[dis.Instruction], at: int) -> int | None:
    """The index of the instruction before ``listing[at]`` that does something."""
    return next((j for j in range(at - 1, -1, -1) if listing[j].opname not in _NO_EFFECT),
                None)


def _class_called(listing: list[dis.Instruction], call: int) -> str | None:
    """The global name ``listing[call]`` (a ``CALL``) calls, where its arguments are plain
    loads (``Cls(a, 2, key=b)``); ``None`` otherwise (``Cls.make()``, ``Cls(a + 1)``: what
    they hand back is not told by the name)."""
    j, args = call, 0
    while (j := _before(listing, j)) is not None:
        ins = listing[j]
        pushes_null = ins.opname == "LOAD_GLOBAL" and bool((ins.arg or 0) & 1)
        if args == listing[call].arg:
            return str(ins.argval) if ins.opname == "LOAD_GLOBAL" else None
        if ins.opname not in _PLAIN_LOADS or pushes_null:
            return None
        args += 1
    return None


def _makes_a_new_object(cls: Any) -> bool:
    """Whether calling ``cls`` makes a new object every time: a class with neither a
    ``__new__`` of its own nor a metaclass that may hand back an existing object (a cache, a
    singleton)."""
    return isinstance(cls, type) and type(cls) in (type, abc.ABCMeta) and \
        cls.__new__ is object.__new__


def _fresh_locals(code: types.CodeType, listing: list[dis.Instruction],
                  g: dict[str, Any]) -> set[str]:
    """The local variables of ``code`` that only ever hold an object made by this call of it:
    every assignment to one is ``name = Cls(...)`` of a global class that makes a new object
    (see :func:`_makes_a_new_object`), and none is a parameter, which holds the caller's object
    (nor a variable a nested function shares, which this code does not assign alone)."""
    params = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                                  + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)])
    fresh: dict[str, bool] = {}
    for at, ins in enumerate(listing):
        if ins.opname not in ("STORE_FAST", "DELETE_FAST"):
            continue
        call = _before(listing, at)
        name = _class_called(listing, call) if call is not None and \
            listing[call].opname == "CALL" else None
        ok = ins.opname == "STORE_FAST" and ins.argval not in params and name is not None \
            and _makes_a_new_object(g.get(name))
        fresh[ins.argval] = fresh.get(ins.argval, True) and ok
    return {name for name, ok in fresh.items() if ok}


class _Scan:
    """The reads and writes in the bytecode of one function: writes of globals, closure
    variables and attributes are refused at once; the values it reads are checked as they are
    met, and the globals and closure variables read are kept to compare with what the rest of
    its module writes."""

    def __init__(self, fn: types.FunctionType, functions: list[Any]) -> None:
        self.top = fn.__code__
        self.g = fn.__globals__
        bi = self.g.get("__builtins__", builtins)
        self.builtins = vars(bi) if isinstance(bi, types.ModuleType) else bi
        self.cells = dict(zip(self.top.co_freevars, fn.__closure__ or (), strict=True))
        self.functions = functions
        self.read_globals: dict[str, tuple[types.CodeType, int | None]] = {}
        self.read_cells: dict[str, tuple[types.CodeType, int | None]] = {}
        self.baked: list[Finding] = []  # module constants read, kept as constants of the graph

    def _write(self, code: types.CodeType, op: str, arg: Any, line: int | None
               ) -> Finding | None:
        if op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            return (f"a write to the global '{arg}' ({_KEEPS}; pass it as a parameter or "
                    "draw from rng)", _where(code, line))
        if op in ("STORE_DEREF", "DELETE_DEREF") and arg in self.top.co_freevars and \
                arg not in code.co_cellvars:
            return (f"a write to the closure variable '{arg}' ({_KEEPS})", _where(code, line))
        if op in ("STORE_ATTR", "DELETE_ATTR"):
            return (f"a write to the attribute '.{arg}' of an object not seen made in the op's "
                    f"call ({_KEEPS}; an object the function itself makes, 't = Cls(...)' and "
                    "then 't.attr = ...', may be written)", _where(code, line))
        return None

    def instructions(self, code: types.CodeType) -> Finding | None:
        """The first write, or read of a value that is not a constant, in ``code``."""
        local_modules: dict[str, Any] = {}
        current: Any = None  # the module the last instruction loaded, for module.attr
        dotted = ""
        previous = None
        listing = list(dis.get_instructions(code))
        fresh = _fresh_locals(code, listing, self.g)
        for at, ins in enumerate(listing):
            op, arg, line = ins.opname, ins.argval, ins.positions.lineno if ins.positions else None
            loaded, name = None, None
            found = self._write(code, op, arg, line)
            obj = _before(listing, at)
            if found is not None and op == "STORE_ATTR" and obj is not None and \
                    listing[obj].opname == "LOAD_FAST" and listing[obj].argval in fresh:
                found = None  # a write to an object this call made: no state outside it
            if found is not None:
                return found
            if op == "LOAD_GLOBAL":
                if arg in self.g:
                    loaded, name = self.g[arg], f"the global '{arg}'"
                    self.read_globals.setdefault(arg, (code, line))
                elif arg in self.builtins:
                    if arg in _WORLD_BUILTINS:
                        return (f"a call of {arg}() (it reads or writes state outside the op; "
                                f"{_KEEPS})", _where(code, line))
                    loaded = self.builtins[arg]
            elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF") and arg in self.top.co_freevars and \
                    arg not in code.co_cellvars and arg in self.cells:
                try:
                    loaded = self.cells[arg].cell_contents
                except ValueError:  # an empty cell: NameError when the op runs
                    loaded = None
                name = f"the closure variable '{arg}'"
                self.read_cells.setdefault(arg, (code, line))
            elif op == "LOAD_FAST" and arg in local_modules:
                loaded = local_modules[arg]
            elif op == "STORE_FAST" and previous is not None and \
                    previous.opname == "IMPORT_NAME" and "." not in str(previous.argval):
                local_modules[arg] = sys.modules.get(str(previous.argval))
            elif op in ("LOAD_ATTR", "LOAD_METHOD") and current is not None:
                if hasattr(current, arg):
                    loaded = getattr(current, arg)
                    name = f"{dotted}.{arg}"
            previous = ins
            current, dotted = None, ""
            if isinstance(loaded, types.ModuleType) and not _is_numpy(loaded):
                current = loaded
                dotted = name[len("the global '"):-1] if name and name.startswith(
                    "the global") else (name or arg)
                continue
            found = self._read(loaded, name, code, line)
            if found is not None and name is not None and isinstance(loaded, (dict, list, set)) \
                    and not name.startswith("the closure") and _only_read(listing, at):
                writer = _module_writer(loaded, self.g)
                if writer is None:
                    self.baked.append((f"{name} (a module-level {type(loaded).__name__} "
                                       "that no code of its module writes) read as a constant",
                                       _where(code, line)))
                    found = None
                else:
                    found = (f"a read of {name}, a {type(loaded).__name__} that {writer} "
                             f"writes; {_KEEPS}", found[1])
            if found is not None:
                return found
        return None

    def _read(self, loaded: Any, name: str | None, code: types.CodeType, line: int | None
              ) -> Finding | None:
        """Whether the value ``name`` read (not a module of a library) is outside state."""
        if loaded is None or _is_numpy(loaded) or name is None:
            return None
        if _random_state(loaded):
            short = name.split("'")[1] if "'" in name else name
            return (f"{short} (global random state; draw from the op's rng)",
                    _where(code, line))
        r = _not_constant(loaded, self.functions)
        if r is not None:
            return f"a read of {name}, {r}; {_KEEPS}", _where(code, line)
        return None

    def read_what_the_module_writes(self) -> Finding | None:
        """A global or closure variable read here that another function of the module writes."""
        written = _module_writes(self.g, set(self.read_globals) | set(self.read_cells))
        for arg, (code, line) in [*self.read_globals.items(), *self.read_cells.items()]:
            if arg in written:
                kind = "global" if arg in self.read_globals else "closure variable"
                return (f"a read of the {kind} '{arg}', which {written[arg]} writes; {_KEEPS}",
                        _where(code, line))
        return None


def outside_state(fn: Any, params: dict[str, Any] | None = None,
                  baked: list[Finding] | None = None) -> Finding | None:
    """``(construct, location)`` of the first place where ``fn`` (an op's numpy function called
    with ``params``), or a function it calls, reads or writes state outside its call; ``None``
    when it depends on its arguments and constants alone (see the module).

    A module-level dict, list or set that no function of the module holding it writes, and that the
    op only reads (``MAX_VALUES_BY_DTYPE[img.dtype]``), counts as a constant: the traced graph
    keeps what the op reads of it at loader build. Such reads are appended to ``baked``."""
    params = dict(params or {})
    todo: list[Any] = [fn]
    seen: set[types.CodeType] = set()
    first = True
    while todo and len(seen) < _MAX_FUNCTIONS:
        f = todo.pop()
        if not isinstance(f, types.FunctionType) or f.__code__ in seen or _is_numpy(f):
            continue
        seen.add(f.__code__)
        if _is_library(f.__code__):
            continue
        found = _look_into(f, params if first else {}, todo, baked)
        first = False
        if found is not None:
            construct, location = found
            if f is not fn:
                construct = f"{construct}, in {f.__code__.co_qualname}() called by the op"
            return construct, location
    return None
