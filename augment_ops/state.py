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
  constant, as is a list or dict default of constants that the function, and every local
  variable it binds to it, only reads: mmdet's ``candidates = ratios if r else shapes``);
- calls a built-in that reads or writes the world: ``open``, ``input``, ``globals``,
  ``setattr``, ``delattr``, ``breakpoint``, also as ``builtins.eval``; ``eval`` and ``exec`` in
  the op's own function are refused where the trace reaches them instead
  (:mod:`augment_ops.trace.rebind`: PaddleClas' ``scale = eval(scale)`` under
  ``if isinstance(scale, str):`` never runs for a number, and cannot change the graph then);
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
import random
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from augment_ops.libfiles import library_file

__all__ = ["library_file", "outside_state"]

#: Built-ins whose call reads or writes state outside the op.
_WORLD_BUILTINS = frozenset({"open", "input", "globals", "setattr", "delattr", "breakpoint"})

#: Built-ins that run code the bytecode does not show, refused when the traced op calls them.
RUNNING_BUILTINS = frozenset({"eval", "exec"})
#: The most functions looked into for one op (the op's own code and what it calls).
_MAX_FUNCTIONS = 200
_KEEPS = "the traced graph would keep the value it had at loader build"

Finding = tuple[str, str]  # (construct, "file:line: code")


