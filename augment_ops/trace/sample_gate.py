"""The per-sample check of a traced op, evaluated by numpy for a whole batch in the stage's
``fn.python_function`` (:class:`augment_ops.trace.scalar_stage.ScalarStage`) before the op's
operators read the image.

The check raises, on the samples where the numpy path raises, the numpy path's errors: an image
below the op's ``min_size``, an image of another channel count than the graph takes (where the
step before the op gives a count known only at run time), a guard of the trace
(``rng.integers(0, h - size)`` on an image ``size`` high), an output that comes out empty. Its
values are per-sample scalars of the image's sizes and the op's draws, which numpy computes in
one call per batch, the scalar stage's where the op has one, and values computed from pixels
(``if img.max() > 250: raise``), which DALI operators compute and the call receives. Computed
by DALI operators instead (a CPU operator per value, dispatched per sample), with a
conditional split and merge around a Python call for the failing samples, the check took
10-32% of four ops' throughput on an H200; this way 8-16%, and
1-8% for ops with the stage (``benchmarks/README.md``, "the native path's check").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from augment_ops.trace.ir import Node

__all__ = ["Gate"]


@dataclass(frozen=True)
class Gate:
    """What the check of one traced op reads, and whom it calls for the failing samples.

    ``values``: the guards' conditions (``True``: numpy raises), then the sizes of the outputs
    the tracer cannot prove non-empty (ints where constant), in the order of
    :class:`augment_ops.trace.lower_dali.CheckLayout`. ``external``: those values computed by
    DALI operators (from pixel values, say), each once, which the stage's function receives as
    inputs after the draws, in this order. ``check(rows, infos)`` gets a row per failing sample
    (:class:`~augment_ops.trace.lower_dali.CheckLayout`) and its info row, and raises."""

    guards: int
    values: tuple[Node | int, ...]
    external: tuple[Node, ...]
    min_size: int
    check: Callable[[list[np.ndarray], list[np.ndarray]], Any]
    #: The channel count the graph takes, checked where given.
    channels: int | None = None

    @property
    def computed(self) -> list[Node]:
        """The values numpy computes from the sizes and draws."""
        outside = {id(n) for n in self.external}
        return [v for v in self.values if isinstance(v, Node) and id(v) not in outside]

    def apply(self, dims: np.ndarray, value: Callable[[Node], np.ndarray],
              external: Sequence[np.ndarray], infos: Sequence[Any]) -> None:
        """Call ``check`` with the samples of the batch that fail: ``dims`` the images' shapes
        ``(count, 3)``, ``value(n)`` a computed value ``(count,)``, ``external`` the given
        values in order, ``infos`` the info rows."""
        count = len(dims)
        given = {id(n): v for n, v in zip(self.external, external, strict=True)}
        cols = []
        for v in self.values:
            if not isinstance(v, Node):
                col = np.full(count, int(v), np.int64)
            elif id(v) in given:
                col = np.asarray(given[id(v)]).reshape(count)
            else:
                col = np.broadcast_to(value(v), (count,))
            cols.append(col.astype(np.int64))
        ok = np.minimum(dims[:, 0], dims[:, 1]) >= self.min_size
        if self.channels is not None:
            ok &= dims[:, 2] == self.channels
        for k, col in enumerate(cols):
            ok &= (col == 0) if k < self.guards else (col >= 1)
        bad = np.flatnonzero(~ok)
        if bad.size:
            table = np.concatenate([dims.astype(np.int64), np.stack(cols, axis=1)], axis=1) \
                if cols else dims.astype(np.int64)
            self.check([table[i] for i in bad], [np.asarray(infos[i]) for i in bad])
