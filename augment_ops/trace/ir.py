"""The tracer's graph (IR) and the state of the trace being run.

:class:`Node` is one value of the graph (an array or a per-sample scalar); :func:`_new` makes
nodes, shared with identical earlier ones within a trace; :class:`Traced` is a traced op's
result and :class:`Guard` a check under which the numpy function raises. :class:`TraceError`
names what cannot be lowered and the user's source line, found with :func:`_user_location`.
``_TRACING.active`` is the trace running in this thread (a :class:`_Session`).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The tracer's own files (this package): never the user's line.
_TRACE_DIR = os.path.dirname(os.path.abspath(__file__))
_REGISTRY_FILE = os.path.join(os.path.dirname(_TRACE_DIR), "registry.py")
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))


# -- errors ------------------------------------------------------------------------------------
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class TraceError(ValueError):
    """The op's function does something the tracer cannot lower to DALI operators.

    ``construct`` names it (``"np.fft.fft"``, ``"if on pixel values"``), ``location`` is
    ``file:line: code`` of the user's source line (empty when unknown).
    """

    def __init__(self, construct: str, location: str | None = None) -> None:
        if location is None:
            location, inner = _user_location()
            if inner and inner != location:
                construct = f"{construct}, inside {inner}"
        # a repr's memory address ("<function f at 0x7f...>") would make the message differ
        # from one run to the next
        construct = _ADDRESS.sub("", construct)
        self.construct = construct
        self.location = location
        super().__init__(f"{construct} at {self.location}" if self.location else construct)
        session = _TRACING.active
        if session is not None:
            session.refusals.append(self)


class MadeWithoutImage(TraceError):
    """A refusal on a branch that makes its result without the image (a constant output, a
    blank PIL image of a per-sample size). The trace goes on with the op's other branches and
    gives this reason only when none of them is refused: a library tests its degenerate sizes
    first (``if image.height == 0: return Image.new(...)``), and a construct refused on a branch
    computed from the image says more about why the op does not lower."""


def _is_internal(filename: str) -> bool:
    f = os.path.abspath(filename)
    return f.startswith(_TRACE_DIR + os.sep) or f.startswith(_NUMPY_DIR) or f.startswith("<frozen")


def _describe(filename: str, lineno: int) -> str:
    code = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}: {code}" if code else f"{filename}:{lineno}"


def _user_location(tb: types.TracebackType | None = None) -> tuple[str, str]:
    """``file:line: code`` of the user's line, and of the innermost frame outside this module and
    numpy (where it went wrong, maybe in a library the op called).

    Only frames inside the op's call count (from the op's function inward: never its caller's,
    such as the line that built the loader). The user's line is the innermost of them in user
    code: the op's own function, a function it calls or that wraps it (a decorator), a lambda,
    code from ``exec`` or a notebook cell; not numpy, this package's tracer and registry, nor
    installed libraries. Walks ``tb``, or else the current stack.
    """
    from augment_ops.state import library_file

    frames: list[tuple[Any, int]] = []
    if tb is not None:
        while tb is not None:
            frames.append((tb.tb_frame.f_code, tb.tb_lineno))
            tb = tb.tb_next
    else:
        frame = sys._getframe(1)
        while frame is not None:
            frames.append((frame.f_code, frame.f_lineno))
            frame = frame.f_back
        frames.reverse()
    session = _TRACING.active
    code = session.user_code if session is not None else None
    start = next((i for i, (c, _) in enumerate(frames) if c is code), None)
    if start is None:  # found after the op returned (its outputs): the op's def line
        first = session.user_def if session is not None else None
        return (_describe(first.co_filename, first.co_firstlineno) if first else ""), ""
    outside = [(c, n) for c, n in frames[start:] if not _is_internal(c.co_filename)
               and os.path.abspath(c.co_filename) != _REGISTRY_FILE]
    own = [(c, n) for c, n in outside if not library_file(c.co_filename)]
    inner = _describe(outside[-1][0].co_filename, outside[-1][1]) if outside else ""
    return (_describe(own[-1][0].co_filename, own[-1][1]) if own else inner), inner


# -- the IR ------------------------------------------------------------------------------------
Dim = Any  # int | Node (an int64 per-sample scalar)


class Node:
    """One value of the traced graph: an array or a per-sample scalar (``shape == ()``).

    ``op`` and ``attrs`` say how it is computed from ``args`` (Nodes, ints or None). ``weak``
    marks a Python scalar (``int``/``float``/``bool``), which numpy promotes weakly (NEP 50).
    ``pixel`` says whether the value depends on pixel values (control flow on those is refused).
    ``value`` holds a constant's numpy value. ``facts`` memoises what the tracer proved about
    the value (bounds, ``<=`` another value): a pure function of the node and its arguments.
    """

    __slots__ = ("__weakref__", "args", "attrs", "dtype", "facts", "op", "pixel", "shape",
                 "value", "weak")

    def __init__(self, op: str, args: tuple, attrs: tuple, dtype: np.dtype, shape: tuple,
                 weak: bool = False, value: np.ndarray | None = None) -> None:
        self.op, self.args, self.attrs = op, args, attrs
        self.dtype, self.shape, self.weak, self.value = np.dtype(dtype), shape, weak, value
        self.pixel = op == "input" or any(isinstance(a, Node) and a.pixel for a in args)
        self.facts: dict[tuple, Any] = {}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Node({self.op}{list(self.attrs)}, {self.dtype}, ndim={self.ndim})"

    # A node travels to the source's reader processes without its facts (rebuilt on demand).
    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("__weakref__", "facts")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self.facts = {}


def _new(op: str, args: tuple, attrs: tuple, dtype: Any, shape: tuple, weak: bool = False,
         value: np.ndarray | None = None) -> Node:
    """A node, shared with an identical earlier one (hash-consing): the same computation on every
    path gives the same node, so branch conditions of different runs can be matched, and a
    sub-expression written twice is one node whose facts are derived once. Arguments that are
    not nodes are keyed with their type (``1``, ``True`` and ``1.0`` are equal in Python)."""
    dtype = np.dtype(dtype)
    vkey = None if value is None else (value.dtype.str, value.shape, value.tobytes())
    key = (op, tuple(a if isinstance(a, Node) else ("v", type(a), a) for a in args), attrs,
           dtype.str, tuple(d if isinstance(d, Node) else ("v", type(d), d) for d in shape), weak,
           vkey)
    table = _TRACING.active.table if _TRACING.active is not None else {}
    node = table.get(key)
    if node is None:
        node = Node(op, args, attrs, dtype, shape, weak, value)
        table[key] = node
    return node


def bottom_up(root: Node, memo: dict[int, Any], needs: Callable[[Node], list[Node]],
              step: Callable[[Node], Any]) -> Any:
    """``step(m)`` (stored in ``memo`` by id) of ``root`` and of every node ``needs`` reaches
    from it that ``memo`` lacks, each after the nodes it needs: a walk without recursion, so
    that a chain of thousands of nodes (a loop of writes) does not exhaust Python's stack."""
    stack = [root]
    while stack:
        m = stack[-1]
        if id(m) in memo:
            stack.pop()
            continue
        todo = [a for a in needs(m) if id(a) not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[id(m)] = step(m)
        stack.pop()
    return memo[id(root)]


def const(value: Any, dtype: Any = None, weak: bool = False) -> Node:
    arr = np.asarray(value, dtype=dtype)
    return _new("const", (), (), arr.dtype, arr.shape, weak, value=arr)


def _is_const(x: Any) -> bool:
    return isinstance(x, Node) and x.op == "const"


@dataclass(frozen=True)
class Guard:
    """Where the numpy function raises for some samples: ``bad`` (a per-sample bool scalar) is
    true for a sample on which the function raises ``error`` (a built-in exception's name) with
    ``message``, from the user's line ``location``. The branch a guard was met on is part of
    ``bad``, so a sample that takes another branch never raises it."""

    bad: Node
    error: str
    message: str
    location: str


@dataclass(frozen=True)
class Traced:
    """A traced op: its output nodes, how many uniform draws (slots) a sample takes, and the
    run-time checks (:class:`Guard`) under which numpy raises, in the order numpy meets them."""

    outputs: tuple[Node, ...]
    num_draws: int
    num_paths: int
    guards: tuple[Guard, ...] = ()

    def nodes(self) -> Iterator[Node]:
        """Every node the outputs depend on, each once (outputs first, then their arguments)."""
        seen: set[int] = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            yield n
            stack.extend(a for a in n.args if isinstance(a, Node))


def same_shape(a: tuple, b: tuple) -> bool:
    """Whether shapes ``a`` and ``b`` are the same on every sample by their form: the same size
    nodes, or equal constants."""
    return len(a) == len(b) and all(x is y or (isinstance(x, int) and isinstance(y, int)
                                               and x == y) for x, y in zip(a, b, strict=True))


# -- the trace being run --------------------------------------------------------------------------
#: The most branches on pixel values one run of an op may take: a loop on pixel values
#: (``while x.max() > 10:``) would take them without end.
MAX_PIXEL_BRANCHES = 8


class _Session:
    """One trace: the node table shared by all runs, and the branch decisions of the current run."""

    def __init__(self, max_steps: int) -> None:
        self.table: dict[Any, Node] = {}
        self.steps = 0  # facts evaluated
        self.max_steps = max_steps  # the most facts the trace may evaluate
        self.user_code: types.CodeType | None = None
        self.user_def: types.CodeType | None = None  # of the function a decorator wraps
        self.prefix: tuple[bool, ...] = ()
        self.conds: list[Node] = []
        self.decisions: list[bool] = []
        self.guards: list[Guard] = []
        self.decided_in: types.FrameType | None = None  # the frame of the last decision
        self.decided_line = 0  # and its line then
        self.refusals: list[TraceError] = []  # made in the current run, raised or not
        # the user's line that led there, where that frame is a library's: (file, line)
        self.decided_by: tuple[str, int] | None = None
        #: The refusal of each branch on pixel values taken (by condition), raised when a run
        #: takes too many of them or the op has too many outcomes (a loop on pixel values).
        self.pixel_refusals: dict[Node, TraceError] = {}
        #: Nodes DALI cannot compute exactly (``np.exp`` of pixels, ``x ** 0.8``), with the
        #: refusal each gives unless a lookup table replaces it (:mod:`augment_ops.trace.tables`).
        self.inexact: dict[Node, TraceError] = {}
        self.library_draws = 0
        #: Call sites (file, line) of small new arrays (``np.empty``, ``zeros``, ``eye`` ...)
        #: that are traced, so that a per-sample value may be written into them
        #: (:func:`augment_ops.trace.creation._small_new`), and the concrete ones made
        #: elsewhere: id -> (site, array).
        self.traced_small: frozenset[tuple[str, int]] = frozenset()
        self.concrete_small: dict[int, tuple[tuple[str, int], Any]] = {}
        #: The site of a concrete one a per-sample value was written into: traced again with
        #: it traced (:func:`augment_ops.trace.runs.trace_function`).
        self.retry_small: tuple[str, int] | None = None
        #: The memory layout of nodes, as :func:`augment_ops.trace.pairwise.layout` finds it.
        self.layouts: dict[int, Any] = {}

    def start(self, prefix: tuple[bool, ...]) -> None:
        self.prefix, self.conds, self.decisions = prefix, [], []
        self.decided_in = None
        self.refusals = []
        self.library_draws = 0  # noise drawn by a library's generator (cv2.randn) in this run

    def caught_refusal(self) -> TraceError | None:
        """A refusal raised in the current run that code outside the tracer and numpy caught
        (the op's ``try: ... except Exception:``, a library's): the run went on past a
        construct the graph does not compute, and its outputs are not what numpy computes (an
        ``except`` that falls back to a constant would make one silently)."""
        for e in self.refusals:
            tb = e.__traceback__
            if tb is not None and not _is_internal(tb.tb_frame.f_code.co_filename):
                return e
        return None

    def decide(self, cond: Node, refusal: TraceError | None = None) -> bool:
        """The outcome of a branch on per-sample condition ``cond`` for this run (from the
        prefix, else True). ``refusal``: the branch is on pixel values; a run taking more than
        :data:`MAX_PIXEL_BRANCHES` of them (a ``while`` on pixel values) is refused at once."""
        frame = sys._getframe(1)
        while frame is not None and _is_internal(frame.f_code.co_filename):
            frame = frame.f_back
        self.decided_in = frame
        self.decided_line = frame.f_lineno if frame is not None else 0
        self.decided_by = None
        if frame is not None:
            from augment_ops.state import library_file

            own = frame
            while own is not None and library_file(own.f_code.co_filename):
                own = own.f_back
            if own is not frame and own is not None and \
                    not _is_internal(own.f_code.co_filename):
                self.decided_by = (own.f_code.co_filename, own.f_lineno)
        # (the frame is recorded either way: a library's raise after its own test is a check)
        earlier = self._decided(cond)
        if earlier is not None:  # ``if s != 0`` after ``if s == 0 and ...``: the same samples
            return earlier
        if refusal is not None:
            self.pixel_refusals.setdefault(cond, refusal)
            if sum(c.pixel for c in self.conds) >= MAX_PIXEL_BRANCHES:
                raise refusal
        i = len(self.decisions)
        choice = self.prefix[i] if i < len(self.prefix) else True
        self.conds.append(cond)
        self.decisions.append(choice)
        return choice

    def _decided(self, cond: Node) -> bool | None:
        """The outcome of ``cond`` this run already decided: ``cond`` itself, or its exact
        negation, taken earlier (the same per-sample value, so a second decision would only
        add outcomes no sample has), else None."""
        for c, d in zip(self.conds, self.decisions, strict=True):
            related = _relation(c, cond)
            if related is not None:
                return d if related else not d
        return None


#: Comparisons as ``less``/``less_equal`` with their operands swapped: the same predicate.
_MIRRORED = {"greater": "less", "greater_equal": "less_equal"}


def _comparison(n: Node) -> tuple[str, Any, Any] | None:
    """``(name, x, y)`` of comparison ``n``, with ``>``/``>=`` written as ``<``/``<=``."""
    if n.op != "bin" or len(n.args) != 2:
        return None
    name, (x, y) = n.attrs[0], n.args
    if name in _MIRRORED:
        return _MIRRORED[name], y, x
    if name in ("less", "less_equal", "equal", "not_equal"):
        return name, x, y
    return None


def same_argument(a: Any, b: Any) -> bool:
    """Whether node arguments ``a`` and ``b`` are the same: one node, or equal Python values of
    one type (``1``, ``True`` and ``1.0`` are equal in Python)."""
    return a is b or (not (isinstance(a, Node) or isinstance(b, Node))
                      and type(a) is type(b) and a == b)


def _relation(a: Node, b: Node) -> bool | None:
    """True where bools ``a`` and ``b`` hold for the same samples, False where ``b`` is the
    negation of ``a`` for every sample, else None (not known from their forms)."""
    if a is b:
        return True
    for p, q in ((a, b), (b, a)):
        if q.op == "un" and q.attrs[0] == "logical_not" and q.args[0] is p:
            return False
    ca, cb = _comparison(a), _comparison(b)
    if ca is None or cb is None:
        return None
    (na, xa, ya), (nb, xb, yb) = ca, cb
    straight = same_argument(xa, xb) and same_argument(ya, yb)
    crossed = same_argument(xa, yb) and same_argument(ya, xb)
    if na == nb and (straight or (crossed and na in ("equal", "not_equal"))):
        return True
    if {na, nb} == {"equal", "not_equal"} and (straight or crossed):
        return False  # != is the negation of == for NaN too
    # not (x < y) is y <= x only where neither can be NaN
    exact = all(np.dtype(getattr(v, "dtype", type(v))).kind in "biu" for v in (xa, ya))
    if exact and {na, nb} == {"less", "less_equal"} and crossed:
        return False
    return None


class _Tracing(threading.local):
    active: _Session | None = None


_TRACING = _Tracing()
