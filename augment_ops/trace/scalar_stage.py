"""Per-sample scalars evaluated by numpy for a whole batch: the draws of a random op in the
source's readers (:class:`augment_ops.trace.lower_dali.SampleScalars`), and, for an op whose
sizes, offsets and draws would take many DALI operators, all of them in one operator
(:class:`ScalarStage`).

Each DALI operator costs about the same per batch whatever its work, since it is dispatched
per sample: an op such as YOLOv5's cutout (31 rectangles, each from four draws and the image's
size) takes several hundred operators for its scalars alone, and runs at a few percent of a
resize. :class:`ScalarStage` computes every scalar of such an op with numpy, vectorised over the
batch, in one ``fn.python_function`` that takes the image's shape and the op's draws, and hands
each consumer (a slice's bounds, a fill's anchor, size and value, a gain) one subscript of its
outputs. numpy computing them is numpy's semantics itself: no emulation of numpy's integer
division, wrap-around or casts by DALI's operators, which differ. An op whose scalars take few
operators keeps them in DALI, with no Python call per batch (:func:`wants_stage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, Traced

__all__ = ["STAGE_MIN_OPERATORS", "ScalarStage", "evaluate", "stageable", "wants_stage"]

#: The fewest DALI operators an op's scalars would take for :class:`ScalarStage` to compute
#: them instead: one Python call per batch costs about what a few dozen scalar operators do
#: (benchmarks/results, bench_realops on the GPU machine).
STAGE_MIN_OPERATORS = 24

#: The nodes :func:`evaluate` computes (with the leaves its ``leaf`` gives).
_EVALUATED = frozenset({"const", "cast", "bin", "un", "where", "select", "stack", "take"})


def evaluate(nodes: Sequence[Node], count: int,
             leaf: Callable[[Node], np.ndarray | None]) -> list[np.ndarray]:
    """Each of ``nodes`` for ``count`` samples, by numpy: an array of shape
    ``(count, *node.shape)`` and the node's dtype each.

    ``leaf(n)`` gives the values of the graph's leaves (draws, the image's sizes, values given
    from outside) as such arrays, or None for a node computed from its arguments here."""
    memo: dict[int, np.ndarray] = {}

    def ev(n: Node | int) -> Any:
        if not isinstance(n, Node):
            return np.full(count, n, np.int64)
        got = memo.get(id(n))
        if got is not None:
            return got

        def arg(a: Node | int) -> np.ndarray:  # aligned with n's axes, after the sample axis
            v = ev(a)
            nd = a.ndim if isinstance(a, Node) else 0
            return v.reshape((count,) + (1,) * (n.ndim - nd) + v.shape[1:])

        got = leaf(n)
        if got is not None:
            pass
        elif n.op == "const":
            got = np.broadcast_to(n.value, (count, *n.value.shape))
        elif n.op == "cast":
            got = np.asarray(ev(n.args[0])).astype(n.dtype)
        elif n.op == "bin":
            got = getattr(np, n.attrs[0])(arg(n.args[0]), arg(n.args[1]))
        elif n.op == "un":
            got = getattr(np, n.attrs[0])(ev(n.args[0]))
        elif n.op in ("where", "select"):
            got = np.where(*(arg(a) for a in n.args))
        elif n.op == "stack":
            got = np.stack([ev(a) for a in n.args], axis=1 + n.attrs[0])
        elif n.op == "take" and isinstance(n.args[1], int):
            got = np.take(ev(n.args[0]), n.args[1], axis=1 + n.attrs[0])
        elif n.op == "take" and n.args[0].ndim == 1:  # a per-sample position in a vector
            got = np.take_along_axis(ev(n.args[0]), ev(n.args[1]).reshape(count, 1), axis=1)
            got = got.reshape(count)
        else:
            raise ValueError(f"not a per-sample scalar numpy computes here: {n}")
        got = np.broadcast_to(np.asarray(got, dtype=n.dtype), (count, *n.shape))
        memo[id(n)] = got
        return got

    with np.errstate(all="ignore"):
        return [np.ascontiguousarray(ev(n)) for n in nodes]


def _small(n: Node) -> bool:
    """A per-sample scalar or a vector of a constant length (``rng.uniform(size=3)``)."""
    return n.ndim == 0 or (n.ndim == 1 and isinstance(n.shape[0], int))


def stageable(given: Iterable[int]) -> Callable[[Node], bool]:
    """Whether :class:`ScalarStage` computes a node: a scalar or short vector that depends on
    the image's sizes and the draws (the ``given`` nodes, by id) but not on its pixels, made of
    operators :func:`evaluate` computes. Memoised."""
    given = set(given)
    memo: dict[int, bool] = {}

    def ok(n: Node) -> bool:
        got = memo.get(id(n))
        if got is None:
            if id(n) in given or n.op == "in_dim":
                got = True
            elif n.pixel or not _small(n) or n.op not in _EVALUATED or (
                    n.op in ("bin", "un") and not hasattr(np, n.attrs[0])):
                got = False
            else:
                got = all(ok(a) for a in n.args if isinstance(a, Node))
            memo[id(n)] = got
        return got

    return ok


def _graph(traced: Traced) -> list[Node]:
    """Every node the op's outputs, output sizes and guards depend on, each once."""
    roots = [*traced.outputs, *(g.bad for g in traced.guards),
             *(d for n in traced.outputs for d in n.shape if isinstance(d, Node))]
    seen: set[int] = set()
    out = []
    while roots:
        n = roots.pop()
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
            roots.extend(a for a in n.args if isinstance(a, Node))
    return out


