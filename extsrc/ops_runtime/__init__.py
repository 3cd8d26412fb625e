"""How a registered op runs inside the DALI graph: which path each op takes (:mod:`.paths`), the
numpy and gpu paths' runners (:mod:`.runners`), the native path's pieces (:mod:`.native`), the
pool of worker processes or threads that runs the numpy path (:mod:`.pool`, :mod:`.worker`), the
per-sample generators (:mod:`.seeding`) and the host resize of CPU loaders (:mod:`.hostresize`).

Names are imported on first use (PEP 562): an op worker process imports :mod:`.worker` and the
modules its ops need through this package, and no more (no pandas, torch or DALI). The names
below are those the old ``extsrc.oppaths`` offered, which maps here.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE: dict[str, str] = {
    "RAISED": "extsrc.errors",
    "BatchOpRunner": "extsrc.ops_runtime.runners",
    "DeviceBatchOpRunner": "extsrc.ops_runtime.runners",
    "GpuBatchOpRunner": "extsrc.ops_runtime.runners",
    "CounterDraws": "extsrc.ops_runtime.native",
    "SampleCheck": "extsrc.ops_runtime.native",
    "SizeCheck": "extsrc.ops_runtime.native",
    "native_outputs": "extsrc.ops_runtime.native",
    "native_sample_scalars": "extsrc.ops_runtime.native",
    "check_output_dtype": "extsrc.ops_runtime.paths",
    "choose_paths": "extsrc.ops_runtime.paths",
    "computes_on_pixels": "extsrc.ops_runtime.paths",
    "op_salt": "extsrc.ops_runtime.seeding",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'extsrc.ops_runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
