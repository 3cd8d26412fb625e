"""The native path's pieces that run beside DALI's operators: the per-sample draws a traced random
op takes from the source's readers (:func:`native_sample_scalars`, :class:`CounterDraws`), the op
lowered into the graph (:func:`native_outputs`), and the checks that raise, on the samples the
numpy path would refuse, the errors the numpy path raises (:class:`SampleCheck`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from augment_ops.registry import Op, OpContractError, implementation
from augment_ops.trace import trace_op
from extsrc.errors import RAISED, OpError, OpOutputError
from extsrc.ops_runtime.seeding import counter_uniform, op_salt
from extsrc.sources.manifest import Manifest
from extsrc.sources.where import sample_where

if TYPE_CHECKING:
    from augment_ops.lower_dali import CheckLayout, SampleScalars

__all__ = ["CounterDraws", "SampleCheck", "SizeCheck", "native_outputs", "native_sample_scalars"]


class SampleCheck:
    """The native path's checks of the samples on which the numpy path raises: images below
    ``op.min_size``, the traced op's guards (:class:`augment_ops.trace.Guard`: numpy's
    ``rng.integers(0, h - size)`` on an image ``size`` high, a Python number divided by 0) and
    outputs that come out empty. numpy computes them for each batch in the graph
    (:mod:`augment_ops.trace.sample_gate`) and calls this only with the rows
    (:class:`augment_ops.lower_dali.CheckLayout`) and info rows of the samples that fail one
    (see :func:`augment_ops.lower_dali.emit`). Raises what the numpy path
    raises, in its order, naming the op, the manifest line and the path: an
    :class:`OpOutputError` of the transform ``after`` the op for an image of another channel
    count than ``channels`` (where given: the traced graph's, for an image no Python saw),
    the op's :class:`OpContractError` for a too-small image, an :class:`OpError` for a
    guard (with the op's line), an :class:`OpOutputError` for an empty output."""

    def __init__(self, op: Op, manifest: Manifest, layout: CheckLayout | None = None, *,
                 channels: int | None = None, after: str | None = None) -> None:
        from augment_ops.lower_dali import CheckLayout

        self.op = op
        self.channels = channels
        self.after = after
        self.manifest = manifest
        self.layout = layout if layout is not None else CheckLayout(0, (), ())
        self.guards = trace_op(op).guards if self.layout.guards else ()

    def _where(self, i: int) -> str:
        m = self.manifest
        return f"{sample_where(m.source, m.lines[i])} ({m.paths[i]})"

    def __call__(self, rows: list[np.ndarray], infos: list[np.ndarray]) -> list[np.ndarray]:
        m = self.manifest
        name = self.op.name
        for row, info in zip(rows, infos, strict=True):
            shape, flags, outs = self.layout.split(row)
            i = int(info[0])
            fields = {"op": name, "source": m.source, "line": m.lines[i], "path": m.paths[i]}
            if self.channels is not None and shape[2] != self.channels:
                # The fault is the output of the transform before the op: its error, as the
                # runner of a numpy-path transform raises it.
                before = f"transform '{self.after}'" if self.after else "the transform"
                err = OpOutputError(
                    f"op '{name}' on its native path takes HWC images with {self.channels} "
                    f"channels, got {shape[2]} from {before} before it [sample "
                    f"{self._where(i)}] [native path]; make {before} return {self.channels} "
                    f"channels, or run '{name}' on the numpy path "
                    f"(OpRuntime(op_path={{'{name}': 'numpy'}}), with op_pool='thread' if it "
                    "cannot be pickled)",
                    **{**fields, "op": self.after or name})
                RAISED.append(err)
                raise err
            if min(shape[0], shape[1]) < self.op.min_size:
                raise OpContractError(
                    f"op '{name}' needs images of at least {self.op.min_size}x"
                    f"{self.op.min_size} pixels, got {shape[0]}x{shape[1]} [sample "
                    f"{self._where(i)}] [native path]"
                )
            for guard, bad in zip(self.guards, flags, strict=True):
                if bad:
                    err = OpError(
                        f"op '{name}' raised {guard.error}: {guard.message} [sample "
                        f"{self._where(i)}] [native path]",
                        detail=f"The op's traced native path checks what numpy checks; numpy "
                               f"raises this at {guard.location or 'the op'}", **fields)
                    RAISED.append(err)
                    raise err
            for k, out_shape in outs:
                if 0 in out_shape:
                    err = OpOutputError(
                        f"op '{name}' output {k} is empty (shape {out_shape}); an image output "
                        f"needs at least one pixel [sample {self._where(i)}] [native path]",
                        **fields)
                    RAISED.append(err)
                    raise err
        return rows


#: The native path's check of ``op.min_size`` is part of :class:`SampleCheck`.
SizeCheck = SampleCheck


def native_sample_scalars(op: Op, *, seed: int, occurrence: int = 0,
                          gpu: bool = False) -> SampleScalars | None:
    """What the source's readers compute for the op's traced native path: the per-sample scalars
    of its draws (:class:`augment_ops.lower_dali.SampleScalars`), packed for the scalar stage
    where the op's graph on the GPU (``gpu``) or the CPU uses one, or ``None`` when there are
    none (a deterministic op, a hand-written lowering)."""
    if implementation(op, "native") is not None:
        return None
    from augment_ops.lower_dali import SampleScalars, sample_scalar_nodes, uses_stage

    traced = trace_op(op)
    nodes = sample_scalar_nodes(traced)
    if not nodes:
        return None
    return SampleScalars(nodes, CounterDraws(seed, op_salt(op.name, occurrence)),
                         packed=uses_stage(traced, gpu=gpu))


def native_outputs(op: Op, img: Any, info: Any, *, manifest: Manifest,
                   sample_values: Sequence[Any] = (), program: SampleScalars | None = None,
                   shape: Any = None, channels: int | None = None,
                   after: str | None = None) -> list[Any]:
    """The op's native path on the image DataNode: its declared lowering, else its traced graph
    (with its per-sample checks, :class:`SampleCheck`, and, for a random op, ``sample_values``:
    the outputs of its :func:`native_sample_scalars` ``program``, as the source delivers them).
    ``shape``: the image's shapes computed without decoding it (``fn.peek_image_shape``), for
    the traced graph (see :func:`augment_ops.lower_dali.emit`). ``channels``: the channel count
    the traced graph takes, checked per sample, where nothing else checks the count of what
    the transform ``after`` gives it (:mod:`extsrc.ops_runtime.op_inputs`)."""
    hand_written = implementation(op, "native")
    if hand_written is not None:
        outs = hand_written(img, **dict(op.params))
        return list(outs) if isinstance(outs, (tuple, list)) else [outs]
    from augment_ops.lower_dali import check_layout, emit

    traced = trace_op(op)
    return emit(traced, img, sample_values=sample_values, info=info,
                check=SampleCheck(op, manifest, check_layout(traced), channels=channels,
                                  after=after),
                min_size=op.min_size, channels=channels,
                packed=program if program is not None and program.packed else None, shape=shape)


def native_reads_sizes(op: Op, program: SampleScalars | None, gpu: bool) -> bool:
    """Whether the op's native path reads the image's sizes (so that ``native_outputs`` takes
    ``shape``): its traced graph's sizes, scalar stage or check do."""
    if implementation(op, "native") is not None:
        return False
    from augment_ops.lower_dali import reads_sizes

    return reads_sizes(trace_op(op), gpu=gpu, min_size=op.min_size,
                       packed=program is not None and program.packed)


class CounterDraws:
    """``(index, epoch, slot) -> uniforms``: :func:`extsrc.ops_runtime.seeding.counter_uniform`
    for one op."""

    def __init__(self, seed: int, salt: int) -> None:
        self.seed = seed
        self.salt = salt

    def __call__(self, index: np.ndarray, epoch: np.ndarray, slot: int) -> np.ndarray:
        return counter_uniform(self.seed, epoch, index, self.salt, slot)
