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
operators keeps them in DALI (:func:`wants_stage`), with no Python call per batch unless it has
a per-sample check (:mod:`augment_ops.trace.sample_gate`), which the stage's call computes where
the op has the stage, and a call of its own otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace.ir import Node, Traced
from augment_ops.trace.sample_gate import Gate
from augment_ops.trace.sym import _INEXACT

__all__ = ["MAX_STAGE_ELEMENTS", "STAGE_MIN_OPERATORS", "STAGE_MIN_OPERATORS_GPU", "ScalarProgram",
           "ScalarStage", "computed_here", "evaluate", "scalar_operators", "small",
           "stage_min_operators", "stageable", "wants_stage"]

#: The fewest scalar operators (:func:`scalar_operators`) for which :class:`ScalarStage` computes
#: an op's scalars instead of DALI. On the project's 2-core CPU machine
#: (benchmarks/probes/scalar_stage_probe.py, batch 32, 64x64 images, medians of 7 rounds) ops
#: counted at 20 to 50 ran within the machine's noise either way (1.8-3.1 ms per batch), and
#: YOLOv5's cutout (1,152) 2.6x faster through the stage: only ops well past that range take it,
#: the others keep their scalars in DALI operators.
STAGE_MIN_OPERATORS = 100

#: The same where the image is on a GPU. There each scalar operator is a DALI CPU operator
#: dispatched per sample beside GPU work, and the stage paid off from about 30 of them: on an
#: H200 (batch 128, 500x375 JPEGs, 2026-11-27, benchmarks/results/2026-11-27_h200_realops_stage4
#: .json against ..._stage100.json) ops counted at 33 to 52 ran 1.07-1.70x faster through it,
#: ops at 16 to 20 0.81-0.93x as fast; MMPretrain's RandomCrop (215) 3.1x (..._nostage.json).
STAGE_MIN_OPERATORS_GPU = 30


def stage_min_operators(gpu: bool) -> int:
    """The fewest scalar operators for which the stage computes an op's scalars, for an image
    on the GPU (``gpu``) or on the CPU."""
    return STAGE_MIN_OPERATORS_GPU if gpu else STAGE_MIN_OPERATORS


#: The nodes :func:`evaluate` computes (with the leaves its ``leaf`` gives).
_EVALUATED = frozenset({"const", "cast", "bin", "un", "where", "select", "stack", "take",
                        "reshape", "broadcast", "expand", "cat", "slice", "laid"})


