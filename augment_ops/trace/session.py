"""Running an op's function on the proxies: patched builtins and modules (``int()``, ``min()``,
``np``, ``os``), one run per branch outcome, the merge of the runs' outputs per sample, and the
time limit of a trace."""

from __future__ import annotations

import builtins
import dis
import numbers
import os
import re
import signal
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import augment_ops.trace.numpy_api  # noqa: F401  (registers the handlers Sym dispatches to)
from augment_ops.state import library_file
from augment_ops.trace.checks import guard_path
from augment_ops.trace.creation import CREATION
from augment_ops.trace.cv2_api import cv2_installed, library_handlers, wrap_library
from augment_ops.trace.facts import MAX_FACT_STEPS, upper
from augment_ops.trace.ir import (
    _REGISTRY_FILE,
    _TRACING,
    Node,
    Traced,
    TraceError,
    _is_internal,
    _new,
    _Session,
    _user_location,
)
from augment_ops.trace.lookup import NUMPY_CALLS, table_view
from augment_ops.trace.refusals import outside_numpy
from augment_ops.trace.rng import DrawRng
from augment_ops.trace.sym import (
    Sym,
    _dwhere,
    _py_float,
    _py_int,
    cast_node,
    is_instance,
    ufunc,
    value_class,
)

#: The most branch outcomes (paths through the function) a traced op may have.
MAX_PATHS = 16


#: Channel count of the symbolic image (decoded images are RGB).
CHANNELS = 3


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
        # the traced function's own int, float and np.<scalar type>: type(5) is int and
        # type(draw) is np.int64 hold there too
        if isinstance(t, builtins.type) and issubclass(t, np.generic) and \
                t.__module__ == "numpy" and _concrete_kind(t) in tuple("biuf"):
            return _scalar_type(t)
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
            return real(*args, **kwargs)
        out = items[0]
        for v in items[1:]:
            out = ufunc("minimum" if name == "min" else "maximum", out, v)
        return out
    return f


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


class _ScalarTypeMeta(type):
    """numpy scalar types (``np.uint8(x)``) that convert per-sample values symbolically and
    otherwise behave as the real type (as a dtype, in ``isinstance``)."""

    def __instancecheck__(cls, x: Any) -> bool:
        return is_instance(x, cls.real)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], Sym):
            if args[0].ndim != 0:
                raise TraceError(f"np.{cls.real.__name__}() of an array")
            return Sym(cast_node(args[0].node, cls.real))
        return cls.real(*args, **kwargs)


_SCALAR_TYPES: dict[type, type] = {}


def _scalar_type(real: type) -> type:
    if real not in _SCALAR_TYPES:
        _SCALAR_TYPES[real] = _ScalarTypeMeta(real.__name__, (), {"real": real,
                                                                 "dtype": np.dtype(real)})
    return _SCALAR_TYPES[real]


class _NumpyProxy(types.ModuleType):
    """``numpy`` as the traced function sees it: all of numpy except the global ``np.random``,
    with scalar types that accept per-sample values."""

    def __init__(self) -> None:
        super().__init__("numpy")

    def __getattr__(self, name: str) -> Any:
        if name == "random":
            return _Forbidden("np.random")
        # lookup tables and PIL images first (augment_ops.trace.lookup, .pil_api): their
        # np.array / np.asarray hand everything else to numpy_api's
        if name in NUMPY_CALLS:
            return NUMPY_CALLS[name]
        if name in CREATION:
            return CREATION[name]
        v = getattr(np, name)
        if isinstance(v, type) and issubclass(v, np.generic) and v.__module__ == "numpy" and \
                _concrete_kind(v) in tuple("biuf"):
            return _scalar_type(v)
        return v


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


def _patched_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    import random as py_random

    ends = {id(getattr(os, n)): n for n in _ENDS_PROCESS if hasattr(os, n)}
    libs = library_handlers()
    g = dict(fn.__globals__)
    for k, v in list(g.items()):
        if v is np:
            g[k] = _NumpyProxy()
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
             len=_py_len, type=_Type)
    g["__builtins__"] = b
    return g


def _rebind(fn: Callable[..., Any]) -> Callable[..., Any]:
    if not isinstance(fn, types.FunctionType):
        raise TraceError(f"the op is a {type(fn).__name__}, not a Python function")
    f = types.FunctionType(fn.__code__, _patched_globals(fn), fn.__name__, fn.__defaults__,
                           _rebound_closure(fn))
    f.__kwdefaults__ = fn.__kwdefaults__
    return f