def _where(code: types.CodeType, line: int | None) -> str:
    line = line or code.co_firstlineno
    text = linecache.getline(code.co_filename, line).strip()
    return f"{code.co_filename}:{line}: {text}" if text else f"{code.co_filename}:{line}"


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
               functions: list[Any], baked: list[Finding] | None = None,
               own: bool = False) -> Finding | None:
    """The first read or write of outside state in ``fn`` itself (its defaults, its code and the
    code nested in it); the functions it calls are appended to ``functions``. ``own``: ``fn`` is
    the op's own function, which the tracer always runs as a copy that refuses ``eval`` and
    ``exec`` where called (functions reached through a ``functools.partial``, a default or a
    bound method may run as they are: there they are refused wherever they stand)."""
    found = _default_reads(fn, params, functions, baked)
    if found is not None:
        return found
    # parameter values are the op's arguments, not outside state; functions among them are
    # looked into as functions the op calls
    functions.extend(v for v in params.values() if isinstance(v, types.FunctionType))
    scan = _Scan(fn, functions, own)
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

    A list or dict default made of constants that the function only reads is one: each use of
    the parameter, and of every local variable it is stored into (``c = sizes``, ``c = a if k
    else sizes``, ``c = [c]``), a subscript, ``in``, iteration, a reading method or built-in
    (``len``, ``isinstance``), a comparison or arithmetic; no call given it but those, no
    ``X[k] = v``, no ``X += ...``, no return (:func:`_aliases_only_read`). The object is then
    reachable only through the function, which never changes it, so every call sees the value
    the trace saw. It is appended to ``baked``."""
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
    if (_READING_BUILTINS | {"isinstance"}) & set(fn.__code__.co_names) & set(fn.__globals__):
        return False  # a global of the module in place of a built-in that only reads
    return _aliases_only_read(fn.__code__, name)


#: What a local variable may hold of a default value: the value itself (a name bound to it:
#: ``rows = sizes``, ``c = a if k else sizes``), or a new list or tuple that may hold it
#: (``rows = [sizes]``), whose items may be the value itself.
_HOLDS, _HOLDS_INSIDE = 1, 2


def _aliases_only_read(code: types.CodeType, name: str) -> bool:
    """Whether the value parameter ``name`` of ``code`` holds at the call is only read, through
    the parameter and through every local variable it is stored into (its aliases): each load
    of each of them :func:`_only_read`. A variable a nested function shares, or one read or
    written by an instruction other than a plain load, store or delete, is not followed: it
    counts as a write."""
    listing = list(dis.get_instructions(code))
    held = {name: _HOLDS}
    todo = [name]
    while todo:
        alias = todo.pop()
        if alias in code.co_cellvars:  # captured by a nested function: its uses are not all here
            return False
        for at, ins in enumerate(listing):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if ins.opcode not in dis.haslocal or alias not in names:
                continue
            if ins.opname in ("STORE_FAST", "DELETE_FAST"):
                continue  # another value bound to the alias: followed where it is loaded
            if ins.opname not in ("LOAD_FAST", "LOAD_FAST_CHECK"):
                return False  # a combined instruction (Python 3.12+): not followed
            stores: dict[str, int] = {}
            if not _only_read(listing, at, held[alias], stores, code):
                return False
            for other, kind in stores.items():
                if held.get(other, 0) < kind:
                    held[other] = kind
                    todo.append(other)
    return True


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


#: Built-ins that read their one argument and keep no reference to it.
_READING_BUILTINS = frozenset({"len", "tuple", "sorted", "min", "max", "sum", "any", "all",
                               "frozenset", "int", "float", "bool", "type"})
#: Those of them whose result holds no item of their argument.
_SCALAR_BUILTINS = frozenset({"len", "any", "all", "int", "float", "bool", "type"})
#: Methods of a dict or list that read it.
_READ_METHODS = frozenset({"get", "keys", "values", "items", "copy", "index", "count",
                           "__getitem__", "__contains__", "__len__"})
#: Those of them whose result holds no item of it.
_SCALAR_METHODS = frozenset({"index", "count", "__contains__", "__len__"})
#: Methods of the op's ``rng`` (a ``np.random.Generator``) that draw numbers or arrays of them.
_NUMBER_DRAWS = frozenset({"integers", "random", "uniform", "normal", "standard_normal",
                           "binomial", "poisson"})


def _effect(ins: dis.Instruction) -> tuple[int, int] | None:
    """``(items popped, items pushed)`` of an instruction that may come between the load of a
    value and its use without using it (the parts of a key, of another argument); ``None`` for
    the others. A conditional jump counts for the path that falls through."""
    op = ins.opname
    if op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_NAME"):
        return 0, 1
    if op == "LOAD_GLOBAL":  # with a NULL before the global for a call of it
        return 0, 1 + (ins.arg or 0) % 2
    if op == "LOAD_ATTR":  # Python 3.12+: a method and its object for a call of it
        return 1, 1 + ((ins.arg or 0) % 2 if sys.version_info >= (3, 12) else 0)
    if op == "LOAD_METHOD":
        return 1, 2
    if op in ("BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP", "CONTAINS_OP", "IS_OP"):
        return 2, 1
    if op.startswith("UNARY_"):
        return 1, 1
    if op in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE"):
        return ins.arg or 0, 1
    if op == "CALL":
        return (ins.arg or 0) + 2, 1
    if op.startswith("POP_JUMP"):
        return 1, 0
    return None


def _only_read(listing: list[dis.Instruction], at: int, kind: int = _HOLDS,
               stores: dict[str, int] | None = None, code: types.CodeType | None = None,
               start: int | None = -1) -> bool:
    """Whether the value that instruction ``listing[at]`` pushes is only read where it is used:
    subscripted (``X[key]``), tested with ``in``, iterated, a reading method of it looked up
    (``X.get``), given alone to a built-in that reads it (``len(X)``, ``isinstance(X, T)``).
    Anything else (an argument of another call, ``X[k] = v``, ``X += ...``) may write it.

    With ``stores`` (a default value, whose items are constants, :func:`_aliases_only_read`):
    also stored into a local variable (recorded in ``stores`` with ``kind``, to follow its
    loads), compared, unpacked, an operand of arithmetic, or an item of a new list or tuple,
    whose own uses are followed in turn. ``kind`` :data:`_HOLDS_INSIDE`: the value may hold
    the default as an item, so its items (``X[i]``, ``i`` an int) are followed as the default
    itself, and a slice, iteration or reading method that hands out its items is refused.
    ``start``: where the instructions making the value begin (``at`` by default; ``None``
    where unknown), to find the function a call of it calls."""
    start = at if start == -1 else start
    index = {ins.offset: i for i, ins in enumerate(listing)}
    above = 0  # items on the stack above the value
    j = at + 1
    while j < len(listing):
        ins = listing[j]
        if ins.opname in _NO_EFFECT:
            j += 1
            continue
        if ins.opname == "JUMP_FORWARD":  # out of a conditional expression: to where it ends
            j = index.get(ins.argval, len(listing))
            continue
        effect = _effect(ins)
        if effect is not None and effect[0] <= above:
            above += effect[1] - effect[0]
            j += 1
            continue
        return _used_at(listing, j, above, kind, stores, code, start)
    return False


def _used_at(listing: list[dis.Instruction], j: int, above: int, kind: int,
             stores: dict[str, int] | None, code: types.CodeType | None,
             start: int | None) -> bool:
    """Whether instruction ``listing[j]``, which uses the value followed by :func:`_only_read`
    (``above`` items above it on the stack), only reads it."""
    ins = listing[j]
    op = ins.opname
    if op == "BINARY_SUBSCR" and above == 1:
        if kind == _HOLDS:  # an item of the value (a constant), or a new list of them
            return True
        # an item of a new list holding the value may be the value itself; a slice of it is
        # a list holding it again: the key, the one instruction before, must be no slice
        key = _before(listing, j)
        return stores is not None and code is not None and key is not None and \
            not listing[j].is_jump_target and _not_a_slice(listing, key, code) and \
            _only_read(listing, j, _HOLDS, stores, code, start)
    if op == "CONTAINS_OP" and above == 0:
        return True
    if op == "GET_ITER" and above == 0:
        return kind == _HOLDS
    if op in ("LOAD_ATTR", "LOAD_METHOD") and above == 0:
        return ins.argval in (_READ_METHODS if kind == _HOLDS else _SCALAR_METHODS)
    if op == "CALL":
        return _read_by_call(listing, j, above, kind, stores, code, start)
    if stores is None:
        return False
    # a default value, whose items are constants
    if op == "STORE_FAST" and above == 0:
        stores[ins.argval] = max(stores.get(ins.argval, 0), kind)
        return True
    if op in ("POP_TOP", "COMPARE_OP", "IS_OP") or op.startswith("POP_JUMP"):
        return True  # dropped, compared or its truth tested
    if op == "UNPACK_SEQUENCE" and above == 0:
        return kind == _HOLDS  # into its items, constants
    if op == "BINARY_OP":
        if ins.argrepr.endswith("=") and (above == 1 or kind == _HOLDS_INSIDE):
            return False  # X += ... changes X; x += X puts X's items into x
        # list + list, list * n: a new list of the items
        return kind == _HOLDS or _only_read(listing, j, _HOLDS_INSIDE, stores, code,
                                            start if above == 1 else None)
    if op in ("BUILD_LIST", "BUILD_TUPLE"):  # a new list or tuple holding it
        # Once: a list of lists that may hold it ([[sizes]]) is not followed, its items' items
        # being the value; but for mmdet's `c = [c]` where c is not yet a list, run at most
        # once a call, which keeps c a list that may hold the value.
        if kind != _HOLDS and not (code is not None and _wraps_itself_once(listing, j)):
            return False
        return _only_read(listing, j, _HOLDS_INSIDE, stores, code,
                          start if above == (ins.arg or 0) - 1 else None)
    return False


def _wraps_itself_once(listing: list[dis.Instruction], j: int) -> bool:
    """Whether ``listing[j]`` (a ``BUILD_LIST``/``BUILD_TUPLE``) is ``v = [v]``, outside any
    loop, and the only list or tuple the code stores into ``v``: then ``v`` is wrapped at most
    once a call, and holds the value at most one list deep."""
    ins = listing[j]
    before, after = _before(listing, j), _after(listing, j)
    if (ins.arg or 0) != 1 or before is None or after is None:
        return False
    load, store = listing[before], listing[after]
    if load.opname not in ("LOAD_FAST", "LOAD_FAST_CHECK") or store.opname != "STORE_FAST" or \
            load.argval != store.argval:
        return False
    here = ins.offset
    if any(i.opname.startswith("JUMP_BACKWARD") and isinstance(i.argval, int)
           and i.argval <= here <= i.offset for i in listing):
        return False  # inside a loop: wrapped again each time round
    stores_of_a_new_list = [
        k for k, i in enumerate(listing) if i.opname in ("BUILD_LIST", "BUILD_TUPLE")
        and (n := _after(listing, k)) is not None and listing[n].opname == "STORE_FAST"
        and listing[n].argval == store.argval]
    return len(stores_of_a_new_list) == 1


def _read_by_call(listing: list[dis.Instruction], j: int, above: int, kind: int,
                  stores: dict[str, int] | None, code: types.CodeType | None,
                  start: int | None) -> bool:
    """Whether ``CALL`` ``listing[j]`` only reads the value :func:`_only_read` follows: the value
    is its first argument, of one (``len(X)``) or of ``isinstance(X, T)``, and the function
    called is a built-in of :data:`_READING_BUILTINS` loaded just before the value's code."""
    n = listing[j].arg or 0
    if above != n - 1 or start is None or _keywords(listing, j):
        return False
    f = _before(listing, start)
    if f is None or listing[start].is_jump_target or listing[f].opname != "LOAD_GLOBAL" or \
            not (listing[f].arg or 0) % 2:
        return False
    name = listing[f].argval
    if n == 2:
        return name == "isinstance"
    if n != 1 or name not in _READING_BUILTINS:
        return False
    if kind == _HOLDS or name in _SCALAR_BUILTINS:
        return True
    # tuple(X), sorted(X), min(X) ... of a list that may hold the default: may hold it too
    return stores is not None and _only_read(listing, j, _HOLDS_INSIDE, stores, code, f)