class ScalarProgram:
    """``nodes`` evaluated by numpy for a batch: a straight-line Python function generated once
    (one numpy call per node, in an order where arguments come first), where walking the graph
    would cost several times the numpy calls themselves (YOLOv5's cutout: 3,000 nodes).

    ``program(count, leaf)`` gives each node as an array of shape ``(count, *node.shape)`` and
    the node's dtype; ``leaf(n)`` gives the values of the graph's leaves (draws, the image's
    sizes, values given from outside) as such arrays. Values the same for every sample
    (constants, and what is computed from them alone) keep a sample axis of length 1 until the
    end: numpy broadcasts them. Made again, not pickled, in each process."""

    def __init__(self, nodes: Sequence[Node], is_leaf: Callable[[Node], bool]) -> None:
        order: list[Node] = []
        index: dict[int, int] = {}

        def visit(n: Node) -> None:
            stack = [(n, False)]
            while stack:
                m, done = stack.pop()
                if id(m) in index:
                    continue
                if done or is_leaf(m) or m.op == "const":
                    index[id(m)] = len(order)
                    order.append(m)
                    continue
                stack.append((m, True))
                stack.extend((a, False) for a in reversed(m.args)
                             if isinstance(a, Node) and id(a) not in index)

        for n in nodes:
            visit(n)
        self.leaves = [m for m in order if is_leaf(m)]
        self.consts = [np.asarray(m.value)[np.newaxis] for m in order
                       if m.op == "const" and not is_leaf(m)]
        self.dtypes = [m.dtype for m in order]
        lines, leaf_k, const_k = [], 0, 0

        def ref(a: Node | int, ndim: int) -> str:
            if not isinstance(a, Node):
                return f"np.full(1, {int(a)}, np.int64)"
            v = f"v{index[id(a)]}"
            if a.ndim == ndim:
                return v
            return f"{v}.reshape(({v}.shape[0],) + (1,) * {ndim - a.ndim} + {v}.shape[1:])"

        for k, m in enumerate(order):
            if is_leaf(m):
                expr = f"L[{leaf_k}]"
                leaf_k += 1
            elif m.op == "const":
                expr = f"C[{const_k}]"
                const_k += 1
            elif m.op == "cast":
                expr = f"{ref(m.args[0], m.ndim)}.astype(D[{k}])"
            elif m.op == "bin" and hasattr(np, m.attrs[0]):
                expr = f"np.{m.attrs[0]}({ref(m.args[0], m.ndim)}, {ref(m.args[1], m.ndim)})"
            elif m.op == "un" and hasattr(np, m.attrs[0]):
                expr = f"np.{m.attrs[0]}({ref(m.args[0], m.ndim)})"
            elif m.op in ("where", "select"):
                expr = "np.where(" + ", ".join(ref(a, m.ndim) for a in m.args) + ")"
            elif m.op == "stack":
                parts = ", ".join(ref(a, m.args[0].ndim) for a in m.args)
                expr = f"_stack([{parts}], {1 + m.attrs[0]})"
            elif m.op == "take" and isinstance(m.args[1], int):
                expr = f"np.take({ref(m.args[0], m.args[0].ndim)}, {m.args[1]}, " \
                       f"axis={1 + m.attrs[0]})"
            elif m.op in ("reshape", "broadcast") and all(isinstance(d, int) for d in m.shape):
                # Static shapes only; a value the same for every sample keeps its axis of 1.
                how = "np.broadcast_to" if m.op == "broadcast" else "np.reshape"
                v = ref(m.args[0], m.ndim if m.op == "broadcast" else m.args[0].ndim)
                expr = f"{how}({v}, ({v}.shape[0],) + {tuple(m.shape)!r})"
            elif m.op == "cat":
                parts = ", ".join(ref(a, m.ndim) for a in m.args)
                expr = f"_cat([{parts}], {1 + m.attrs[0]})"
            elif m.op == "slice" and _static_slice(m):
                key = [":"] * (1 + m.ndim)
                for j, ax in enumerate(m.attrs):
                    key[1 + ax] = f"{m.args[1 + 2 * j]}:{m.args[2 + 2 * j]}"
                expr = f"{ref(m.args[0], m.ndim)}[{', '.join(key)}]"
            elif m.op == "laid":  # a memory layout (float sums), the same values
                expr = ref(m.args[0], m.ndim)
            elif m.op == "expand":
                expr = f"np.expand_dims({ref(m.args[0], m.args[0].ndim)}, {1 + m.attrs[0]})"
            elif m.op == "take" and m.args[0].ndim == 1:  # a per-sample position in a vector
                expr = f"_take_at({ref(m.args[0], 1)}, {ref(m.args[1], 0)}, count)"
            else:
                raise ValueError(f"not a per-sample scalar numpy computes here: {m}")
            lines.append(f"    v{k} = _typed({expr}, D[{k}])")
        outs = ", ".join(f"_rows(v{index[id(n)]}, count)" for n in nodes)
        source = "def run(L, C, D, count):\n" + "\n".join(lines) + f"\n    return [{outs}]\n"
        scope = {"np": np, "_typed": _typed, "_stack": _stack, "_cat": _cat, "_take_at": _take_at,
                 "_rows": _rows}
        exec(compile(source, "<augment_ops scalar program>", "exec"), scope)
        self._run = scope["run"]

    def __call__(self, count: int, leaf: Callable[[Node], np.ndarray]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return self._run([leaf(m) for m in self.leaves], self.consts, self.dtypes, count)


def _batch(samples: Sequence[np.ndarray], shape: tuple, dtype: np.dtype | None) -> np.ndarray:
    """A batch's samples (arrays of one ``shape``, as DALI hands a python_function's input)
    as one array ``(len(samples), *shape)``; ``np.array`` of the list takes a fraction of
    ``np.stack``'s time on 128 small arrays."""
    if not samples:
        return np.zeros((0, *shape), dtype)
    out = np.array(samples, dtype=dtype)
    if out.shape != (len(samples), *shape):
        raise ValueError(f"per-sample values of shape {shape} expected, got a batch "
                         f"{out.shape}")
    return out


def _typed(v: Any, dt: np.dtype) -> np.ndarray:
    v = np.asarray(v)
    return v if v.dtype == dt else v.astype(dt)


def _aligned(parts: list[np.ndarray]) -> list[np.ndarray]:
    """``parts`` with as many samples each (a constant's axis of 1 repeated)."""
    rows = max(p.shape[0] for p in parts)
    return [np.broadcast_to(p, (rows, *p.shape[1:])) for p in parts]


def _stack(parts: list[np.ndarray], axis: int) -> np.ndarray:
    return np.stack(_aligned(parts), axis=axis)


def _cat(parts: list[np.ndarray], axis: int) -> np.ndarray:
    return np.concatenate(_aligned(parts), axis=axis)


def _static_slice(n: Node) -> bool:
    """Whether slice ``n`` has bounds that are the same for every sample."""
    return all(isinstance(b, int) for b in n.args[1:])


def computed_here(n: Node) -> bool:
    """Whether :class:`ScalarProgram` computes node ``n`` from its arguments (numpy's function
    of its name, a slice of bounds the same for every sample, ...)."""
    if n.op == "take" and not isinstance(n.args[1], int):  # a per-sample position in a vector
        return n.args[0].ndim == 1 and n.ndim == 0
    return n.op in _EVALUATED and (n.op not in ("bin", "un") or hasattr(np, n.attrs[0])) and (
        n.op != "slice" or _static_slice(n))


def _take_at(src: np.ndarray, pos: np.ndarray, count: int) -> np.ndarray:
    src = np.broadcast_to(src, (count, *src.shape[1:]))
    pos = np.broadcast_to(pos, (count,))
    return np.take_along_axis(src, pos.reshape(count, 1), axis=1).reshape(count)


def _rows(v: np.ndarray, count: int) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(v, (count, *v.shape[1:])))


