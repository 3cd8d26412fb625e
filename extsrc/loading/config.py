"""``LoaderConfig``: everything that shapes a loader's output, and the rules its values follow.

A config is a pure value: the loader's top-level arguments (op names become
:class:`~augment_ops.Op`, ``resize`` becomes ``(height, width)``) and its option groups
(:mod:`extsrc.loading.options`), checked once, at construction, in
:meth:`LoaderConfig.__post_init__`. Building one neither traces nor pickles an op: which path each
op runs on is chosen after, by the loader, and :class:`RunPlan` holds that choice with what it
implies (the op pool, DALI's readers and threads).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import augment_ops
from augment_ops.registry import Op
from extsrc._dali import cuda_driver_initialized
from extsrc._util import argcheck
from extsrc._util.caller import user_stacklevel
from extsrc.graph.batchformat import BatchFormat
from extsrc.loading.options import DEFAULT_HW_DECODER_LOAD, BadFiles, OpRuntime, Sampling, Workers
from extsrc.sources.sharding import check_seed

__all__ = [
    "DEFAULT_HW_DECODER_LOAD", "HIDDEN_OUTPUTS", "METADATA_KEYS", "LoaderConfig", "RunPlan",
    "check_output_names", "cores_per_process", "default_output_names",
]

#: Keys every batch carries besides the named outputs: the manifest index of each sample and
#: whether it is a pad repeat (count it in no metric).
METADATA_KEYS: tuple[str, ...] = ("index", "is_pad")
#: The pipeline outputs a loader reads after the named ones (``index``, epoch, ``is_pad``).
HIDDEN_OUTPUTS: tuple[str, ...] = ("__info",)


def default_output_names(ops: Sequence[Op], image: str = "image") -> tuple[str, ...]:
    """``image`` (a video loader's ``video``), then ``<op>_<k>`` for each op output, then
    ``label``."""
    names = [image]
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
    """Everything that shapes a loader's output, checked at construction.

    The top-level arguments (``batch_size``, ``ops``, ``transforms``, ``resize``, ``output_map``,
    ``shuffle``, ``seed``, ``device_id``, ``stages``) and the option groups (``sampling``,
    ``workers``, ``op_runtime``, ``bad_files``, ``format``: see :mod:`extsrc.loading.options`). Op
    names become :class:`~augment_ops.Op` and ``resize`` ``(height, width)``. A ``sampling``
    with neither ``shard_id`` nor ``num_shards`` is shard 0 of 1 (the loader fills both in from
    ``torch.distributed`` first). ``output_names`` are the batch's names of the outputs:
    ``output_map``, or ``image`` (``image_output``), each op's ``<op>_<k>`` and ``label``.
    """

    batch_size: int
    ops: tuple[Op, ...] = ()
    transforms: tuple[Op, ...] = ()
    resize: tuple[int, int] | None = None
    output_map: tuple[str, ...] | None = None
    shuffle: bool = True
    seed: int = 0
    device_id: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    workers: Workers = field(default_factory=Workers)
    op_runtime: OpRuntime = field(default_factory=OpRuntime)
    bad_files: BadFiles = field(default_factory=BadFiles)
    format: BatchFormat = field(default_factory=BatchFormat)
    stages: tuple[Any, ...] = ()
    # The name of the main image output (a video loader's clips are "video").
    image_output: str = "image"
    # Names the loader uses besides the outputs: its batch keys and DALI's bookkeeping outputs.
    metadata_keys: tuple[str, ...] = METADATA_KEYS
    hidden_outputs: tuple[str, ...] = HIDDEN_OUTPUTS
    output_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        for name, cls in (("sampling", Sampling), ("workers", Workers),
                          ("op_runtime", OpRuntime), ("bad_files", BadFiles),
                          ("format", BatchFormat)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise TypeError(f"Loader: {name} must be an extsrc.{cls.__name__}, got "
                                f"{type(value).__name__} {value!r}")
        self._check_values()
        s = self.sampling
        if (s.shard_id is None) != (s.num_shards is None):
            raise ValueError("Loader: sampling needs both shard_id and num_shards, or neither")
        if s.shard_id is None:
            object.__setattr__(self, "sampling", dataclasses.replace(s, shard_id=0, num_shards=1))
        if self.shuffle and s.run_length > self.batch_size:
            warnings.warn(
                f"Loader: Sampling(run_length={s.run_length}) is longer than batch_size="
                f"{self.batch_size}: each batch then holds one or two runs of neighbouring "
                "samples; a run_length of batch_size // 4 or less mixes several runs in a batch",
                stacklevel=user_stacklevel())
        for t in self.transforms:
            if t.num_outputs != 1:
                raise ValueError(
                    f"transform '{t.name}' has {t.num_outputs} outputs; transforms replace the "
                    "image and must have exactly one. Put it in ops= to get its outputs"
                )
        if self.workers.decoder == "mixed" and self.device_id is None:
            raise ValueError(
                "Workers: decoder='mixed' decodes on the GPU but the loader runs on the CPU; use "
                "decoder='cpu' or 'auto', or a GPU device"
            )
        object.__setattr__(self, "output_names", self._names())
        check_resizable(self.ops, self.transforms, self.resize, self.stages)

    def _check_values(self) -> None:
        """Types and ranges of the top-level arguments, each refused naming it; numpy integers
        are taken as ints (and stored as plain ints, so a state dict stays JSON)."""
        object.__setattr__(self, "batch_size", argcheck.check_int(
            self.batch_size, "Loader: batch_size", minimum=1, maximum=MAX_BATCH_SIZE,
            what="samples per batch"))
        object.__setattr__(self, "device_id", argcheck.check_int(
            self.device_id, "Loader: device_id", minimum=0, allow_none=True))
        check_seed(self.seed)  # the shard plan's rule: an int in [0, 2**63)
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "shuffle", argcheck.check_bool(self.shuffle, "Loader: shuffle"))
        for name in ("ops", "transforms"):
            value = getattr(self, name)
            if not isinstance(value, (str, Op, Sequence)) or isinstance(value, bytes):
                raise TypeError(
                    f"Loader: {name} must be an op name, an augment_ops.Op or a sequence of "
                    f"them, got {type(value).__name__} {value!r}"
                )
            object.__setattr__(self, name, as_ops(value, name))
        object.__setattr__(self, "resize", as_size(self.resize))
        argcheck.check_sequence(self.stages, "Loader: stages",
                                "a sequence of callables stage(image, gpu=...)",
                                hint="wrap one stage in a list")
        for s in self.stages:
            if not callable(s):
                raise TypeError(f"stages must be callables stage(image, gpu=...), got {s!r}")
        object.__setattr__(self, "stages", tuple(self.stages))

    def _names(self) -> tuple[str, ...]:
        """The output names, from ``output_map`` or the defaults: the one place they are
        checked (form, count, and :func:`check_output_names`)."""
        defaults = default_output_names(self.ops, self.image_output)
        om = self.output_map
        if om is None:
            dup = sorted({n for n in defaults if defaults.count(n) > 1})
            if dup:
                raise ValueError(
                    f"ops produce duplicate output names {dup} (an op used twice?); pass "
                    f"output_map with {len(defaults)} distinct names"
                )
            names = defaults
        else:
            argcheck.check_sequence(om, "Loader: output_map", "None or a sequence of output names")
            names = tuple(om)
            object.__setattr__(self, "output_map", names)
            if len(names) != len(defaults):
                raise ValueError(
                    f"output_map has {len(names)} names but the loader has {len(defaults)} "
                    f"outputs {list(defaults)} ({self.image_output}, each op output, label); "
                    "give one name per output"
                )
        check_output_names(names, metadata_keys=self.metadata_keys,
                           hidden_outputs=self.hidden_outputs)
        return names

    @property
    def gpu(self) -> bool:
        return self.device_id is not None

    @property
    def host_resizes(self) -> bool:
        """Whether uint8 images are resized on the host (:mod:`extsrc.ops_runtime.hostresize`): on
        the CPU, with a ``resize`` and no ``stages``."""
        return self.device_id is None and self.resize is not None and not self.stages


@dataclass(frozen=True)
class RunPlan:
    """A config with the path each op and transform runs on (``op_paths``: ``(name, path)``
    pairs, :func:`extsrc.ops_runtime.paths.choose_paths`), and what that implies: the op pool,
    DALI's reader processes, threads and start method."""

    config: LoaderConfig
    op_paths: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "op_paths", tuple(dict(self.op_paths).items()))
        missing = sorted({op.name for op in (*self.config.transforms, *self.config.ops)}
                         - set(self.paths))
        if missing:
            raise ValueError(f"RunPlan: op_paths has no path for {missing}")
        rt = self.config.op_runtime
        if rt.op_timeout is not None and rt.op_workers == 0 and (
                self.numpy_ops or self.config.host_resizes):
            raise ValueError(
                "OpRuntime: op_timeout needs an op pool, but op_workers=0 runs the ops in DALI's "
                "thread, where nothing can stop them; pass op_workers >= 1 (1: one worker, "
                "the same pace as op_workers=0), or op_timeout=None"
            )

    @property
    def paths(self) -> dict[str, str]:
        return dict(self.op_paths)

    @property
    def numpy_ops(self) -> tuple[Op, ...]:
        """The ops and transforms that run on the numpy path."""
        paths, c = self.paths, self.config
        return tuple(op for op in (*c.transforms, *c.ops) if paths[op.name] == "numpy")

    @property
    def op_pool_workers(self) -> int:
        """Workers of the numpy path's op pool; 0 or 1: the ops run in DALI's thread, no pool.
        ``op_workers=None`` (default): every core this process may use (see
        :func:`cores_per_process`), when any op runs on the numpy path or images are resized on
        the host."""
        if not self.numpy_ops and not self.config.host_resizes:
            return 0
        if self.config.op_runtime.op_workers is not None:
            return self.config.op_runtime.op_workers
        return cores_per_process()

    @property
    def op_pool_size(self) -> int:
        """Workers of the op pool the loader starts, 0 for none: :attr:`op_pool_workers` when
        more than one, and a pool of one when an ``op_timeout`` must stop a stuck op."""
        n = self.op_pool_workers
        return n if n > 1 or (n == 1 and self.config.op_runtime.op_timeout is not None) else 0

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
        return self.config.device_id is not None and self.op_pool_workers > 1

    @property
    def workers(self) -> int:
        """DALI's reader processes (``Workers.num_workers``, or from the cores)."""
        if self.config.workers.num_workers is not None:
            return self.config.workers.num_workers
        cores = cores_per_process()
        base = min(4, max(1, cores // 4))
        return min(base, max(1, cores // 8)) if self.pool_beside_gpu else base

    @property
    def threads(self) -> int:
        """DALI's CPU threads (``Workers.num_threads``, or from the cores)."""
        if self.config.workers.num_threads is not None:
            return self.config.workers.num_threads
        if self.pool_beside_gpu:
            return max(2, cores_per_process() // 8)
        return max(2, min(12, cores_per_process() - self.workers))

    @property
    def method(self) -> str:
        """How DALI starts its readers (``Workers.start_method``, or as below)."""
        if self.config.workers.start_method is not None:
            return self.config.workers.start_method
        # fork is cheaper and keeps ops defined in a notebook, but DALI cannot fork once CUDA is
        # up in this process (a GPU loader built earlier, or torch on the GPU).
        if self.config.device_id is not None or cuda_driver_initialized():
            return "spawn"
        return "fork"