def _rebound_closure(fn: types.FunctionType) -> tuple | None:
    """``fn``'s closure, the function a decorator wraps (``functools.wraps``' ``__wrapped__``,
    held in a closure cell) rebound too: a decorated op's own code then sees the traced
    function's ``np``, builtins and library helpers, as an undecorated one does."""
    inner = getattr(fn, "__wrapped__", None)
    if not fn.__closure__ or not isinstance(inner, types.FunctionType):
        return fn.__closure__
    cells = []
    for cell in fn.__closure__:
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            held = None
        cells.append(types.CellType(_rebind(inner)) if held is inner else cell)
    return tuple(cells)


def _merge(paths: list[tuple[list[Node], list[bool], tuple[Node, ...]]], depth: int,
           nout: int) -> tuple[Node, ...]:
    if len(paths) == 1:
        return paths[0][2]
    cond = paths[0][0][depth]
    taken = [p for p in paths if p[1][depth]]
    other = [p for p in paths if not p[1][depth]]
    if not taken or not other:
        return _merge(paths, depth + 1, nout)
    a, b = _merge(taken, depth + 1, nout), _merge(other, depth + 1, nout)
    out = []
    for x, y in zip(a, b, strict=True):
        if x is y:
            out.append(x)
            continue
        if x.dtype != y.dtype or x.ndim != y.ndim:
            raise TraceError("branches that return outputs of different dtype or rank")
        shape = tuple(dx if dx is dy else _dwhere(Sym(cond), dx, dy)
                      for dx, dy in zip(x.shape, y.shape, strict=True))
        out.append(_new("select", (cond, x, y), (), x.dtype, shape))
    return tuple(out)


#: Seconds one trace may run. Tracing runs the op's Python code once per branch outcome; an op
#: that loops forever, or a Python loop over pixels that builds a huge graph, is stopped and
#: refused (it runs on the numpy path, where ``op_timeout`` can limit it) instead of keeping
#: ``Loader(...)`` waiting. Enforced in the main thread, with ``SIGALRM``, when no other alarm or
#: ``SIGALRM`` handler is set.
MAX_TRACE_SECONDS = 20.0


class _TraceTimeout(BaseException):
    """The trace's time (``seconds``) is up: a ``BaseException``, so that an op's
    ``except Exception`` does not swallow it."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_TraceTimeout` into the code running after ``seconds`` (main thread only;
    an alarm or ``SIGALRM`` handler someone else set is left alone, and then there is no limit)."""
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN)):
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise _TraceTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _too_long(seconds: float, location: str = "") -> TraceError:
    return TraceError(f"tracing took longer than {seconds:g} s (an endless loop, or a "
                      "Python loop over the image's pixels?)", location)


