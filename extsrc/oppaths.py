"""How a registered op runs inside the DALI graph: the three paths and the automatic choice.

- ``"numpy"``: the user's numpy function, through ``python_function`` on the CPU,
  one Python call per batch. Always available; it is the reference.
- ``"gpu"``: the same array code on the GPU. The op either declared ``gpu=True`` (its function
  also runs unchanged on CuPy arrays) or registered a dedicated ``Op.implement("gpu")`` function.
  Runs through ``python_function(device="gpu", batch_processing=True)``.
- ``"native"``: a lowering the op declared with ``Op.implement("native")``, built from DALI's own
  operators (``grid2x2``: four slices). Runs on whichever device the image is on, at DALI speed.

The automatic choice is the fastest path the op declares and the device supports: native, then
gpu (on a GPU), then numpy. A parity test holds every declared path to the numpy reference.
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from augment_ops.registry import IMPLEMENTATIONS, Op, OpContractError, implementation
from extsrc.errors import OpError
from extsrc.manifest import Manifest
from extsrc.seeding import name_salt, sample_rng

__all__ = ["RAISED", "BatchOpRunner", "GpuBatchOpRunner", "choose_paths", "op_salt"]

#: The last errors the runners raised in this process. DALI re-raises an op's error as text;
#: the loader finds the error object here again, with its fields (op, line, path).
RAISED: deque[OpError] = deque(maxlen=8)

_PREFERENCE_GPU = ("native", "gpu", "numpy")
_PREFERENCE_CPU = ("native", "numpy")


def _cupy_available() -> bool:
    try:
        import cupy  # noqa: F401
    except Exception:  # cupy raises more than ImportError when CUDA libraries are missing
        return False
    return True


def choose_paths(
    ops: Sequence[Op], *, gpu: bool, override: str | Mapping[str, str] | None = None
) -> dict[str, str]:
    """Pick a path per op name: ``override`` (one path for all, or per op name) else automatic.

    An override naming a path the op does not declare, or that the device cannot run, is an error
    that lists what the op offers.
    """
    if isinstance(override, str) or override is None:
        per_op: Mapping[str, str] = {} if override is None else {op.name: override for op in ops}
    else:
        per_op = dict(override)
        unknown = sorted(set(per_op) - {op.name for op in ops})
        if unknown:
            raise ValueError(
                f"op_path names op(s) {unknown} that the loader does not use; its ops are "
                f"{[op.name for op in ops]}"
            )
    chosen: dict[str, str] = {}
    for op in ops:
        offered = [p for p in op.paths if p != "gpu" or gpu]
        if op.name in per_op:
            want = per_op[op.name]
            if want not in IMPLEMENTATIONS:
                raise ValueError(
                    f"op_path for '{op.name}' must be one of {list(IMPLEMENTATIONS)}, got {want!r}"
                )
            if want == "gpu" and not gpu:
                raise ValueError(
                    f"op_path 'gpu' for '{op.name}' needs a GPU device; this loader runs on the "
                    "CPU. Use 'numpy' or 'native'"
                )
            if want not in op.paths:
                raise ValueError(
                    f"op '{op.name}' has no '{want}' implementation; it offers {list(op.paths)}"
                )
            chosen[op.name] = want
            continue
        prefs = _PREFERENCE_GPU if gpu else _PREFERENCE_CPU
        choice = next(p for p in prefs if p in offered)
        if choice == "gpu" and not _cupy_available():
            choice = "native" if "native" in offered else "numpy"
        chosen[op.name] = choice
    return chosen


class BatchOpRunner:
    """The numpy path: runs one op over a batch inside ``python_function(batch_processing=True)``.

    It receives the decoded images with each sample's manifest index and epoch, so a random op gets
    the generator of exactly that sample whatever order the batch arrives in, and a failure names
    the manifest line.
    """

    def __init__(self, op: Op, *, seed: int, manifest: Manifest, occurrence: int = 0) -> None:
        self.op = op
        self.seed = seed
        self.salt = op_salt(op.name, occurrence)
        self.manifest = manifest

    def where(self, index: int) -> str:
        m = self.manifest
        return f"{m.source} line {m.lines[index]} ({m.paths[index]})"

    def rng(self, index: int, epoch: int) -> np.random.Generator | None:
        return sample_rng(self.seed, epoch, index, self.salt) if self.op.random else None

    def run_one(self, img: Any, index: int, epoch: int) -> tuple[Any, ...]:
        try:
            return self.op.apply(img, self.rng(index, epoch))
        except OpContractError as e:
            raise OpContractError(f"{e} [sample {self.where(index)}]") from None
        except Exception as e:
            tb = "".join(traceback.format_exception(e)).rstrip()
            m = self.manifest
            err = OpError(
                f"op '{self.op.name}' raised {type(e).__name__}: {e} [sample {self.where(index)}]",
                op=self.op.name, source=m.source, line=m.lines[index], path=m.paths[index],
                detail=f"Original traceback of the op:\n{tb}",
            )
            RAISED.append(err)
            raise err from e

    def __call__(self, images: list[np.ndarray], infos: list[np.ndarray]) -> Any:
        # info rows are (manifest index, epoch, is_pad); see extsrc.source.INFO_COLUMNS
        results = [
            self.run_one(im, int(info[0]), int(info[1]))
            for im, info in zip(images, infos, strict=True)
        ]
        return _transpose(results, self.op.num_outputs)


class GpuBatchOpRunner(BatchOpRunner):
    """The gpu path: the op's array code on CuPy arrays, a batch per Python call.

    Each sample's info row (manifest index, epoch, pad flag) arrives on the GPU; the rows are copied
    to the host once per batch, and only for random ops, which need them for their generators.
    """

    def __init__(self, op: Op, *, seed: int, manifest: Manifest, occurrence: int = 0) -> None:
        super().__init__(op, seed=seed, manifest=manifest, occurrence=occurrence)
        self.impl = implementation(op, "gpu")

    def __call__(self, images: list[Any], *keys: list[Any]) -> Any:
        import cupy

        if keys:
            host = cupy.asnumpy(cupy.stack(keys[0])) if keys[0] else np.zeros((0, 3), np.int64)
            ids = [(int(k[0]), int(k[1])) for k in host]
        else:
            ids = [(-1, 0)] * len(images)
        results = []
        for img, (index, epoch) in zip(images, ids, strict=True):
            rng = self.rng(index, epoch)
            try:
                # The dedicated implementation, else the op's own array code, on a CuPy image,
                # with the op's bound parameters either way.
                f = self.impl if self.impl is not None else self.op.fn
                kwargs = {**dict(self.op.params), **({"rng": rng} if self.op.random else {})}
                out = f(img, **kwargs)
                outs = self.op.check_outputs(out, array_type=cupy.ndarray)
            except OpContractError as e:
                raise OpContractError(f"{e} [gpu path]") from None
            except Exception as e:
                where = self.where(index) if index >= 0 else "a sample"
                raise OpError(
                    f"op '{self.op.name}' (gpu path) raised {type(e).__name__}: {e} [{where}]"
                ) from e
            results.append(tuple(cupy.ascontiguousarray(o) for o in outs))
        return _transpose(results, self.op.num_outputs)


def op_salt(name: str, occurrence: int = 0) -> int:
    """The generator salt of the ``occurrence``-th use (0-based) of op ``name`` in one loader.

    The first use salts with the name alone; later uses of the same op (two random crops for
    two views, say) get their own streams instead of repeating the first one's draws.
    """
    return name_salt(name if occurrence == 0 else f"{name}#{occurrence}")


def _transpose(results: list[tuple[Any, ...]], num_outputs: int) -> Any:
    """Per-sample tuples -> per-output lists, as batch-mode ``python_function`` returns them."""
    if num_outputs == 1:
        return [r[0] for r in results]
    return tuple([r[k] for r in results] for k in range(num_outputs))