def _keywords(listing: list[dis.Instruction], call: int) -> bool:
    """Whether ``CALL`` ``listing[call]`` passes keyword arguments (a ``KW_NAMES`` before it)."""
    j = call - 1
    while j >= 0 and listing[j].opname in _NO_EFFECT:
        if listing[j].opname == "KW_NAMES":
            return True
        j -= 1
    return False


def _parameters(code: types.CodeType) -> tuple[str, ...]:
    """The names of ``code``'s parameters, ``*args`` and ``**kwargs`` included."""
    return code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                            + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)]


def _not_a_slice(listing: list[dis.Instruction], key: int, code: types.CodeType) -> bool:
    """Whether the value ``listing[key]`` pushes is never a slice: an int constant, or a local
    variable (no parameter) every value stored into which is an int constant, a draw of the
    op's ``rng`` (``rng.integers(...)``) or ``len(...)`` of something."""
    ins = listing[key]
    if listing[key].is_jump_target:
        return False
    if ins.opname == "LOAD_CONST":
        return isinstance(ins.argval, int)
    if ins.opname not in ("LOAD_FAST", "LOAD_FAST_CHECK"):
        return False
    name = ins.argval
    if name in _parameters(code) or name in code.co_cellvars or name in code.co_freevars:
        return False
    for at, other in enumerate(listing):
        names = other.argval if isinstance(other.argval, tuple) else (other.argval,)
        if other.opcode not in dis.haslocal or name not in names or \
                other.opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "DELETE_FAST"):
            continue
        made = _before(listing, at)
        if other.opname != "STORE_FAST" or other.is_jump_target or made is None:
            return False
        if listing[made].opname == "LOAD_CONST" and isinstance(listing[made].argval, int):
            continue
        if listing[made].opname != "CALL" or _callee(listing, made, code) is None:
            return False
    return True