def wants_stage(traced: Traced, given: Iterable[int], costs: Callable[[Node], bool]) -> bool:
    """Whether ``traced``'s per-sample scalars would take at least :data:`STAGE_MIN_OPERATORS`
    DALI operators: the stageable nodes (besides constants, given values and the image's sizes)
    for which ``costs`` says lowering takes an operator of its own."""
    given = set(given)
    ok = stageable(given)
    count = sum(1 for n in _graph(traced) if n.op not in ("const", "in_dim")
                and id(n) not in given and ok(n) and costs(n))
    return count >= STAGE_MIN_OPERATORS


class _StageFunction:
    """What the stage's ``fn.python_function`` runs per batch: the requested nodes evaluated by
    numpy from the images' shapes and the given values, laid out in one vector per dtype."""

    def __init__(self, groups: Sequence[np.dtype], given: Sequence[Node],
                 unpack: Callable[[np.ndarray], list[np.ndarray]] | None) -> None:
        self.groups = list(groups)
        self.given = list(given)
        self.unpack = unpack
        #: Per dtype, the lanes of its output vector: (node or int, its length).
        self.layout: list[list[tuple[Node | int, int]]] = [[] for _ in groups]

    def __call__(self, shapes: list[np.ndarray], *given: list[np.ndarray]) -> tuple:
        count = len(shapes)
        dims = np.stack([np.asarray(s, np.int64) for s in shapes]) if count else \
            np.zeros((0, 3), np.int64)
        if self.unpack is not None:
            (rows,) = given
            arrays = self.unpack(np.stack([np.asarray(r) for r in rows]) if count else
                                 np.zeros((0, 0), np.uint8))
        else:
            arrays = [np.stack([np.asarray(v) for v in batch]) if count else
                      np.zeros((0, *n.shape), n.dtype) for n, batch in zip(self.given, given,
                                                                           strict=True)]
        values = {id(n): a for n, a in zip(self.given, arrays, strict=True)}

        def leaf(n: Node) -> np.ndarray | None:
            if id(n) in values:
                return values[id(n)]
            if n.op == "in_dim":
                return dims[:, n.attrs[0]]
            return None

        wanted = [lane for lanes in self.layout for lane, _ in lanes if isinstance(lane, Node)]
        got = dict(zip(map(id, wanted), evaluate(wanted, count, leaf), strict=True))
        outs = []
        for dt, lanes in zip(self.groups, self.layout, strict=True):
            cols = [got[id(lane)].reshape(count, -1) if isinstance(lane, Node) else
                    np.full((count, 1), lane, dt) for lane, _ in lanes]
            # A dtype nothing asked for still gives a vector of one (DALI takes no
            # zero-length outputs of a python_function everywhere).
            block = np.concatenate(cols, axis=1).astype(dt) if cols else np.zeros((count, 1), dt)
            outs.append([np.ascontiguousarray(row) for row in block])
        return tuple(outs)


