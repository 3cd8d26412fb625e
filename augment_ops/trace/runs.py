"""Running an op's function on the proxies, as a copy that sees the traced names
(:mod:`augment_ops.trace.rebind`): one run per branch outcome, the merge of the runs' outputs
per sample, and the time limit of a trace."""

from __future__ import annotations

import builtins
import dis
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
from augment_ops.trace.cv2_api import cv2_installed
from augment_ops.trace.facts import MAX_FACT_STEPS, upper
from augment_ops.trace.ir import (
    _REGISTRY_FILE,
    _TRACING,
    MadeWithoutImage,
    Node,
    Traced,
    TraceError,
    _describe,
    _is_internal,
    _new,
    _Session,
    _user_location,
    same_argument,
)
from augment_ops.trace.rebind import Rebinder
from augment_ops.trace.refusals import outside_numpy
from augment_ops.trace.rng import DrawRng
from augment_ops.trace.sym import (
    Sym,
    _dwhere,
)
from augment_ops.trace.tables import tabulate

#: The most branch outcomes (paths through the function) a traced op may have.
MAX_PATHS = 32


#: Channel count of the symbolic image (decoded images are RGB).
CHANNELS = 3



def _merge(paths: list[tuple[list[Node], list[bool], tuple[Node, ...]]], depth: int,
           nout: int) -> tuple[Node, ...]:
    """The outputs of the runs ``paths``, selected per sample by their branch decisions from
    ``depth`` on. A branch on pixel values (``if imin != imax:``) is a select like any other:
    its predicate is computed where the image is, and read on the CPU where DALI needs it
    there (:func:`augment_ops.trace.lower_dali.emit`)."""
    if len(paths) == 1:
        return paths[0][2]
    cond = paths[0][0][depth]
    taken = [p for p in paths if p[1][depth]]
    other = [p for p in paths if not p[1][depth]]
    if not taken or not other:
        return _merge(paths, depth + 1, nout)
    a, b = _merge(taken, depth + 1, nout), _merge(other, depth + 1, nout)
    for x, y in zip(a, b, strict=True):
        if x is not y and (x.dtype != y.dtype or x.ndim != y.ndim):
            raise TraceError("branches that return outputs of different dtype or rank")
    memo: dict[tuple[int, int, int], Node] = {}
    return tuple(_select(cond, x, y, memo, MAX_PUSHED) for x, y in zip(a, b, strict=True))


#: Operators a per-sample choice between two of their results moves into, as a choice between
#: their arguments: elementwise arithmetic and stacks of channels, computed once on the chosen
#: arguments instead of once for each outcome (albumentations' HSV shift, whose drawn shifts
#: decide which channels change, converts back from HSV once, not once per outcome). Not layout
#: operators (a choice between flips has DALI forms of its own, :mod:`lower_patterns`), nor
#: lookup tables, whose tables DALI needs constant.
_PUSHED = frozenset({"bin", "un", "cast", "where", "stack", "cat", "take", "pad"})

#: How deep a choice moves into its outcomes' arguments.
MAX_PUSHED = 64


def _chosen_shape(cond: Node, x: Node, y: Node) -> tuple:
    """The shape of ``x`` where ``cond`` holds, else of ``y``: each size chosen per sample."""
    return tuple(dx if dx is dy else _dwhere(Sym(cond), dx, dy)
                 for dx, dy in zip(x.shape, y.shape, strict=True))


def _select(cond: Node, x: Node, y: Node, memo: dict[tuple[int, int, int], Node],
            depth: int) -> Node:
    """``x`` where ``cond`` holds, else ``y``, per sample, as one node (both of one dtype and
    rank): moved into their arguments where both are the same operator (:func:`_pushed`), or
    where one outcome is itself a choice with such an outcome (:func:`_hoisted`); one crop of an
    array with chosen bounds (:func:`_selected_slice`); else a select."""
    if x is y:
        return x
    key = (id(cond), id(x), id(y))
    got = memo.get(key)
    if got is not None:
        return got
    shape = _chosen_shape(cond, x, y)
    x, y = _as_pad(x, y), _as_pad(y, x)
    got = (_pushed(cond, x, y, shape, memo, depth) or _hoisted(cond, x, y, memo, depth)
           or _selected_slice(cond, x, y, shape)
           or _new("select", (cond, x, y), (), x.dtype, shape))
    memo[key] = got
    return got


