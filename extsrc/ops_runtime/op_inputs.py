"""What each use of an op is given, and whether its traced native path can take it.

A traced op's graph (:mod:`augment_ops.trace`) computes numpy's result for HWC ``uint8`` images
of 3 channels, which is what the loader decodes. Its casts, divisions and wrap-arounds are
numpy's for such pixels: given a float32 image, it computes otherwise than the same numpy
function does (its ``img.astype(np.int16)`` rounds a float where numpy truncates it), and the
channel count is part of the graph (``img.shape[2]`` is 3 there). The first transform and the
ops after no transform take the decoded images; every other transform takes the output of the
one before it, and the ops take the last transform's output.

- A traced op given another dtype or rank (a float32 transform's output), or a traced
  transform's output of another channel count, runs on the numpy path, which runs the user's
  function on what it is given; forced onto its native path, the loader refuses it when built.
- After a transform on the numpy or gpu path, whose channel count shows only when it runs, the
  traced op keeps its native path, and that transform's runner checks each output it gives
  it (:func:`checked_readers`), naming the sample: an output of 4 channels stops the loader
  with the fix, where the op's graph would have given numpy's result only if it happens not
  to depend on the count (a flip's would, a greyscale's would not).
- After a transform on its native path whose channel count shows only when it runs (lowered
  by hand with ``Op.implement("native")``, or traced to a count of its own per sample), no
  Python sees its outputs: the traced op runs on the numpy path, or, forced onto its native
  path (or an op that cannot be pickled, which the automatic choice keeps native whatever the
  pool), checks the channel count per sample itself, first
  (:func:`augment_ops.lower_dali.emit`'s ``channels``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from augment_ops.registry import Op, implementation
from augment_ops.trace import trace_op

__all__ = ["DECODED", "TRACED_CHANNELS", "OpInput", "checked_readers", "fit_to_inputs",
           "op_inputs", "traced"]

#: The channel count a traced op's graph takes (the tracer's symbolic image).
TRACED_CHANNELS = 3


def _channels(count: int) -> str:
    return f"{count} channel" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class OpInput:
    """What one use of an op is given: images of ``dtype`` and rank ``ndim`` with ``channels``
    channels (``None``: known only when the batch runs), the output of transform ``after`` on
    path ``after_path`` (both ``None``: the decoded images)."""

    dtype: np.dtype
    ndim: int
    channels: int | None
    after: str | None = None
    after_path: str | None = None

    def traced_refusal(self) -> str | None:
        """Why a traced op's graph cannot take this input, or ``None`` where it can (a channel
        count known only at run time is checked per sample)."""
        if self.dtype == np.uint8 and self.ndim == 3 and self.channels in (None,
                                                                            TRACED_CHANNELS):
            return None
        what = f"{self.dtype} images of rank {self.ndim}"
        if self.channels is not None and self.ndim == 3:
            what += f" with {_channels(self.channels)}"
        return (f"transform '{self.after}' before it gives {what}, and the op's traced native "
                f"path computes numpy's result for HWC uint8 images with "
                f"{_channels(TRACED_CHANNELS)} only")

    @property
    def unchecked(self) -> bool:
        """Whether no Python sees these images before the op: the output of a transform on its
        native path (lowered by hand, or traced to a channel count of its own per sample),
        whose channel count shows only when it runs."""
        return self.channels is None and self.after_path == "native"


#: The decoded images.
DECODED = OpInput(np.dtype(np.uint8), 3, TRACED_CHANNELS)


def traced(op: Op, path: str) -> bool:
    """Whether ``op`` on ``path`` runs its traced graph."""
    return path == "native" and implementation(op, "native") is None


def _output(op: Op, path: str) -> OpInput:
    """What a transform on ``path`` gives the step after it."""
    channels = None
    if traced(op, path) and op.ndim == 3:
        out = trace_op(op).outputs[0]
        if len(out.shape) == 3 and isinstance(out.shape[2], int):
            channels = out.shape[2]
    return OpInput(np.dtype(op.dtype), op.ndim, channels, op.name, path)


def op_inputs(transforms: Sequence[Op], ops: Sequence[Op],
              paths: Mapping[str, str]) -> list[OpInput]:
    """What each use is given, in order: the transforms, then the ops, on their ``paths``."""
    given, inputs = DECODED, []
    for t in transforms:
        inputs.append(given)
        given = _output(t, paths[t.name])
    return inputs + [given] * len(ops)


def checked_readers(transforms: Sequence[Op], ops: Sequence[Op],
                    paths: Mapping[str, str]) -> list[tuple[str, ...]]:
    """Per transform, the traced ops on their native path that read its outputs where its
    channel count shows only when it runs (a transform on the numpy or gpu path): its runner
    checks each output has :data:`TRACED_CHANNELS` for them. Empty: nothing to check."""
    uses = [*transforms, *ops]
    found: list[tuple[str, ...]] = []
    for k, t in enumerate(transforms):
        readers = uses[k + 1:k + 2] if k + 1 < len(transforms) else list(ops)
        names = tuple(dict.fromkeys(r.name for r in readers if traced(r, paths[r.name])))
        found.append(names if paths[t.name] in ("numpy", "gpu") and t.ndim == 3 else ())
    return found


def fit_to_inputs(transforms: Sequence[Op], ops: Sequence[Op], paths: Mapping[str, str],
                  forced: set[str], moved: dict[str, str] | None = None,
                  movable: Callable[[Op], bool] = lambda op: True) -> dict[str, str]:
    """``paths``, with the traced ops given an input their graph cannot take on the numpy path,
    and those given images no Python sees (:attr:`OpInput.unchecked`) unless ``forced`` or not
    ``movable`` (an op that cannot be pickled): those keep their native path and check the
    channel count per sample. Raises ``ValueError`` for an op in ``forced`` (its path given by
    the user) that its input does not fit. ``moved`` gets the reason for each op moved."""
    chosen = dict(paths)
    uses = [*transforms, *ops]
    while True:
        # In order, and again after each move: moving a transform to the numpy path makes the
        # channel count after it unknown, which the ops after it take.
        for op, given in zip(uses, op_inputs(transforms, ops, chosen), strict=True):
            if not traced(op, chosen[op.name]):
                continue
            why = given.traced_refusal()
            if why is None and given.unchecked and op.name not in forced and movable(op):
                why = (f"transform '{given.after}' before it runs on its native path, where no "
                       "Python sees the channel count it gives")
            if why is None:
                continue
            if op.name in forced:
                raise ValueError(
                    f"op '{op.name}' cannot run on its native path here: {why}. Run it on the "
                    f"numpy path (OpRuntime(op_path={{'{op.name}': 'numpy'}})), or give it "
                    "uint8 HWC images with 3 channels")
            chosen[op.name] = "numpy"
            if moved is not None:
                moved[op.name] = why
            break
        else:
            return chosen