class ScalarStage:
    """The per-sample scalars of one traced op, computed by one ``fn.python_function`` per batch
    (see the module's text). :meth:`scalar` and :meth:`vector` hand out DALI subscripts of its
    outputs; the function evaluates, at run time, whatever was asked for while the graph was
    defined.

    ``given``: the op's draws (the nodes of ``SampleScalars``), as ``values`` give them: one
    DataNode per node, or one DataNode of packed bytes that ``unpack`` reads."""

    def __init__(self, traced: Traced, shape: Any, given: Sequence[Node], *values: Any,
                 unpack: Callable[[np.ndarray], list[np.ndarray]] | None = None) -> None:
        from nvidia.dali import fn

        self.takes = stageable(id(n) for n in given)
        dtypes = {np.dtype(np.int64), np.dtype(np.float32)}  # float32: fn.erase's arguments
        for n in _graph(traced):
            if self.takes(n):
                dtypes.add(n.dtype)
        self.groups = sorted(dtypes, key=str)
        self.function = _StageFunction(self.groups, given, unpack)
        outs = fn.python_function(shape, *values, function=self.function,
                                  batch_processing=True, num_outputs=len(self.groups))
        self.outputs = outs if isinstance(outs, (list, tuple)) else [outs]
        self.memo: dict[tuple, Any] = {}

    def _place(self, lanes: Sequence[Node | int], dt: np.dtype) -> tuple[int, int, int]:
        g = self.groups.index(dt)
        layout = self.function.layout[g]
        start = sum(size for _, size in layout)
        size = 0
        for lane in lanes:
            k = int(np.prod(lane.shape)) if isinstance(lane, Node) else 1
            layout.append((lane, k))
            size += k
        return g, start, size

    def scalar(self, n: Node) -> Any:
        """``n`` (a node :attr:`takes`), per sample: a 0-d scalar or a 1-D vector."""
        key = ("n", id(n))
        if key not in self.memo:
            g, start, size = self._place([n], n.dtype)
            out = self.outputs[g]
            self.memo[key] = out[start] if n.ndim == 0 else out[start:start + size]
        return self.memo[key]

    def vector(self, lanes: Sequence[Node | int], dtype: Any = None) -> Any:
        """The scalars ``lanes`` (nodes :attr:`takes` of one dtype, or ints) as one per-sample
        vector; converted to ``dtype`` as numpy's ``astype`` converts, if given (a float32
        vector is what ``fn.erase`` takes)."""
        key = ("v", str(dtype), *(id(v) if isinstance(v, Node) else ("i", v) for v in lanes))
        if key not in self.memo:
            dt = next((v.dtype for v in lanes if isinstance(v, Node)), np.dtype(np.int64))
            if dtype is not None and np.dtype(dtype) != dt:
                dt = np.dtype(dtype)
                if dt not in self.groups:  # the outputs are made with the stage
                    raise ValueError(f"the scalar stage has no {dt} output")
                lanes = [Node("cast", (v,), (), dt, ()) if isinstance(v, Node) else v
                         for v in lanes]
            g, start, size = self._place(lanes, dt)
            self.memo[key] = self.outputs[g][start:start + size]
        return self.memo[key]

    def accepts(self, lanes: Sequence[Node | int]) -> bool:
        """Whether :meth:`vector` takes ``lanes``: scalars of one dtype it computes."""
        nodes = [v for v in lanes if isinstance(v, Node)]
        return bool(nodes) and all(v.ndim == 0 and self.takes(v) for v in nodes) and \
            len({v.dtype for v in nodes}) == 1
