"""The paths an op can run on: the implementations declared for it (:attr:`Op.paths
<augment_ops.registry.Op.paths>`) and a native path traced from its numpy function.

The registry holds only what was declared and never asks the tracer; this module asks it, for the
loader's choice of paths (:func:`extsrc.ops_runtime.paths.choose_paths`) and the ``extsrc ops``
listing.
"""

from __future__ import annotations

from augment_ops.registry import IMPLEMENTATIONS, Op
from augment_ops.trace import traces

__all__ = ["available_paths"]


def available_paths(op: Op) -> tuple[str, ...]:
    """The paths ``op`` can run on, reference first, in the order of
    :data:`~augment_ops.registry.IMPLEMENTATIONS`: ``"numpy"``, the paths declared with
    :meth:`Op.implement <augment_ops.registry.Op.implement>`, and ``"native"`` where none was
    declared but the tracer lowers the numpy function (:mod:`augment_ops.trace`;
    ``augment_ops.explain(op)`` says why it does not). Traces the op on the first call."""
    declared = op.paths
    if op.on_clips or "native" in declared or not traces(op):
        return declared
    has = {*declared, "native"}
    return tuple(p for p in IMPLEMENTATIONS if p in has)