def _as_pad(n: Node, other: Node) -> Node:
    """``n`` as a padded read of itself (offsets 0, its own size) where ``other`` is a padded
    read of ``n`` (albumentations' PadIfNeeded pads on some samples only): then the choice
    between them is one padded read with bounds chosen per sample."""
    if other.op != "pad" or other.args[0] is not n:
        return n
    return _new("pad", (n, 0, 0, n.shape[0], n.shape[1], other.args[5]), (), n.dtype, n.shape)


def _argument_choices(cond: Node, x: Node, y: Node) -> list[str] | None:
    """How a choice between ``x`` and ``y`` moves into each of their arguments, where it does:
    ``"same"`` (one argument of both), ``"where"`` (a padded read's bounds, ints or per-sample
    integers, chosen by a where of two) or ``"select"`` (arguments of one dtype and rank, not
    constants, which operators take as constants). None where it does not: not the same
    operator of :data:`_PUSHED`, or a predicate that reads pixel values (a choice of sizes would
    then be read on the CPU)."""
    if (cond.pixel or x.op != y.op or x.op not in _PUSHED or _attrs(x, y) is None
            or x.dtype != y.dtype or x.weak != y.weak or len(x.args) != len(y.args)):
        return None
    how = []
    for k, (ax, ay) in enumerate(zip(x.args, y.args, strict=True)):
        if same_argument(ax, ay):
            how.append("same")
        elif x.op == "pad" and _pad_bound(k) and _sizes(ax, ay):
            how.append("where")
        elif isinstance(ax, Node) and isinstance(ay, Node) and ax.dtype == ay.dtype \
                and ax.ndim == ay.ndim and ax.op != "const" and ay.op != "const":
            how.append("select")
        else:
            return None
    return how


def _pad_bound(k: int) -> bool:
    """Whether argument ``k`` of a padded read is one of its bounds (``y0, x0, height, width``;
    not the array, nor the fill, which DALI takes as a constant)."""
    return 1 <= k <= 4