def evaluate(nodes: Sequence[Node], count: int,
             leaf: Callable[[Node], np.ndarray | None]) -> list[np.ndarray]:
    """Each of ``nodes`` for ``count`` samples (see :class:`ScalarProgram`), made and run once;
    ``leaf(n)`` gives a leaf's values, None for a node computed from its arguments."""
    found: dict[int, np.ndarray | None] = {}

    def is_leaf(n: Node) -> bool:
        if id(n) not in found:
            found[id(n)] = leaf(n)
        return found[id(n)] is not None

    return ScalarProgram(nodes, is_leaf)(count, lambda n: found[id(n)])


#: The most elements a per-sample array numpy computes here (in the stage, or in the source's
#: readers) may have.
MAX_STAGE_ELEMENTS = 64


def small(n: Node) -> bool:
    """A per-sample scalar, or an array of a constant shape of at most
    :data:`MAX_STAGE_ELEMENTS` values (``rng.uniform(size=3)``, mmcv's ``(1, 4)`` box)."""
    return all(isinstance(d, int) for d in n.shape) and \
        int(np.prod(n.shape, dtype=np.int64)) <= MAX_STAGE_ELEMENTS


def _handed_out(n: Node) -> bool:
    """Whether :class:`ScalarStage` gives ``n`` to the graph: a scalar or a vector (an array of
    more axes, such as mmcv's box, is only computed from, on the way to its elements)."""
    return n.ndim <= 1


def stageable(given: Iterable[int]) -> Callable[[Node], bool]:
    """Whether :class:`ScalarStage` computes a node: a scalar or small array (:func:`small`)
    that depends on the image's sizes and the draws (the ``given`` nodes, by id) but not on its
    pixels, made of operators :func:`evaluate` computes. Memoised."""
    given = set(given)
    memo: dict[int, bool] = {}

    def ok(n: Node) -> bool:
        got = memo.get(id(n))
        if got is None:
            if id(n) in given or n.op == "in_dim":
                got = True
            elif n.pixel or not small(n) or not computed_here(n):
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


def _scalar_nodes(traced: Traced, given: set[int], costs: Callable[[Node], bool]) -> list[Node]:
    """The nodes :func:`stageable` (besides constants, the ``given`` values and the image's
    sizes) for which ``costs`` says lowering takes a DALI operator of its own."""
    ok = stageable(given)
    return [n for n in _graph(traced) if n.op not in ("const", "in_dim")
            and id(n) not in given and ok(n) and costs(n)]


def scalar_operators(traced: Traced, given: Iterable[int], costs: Callable[[Node], bool]) -> int:
    """About how many DALI operators ``traced``'s per-sample scalars take
    (:func:`_scalar_nodes`). An upper bound: the emitter computes scalars alike along several
    axes (a rectangle's y and x) in one operator."""
    return len(_scalar_nodes(traced, set(given), costs))