def trace_function(fn: Callable[..., Any], *, params: dict[str, Any], random: bool,
                   num_outputs: int, dtype: Any, ndim: int, max_paths: int = MAX_PATHS,
                   max_fact_steps: int = MAX_FACT_STEPS) -> Traced:
    """Trace ``fn(img, [rng=], **params)``; raise :class:`TraceError` where it cannot be lowered
    (also past ``max_paths`` branch outcomes or ``max_fact_steps`` facts)."""
    session = _Session(max_fact_steps)
    f = _rebind(fn)
    session.user_code = fn.__code__
    inner_fn = fn
    while isinstance(getattr(inner_fn, "__wrapped__", None), types.FunctionType):
        inner_fn = inner_fn.__wrapped__
    session.user_def = inner_fn.__code__
    pending: list[tuple[bool, ...]] = [()]
    done: list[tuple[list[Node], list[bool], tuple[Node, ...]]] = []
    draws = 0
    previous, _TRACING.active = _TRACING.active, session
    try:
        while pending:
            prefix = pending.pop()
            session.start(prefix)
            img_node = _new("input", (), (), np.uint8,
                            (_new("in_dim", (), (0,), np.int64, (), weak=True),
                             _new("in_dim", (), (1,), np.int64, (), weak=True), CHANNELS))
            img = Sym(img_node, writable=False)
            kwargs = dict(params)
            rng = None
            if random:
                rng = DrawRng(lambda k: Sym(_new("uniform", (), (k,), np.float64, (), weak=True)))
                kwargs["rng"] = rng
            try:
                with cv2_installed():  # cv2 on traced arrays, in the op or in its helpers
                    out = f(img, **kwargs)
            except TraceError as e:
                called = outside_numpy(e)
                if called is None:
                    raise
                raise _call_refused(e, *called) from e
            except Exception as e:
                location, inner = _user_location(e.__traceback__)
                called = outside_numpy(e)
                if called is not None:
                    raise _call_refused(e, *called) from e
                message = _shown(e)
                if _raised_by_code(e) and guard_path(type(e), message, location):
                    # numpy raises this for the samples taking this branch alone: a run-time
                    # check raises it for them, and the other branches are traced on
                    pending.extend((*session.decisions[:i], not session.decisions[i])
                                   for i in range(len(prefix), len(session.decisions)))
                    if rng is not None:
                        draws = builtins.max(draws, rng.slots_used)
                    continue
                where = f", inside {inner}" if inner and inner != location else ""
                raise TraceError(f"{type(e).__name__}: {message}{where}", location) from e
            except _TraceTimeout as e:
                raise _too_long(e.seconds, _user_location(e.__traceback__)[0]) from None
            except KeyboardInterrupt:
                raise  # indistinguishable from Ctrl-C, which must stop the program
            except BaseException as e:  # SystemExit, GeneratorExit: the op must not end the
                # program at loader build; it is refused and runs on the numpy path instead
                location, inner = _user_location(e.__traceback__)
                where = f", inside {inner}" if inner and inner != location else ""
                raised = f"{type(e).__name__}({', '.join(map(repr, e.args))})"
                raise TraceError(f"the op raised {raised} (tracing runs the op at loader build, "
                                 f"where it must not end the program){where}", location) from e
            outs = _check_outputs(out, num_outputs, np.dtype(dtype), ndim)
            if rng is not None:
                draws = builtins.max(draws, rng.slots_used)
            for i in range(len(prefix), len(session.decisions)):
                pending.append((*tuple(session.decisions[:i]), not session.decisions[i]))
            done.append((list(session.conds), list(session.decisions), outs))
            if len(done) + len(pending) > max_paths:
                raise TraceError(f"more than {max_paths} branch outcomes (if on per-sample "
                                 "values)", "")
        if not done:
            raise TraceError("the op raises on every image: "
                             f"{session.guards[0].error}: {session.guards[0].message}",
                             session.guards[0].location)
        merged = _merge(done, 0, num_outputs)
    finally:
        _TRACING.active = previous
    return Traced(outputs=merged, num_draws=draws, num_paths=len(done),
                  guards=tuple(session.guards))


def _call_refused(e: BaseException, construct: str, inside: bool) -> TraceError:
    """The refusal of a call outside what the tracer lowers, at the op's line (and the line
    inside a library where it failed, where ``inside``)."""
    location, inner = _user_location(e.__traceback__)
    where = f", inside {inner}" if inside and inner and inner != location else ""
    return TraceError(f"{construct}{where}", location)


#: How a traced value prints: its repr names the tracer's node, which means nothing to a user.
_TRACED_REPR = re.compile(r"<traced Node\(.*?, ndim=\d+\)>")


def _shown(e: BaseException) -> str:
    """``str(e)`` with each traced value it prints as "<a per-sample value>"."""
    return _TRACED_REPR.sub("<a per-sample value>", str(e))


def _raised_by_code(e: BaseException) -> bool:
    """Whether ``e`` comes from a ``raise`` or ``assert`` statement of the user's own code (not
    the tracer, numpy or an installed library, whose checks the tracer cannot follow as
    closely, e.g. on ``type(x)``; and not raised while handling another exception, which may be a
    tracer's refusal): numpy would meet it on the same values."""
    if e.__context__ is not None or e.__cause__ is not None:
        return False
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if _is_internal(code.co_filename) or os.path.abspath(code.co_filename) == _REGISTRY_FILE \
            or library_file(code.co_filename):
        return False
    lasti = tb.tb_lasti
    return 0 <= lasti < len(code.co_code) and code.co_code[lasti] == dis.opmap["RAISE_VARARGS"]


def _check_outputs(out: Any, num_outputs: int, dtype: np.dtype, ndim: int) -> tuple[Node, ...]:
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != num_outputs:
        raise TraceError(f"the function returns {len(outs)} output(s), the op declares "
                         f"{num_outputs}", "")
    nodes = []
    for k, o in enumerate(outs):
        if not isinstance(o, Sym):
            raise TraceError(f"output {k} is a {type(o).__name__} that does not depend on the "
                             "image", "")
        n = o._checked()
        if builtins.any(upper(d) == 0 for d in n.shape):
            raise TraceError(f"output {k} is empty for every image (an image output needs at "
                             "least one pixel)", "")
        if n.dtype != dtype or n.ndim != ndim:
            raise TraceError(f"output {k} is {n.dtype} of rank {n.ndim}, the op declares "
                             f"{dtype} of rank {ndim}", "")
        nodes.append(n)
    return tuple(nodes)