def _sizes(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are per-sample integer sizes or offsets, a Python int or a 0-d
    integer node each, not both ints (a pad's bounds: chosen per sample by a where of two)."""
    def size(v: Any) -> bool:
        return (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, Node) and v.ndim == 0 and v.dtype.kind in "iu")
    return size(a) and size(b) and (isinstance(a, Node) or isinstance(b, Node))


def _attrs(x: Node, y: Node) -> tuple | None:
    """The attributes of one operator computing both ``x`` and ``y``: theirs, without the
    ``"nonneg"`` that only one of them has (a cheaper form where the operands are known to be
    >= 0, which the other outcome's may not be), or None where they differ otherwise."""
    if x.attrs == y.attrs:
        return x.attrs
    bare = [a[:-1] if a[-1:] == ("nonneg",) else a for a in (x.attrs, y.attrs)]
    return bare[0] if bare[0] == bare[1] else None


def _pushed(cond: Node, x: Node, y: Node, shape: tuple,
            memo: dict[tuple[int, int, int], Node], depth: int) -> Node | None:
    """``op(select(cond, x1, y1), ...)`` for ``select(cond, op(x1, ...), op(y1, ...))``: exact,
    as the choice is per sample, so each sample computes the operator on the arguments of its
    outcome. None where :func:`_argument_choices` says no."""
    how = _argument_choices(cond, x, y) if depth > 0 else None
    if how is None:
        return None
    choose = {"same": lambda a, b: a, "where": lambda a, b: _dwhere(Sym(cond), a, b),
              "select": lambda a, b: _select(cond, a, b, memo, depth - 1)}
    args = tuple(choose[h](ax, ay) for h, ax, ay in zip(how, x.args, y.args, strict=True))
    return _new(x.op, args, _attrs(x, y), x.dtype, shape, x.weak)


def _both(a: Node, b: Node) -> Node:
    return _new("bin", (a, b), ("bitwise_and",), np.bool_, ())


def _negated(a: Node) -> Node:
    return _new("un", (a,), ("logical_not",), np.bool_, ())


def _hoisted(cond: Node, x: Node, y: Node, memo: dict[tuple[int, int, int], Node],
             depth: int) -> Node | None:
    """A choice between ``x`` and ``y`` where one of them is a choice ``select(c, p, q)`` whose
    outcome ``p`` or ``q`` moves into a choice with the other (:func:`_argument_choices`),
    written as one choice of the remaining outcome first: ``select(cond, select(c, p, q), y)`` is
    ``select(cond & c, p, select(cond, q, y))``. An op that returns its input early (``if
    shift == 0: return img``) then computes its other outcomes once, not once per branch."""
    if depth <= 0 or cond.pixel:
        return None
    for inner, other, first in ((x, y, True), (y, x, False)):
        if inner.op != "select" or inner.args[0].pixel:
            continue
        c, p, q = inner.args
        for kept, moved, c_kept in ((p, q, c), (q, p, None)):
            pair = (moved, other) if first else (other, moved)
            if _argument_choices(cond, *pair) is None:
                continue
            c_kept = c if c_kept is not None else _negated(c)
            # ``kept`` where the sample takes ``inner``'s branch to it, else the pushed choice
            taken = _both(cond if first else _negated(cond), c_kept)
            rest = _select(cond, *pair, memo, depth - 1)
            return _new("select", (taken, kept, rest), (), x.dtype,
                        _chosen_shape(taken, kept, rest))
    return None


def _slice_bounds(n: Node, base: Node) -> dict[int, tuple[Any, Any]] | None:
    """``n``'s bounds per axis as a slice of ``base`` (``n`` itself: the whole axes), or None
    where ``n`` is not one."""
    if n is base:
        return {}
    if n.op != "slice" or n.args[0] is not base:
        return None
    return {ax: (n.args[1 + 2 * k], n.args[2 + 2 * k]) for k, ax in enumerate(n.attrs)}


def _selected_slice(cond: Node, x: Node, y: Node, shape: tuple) -> Node | None:
    """One slice of the same array for a branch between two slices of it (``if w == tw: crop
    = img[0:h] else: crop = img[oy:oy + th]``, either outcome of mmcv's crop): its bounds chosen
    per sample, so that a merge of the image's two outcomes becomes a choice of two numbers.
    None where the outcomes are not such slices, or the predicate reads pixel values (its
    bounds would then be read on the CPU from the GPU)."""
    if cond.pixel:
        return None
    base = x.args[0] if x.op == "slice" else y.args[0] if y.op == "slice" else None
    if base is None:
        return None
    bx, by = _slice_bounds(x, base), _slice_bounds(y, base)
    if bx is None or by is None:
        return None
    args: list[Any] = [base]
    axes = sorted(set(bx) | set(by))
    for ax in axes:
        whole = (0, base.shape[ax])
        (lx, hx), (ly, hy) = bx.get(ax, whole), by.get(ax, whole)
        args += [lx if lx is ly else _dwhere(Sym(cond), lx, ly),
                 hx if hx is hy else _dwhere(Sym(cond), hx, hy)]
    return _new("slice", tuple(args), tuple(axes), x.dtype, shape)


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


#: The most call sites of small new arrays one trace makes traced arrays of.
MAX_TRACED_SMALL = 8


def trace_function(fn: Callable[..., Any], *, params: dict[str, Any], random: bool,
                   num_outputs: int, dtype: Any, ndim: int, max_paths: int = MAX_PATHS,
                   max_fact_steps: int = MAX_FACT_STEPS) -> Traced:
    """Trace ``fn(img, [rng=], **params)``; raise :class:`TraceError` where it cannot be lowered
    (also past ``max_paths`` branch outcomes or ``max_fact_steps`` facts). Where the op wrote a
    per-sample value into a small new array (``np.empty(4)``), it is traced again with the
    arrays made at that line traced (:func:`augment_ops.trace.creation._small_new`)."""
    sites: frozenset[tuple[str, int]] = frozenset()
    while True:
        session = _Session(max_fact_steps)
        session.traced_small = sites
        refused: TraceError | None = None
        try:
            traced = _trace_once(session, fn, params=params, random=random,
                                 num_outputs=num_outputs, dtype=dtype, ndim=ndim,
                                 max_paths=max_paths)
        except TraceError as e:
            refused = e
        # (after a trace that went on, the write was one the op caught with try/except)
        site = session.retry_small
        if site is None or site in sites:
            if refused is not None:
                raise refused
            return traced
        if len(sites) >= MAX_TRACED_SMALL:
            raise refused or TraceError("per-sample values written into small new arrays made "
                                        f"at more than {MAX_TRACED_SMALL} lines")
        sites = sites | {site}


def _trace_once(session: _Session, fn: Callable[..., Any], *, params: dict[str, Any],
                random: bool, num_outputs: int, dtype: Any, ndim: int,
                max_paths: int) -> Traced:
    f = Rebinder().op(fn)
    session.user_code = fn.__code__
    inner_fn = fn
    while isinstance(getattr(inner_fn, "__wrapped__", None), types.FunctionType):
        inner_fn = inner_fn.__wrapped__
    session.user_def = inner_fn.__code__
    pending: list[tuple[bool, ...]] = [()]
    done: list[tuple[list[Node], list[bool], tuple[Node, ...]]] = []
    # A branch that makes its result without the image (a constant output, a blank PIL image)
    # is refused, but only once every other branch is traced: a construct refused on a branch
    # computed from the image (PIL's resize of it) is the reason to give, not the degenerate
    # branch a library tests first (ImageOps.fit's blank image for a zero-height box).
    deferred: TraceError | None = None
    draws = 0
    previous, _TRACING.active = _TRACING.active, session
    try:
        while pending:
            prefix = pending.pop()
            session.start(prefix)
            try:
                out, rng = _run_path(f, session, params, random)
            except MadeWithoutImage as e:  # refused only if no other path is
                deferred, out, rng = deferred or e, None, None
            # The other outcome of each decision this run took past its prefix: traced later.
            pending.extend((*session.decisions[:i], not session.decisions[i])
                           for i in range(len(prefix), len(session.decisions)))
            if rng is not None:
                draws = builtins.max(draws, rng.slots_used)
            if out is None:  # the path raises (a run-time check for its samples), or is deferred
                continue
            outs, refused = _path_outputs(out, session, num_outputs, np.dtype(dtype), ndim)
            deferred = deferred or refused
            if outs is None:
                continue
            done.append((list(session.conds), list(session.decisions), outs))
            if len(done) + len(pending) > max_paths:
                raise TraceError(f"more than {max_paths} branch outcomes (if on per-sample "
                                 "values; the last one taken at the line named)",
                                 _decision_line(session))
        if deferred is not None:
            raise deferred
        if not done:
            raise TraceError("the op raises on every image: "
                             f"{session.guards[0].error}: {session.guards[0].message}",
                             session.guards[0].location)
        merged = _merge(done, 0, num_outputs)
        # float math numpy and DALI compute differently: tables of a uint8 array, else refused
        return tabulate(Traced(outputs=merged, num_draws=draws, num_paths=len(done),
                               guards=tuple(session.guards)), session.inexact)
    finally:
        _TRACING.active = previous


def _path_outputs(out: Any, session: _Session, num_outputs: int, dtype: np.dtype,
                  ndim: int) -> tuple[tuple[Node, ...] | None, TraceError | None]:
    """A path's outputs checked against the op's declaration, or ``(None, refusal)`` for a path
    whose output does not depend on the image (refused once the other paths are traced); a
    refusal the op's own code caught and went on without refuses the op now."""
    caught = session.caught_refusal()
    if caught is not None:
        raise TraceError(f"{caught.construct} (refused, and caught by a try/except that goes on "
                         "without it: the traced graph would compute what the except does, "
                         "numpy what the try does)", caught.location)
    try:
        return _check_outputs(out, num_outputs, dtype, ndim), None
    except _ConstantOutput as e:
        return None, _constant_refusal(e, session)


def _run_path(f: Callable[..., Any], session: _Session, params: dict[str, Any],
              random: bool) -> tuple[Any, Any]:
    """One run of the op along the session's branch decisions: ``(its result, its rng)``, or
    ``(None, rng)`` where numpy raises on that path for the samples taking it (a guard); any
    other failure is a :class:`TraceError`."""
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
    except MadeWithoutImage:
        raise  # trace_function decides once the other paths are traced
    except TraceError as e:
        called = outside_numpy(e)
        if called is None:
            raise
        raise _call_refused(e, *called) from e
    except Exception as e:
        location, inner = _user_location(e.__traceback__)
        message = _shown(e)
        raised = _raised_by_code(e, session)
        called = None if raised else outside_numpy(e)
        if called is not None:
            raise _call_refused(e, *called) from e
        if raised and guard_path(type(e), message, location):
            # numpy raises this for the samples taking this branch alone: a run-time
            # check raises it for them, and the other branches are traced on
            return None, rng
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
    return out, rng


def _decision_line(session: _Session) -> str:
    """``file:line: code`` where the last per-sample decision was made, when in the user's code
    (a loop that branches on per-sample values again and again), or else the user's line whose
    call into a library made it (albumentations' branches on each drawn shift), else ``""``."""
    frame = session.decided_in
    if frame is None:
        return ""
    if library_file(frame.f_code.co_filename):
        return _describe(*session.decided_by) if session.decided_by is not None else ""
    return _describe(frame.f_code.co_filename, session.decided_line)


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


def _raised_by_code(e: BaseException, session: _Session) -> bool:
    """Whether ``e`` comes from a ``raise`` or ``assert`` statement that numpy would meet on the
    same values: one of the user's own code, or one of an installed library's right after a
    per-sample decision made in the same function (``if x_min >= x_max: raise``). Not the
    tracer's or numpy's; not a library's raise that no per-sample value led to there (a check of
    ``type(x)`` or ``isinstance(x, Image.Image)`` that a traced value fails where an array would
    pass); not one raised while handling another exception, which may be a tracer's refusal."""
    if e.__context__ is not None or e.__cause__ is not None:
        return False
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if _is_internal(code.co_filename) or os.path.abspath(code.co_filename) == _REGISTRY_FILE:
        return False
    if library_file(code.co_filename) and tb.tb_frame is not session.decided_in:
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
            raise _ConstantOutput(k, type(o).__name__)
        n = o._checked()
        if builtins.any(upper(d) == 0 for d in n.shape):
            raise TraceError(f"output {k} is empty for every image (an image output needs at "
                             "least one pixel)", "")
        if n.dtype != dtype or n.ndim != ndim:
            raise TraceError(f"output {k} is {n.dtype} of rank {n.ndim}, the op declares "
                             f"{dtype} of rank {ndim}", "")
        nodes.append(n)
    return tuple(nodes)


class _ConstantOutput(MadeWithoutImage):
    """Output ``k`` of one branch is a value of type ``kind`` that is not traced: made without
    the image (``np.zeros((4, 4, 3))``, ``np.asarray(Image.new(...))``), the same for every
    sample taking that branch."""

    def __init__(self, k: int, kind: str) -> None:
        super().__init__(f"output {k} is a {kind} that does not depend on the image", "")
        self.k, self.kind = k, kind


def _constant_refusal(e: _ConstantOutput, session: _Session) -> MadeWithoutImage:
    """The refusal of a constant output, at the op's line that returned it. On a branch (a
    per-sample test chose it): which test, since the op's other branches may well depend on the
    image."""
    decided = session.decided_in
    returned = _returning_line(session, decided)
    what = f"output {e.k} is a {e.kind} made without the image"
    if not session.decisions:
        return MadeWithoutImage(f"{what}, the same for every image (a traced graph computes its "
                          "outputs from the image; return the constant from the numpy path, or "
                          "compute it from the image)", returned)
    test = _describe(decided.f_code.co_filename, session.decided_line) if decided else ""
    chosen = f"the per-sample test at {test}" if test else "a per-sample test"
    return MadeWithoutImage(f"{what} on a branch chosen by {chosen} (a constant output, such "
                            "as a blank image a library makes for a degenerate size, is not "
                            "lowered: a traced graph computes every branch's outputs from the "
                            "image); the op runs on the numpy path", returned)


def _returning_line(session: _Session, frame: Any) -> str:
    """``file:line: code`` of the op's own line that returned (the line its frame was at when
    it finished, found from the frame of the last decision, which the op's frame called), or
    its only ``return``; else its ``def`` line."""
    while frame is not None and frame.f_code is not session.user_code:
        frame = frame.f_back
    if frame is not None:
        return _describe(frame.f_code.co_filename, frame.f_lineno)
    code = session.user_code
    if code is None:
        return ""
    lines = {ins.positions.lineno for ins in dis.get_instructions(code)
             if ins.opname in ("RETURN_VALUE", "RETURN_CONST") and ins.positions
             and ins.positions.lineno}
    if len(lines) == 1:
        return _describe(code.co_filename, lines.pop())
    return _describe(code.co_filename, code.co_firstlineno)