def _callee(listing: list[dis.Instruction], call: int, code: types.CodeType) -> str | None:
    """``"len"``, or ``"rng.<draw>"`` of :data:`_NUMBER_DRAWS` (``rng`` a parameter the code
    never rebinds), that ``CALL`` ``listing[call]`` calls; ``None`` for any other, or where
    the code before it is not one straight run of loads, attributes and calls."""
    need = listing[call].arg or 0  # the arguments' items, above the function's
    at = call
    while need > 0:
        at = _before(listing, at)  # type: ignore[assignment]
        if at is None or listing[at].is_jump_target:
            return None
        effect = _effect(listing[at])
        if effect is None or listing[at].opname.startswith("POP_JUMP") or effect[1] > need:
            return None
        need += effect[0] - effect[1]
    f = _before(listing, at)
    if f is None or listing[f].is_jump_target:
        return None
    ins = listing[f]
    if ins.opname == "LOAD_GLOBAL" and (ins.arg or 0) % 2 and ins.argval == "len":
        return "len"
    method = ins.opname == "LOAD_METHOD" or (ins.opname == "LOAD_ATTR" and (ins.arg or 0) % 2
                                             and sys.version_info >= (3, 12))
    obj = _before(listing, f)
    if not method or ins.argval not in _NUMBER_DRAWS or obj is None or \
            listing[obj].opname != "LOAD_FAST" or listing[obj].argval != "rng" or \
            "rng" not in _parameters(code):
        return None
    rebound = any(i.opname in ("STORE_FAST", "DELETE_FAST") and i.argval == "rng"
                  for i in listing)
    return None if rebound else f"rng.{ins.argval}"


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


def _after(listing: list[dis.Instruction], at: int) -> int | None:
    """The index of the instruction after ``listing[at]`` that does something."""
    return next((j for j in range(at + 1, len(listing))
                 if listing[j].opname not in _NO_EFFECT), None)


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
    params = set(_parameters(code))
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

    def __init__(self, fn: types.FunctionType, functions: list[Any], own: bool = False) -> None:
        self.top = fn.__code__
        self.own = own
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
                    if arg in _WORLD_BUILTINS or (arg in RUNNING_BUILTINS and not self.own):
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
                if current is builtins and arg in _WORLD_BUILTINS | RUNNING_BUILTINS:
                    return (f"a call of builtins.{arg}() (it reads or writes state outside the "
                            f"op; {_KEEPS})", _where(code, line))
                if hasattr(current, arg):
                    loaded = getattr(current, arg)
                    name = f"{dotted}.{arg}"
            previous = ins
            current, dotted = None, ""
            if loaded is builtins or (isinstance(loaded, dict) and loaded is vars(builtins)) or (
                    op == "IMPORT_NAME" and arg == "builtins"):
                # reaches eval and exec however they are then named
                return ("a use of the builtins module (it reaches eval and exec, which read or "
                        f"write state outside the op; {_KEEPS})", _where(code, line))
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
                    # its items may be called (a table of augmentation functions): its
                    # functions are looked into as functions the op calls
                    items = loaded.values() if isinstance(loaded, dict) else loaded
                    self.functions.extend(x for x in list(items)
                                          if isinstance(x, types.FunctionType))
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
        found = _look_into(f, params if first else {}, todo, baked, own=first)
        first = False
        if found is not None:
            construct, location = found
            if f is not fn:
                construct = f"{construct}, in {f.__code__.co_qualname}() called by the op"
            return construct, location
    return None
