"""``LoaderConfig``: everything that shapes a loader's output, and the rules its values follow.

The loader's arguments are normalised here (op names to :class:`~augment_ops.Op`, ``resize`` to
``(height, width)``, ``op_path`` to a tuple) and checked once, at construction, in
:meth:`LoaderConfig.__post_init__`; the checks shared with :mod:`extsrc.sources.sharding` (batch
size, seed, last-batch policy) are that module's.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np

import augment_ops
from augment_ops.registry import IMPLEMENTATIONS, Op
from extsrc._dali import cuda_driver_initialized
from extsrc._util import argcheck
from extsrc.graph.batchformat import BatchFormat, Dtype, Layout, ResizeMode
from extsrc.ops_runtime.paths import choose_paths
from extsrc.ops_runtime.pool import POOL_KINDS, check_op_timeout, check_picklable
from extsrc.sources.fileread import check_max_file_bytes
from extsrc.sources.sharding import LastBatch, check_last_batch, check_seed

__all__ = [
    "DEFAULT_HW_DECODER_LOAD", "HIDDEN_OUTPUTS", "METADATA_KEYS", "LoaderConfig",
    "check_output_names", "cores_per_process", "default_output_names",
]

#: Keys every batch carries besides the named outputs: the manifest index of each sample and
#: whether it is a pad repeat (count it in no metric).
METADATA_KEYS: tuple[str, ...] = ("index", "is_pad")
#: The pipeline outputs a loader reads after the named ones (``index``, epoch, ``is_pad``).
HIDDEN_OUTPUTS: tuple[str, ...] = ("__info",)
_START_METHODS = ("fork", "spawn")
_LAST_BATCH: tuple[str, ...] = get_args(LastBatch)

#: Share of JPEGs that mixed decoding gives to the GPU's hardware decoder. DALI's own default is
#: 0.65; on an H100 with 16 cores (2026-11-21, benchmarks/README.md) 0.85 ran extsrc 1.15x faster
#: (13.1k vs 11.4k images/s, medians of 3) and left training 0.92 instead of 0.90 of its
#: synthetic-data speed, because the rest is Huffman-decoded on DALI's CPU threads.
DEFAULT_HW_DECODER_LOAD = 0.85


def default_output_names(ops: Sequence[Op]) -> tuple[str, ...]:
    """``image``, then ``<op>_<k>`` for each op output, then ``label``."""
    names = ["image"]
    for op in ops:
        names += [f"{op.name}_{k}" for k in range(op.num_outputs)]
    names.append("label")
    return tuple(names)


def as_ops(value: Any, what: str) -> tuple[Op, ...]:
    if isinstance(value, (str, Op)):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        items = (value,)
    wrong = [v for v in items if not isinstance(v, (str, Op))]
    if wrong:
        raise TypeError(
            f"{what} must be a sequence of op names or augment_ops.Op objects, got {value!r} "
            f"({type(wrong[0]).__name__} {wrong[0]!r} is neither)"
        )
    return tuple(augment_ops.get(v) for v in items)


#: Largest ``resize`` side accepted: 65,536 pixels (a 65,536 x 65,536 RGB image is 12 GiB).
MAX_RESIZE_SIDE = 65_536


def as_size(resize: Any) -> tuple[int, int] | None:
    """``resize`` as ``(height, width)``: ``None``, a positive int (numpy ints too) for a square,
    or a pair of them; each side at most :data:`MAX_RESIZE_SIDE`."""
    if resize is None:
        return None
    forms = "None, a positive int or (height, width)"
    if isinstance(resize, numbers.Integral) and not isinstance(resize, bool):
        resize = (resize, resize)
    elif isinstance(resize, (str, bytes)) or not isinstance(resize, Sequence) or len(resize) != 2:
        raise TypeError(f"resize must be {forms}, got {type(resize).__name__} {resize!r}")
    h, w = (
        argcheck.check_int(v, f"resize {side}", minimum=1, maximum=MAX_RESIZE_SIDE,
                           what=f"resize={resize!r}")
        for side, v in zip(("height", "width"), resize, strict=True)
    )
    return h, w


#: Largest ``batch_size`` accepted (2**20). A batch of 2**20 images of 64 x 64 pixels is already
#: 12 GiB; a larger value is a mistake (a sample count passed as the batch size, say).
MAX_BATCH_SIZE = 1 << 20
#: ``batch_size`` may exceed the manifest's sample count (its good samples under
#: ``on_error="skip"``) at most this many times: a batch is padded with repeats up to its size
#: (``last_batch="pad"``), so a batch size 1,000 times the dataset is that many copies of every
#: sample in every batch.
MAX_BATCH_OVER_SAMPLES = 1000
#: Largest ``num_shards`` (world size) accepted.
MAX_SHARDS = 1 << 20
#: Largest ``num_workers`` and ``num_threads``: each worker is a process holding a copy of the
#: source (about 200 MB), each thread a DALI CPU thread.
MAX_WORKERS = 256
MAX_THREADS = 1024
#: Largest ``prefetch_queue_depth``: each level holds a whole batch, decoded, in memory.
MAX_PREFETCH = 64

#: Element types DALI's ``fn.resize`` takes (uint8, int16, uint16 and float32, checked against
#: DALI 2.4); any other declared by an op whose output is resized fails at the first batch.
RESIZE_DTYPES: tuple[str, ...] = ("uint8", "uint16", "int16", "float32")


def check_resizable(
    ops: Sequence[Op], transforms: Sequence[Op], resize: tuple[int, int] | None,
    stages: Sequence[Any],
) -> None:
    """Refuse, naming the op, an op whose declared outputs ``resize`` would give DALI's resize
    but that it cannot take: a dtype outside :data:`RESIZE_DTYPES`, or rank-2 (``ndim=2``)
    outputs, which have no channel axis for DALI's HWC layout.

    With ``resize``, every op output is resized, and the main image too unless ``stages``
    replace the resize (the last transform makes the main image)."""
    if resize is None:
        return
    resized = [(op, "ops") for op in ops]
    if transforms and not stages:
        resized.append((transforms[-1], "transforms"))
    for op, where in resized:
        dtype = np.dtype(op.dtype)
        if dtype.name not in RESIZE_DTYPES:
            raise ValueError(
                f"op '{op.name}' (in {where}) declares {dtype.name} outputs, but resize={resize} "
                f"resizes them and DALI's resize takes only {', '.join(RESIZE_DTYPES)}; declare "
                f"dtype=np.float32 (returning .astype(np.float32)) or np.uint8 in @augment_op, "
                "convert after the loader, or pass resize=None"
            )
        if op.ndim == 2:  # 3: HWC images; 4: FHWC clips (video loaders), resized frame by frame
            raise ValueError(
                f"op '{op.name}' (in {where}) declares rank-{op.ndim} outputs (ndim={op.ndim}), "
                f"but resize={resize} resizes them and DALI's resize needs HWC images (rank 3); "
                "return img[..., None] and declare ndim=3 in @augment_op, or pass resize=None"
            )


#: ``validate`` options that ``Loader(validate_kwargs=...)`` may set (``manifest`` is the loader's).
VALIDATE_OPTIONS: tuple[str, ...] = (
    "decode", "n_jobs", "max_pixels", "progress", "chunk_size", "max_file_bytes",
)


@dataclass(frozen=True)
class LoaderOptions:
    """The loader's arguments that do not shape its output (how bad files and DALI's workers
    are handled), checked at construction. ``max_pixels`` and ``max_file_bytes`` are ``None``
    (no limit) or ints >= 1; ``validate_kwargs`` applies to ``on_error="skip"`` only and may set
    :data:`VALIDATE_OPTIONS`."""

    on_error: str = "raise"
    max_pixels: int | None = None
    max_file_bytes: int | None = None
    validate_kwargs: Mapping[str, Any] | None = None
    watchdog: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.on_error, str):
            raise TypeError(
                f"on_error must be 'raise' or 'skip', got {type(self.on_error).__name__} "
                f"{self.on_error!r}"
            )
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        object.__setattr__(self, "max_pixels", argcheck.check_int(
            self.max_pixels, "Loader: max_pixels", minimum=1, allow_none=True,
            what="largest pixel count an image header may declare"))
        object.__setattr__(self, "max_file_bytes",
                           check_max_file_bytes(self.max_file_bytes, "Loader: max_file_bytes"))
        object.__setattr__(self, "watchdog", argcheck.check_bool(self.watchdog,
                                                                 "Loader: watchdog"))
        kw = self.validate_kwargs
        if kw is None:
            return
        if not isinstance(kw, Mapping):
            raise TypeError(
                f"Loader: validate_kwargs must be a dict of extsrc.validate options or None, got "
                f"{type(kw).__name__}"
            )
        unknown = sorted(str(k) for k in kw if k not in VALIDATE_OPTIONS)
        if unknown:
            raise TypeError(
                f"Loader: validate_kwargs has unknown option(s) {unknown}; extsrc.validate "
                f"takes {list(VALIDATE_OPTIONS)}"
            )
        if self.on_error != "skip":
            raise ValueError(
                "Loader: validate_kwargs is used by on_error='skip' only (it runs extsrc.validate "
                "up front); pass on_error='skip' or drop validate_kwargs"
            )


def check_loader_arguments(*, output_map: Any, stages: Any, ops: Any, transforms: Any) -> None:
    """The forms of the loader's sequence arguments, before they are made tuples: a string or a
    non-iterable where a sequence is due is refused (``tuple("abc")`` would be three names)."""
    argcheck.check_sequence(output_map, "Loader: output_map",
                            "None or a sequence of output names", allow_none=True)
    argcheck.check_sequence(stages, "Loader: stages",
                            "a sequence of callables stage(image, gpu=...)",
                            hint="wrap one stage in a list")
    for name, value in (("ops", ops), ("transforms", transforms)):
        if not isinstance(value, (str, Op, Sequence)) or isinstance(value, bytes):
            raise TypeError(
                f"Loader: {name} must be an op name, an augment_ops.Op or a sequence of them, "
                f"got {type(value).__name__} {value!r}"
            )


def check_output_names(
    names: Sequence[Any], *, metadata_keys: Sequence[str], hidden_outputs: Sequence[str],
    who: str = "Loader",
) -> None:
    """The one rule for the loaders' output names (``output_map`` or the defaults): non-empty
    strings, distinct, and none of the names the loader uses itself: the per-sample metadata
    keys of every batch (``metadata_keys``) and the pipeline's bookkeeping outputs
    (``hidden_outputs``), which DALI would otherwise meet twice at the first batch."""
    wrong = [n for n in names if not isinstance(n, str)]
    if wrong:
        raise TypeError(
            f"{who}: output_map must be a sequence of names (str), got {tuple(names)!r} "
            f"({type(wrong[0]).__name__} {wrong[0]!r} is not a str)"
        )
    if not all(n.strip() for n in names):
        raise ValueError(
            f"{who}: output_map names must be distinct non-empty strings, got {tuple(names)} "
            "(an empty or blank name)"
        )
    dup = sorted({n for n in names if list(names).count(n) > 1})
    if dup:
        raise ValueError(
            f"{who}: output_map names must be distinct non-empty strings, got {tuple(names)} "
            f"({dup} more than once)"
        )
    meta = sorted(set(names) & set(metadata_keys))
    if meta:
        raise ValueError(
            f"{who}: output names {meta} are reserved for per-sample metadata (every batch has "
            f"the keys {list(metadata_keys)}); rename them in output_map"
        )
    hidden = sorted(set(names) & set(hidden_outputs))
    if hidden:
        raise ValueError(
            f"{who}: output names {hidden} are reserved for the loader's internal pipeline "
            f"outputs {list(hidden_outputs)}; rename them in output_map"
        )


def check_batch_for_samples(batch_size: int, num_samples: int) -> None:
    """Refuse a batch size more than :data:`MAX_BATCH_OVER_SAMPLES` times the number of samples
    the loader reads: each batch would hold that many repeats of every sample."""
    if batch_size > MAX_BATCH_OVER_SAMPLES * num_samples:
        raise ValueError(
            f"Loader: batch_size={batch_size:,} is more than {MAX_BATCH_OVER_SAMPLES:,} times the "
            f"{num_samples:,} sample(s) of the manifest, so every batch would repeat each "
            "sample over a thousand times; is batch_size the dataset size? Use a batch size of "
            "at most the number of samples"
        )


def cores_per_process() -> int:
    """This process's share of the machine's cores: under ``torchrun`` every local rank runs its
    own loader, so each sizes its threads and workers from cores / ``LOCAL_WORLD_SIZE``."""
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, available_cores() // local)


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's cpuset),
    not the machine's core count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class LoaderConfig:
    """Everything that shapes a loader's output, validated at construction.

    ``resize`` is ``None``, an int (square) or ``(height, width)``. ``num_workers`` is the number of
    DALI worker processes that read files (0: read in the main thread); ``None`` picks one from the
    core count. ``start_method`` ``None`` picks ``"spawn"`` on a GPU (safe after CUDA is
    initialised) and ``"fork"`` on the CPU (``"spawn"`` there too once CUDA is up in the process,
    as DALI cannot fork then). ``op_workers`` and ``op_pool`` size and choose the pool that runs
    the numpy path's ops (:mod:`extsrc.ops_runtime.pool`; see :attr:`op_pool_workers`).
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
    op_workers: int | None = None
    op_pool: str = "process"
    # Seconds per sample a numpy-path op may take in the op pool (None: no limit).
    op_timeout: float | None = None
    stages: tuple[Any, ...] = ()
    decoder: str = "auto"
    hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD
    # The batch format of every image output (see extsrc.graph.batchformat).
    layout: Layout = "NHWC"
    dtype: Dtype = "uint8"
    normalize: Any = None
    resize_mode: ResizeMode = "shorter_side"
    # Names the loader uses besides the outputs: its batch keys and DALI's bookkeeping outputs.
    metadata_keys: tuple[str, ...] = METADATA_KEYS
    hidden_outputs: tuple[str, ...] = HIDDEN_OUTPUTS
    output_names: tuple[str, ...] = field(init=False)
    batch_format: BatchFormat = field(init=False)
    op_paths: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        self._check_arguments()
        argcheck.check_int(self.batch_size, "batch_size", minimum=1)
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
            names = om
        check_output_names(names, metadata_keys=self.metadata_keys,
                           hidden_outputs=self.hidden_outputs)
        object.__setattr__(self, "output_names", names)
        check_resizable(self.ops, self.transforms, self.resize, self.stages)
        override = dict(self.op_path) if isinstance(self.op_path, tuple) else self.op_path
        for s in self.stages:
            if not callable(s):
                raise TypeError(f"stages must be callables stage(image, gpu=...), got {s!r}")
        # Transforms and ops are chosen together: a transform named in op_path is honoured too.
        chosen = choose_paths(
            (*self.transforms, *self.ops), gpu=self.device_id is not None, override=override
        )
        object.__setattr__(self, "op_paths", tuple(chosen.items()))
        object.__setattr__(self, "op_timeout", check_op_timeout(self.op_timeout,
                                                                "Loader: op_timeout"))
        if self.op_timeout is not None and self.op_workers == 0 and (
                self.numpy_ops or self.host_resizes):
            raise ValueError(
                "Loader: op_timeout needs an op pool, but op_workers=0 runs the ops in DALI's "
                "thread, where nothing can stop them; pass op_workers >= 1 (1: one worker, "
                "the same pace as op_workers=0), or op_timeout=None"
            )
        if self.op_pool == "process" and self.op_pool_size > 0:
            for op in self.numpy_ops:
                check_picklable(op)

    def _check_arguments(self) -> None:
        """Types and ranges of the plain arguments, each refused naming it; numpy integers are
        taken as ints (and stored as plain ints, so a state dict stays JSON)."""
        ints = {
            "batch_size": dict(minimum=1, maximum=MAX_BATCH_SIZE, what="samples per batch"),
            "shard_id": dict(minimum=0, what="this process's shard, the global rank"),
            "num_shards": dict(minimum=1, maximum=MAX_SHARDS, what="shards, the world size"),
            "num_workers": dict(minimum=0, maximum=MAX_WORKERS, allow_none=True,
                                what="DALI worker processes reading files"),
            "num_threads": dict(minimum=1, maximum=MAX_THREADS, allow_none=True,
                                what="DALI CPU threads"),
            "op_workers": dict(minimum=0, maximum=MAX_WORKERS, allow_none=True,
                               what="workers running the numpy path's ops"),
            "prefetch_queue_depth": dict(minimum=1, maximum=MAX_PREFETCH,
                                         what="batches DALI prepares ahead"),
            "device_id": dict(minimum=0, allow_none=True),
        }
        for name, rule in ints.items():
            object.__setattr__(self, name, argcheck.check_int(
                getattr(self, name), f"Loader: {name}", **rule))  # type: ignore[arg-type]
        check_seed(self.seed)  # the shard plan's rule: an int in [0, 2**63)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "shuffle", argcheck.check_bool(self.shuffle, "Loader: shuffle"))
        for name, allowed in (("last_batch", _LAST_BATCH), ("decoder", ("auto", "cpu", "mixed")),
                              ("start_method", (None, *_START_METHODS)),
                              ("op_pool", POOL_KINDS)):
            value = getattr(self, name)
            if not isinstance(value, (str, type(None))) or value not in allowed:
                wrong_type = not isinstance(value, (str, type(None)))
                raise (TypeError if wrong_type else ValueError)(
                    f"Loader: {name} must be one of {list(allowed)}, got "
                    f"{type(value).__name__} {value!r}"
                )
        load = self.hw_decoder_load
        if load is not None and (isinstance(load, bool) or not isinstance(load, numbers.Real)):
            raise TypeError(
                f"Loader: hw_decoder_load must be None or a number in [0, 1], got "
                f"{type(load).__name__} {load!r}"
            )

    @property
    def workers(self) -> int:
        if self.num_workers is not None:
            return self.num_workers
        cores = cores_per_process()
        base = min(4, max(1, cores // 4))
        return min(base, max(1, cores // 8)) if self.pool_beside_gpu else base

    @property
    def threads(self) -> int:
        if self.num_threads is not None:
            return self.num_threads
        if self.pool_beside_gpu:
            return max(2, cores_per_process() // 8)
        return max(2, min(12, cores_per_process() - self.workers))

    @property
    def pool_beside_gpu(self) -> bool:
        """A GPU loader with an op pool: the pool's workers want the cores, and DALI, decoding
        on the GPU at the pool's pace, needs few; so the defaults give DALI an eighth of the
        cores as threads (at least 2) and as readers (at least 1, at most the usual): 2 and 2
        on 16 cores. Measured on an H100 with 16 cores, 2 threads and 2 readers against 12
        and 4: the pool ran four of five user ops 5-10% faster on average (posterize and jitter
        about 20% in a second run), random_flip 12% slower on average, within the spread of
        its rounds; DALI alone, with no op, reaches about 9k images/s with 2 and 2
        (benchmarks/README.md, "DALI's threads beside the op pool")."""
        return self.device_id is not None and self.op_pool_workers > 1

    @property
    def numpy_ops(self) -> tuple[Op, ...]:
        """The ops and transforms that run on the numpy path."""
        paths = dict(self.op_paths)
        return tuple(op for op in (*self.transforms, *self.ops) if paths[op.name] == "numpy")

    @property
    def host_resizes(self) -> bool:
        """Whether uint8 images are resized on the host (:mod:`extsrc.ops_runtime.hostresize`): on
        the CPU, with a ``resize`` and no ``stages``."""
        return self.device_id is None and self.resize is not None and not self.stages

    @property
    def op_pool_workers(self) -> int:
        """Workers of the numpy path's op pool; 0 or 1: the ops run in DALI's thread, no pool.
        ``None`` (default): every core this process may use (see :func:`cores_per_process`),
        when any op runs on the numpy path or images are resized on the host."""
        if not self.numpy_ops and not self.host_resizes:
            return 0
        if self.op_workers is not None:
            return self.op_workers
        return cores_per_process()

    @property
    def op_pool_size(self) -> int:
        """Workers of the op pool the loader starts, 0 for none: :attr:`op_pool_workers` when
        more than one, and a pool of one when an ``op_timeout`` must stop a stuck op."""
        n = self.op_pool_workers
        return n if n > 1 or (n == 1 and self.op_timeout is not None) else 0

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
    """``op_path`` as the frozen config holds it: a dict becomes sorted ``(name, path)`` pairs.

    Its forms are checked here, whatever ops there are: ``None``, one of
    ``augment_ops.IMPLEMENTATIONS`` for every op, or a mapping of op names to those."""
    forms = f"None, one of {list(IMPLEMENTATIONS)}, or a dict {{op name: path}}"
    if op_path is None:
        return None
    if isinstance(op_path, str):
        if op_path not in IMPLEMENTATIONS:
            raise ValueError(f"Loader: op_path must be {forms}, got {op_path!r}")
        return op_path
    if not isinstance(op_path, Mapping):
        raise TypeError(f"Loader: op_path must be {forms}, got {type(op_path).__name__} "
                        f"{op_path!r}")
    for name, path in op_path.items():
        if not isinstance(name, str) or not isinstance(path, str):
            raise TypeError(f"Loader: op_path must be {forms}; got the entry {name!r}: {path!r}")
        if path not in IMPLEMENTATIONS:
            raise ValueError(
                f"Loader: op_path for '{name}' must be one of {list(IMPLEMENTATIONS)}, got "
                f"{path!r}"
            )
    return tuple(sorted(op_path.items()))
