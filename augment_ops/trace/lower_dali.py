"""Emit a traced op (:mod:`augment_ops.trace`) as DALI operators on the image's DataNode.

The operators run on whichever device the image is on. Per-sample scalars (sizes, slice bounds,
branch conditions) are DALI CPU operators on ``image.shape()``, copied to the GPU only where an
elementwise operator mixes them with GPU pixels; those that depend on a random op's draws alone are
computed by numpy in the source's reader processes (:class:`SampleScalars`) and enter the graph as
external-source outputs. No Python runs per batch in the graph, except for an op whose scalars
would take many operators, or hold float functions DALI computes otherwise than numpy
(:func:`uses_stage`): numpy computes them all in one ``fn.python_function`` per batch
(:mod:`augment_ops.trace.scalar_stage`), the draws arriving packed in one external-source output;
and for an op that numpy refuses on some samples (below its ``min_size``, a ``raise`` of its
code, an output that may come out empty), whose check numpy computes in that same call, or in
one of its own (:mod:`augment_ops.trace.sample_gate`).
Facts the tracer knows (sizes are >= 1, ``(h - ch) // 2 + ch <= h``) spare the clamps of slice
bounds, so a crop's bounds take a few operators. Each DALI operator costs about the same per batch
whatever its work (it is dispatched per sample), so scalars computed alike along several axes (a
rectangle's y and x bounds) are computed together, as per-sample vectors
(:mod:`augment_ops.trace.emitter`): a crop whose starts are computed alike is one ``fn.slice`` on
vectors of starts and sizes, and a rectangle fill's anchor and size are vectors too, the clamps of
its bounds at 0 and at the image's size left to ``fn.erase``, which clips its region to the image.
numpy's semantics are kept where DALI's differ (:mod:`augment_ops.trace.dali_ops`):

- casts: DALI saturates and rounds to nearest, numpy wraps between integer types and truncates
  floats toward zero, so integer narrowing masks the bits first and float-to-int truncates first
  (floats outside the target range: to 8- and 16-bit integers they wrap around as numpy's do
  on x86-64 and ARM64; to wider ones, where numpy's result depends on the processor, DALI
  saturates);
- ``//`` and ``%`` on signed integers: DALI truncates toward zero, numpy floors; by 0 DALI
  raises and numpy gives 0, and the most negative int32 or int64 by -1 traps in DALI where
  numpy wraps around, so a divisor that may be either is replaced by 1 and the result fixed;
- ``np.rint`` (half to even) through the add-and-subtract 2**23 (2**52) rounding identity;
- ``np.where`` as a bitwise select, exact for every value (NaN and inf included);
- a branch on a per-sample scalar: both outcomes are computed for the whole batch and merged
  per sample with DALI's conditional split/merge, so outputs may differ in shape; branches that
  only flip and transpose one image (``np.rot90(img, k)`` of a drawn ``k``, a random flip) are
  one ``fn.flip`` with per-sample flags and a transpose of the samples that take it, their
  flags computed with the draws (:func:`augment_ops.trace.lower_patterns.rewritten_for_dali`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from augment_ops.trace.dali_ops import _dali_type
from augment_ops.trace.emitter import _Emitter
from augment_ops.trace.facts import lower
from augment_ops.trace.ir import Node, Traced, same_shape
from augment_ops.trace.lower_patterns import _free, rewritten_for_dali
from augment_ops.trace.sample_gate import Gate
from augment_ops.trace.scalar_stage import (
    ScalarProgram,
    ScalarStage,
    computed_here,
    scalar_operators,
    small,
    stageable,
    wants_stage,
)

__all__ = ["CheckLayout", "SampleScalars", "check_layout", "emit", "reads_sizes",
           "sample_scalar_nodes", "scalar_cost", "uses_stage"]


class SampleScalars:
    """The per-sample scalars of a traced op that depend on its random draws but not on the image
    (``rng.uniform(a, b)``, ``rng.random() < p``, the draw of ``rng.integers`` before it meets a
    size), evaluated by numpy for a batch of samples from their (manifest index, epoch).

    The loader runs it in the source's reader processes, beside the file bytes
    (:class:`extsrc.sources.images.ReaderValues`): the numbers arrive in the graph as
    external-source outputs, with numpy's own semantics and no Python call in the pipeline.
    ``uniform(index, epoch, slot)`` gives the draws (float64 arrays). Picklable.

    ``packed``: all values of a sample as one byte vector, one external-source output in place of
    one per value (hundreds for YOLOv5's cutout), for an op whose scalars numpy computes in the
    graph too (:func:`uses_stage`), which reads them back with :meth:`unpack`.
    """

    def __init__(self, nodes: list[Node], uniform: Callable[..., np.ndarray],
                 packed: bool = False) -> None:
        self.nodes = nodes
        self.uniform = uniform
        self.packed = packed
        self._program: ScalarProgram | None = None  # made in the process that runs it

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_program": None}

    @property
    def num_outputs(self) -> int:
        """How many per-sample values :meth:`__call__` gives: one per node, or one packed."""
        return 1 if self.packed else len(self.nodes)

    def __call__(self, index: np.ndarray, epoch: np.ndarray) -> list[np.ndarray]:
        """One array of shape ``(len(index), *node.shape)`` per node, of the node's dtype; packed,
        one uint8 array of shape ``(len(index), bytes)``."""

        if self._program is None:
            self._program = ScalarProgram(self.nodes, lambda n: n.op == "uniform")
        values = self._program(len(index), lambda n: self.uniform(index, epoch, n.attrs[0]))
        if not self.packed:
            return values
        return [np.concatenate([v.reshape(len(index), -1).view(np.uint8) for v in values]
                               + [np.zeros((len(index), 0), np.uint8)], axis=1)]

    def unpack(self, rows: np.ndarray) -> list[np.ndarray]:
        """The values of :meth:`__call__` (unpacked) from its packed rows."""
        count, out, at = len(rows), [], 0
        for n in self.nodes:
            size = n.dtype.itemsize * int(np.prod(n.shape, dtype=np.int64))
            part = np.ascontiguousarray(rows[:, at:at + size])
            out.append(part.view(n.dtype).reshape(count, *n.shape))
            at += size
        return out


#: The graph each traced op is emitted from (:func:`_lowered`), kept while the op's is alive.
_LOWERED: weakref.WeakKeyDictionary[Traced, Traced] = weakref.WeakKeyDictionary()
_LOWERING = threading.RLock()


def _lowered(traced: Traced) -> Traced:
    """The graph :func:`emit` lowers for ``traced``, with the same values and fewer operators
    (:func:`augment_ops.trace.lower_patterns.rewritten_for_dali`: selects among flips and
    transposes made one per-sample flip and transpose, ...). One object per traced op, so that
    the scalars :func:`sample_scalar_nodes` names are the nodes :func:`emit` reads."""
    with _LOWERING:  # two threads lowering one op must get the same graph
        got = _LOWERED.get(traced)
        if got is None:
            got = rewritten_for_dali(traced)
            if got is not traced:  # a graph without such selects is its own (and keeps no entry)
                _LOWERED[traced] = got
                _LOWERED[got] = got  # lowered already: what check_layout and emit are given
        return got


def _noise_read_as_scalars(traced: Traced) -> set[int]:
    """The noise nodes a per-sample scalar is computed from (a branch on a noise value, an
    offset read from it): DALI's generator draws them on the CPU, where the scalars must be
    (a branch's predicate, an operator's argument), and elementwise operators copy them to
    the GPU where they meet the image there."""
    under: dict[int, set[int]] = {}

    def noise_under(n: Node) -> set[int]:
        got = under.get(id(n))
        if got is None:
            got = {id(n)} if n.op == "noise" else set().union(
                *(noise_under(a) for a in n.args if isinstance(a, Node)))
            under[id(n)] = got
        return got

    found: set[int] = set()
    for n in traced.nodes():
        if n.ndim == 0:
            found |= noise_under(n)
    return found


#: Operators whose per-sample scalar arguments may stay on the image's device: elementwise
#: operators (which copy CPU scalars over, :func:`augment_ops.trace.dali_ops._on_device`) and
#: those that only move them. The others take theirs as DALI argument inputs, on the CPU.
_DEVICE_ARGUMENTS = frozenset({"bin", "un", "cast", "where", "full", "stack", "cat", "expand",
                               "reduce", "lut"})


def _pixel_scalars_on_cpu(traced: Traced) -> set[int]:
    """The per-sample scalars computed from pixel values that DALI takes on the CPU: the
    predicate of a branch whose outcomes differ in shape (``if img[0, 0, 0] > 128: return
    img[1:]``), a slice bound or a fill's region computed from them, the size of an output that
    depends on them. On a GPU image they are computed there and copied to the CPU once; those
    that only meet the pixels (``img - img.mean()``, the predicate of ``if imin != imax:``
    between outcomes of one shape, an elementwise select) stay on the GPU."""
    roots: list[Node] = []
    for n in traced.nodes():
        roots.extend(d for d in n.shape if isinstance(d, Node))
        if n.op == "select":
            if not _same_shapes(n):
                roots.append(n.args[0])  # a conditional merge: its predicate on the CPU
        elif n.op not in _DEVICE_ARGUMENTS:
            roots.extend(a for a in n.args if isinstance(a, Node) and a.ndim == 0)
    found: set[int] = set()
    seen: set[int] = set()
    while roots:
        n = roots.pop()
        if id(n) in seen or n.ndim != 0:
            continue
        seen.add(id(n))
        if n.pixel:
            found.add(id(n))
        roots.extend(a for a in n.args if isinstance(a, Node))
    return found


def _same_shapes(n: Node) -> bool:
    """Whether select ``n``'s two outcomes have the same shape on every sample (the same size
    nodes): then it is an elementwise select where its predicate is, with no conditional."""
    _, a, b = n.args
    return same_shape(a.shape, b.shape)


def uses_stage(traced: Traced, gpu: bool = False) -> bool:
    """Whether :func:`emit` computes ``traced``'s per-sample scalars by numpy in one operator
    (:mod:`augment_ops.trace.scalar_stage`), which also takes the draws packed, for an image on
    the GPU (``gpu``) or on the CPU."""
    traced = _lowered(traced)
    nodes = sample_scalar_nodes(traced)
    if any(n.ndim > 1 for n in nodes):  # the stage hands out scalars and vectors only
        return False
    return wants_stage(traced, {id(n) for n in nodes}, lambda n: not _free(n), gpu)


def reads_sizes(traced: Traced, *, gpu: bool, min_size: int = 1, checked: bool = True,
                packed: bool = False) -> bool:
    """Whether :func:`emit` reads the image's sizes for ``traced``: its graph reads them, or
    its scalar stage (``packed``: the draws come packed, which only the stage unpacks) or its
    check does (``checked``: a check is given)."""
    traced = _lowered(traced)
    return packed or uses_stage(traced, gpu=gpu) or any(
        n.op == "in_dim" for n in traced.nodes()) or (
        checked and _may_refuse(check_layout(traced), min_size))


def _may_refuse(layout: CheckLayout, min_size: int) -> bool:
    """Whether the numpy path may refuse a sample of an op whose check rows ``layout``
    describes: one below ``min_size``, one that meets a guard, an output that may be empty."""
    return min_size > 1 or bool(layout.guards) or bool(layout.outputs)


def scalar_cost(traced: Traced) -> int:
    """About how many DALI operators ``traced``'s per-sample scalars take
    (:func:`augment_ops.trace.scalar_stage.scalar_operators`), what :func:`uses_stage` weighs."""
    traced = _lowered(traced)
    nodes = sample_scalar_nodes(traced)
    return scalar_operators(traced, {id(n) for n in nodes}, lambda n: not _free(n))


def sample_scalar_nodes(traced: Traced) -> list[Node]:
    """The scalars of ``traced`` that :class:`SampleScalars` computes: those depending on draws
    and not on the image, which the graph's other nodes read, in a stable order (empty for an
    op without draws)."""
    traced = _lowered(traced)
    if not traced.num_draws:
        return []
    on_image: dict[int, bool] = {}

    def image_dependent(n: Node) -> bool:
        """Computed in the graph: from the image, its sizes, or noise (which DALI's generator
        draws there, and the readers cannot)."""
        got = on_image.get(id(n))
        if got is None:
            got = n.pixel or n.op in ("in_dim", "noise") or any(
                isinstance(a, Node) and image_dependent(a) for a in n.args)
            on_image[id(n)] = got
        return got

    evaluable: dict[int, bool] = {}

    def small_array(n: Node) -> bool:
        """A small array of a static shape that numpy computes from the draws
        (:class:`ScalarProgram`): mmlab's lighting's three channel offsets."""
        got = evaluable.get(id(n))
        if got is None:
            # (an array of the draws of a static shape, up to MAX_STAGE_ELEMENTS: a larger
            # one is computed in the graph)
            got = small(n) and (n.op in ("const", "uniform") or (
                computed_here(n) and all(small_array(a) for a in n.args if isinstance(a, Node))))
            evaluable[id(n)] = got
        return got

    seen: set[int] = set()
    found: dict[int, Node] = {}
    layout = check_layout(traced)
    stack = [*traced.outputs, *(g.bad for g in traced.guards),
             *(d for k in layout.outputs for d in traced.outputs[k].shape
               if isinstance(d, Node))]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for k, a in enumerate(n.args):
            if not isinstance(a, Node) or a.op == "const":
                continue
            # a per-sample table (augment_ops.trace.gather) is numpy's, whatever its size
            table = n.op == "gather" and k == 0
            # only what ScalarProgram computes: a scalar of another operator (a write into a
            # small array) is the graph's
            if (small_array(a) or table) and not image_dependent(a):
                found.setdefault(id(a), a)
            else:
                stack.append(a)
    return list(found.values())


@dataclass(frozen=True)
class CheckLayout:
    """What the per-sample check of a traced op (:func:`emit`'s ``check``) receives, one int64
    row per sample: the image's shape (3 values), then 1 or 0 per guard of ``traced.guards``
    (1: the numpy function raises it for the sample), then the shapes of the outputs listed in
    ``outputs`` (those the tracer cannot prove non-empty), one after the other."""

    guards: int
    outputs: tuple[int, ...]
    ranks: tuple[int, ...]

    def split(self, row: Sequence[int]) -> tuple[tuple[int, ...], list[bool],
                                                 list[tuple[int, tuple[int, ...]]]]:
        """``(image shape, guard flags, [(output index, output shape), ...])`` of a row."""
        row = [int(v) for v in row]
        shape, flags = tuple(row[:3]), [bool(v) for v in row[3:3 + self.guards]]
        outs, at = [], 3 + self.guards
        for k in self.outputs:
            outs.append((k, tuple(row[at:at + self.ranks[k]])))
            at += self.ranks[k]
        return shape, flags, outs


def check_layout(traced: Traced) -> CheckLayout:
    """The rows :func:`emit` gives its ``check`` for ``traced`` (see :class:`CheckLayout`), from
    the graph :func:`emit` lowers, whichever of the two it is given."""
    traced = _lowered(traced)
    outputs = tuple(k for k, n in enumerate(traced.outputs)
                    if any(isinstance(d, Node) and (lower(d) is None or lower(d) < 1)
                           for d in n.shape))
    return CheckLayout(len(traced.guards), outputs, tuple(n.ndim for n in traced.outputs))


def emit(traced: Traced, image: Any, *, sample_values: Sequence[Any] = (), info: Any = None,
         check: Callable[[list[np.ndarray], list[np.ndarray]], Any] | None = None,
         min_size: int = 1, packed: SampleScalars | None = None, shape: Any = None,
         channels: int | None = None) -> list[Any]:
    """The traced op's outputs as DALI DataNodes, computed from ``image`` (an HWC uint8 DataNode).

    Every per-sample scalar is a DALI CPU operator on ``image.shape()``, except those of
    :func:`sample_scalar_nodes`, which a random op must pass as ``sample_values`` (DataNodes of
    per-sample scalars in that order, made by :class:`SampleScalars`).

    ``check`` (with ``info``, the pipeline's per-sample manifest index, epoch and pad flag):
    ``check(rows, infos)`` is called with the samples on which the numpy path raises alone, to
    raise, with a row per sample as :func:`check_layout` describes: images smaller than
    ``min_size`` on either side, samples that meet a guard of the trace (``rng.integers(0, h -
    size)`` on an image ``size`` high), samples whose outputs come out empty. numpy finds them,
    in one Python call per batch (:mod:`augment_ops.trace.sample_gate`), the scalar stage's when
    the op has one, unless a value of the check is computed from pixel values by DALI operators
    (which may read the stage's outputs): then in a call of its own. An op without guards whose
    outputs are known non-empty and whose ``min_size`` is 1 takes nothing for it. The op's
    image and sizes are read from the check's outputs, so it runs before any operator of the op
    could fail on such a sample.

    ``shape``: the image's shapes as a CPU DataNode computed without the image: the decoder's
    ``fn.peek_image_shape`` of the encoded bytes, which applies EXIF orientation as the decoder
    does. Where the op reads sizes (:func:`reads_sizes`), its sizes, scalar stage and check read
    it instead of ``image.shape()``, so they run while the image decodes instead of after it (a
    CPU operator on the decoded image's shape waits for the decoder). The image is reshaped to
    it, which stops the pipeline where the sizes hold another number of pixels; the caller
    checks that they equal the decoded image's (a transposed shape holds as many).

    ``channels`` (with ``check``): the channel count the graph takes, checked per sample first,
    in a Python call of its own, for an image from a step whose count nothing checked (a
    transform lowered by hand): ``check`` gets the image shapes of the samples with another
    count, before any other value is computed.
    """
    from nvidia.dali import fn

    traced = _lowered(traced)
    gpu = getattr(image, "device", "cpu") == "gpu"
    if shape is not None and not reads_sizes(traced, gpu=gpu, min_size=min_size,
                                             checked=check is not None,
                                             packed=packed is not None):
        shape = None  # nothing reads it: no operator for it
    em = _Emitter(image)
    em.shape = image.shape() if shape is None else shape
    if shape is not None:
        em.image = _image_as_read(image, shape)
    if check is not None and channels is not None:
        if info is None:
            raise ValueError("a check needs the pipeline's info; pass info=")
        # The channel count first, in a call of its own: every other value, a check's values
        # computed from pixels among them, is computed from the image that passed it. The
        # check gets the image's shape alone, and raises on the count before it reads more.
        counted = ScalarStage(traced, em.shape, [], info=info, hands_out=False,
                              gate=Gate(0, (), (), 1, check, channels)).checked_shape
        image = em.image = _image_as_read(em.image, counted)
        em.shape = counted
    em.cpu_noise = _noise_read_as_scalars(traced)
    em.cpu_scalars = _pixel_scalars_on_cpu(traced)
    nodes = sample_scalar_nodes(traced)
    if packed is not None:  # one byte vector per sample, which the stage unpacks
        if len(sample_values) != 1 or packed.nodes != nodes or not packed.packed:
            raise ValueError("packed= takes the op's SampleScalars (packed) and sample_values= "
                             "its one output")
        em.given.update(id(n) for n in nodes)
        staged = True
    else:
        if len(sample_values) != len(nodes):
            raise ValueError(
                f"the traced op needs {len(nodes)} per-sample value(s) made by SampleScalars "
                f"from its draws; got {len(sample_values)}")
        for n, value in zip(nodes, sample_values, strict=True):
            em.memo[id(n)] = value
            em.given.add(id(n))
        staged = uses_stage(traced, gpu=gpu)
    unpack = packed.unpack if packed is not None else None
    layout = check_layout(traced)
    gate = None
    if check is not None and _may_refuse(layout, min_size):
        if info is None:
            raise ValueError("a check needs the pipeline's info; pass info=")
        gate = _gate(traced, layout, nodes, check, min_size)
    if staged:
        # The check rides in the stage's function, unless a value of it is computed by DALI
        # operators, which may read the stage's outputs.
        inside = gate is not None and not gate.external
        em.stage = ScalarStage(traced, em.shape, nodes, *sample_values, unpack=unpack,
                               gate=gate if inside else None, info=info)
        checked = em.stage.checked_shape
    if gate is not None and not (staged and inside):
        i64 = _dali_type(np.dtype(np.int64))
        external = [fn.cast(_on_cpu(em.value(v)), dtype=i64) for v in gate.external]
        given, values = nodes, list(sample_values)
        if unpack is None:  # the draws the check's values are computed from, and only those
            read = _reaches(gate.computed, {id(n) for n in nodes})
            given = [n for n in nodes if id(n) in read]
            values = [v for n, v in zip(nodes, sample_values, strict=True) if id(n) in read]
        checked = ScalarStage(traced, em.shape, given, *values, unpack=unpack, gate=gate,
                              info=info, external=external, hands_out=False).checked_shape
    if gate is not None:
        # A reshape to its own shape shares the image's memory; it orders the check first.
        em.image = _image_as_read(image, checked)
        # Sizes are read from the checked shapes, and the values the check computed by DALI
        # operators are computed again from the checked image and sizes, so that no operator
        # of the outputs (a crop, noise of a drawn shape, np.full of one) runs before the
        # check. The draws stay, and the noise: the outputs read the noise the check read.
        em.shape = checked
        em.dims.clear()
        noise = {id(n) for n in traced.nodes() if n.op == "noise"}
        for k in [k for k in em.memo if k not in em.given and k not in noise]:
            del em.memo[k]
        em.vmemo.clear()
    # Later stages (resize) read the layout, which elementwise operators may not keep; slices
    # and rectangle fills of the input keep it, and spare the operator.
    return [em.value(n) if _keeps_layout(n) else
            fn.reshape(em.value(n), layout={3: "HWC", 2: "HW"}.get(n.ndim, ""))
            for n in traced.outputs]


def _image_as_read(image: Any, shape: Any) -> Any:
    """``image`` reshaped to ``shape`` (its own, or the one read from its header), sharing its
    memory; DALI stops the pipeline where they hold other numbers of pixels (its error names
    this function, by which extsrc explains it)."""
    from nvidia.dali import fn

    return fn.reshape(image, shape=shape)


def _gate(traced: Traced, layout: CheckLayout, given: Sequence[Node],
          check: Callable[[list[np.ndarray], list[np.ndarray]], Any], min_size: int) -> Gate:
    """The check of ``traced`` (:mod:`augment_ops.trace.sample_gate`): its guards' conditions
    and the sizes of the outputs ``layout`` lists; numpy computes those made of the image's
    sizes and the draws (``given``), DALI operators the others (a guard on pixel values)."""
    computes = stageable(id(n) for n in given)
    values: list[Node | int] = [g.bad for g in traced.guards]
    for k in layout.outputs:
        values += [int(d.value) if isinstance(d, Node) and d.op == "const" else d
                   for d in traced.outputs[k].shape]
    external = tuple({id(v): v for v in values
                      if isinstance(v, Node) and not computes(v)}.values())
    return Gate(len(traced.guards), tuple(values), external, min_size, check)


def _reaches(roots: Sequence[Node], among: set[int]) -> set[int]:
    """The ids in ``among`` of the nodes ``roots`` are computed from."""
    return {id(n) for n in Traced(tuple(roots), 0, 0).nodes()} & among


def _on_cpu(value: Any) -> Any:
    """A DataNode on the CPU (per-sample scalars on pixel values of a GPU image are on the GPU)."""
    return value.cpu() if getattr(value, "device", "cpu") == "gpu" else value


def _keeps_layout(n: Node) -> bool:
    """Whether DALI gives ``n`` the input's HWC layout: slices and rectangle fills of it do."""
    while n.op in ("slice", "fill") and n.ndim == 3:
        n = n.args[0]
    return n.op == "input"
