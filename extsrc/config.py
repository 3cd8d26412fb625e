"""``LoaderConfig``: everything that shapes a loader's output, and the rules its values follow.

The loader's arguments are normalised here (op names to :class:`~augment_ops.Op`, ``resize`` to
``(height, width)``, ``op_path`` to a tuple) and checked once, at construction, in
:meth:`LoaderConfig.__post_init__`; the checks shared with :mod:`extsrc.sharding` (batch size,
seed, last-batch policy) are that module's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import augment_ops
from augment_ops.registry import Op
from extsrc._dali import cuda_driver_initialized
from extsrc.batchformat import BatchFormat, Dtype, Layout, ResizeMode
from extsrc.oppaths import choose_paths
from extsrc.pipeline import default_output_names
from extsrc.sharding import LastBatch, check_int, check_last_batch, check_seed

__all__ = ["DEFAULT_HW_DECODER_LOAD", "METADATA_KEYS", "LoaderConfig", "cores_per_process"]

#: Keys every batch carries besides the named outputs: the manifest index of each sample and
#: whether it is a pad repeat (count it in no metric).
METADATA_KEYS: tuple[str, ...] = ("index", "is_pad")
_START_METHODS = ("fork", "spawn")

#: Share of JPEGs that mixed decoding gives to the GPU's hardware decoder. DALI's own default is
#: 0.65; on an H100 with 16 cores (2026-11-21, benchmarks/README.md) 0.85 ran extsrc 1.15x faster
#: (13.1k vs 11.4k images/s, medians of 3) and left training 0.92 instead of 0.90 of its
#: synthetic-data speed, because the rest is Huffman-decoded on DALI's CPU threads.
DEFAULT_HW_DECODER_LOAD = 0.85


def as_ops(value: Any, what: str) -> tuple[Op, ...]:
    if isinstance(value, (str, Op)):
        value = (value,)
    try:
        return tuple(augment_ops.get(v) for v in value)
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of op names or augment_ops.Op objects, got {value!r}"
        ) from None


def as_size(resize: Any) -> tuple[int, int] | None:
    if resize is None:
        return None
    if isinstance(resize, int) and not isinstance(resize, bool):
        resize = (resize, resize)
    if (
        isinstance(resize, Sequence) and len(resize) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in resize)
    ):
        return int(resize[0]), int(resize[1])
    raise ValueError(f"resize must be None, a positive int or (height, width), got {resize!r}")


def cores_per_process() -> int:
    """This process's share of the machine's cores: under ``torchrun`` every local rank runs its
    own loader, so each sizes its threads and workers from cores / ``LOCAL_WORLD_SIZE``."""
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, (os.cpu_count() or 1) // local)


@dataclass(frozen=True)
class LoaderConfig:
    """Everything that shapes a loader's output, validated at construction.

    ``resize`` is ``None``, an int (square) or ``(height, width)``. ``num_workers`` is the number of
    DALI worker processes that read files (0: read in the main thread); ``None`` picks one from the
    core count. ``start_method`` ``None`` picks ``"spawn"`` on a GPU (safe after CUDA is
    initialised) and ``"fork"`` on the CPU (``"spawn"`` there too once CUDA is up in the process,
    as DALI cannot fork then).
    """

    batch_size: int
    ops: tuple[Op, ...] = ()
    transforms: tuple[Op, ...] = ()
    resize: tuple[int, int] | None = None
    output_map: tuple[str, ...] | None = None
    shard_id: int = 0
    num_shards: int = 1
    shuffle: bool = True
    seed: int = 0
    last_batch: LastBatch = "partial"
    device_id: int | None = None
    num_workers: int | None = None
    num_threads: int | None = None
    start_method: str | None = None
    prefetch_queue_depth: int = 2
    op_path: str | tuple[tuple[str, str], ...] | None = None
    stages: tuple[Any, ...] = ()
    decoder: str = "auto"
    hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD
    # The batch format of every image output (see extsrc.batchformat).
    layout: Layout = "NHWC"
    dtype: Dtype = "uint8"
    normalize: Any = None
    resize_mode: ResizeMode = "shorter_side"
    output_names: tuple[str, ...] = field(init=False)
    batch_format: BatchFormat = field(init=False)
    op_paths: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, 1)
        check_seed(self.seed)
        check_last_batch(self.last_batch)
        for t in self.transforms:
            if t.num_outputs != 1:
                raise ValueError(
                    f"transform '{t.name}' has {t.num_outputs} outputs; transforms replace the "
                    "image and must have exactly one. Put it in ops= to get its outputs"
                )
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 or None, got {self.num_workers}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")
        if self.start_method not in (None, *_START_METHODS):
            raise ValueError(
                f"start_method must be None, 'fork' or 'spawn', got {self.start_method!r}"
            )
        if self.decoder not in ("auto", "cpu", "mixed"):
            raise ValueError(f"decoder must be 'auto', 'cpu' or 'mixed', got {self.decoder!r}")
        if self.decoder == "mixed" and self.device_id is None:
            raise ValueError(
                "decoder='mixed' decodes on the GPU but the loader runs on the CPU; use "
                "decoder='cpu' or 'auto', or a GPU device"
            )
        if self.hw_decoder_load is not None and (
            isinstance(self.hw_decoder_load, bool)
            or not isinstance(self.hw_decoder_load, (int, float))
            or not 0.0 <= self.hw_decoder_load <= 1.0
        ):
            raise ValueError(
                f"hw_decoder_load must be None (DALI's default) or a number in [0, 1], got "
                f"{self.hw_decoder_load!r}; it is the share of JPEGs sent to the GPU's hardware "
                "decoder"
            )
        if self.prefetch_queue_depth < 1:
            raise ValueError("prefetch_queue_depth must be >= 1")
        fmt = BatchFormat(layout=self.layout, dtype=self.dtype, normalize=self.normalize,
                          resize_mode=self.resize_mode)
        object.__setattr__(self, "batch_format", fmt)
        object.__setattr__(self, "normalize", fmt.normalize)
        defaults = default_output_names(self.ops)
        dup = sorted({n for n in defaults if defaults.count(n) > 1})
        if dup and self.output_map is None:
            raise ValueError(
                f"ops produce duplicate output names {dup} (an op used twice?); pass output_map "
                f"with {len(defaults)} distinct names"
            )
        names = defaults
        if self.output_map is not None:
            om = tuple(self.output_map)
            if len(om) != len(defaults):
                raise ValueError(
                    f"output_map has {len(om)} names but the loader has {len(defaults)} outputs "
                    f"{list(defaults)} (image, each op output, label); give one name per output"
                )
            if len(set(om)) != len(om) or not all(isinstance(n, str) and n for n in om):
                raise ValueError(f"output_map names must be distinct non-empty strings, got {om}")
            names = om
        clash = sorted(set(names) & set(METADATA_KEYS))
        if clash:
            raise ValueError(
                f"output names {clash} are reserved for per-sample metadata; rename them"
            )
        object.__setattr__(self, "output_names", names)
        override = dict(self.op_path) if isinstance(self.op_path, tuple) else self.op_path
        for s in self.stages:
            if not callable(s):
                raise TypeError(f"stages must be callables stage(image, gpu=...), got {s!r}")
        # Transforms and ops are chosen together: a transform named in op_path is honoured too.
        chosen = choose_paths(
            (*self.transforms, *self.ops), gpu=self.device_id is not None, override=override
        )
        object.__setattr__(self, "op_paths", tuple(chosen.items()))

    @property
    def workers(self) -> int:
        if self.num_workers is not None:
            return self.num_workers
        return min(4, max(1, cores_per_process() // 4))

    @property
    def threads(self) -> int:
        if self.num_threads is not None:
            return self.num_threads
        return max(2, min(12, cores_per_process() - self.workers))

    @property
    def method(self) -> str:
        if self.start_method is not None:
            return self.start_method
        # fork is cheaper and keeps ops defined in a notebook, but DALI cannot fork once CUDA is
        # up in this process (a GPU loader built earlier, or torch on the GPU).
        if self.device_id is not None or cuda_driver_initialized():
            return "spawn"
        return "fork"


def normalise_op_path(
    op_path: str | Mapping[str, str] | None,
) -> str | tuple[tuple[str, str], ...] | None:
    """``op_path`` as the frozen config holds it: a dict becomes sorted ``(name, path)`` pairs."""
    return tuple(sorted(op_path.items())) if isinstance(op_path, Mapping) else op_path