def wants_stage(traced: Traced, given: Iterable[int], costs: Callable[[Node], bool],
                gpu: bool = False) -> bool:
    """Whether ``traced``'s per-sample scalars would take at least
    :func:`stage_min_operators` DALI operators (:func:`scalar_operators`) for an image on the
    GPU (``gpu``) or the CPU, or hold a float function whose DALI result may differ from
    numpy's in the last bit (``np.exp(h / 7)``, ``math.log`` of a draw): numpy computes those
    exactly."""
    nodes = _scalar_nodes(traced, set(given), costs)
    return len(nodes) >= stage_min_operators(gpu) or any(
        n.op == "un" and n.attrs[0] in _INEXACT for n in nodes)


class _StageFunction:
    """What the stage's ``fn.python_function`` runs per batch: the requested nodes evaluated by
    numpy from the images' shapes and the given values, laid out in one vector per dtype."""

    def __init__(self, groups: Sequence[np.dtype], given: Sequence[Node],
                 unpack: Callable[[np.ndarray], list[np.ndarray]] | None,
                 gate: Gate | None = None) -> None:
        self.groups = list(groups)
        self.given = list(given)
        self.unpack = unpack
        self.gate = gate
        #: Per dtype, the lanes of its output vector: (node or int, its length).
        self.layout: list[list[tuple[Node | int, int]]] = [[] for _ in groups]
        self.program: ScalarProgram | None = None

    def __call__(self, shapes: list[np.ndarray], *inputs: list[np.ndarray]) -> Any:
        count = len(shapes)
        dims = _batch(shapes, (3,), np.dtype(np.int64))
        infos: Sequence[Any] = ()
        external: list[np.ndarray] = []
        if self.gate is not None:  # inputs: the info rows, the draws, the gate's own values
            infos, *inputs = inputs
            cut = len(inputs) - len(self.gate.external)
            inputs, rest = inputs[:cut], inputs[cut:]
            external = [_batch(batch, np.shape(batch[0]) if count else (), None)
                        for batch in rest]
        given = inputs
        if self.unpack is not None:
            (rows,) = given
            arrays = self.unpack(_batch(rows, np.shape(rows[0]) if count else (0,),
                                        np.dtype(np.uint8)))
        else:
            arrays = [_batch(batch, n.shape, n.dtype)
                      for n, batch in zip(self.given, given, strict=True)]
        values = {id(n): a for n, a in zip(self.given, arrays, strict=True)}
        wanted = [lane for lanes in self.layout for lane, _ in lanes if isinstance(lane, Node)]
        if self.gate is not None:
            wanted += self.gate.computed
        if self.program is None:  # the layout is complete once the pipeline runs
            self.program = ScalarProgram(wanted, lambda n: id(n) in values or n.op == "in_dim")
        got = dict(zip(map(id, wanted), self.program(
            count, lambda n: values[id(n)] if id(n) in values else dims[:, n.attrs[0]]),
            strict=True))
        if self.gate is None:
            return self._outputs(got, count)
        # Raises for a batch holding a sample the numpy path refuses, before any operator that
        # reads this function's outputs (the image's among them) runs.
        self.gate.apply(dims, lambda n: got[id(n)], external, infos)
        outs = self._outputs(got, count)
        # The shapes go out as they came in (DALI copies a python_function's outputs).
        return (list(shapes), *outs) if outs else list(shapes)

    def _outputs(self, got: dict[int, np.ndarray], count: int) -> tuple:
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
                 unpack: Callable[[np.ndarray], list[np.ndarray]] | None = None,
                 gate: Gate | None = None, info: Any = None, external: Sequence[Any] = (),
                 hands_out: bool = True) -> None:
        from nvidia.dali import fn

        computes = stageable(id(n) for n in given)
        self.takes = lambda n: hands_out and _handed_out(n) and computes(n)
        dtypes = {np.dtype(np.int64), np.dtype(np.float32)} if hands_out else set()
        for n in _graph(traced):  # (float32: fn.erase's arguments)
            if self.takes(n):
                dtypes.add(n.dtype)
        self.groups = sorted(dtypes, key=str)
        self.function = _StageFunction(self.groups, given, unpack, gate)
        inputs = [shape, *values] if gate is None else [shape, info, *values, *external]
        gated = gate is not None
        outs = fn.python_function(*inputs, function=self.function, batch_processing=True,
                                  num_outputs=len(self.groups) + gated)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        #: With a gate: the images' shapes, once the check has passed (a reshape of the image
        #: to them orders the op's operators after it).
        self.checked_shape = outs.pop(0) if gated else None
        self.outputs = outs
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
