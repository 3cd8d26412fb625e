"""``Loader``: the PyTorch-facing object. Builds the DALI pipeline and yields dicts of tensors.

This is the only module of the core that imports torch (through DALI's PyTorch plugin).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import augment_ops
from augment_ops.registry import Op
from extsrc import errors as _errors
from extsrc.device import resolve_device
from extsrc.distributed import detect, resolve_sharding
from extsrc.errors import (
    BadImageError,
    ExtsrcError,
    OpError,
    OpOutputError,
    PipelineError,
    WorkerDiedError,
)
from extsrc.imagecheck import DEFAULT_MAX_PIXELS, check_file
from extsrc.mainguard import check_main_guard
from extsrc.manifest import Manifest, read_manifest
from extsrc.oppaths import choose_paths
from extsrc.pipeline import build_pipeline, default_output_names
from extsrc.sharding import LastBatch
from extsrc.source import UP_FRONT_HINT, ShardedSource
from extsrc.state import check_state, describe_ops, make_state

__all__ = ["METADATA_KEYS", "Loader", "LoaderConfig"]

#: Keys every batch carries besides the named outputs: the manifest index of each sample and
#: whether it is a pad repeat (count it in no metric).
METADATA_KEYS: tuple[str, ...] = ("index", "is_pad")
_START_METHODS = ("fork", "spawn")

#: Share of JPEGs that mixed decoding gives to the GPU's hardware decoder. DALI's own default is
#: 0.65; on an H100 with 16 cores (2026-11-21, benchmarks/README.md) 0.85 ran extsrc 1.15x faster
#: (13.1k vs 11.4k images/s, medians of 3) and left training 0.92 instead of 0.90 of its
#: synthetic-data speed, because the rest is Huffman-decoded on DALI's CPU threads.
DEFAULT_HW_DECODER_LOAD = 0.85


def _cuda_driver_initialized() -> bool:
    """Whether CUDA is up in this process: DALI then refuses to fork its reader processes."""
    try:
        from nvidia.dali import backend
    except ImportError:
        return False
    return bool(backend.IsDriverInitialized())


def _as_ops(value: Any, what: str) -> tuple[Op, ...]:
    if isinstance(value, (str, Op)):
        value = (value,)
    try:
        return tuple(augment_ops.get(v) for v in value)
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of op names or augment_ops.Op objects, got {value!r}"
        ) from None


def _as_size(resize: Any) -> tuple[int, int] | None:
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


def _cores_per_process() -> int:
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
    last_batch: LastBatch = "pad"
    device_id: int | None = None
    num_workers: int | None = None
    num_threads: int | None = None
    start_method: str | None = None
    prefetch_queue_depth: int = 2
    op_path: str | tuple[tuple[str, str], ...] | None = None
    stages: tuple[Any, ...] = ()
    decoder: str = "auto"
    hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD
    output_names: tuple[str, ...] = field(init=False)
    op_paths: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) \
                or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not 0 <= self.seed < 2**63:
            raise ValueError(
                f"seed must be an int in [0, 2**63), got {self.seed!r}; it seeds the shuffle, "
                "the random ops and DALI"
            )
        if self.last_batch not in get_args(LastBatch):
            raise ValueError(
                f"last_batch must be one of {list(get_args(LastBatch))}, got {self.last_batch!r}"
            )
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
            raise ValueError("decoder='mixed' decodes on the GPU but the loader runs on the CPU")
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
        return min(4, max(1, _cores_per_process() // 4))

    @property
    def threads(self) -> int:
        if self.num_threads is not None:
            return self.num_threads
        return max(2, min(12, _cores_per_process() - self.workers))

    @property
    def method(self) -> str:
        if self.start_method is not None:
            return self.start_method
        # fork is cheaper and keeps ops defined in a notebook, but DALI cannot fork once CUDA is
        # up in this process (a GPU loader built earlier, or torch on the GPU).
        if self.device_id is not None or _cuda_driver_initialized():
            return "spawn"
        return "fork"


class Loader:
    """Iterate epochs of batches as ``dict[name, torch.Tensor]`` from a labelled manifest.

    The DALI graph: ``ShardedSource`` (raw bytes, read in worker processes) -> image decoding ->
    ``transforms`` (single-output ops that replace the image, in order) -> ``ops`` (each gets the
    image and adds its outputs) -> ``resize`` of every image output -> outputs. On a GPU the resize
    runs there and the image outputs and labels are CUDA tensors (``index`` and ``is_pad`` stay
    on the CPU, for bookkeeping, in page-locked memory: move them with ``non_blocking=True``); on
    the CPU everything runs in DALI's CPU-only mode.

    Each batch holds the outputs under their names (default ``image``, ``<op>_<k>``, ``label``;
    ``output_map`` renames them in that order) plus ``index`` (manifest index of each sample,
    ``int64``) and ``is_pad`` (``bool``: a repeat added by ``last_batch="pad"``). ``len(loader)``
    is the number of batches per epoch; each new ``iter(loader)`` starts the next epoch.

    ``device``: ``None`` (GPU 0 when one is visible, else CPU), ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or a GPU index.

    ``op_path`` chooses how ops run: ``None`` picks per op the fastest path it declares that the
    device supports (``"native"`` DALI operators, then ``"gpu"`` CuPy on a GPU, then ``"numpy"``
    ``python_function`` on the CPU); a string forces one path for every op (``"numpy"`` is the
    card's literal recipe); a dict forces it per op name. ``loader.op_paths`` reports the choice.
    ``decoder``: ``"auto"`` decodes on the GPU (nvJPEG) when the loader runs on one, ``"cpu"``
    forces CPU decoding; ``hw_decoder_load`` sets the share of JPEGs that mixed decoding gives to
    the GPU's hardware decoder (``None``: DALI's default), the rest taking nvJPEG's CUDA path
    whose Huffman decoding runs on DALI's CPU threads (default ``DEFAULT_HW_DECODER_LOAD``, 0.85,
    measured faster than DALI's 0.65 on an H100). ``stages`` are DALI callables applied to
    the main image instead of ``resize`` (see :mod:`extsrc.presets`).

    Under ``torchrun`` / an initialised ``torch.distributed`` group, leaving ``shard_id`` and
    ``num_shards`` unset shards by global rank and world size, and ``device=None`` picks the local
    GPU (``LOCAL_RANK``); see :mod:`extsrc.distributed`.

    Bad files: every file is checked before DALI sees it (not an image, a format DALI cannot
    decode, truncated, a header declaring more than ``max_pixels`` pixels), and a file DALI's
    decoder still rejects is found by decoding its batch with Pillow. With ``on_error="raise"``
    (default) the first bad file stops iteration with a :class:`~extsrc.errors.SampleReadError`
    / :class:`~extsrc.errors.BadImageError` naming the manifest line, the path and the reason;
    ``on_error="skip"`` runs :func:`extsrc.validate` (options: ``validate_kwargs``) up front,
    trains on the good samples (equal batch counts on every shard still), warns with a count and
    keeps the problems in ``loader.skipped``; ``batch["index"]`` still refers to the original
    manifest. An op that raises, an op breaking its output contract and a DALI worker that dies
    surface as :class:`~extsrc.errors.OpError`, :class:`~extsrc.errors.OpOutputError` and
    :class:`~extsrc.errors.WorkerDiedError`; after any error DALI's threads and workers are
    stopped, and iterating again resumes at the failed batch. ``watchdog=False`` calls DALI
    directly instead of through the watchdog thread (a killed worker can then hang the loop, as
    plain DALI does); it exists to measure what the watchdog costs.

    Resume: :meth:`state_dict` / :meth:`load_state_dict` (see :mod:`extsrc.state`).
    """

    def __init__(
        self,
        manifest: Manifest | str | os.PathLike[str],
        *,
        batch_size: int,
        ops: Sequence[str | Op] = (),
        transforms: Sequence[str | Op] = (),
        resize: int | tuple[int, int] | None = None,
        output_map: Sequence[str] | None = None,
        shard_id: int | None = None,
        num_shards: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        last_batch: LastBatch = "pad",
        device: Any = None,
        num_workers: int | None = None,
        num_threads: int | None = None,
        start_method: str | None = None,
        prefetch_queue_depth: int = 2,
        op_path: str | Mapping[str, str] | None = None,
        stages: Sequence[Any] = (),
        decoder: str = "auto",
        hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD,
        on_error: str = "raise",
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        validate_kwargs: Mapping[str, Any] | None = None,
        watchdog: bool = True,
    ) -> None:
        shard_id, num_shards, device = resolve_sharding(shard_id, num_shards, device, detect())
        if isinstance(manifest, (str, os.PathLike)):
            manifest = read_manifest(manifest)
        if not isinstance(manifest, Manifest):
            raise TypeError(
                f"manifest must be an extsrc.Manifest or a manifest file path, got "
                f"{type(manifest).__name__}"
            )
        self.manifest = manifest
        self.config = LoaderConfig(
            batch_size=batch_size,
            ops=_as_ops(ops, "ops"),
            transforms=_as_ops(transforms, "transforms"),
            resize=_as_size(resize),
            output_map=None if output_map is None else tuple(output_map),
            shard_id=shard_id,
            num_shards=num_shards,
            shuffle=shuffle,
            seed=seed,
            last_batch=last_batch,
            device_id=resolve_device(device),
            num_workers=num_workers,
            num_threads=num_threads,
            start_method=start_method,
            prefetch_queue_depth=prefetch_queue_depth,
            op_path=(
                tuple(sorted(op_path.items())) if isinstance(op_path, Mapping) else op_path
            ),
            stages=tuple(stages),
            decoder=decoder,
            hw_decoder_load=hw_decoder_load,
        )
        check_main_guard(self.config.workers, self.config.method)  # before any reader starts
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.on_error = on_error
        self.max_pixels = max_pixels
        self.watchdog = bool(watchdog)
        #: The problems (``extsrc.validate.Problem``) that ``on_error="skip"`` left out.
        self.skipped: tuple[Any, ...] = ()
        #: The ``ValidationReport`` of ``on_error="skip"`` (``None`` otherwise).
        self.validation: Any = None
        # on_error="skip": the original index of each sample of the cleaned manifest; the source
        # reports original indices with it, so random ops and batch["index"] see the original.
        self._orig_index: Any = None
        self._feed = manifest  # what the source reads: the manifest, or its cleaned subset
        if on_error == "skip":
            self._feed = self._skip_bad(manifest, validate_kwargs)
        else:
            manifest.check_root()
        self.source = self._make_source()
        self.epoch = 0
        self._batch = 0  # batches of self.epoch already yielded (resume position)
        self._gen = 0  # bumped by close()/load_state_dict(): stale epoch iterators stop
        self._pump: _Pump | None = None  # runs DALI calls while we watch the workers
        self._built: Any = None  # the DALI Pipeline while one is built
        self._dali_iter: Any = None
        self._in_epoch = False

    # -- public surface ---------------------------------------------------------------------------
    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the tensor outputs in order (metadata keys excluded)."""
        return self.config.output_names

    @property
    def op_paths(self) -> dict[str, str]:
        """The path each op and transform runs on (``"numpy"``, ``"gpu"`` or ``"native"``)."""
        return dict(self.config.op_paths)

    @property
    def device(self) -> str:
        d = self.config.device_id
        return "cpu" if d is None else f"cuda:{d}"

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._in_epoch:
            # The previous epoch was left part-way (a `break`): this iteration is the next epoch.
            # Restarting the pipeline there costs one build and reads nothing; finishing the old
            # epoch would read, decode and augment every batch left in it (a million images
            # after a 100-batch probe of ImageNet), and outside the error handling below.
            self.close()
            self.epoch, self._batch = self.epoch + 1, 0
        self._gen += 1  # an older epoch's generator must not take this epoch's batches
        return self._epoch_batches(self._ensure_built())

    def close(self) -> None:
        """Stop DALI's threads and worker processes now.

        The position is kept: iterating again rebuilds the pipeline and continues with the
        batches still due (as after an error).
        """
        self._dali_iter = None
        self._in_epoch = False
        self._gen += 1
        pump, self._pump = self._pump, None
        if self._built is not None:
            pipe = self._built
            procs = self._worker_procs()
            self._built = None
            if pump is None or not pump.stuck:
                _shutdown_pipeline(pipe)
            _stop_processes(procs)  # whatever DALI left running: never an orphan
            del pipe
        if pump is not None:
            pump.stop()

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands, as a JSON-serialisable dict (see :mod:`extsrc.state`).

        ``{"version": 1, "epoch": e, "batch": b, "config": {...}}``: the next batch is batch
        ``b`` of epoch ``e`` (``b`` batches of the epoch were yielded). Save it with your model
        checkpoint; a Loader built the same way resumes from it with :meth:`load_state_dict`.
        Taken after a ``break``, it points at the rest of the interrupted epoch (while this
        loader's next ``for`` would start the next epoch).
        """
        epoch, batch = self.epoch, self._batch
        if batch >= len(self):
            epoch, batch = epoch + 1, 0
        return make_state(epoch, batch, self._state_config())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next ``for batch in loader`` yields exactly the
        batches that were still due (same order, same random op results), then whole epochs.
        DALI's own randomness (the presets' crops and flips) is seeded per shard and resume
        point: reproducible for the same start, but not bit-identical to an uninterrupted run.

        Call it before iterating or between epochs. A state from another configuration (batch
        size, shards, seed, shuffle, last_batch, manifest content, ops, resize) raises
        :class:`~extsrc.errors.StateMismatchError` listing what differs.
        """
        epoch, batch = check_state(state, self._state_config(), len(self))
        self.close()
        self.epoch, self._batch = epoch, batch

    def _state_config(self) -> dict[str, Any]:
        c = self.config
        m = self.source.manifest
        return {
            "batch_size": c.batch_size,
            "shard_id": c.shard_id,
            "num_shards": c.num_shards,
            "seed": c.seed,
            "shuffle": c.shuffle,
            "last_batch": c.last_batch,
            "num_samples": len(m),
            "manifest": m.fingerprint(),
            "ops": describe_ops(c.ops),
            "transforms": describe_ops(c.transforms),
            "resize": None if c.resize is None else list(c.resize),
            "stages": [getattr(s, "__qualname__", type(s).__name__) for s in c.stages],
        }

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Loader({len(self.manifest)} samples, batch_size={c.batch_size}, "
            f"outputs={list(c.output_names)}, device={self.device!r}, op_paths={self.op_paths}, "
            f"shard {c.shard_id}/{c.num_shards}, {len(self)} batches/epoch)"
        )

    # -- internals --------------------------------------------------------------------------------
    def _ensure_built(self) -> Any:
        if self._dali_iter is None:
            from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

            if self._batch >= len(self):  # stopped right after an epoch's last batch
                self.epoch, self._batch = self.epoch + 1, 0
            if (self.source.start_epoch, self.source.start_batch) != (self.epoch, self._batch):
                self.source = self._make_source(self.epoch, self._batch)
            c = self.config
            self._built = build_pipeline(
                self.source, ops=c.ops, transforms=c.transforms, paths=self.op_paths,
                resize=c.resize, stages=c.stages, decoder=c.decoder,
                hw_decoder_load=c.hw_decoder_load,
                device_id=c.device_id, num_threads=c.threads, num_workers=c.workers,
                start_method=c.method, prefetch_queue_depth=c.prefetch_queue_depth, seed=c.seed,
            )
            self._built.build()
            # PARTIAL: the source decides batch sizes; DALI must pass short batches through.
            self._dali_iter = DALIGenericIterator(
                self._built,
                [*c.output_names, "__info"],
                last_batch_policy=LastBatchPolicy.PARTIAL,
                auto_reset=False,
                prepare_first_batch=False,
            )
        return self._dali_iter

    def _epoch_batches(self, it: Any) -> Iterator[dict[str, Any]]:
        self._in_epoch = True
        gen = self._gen
        pin = self.config.device_id is not None
        while True:
            if gen != self._gen:
                raise RuntimeError(
                    "this epoch's iterator was stopped by loader.close() or load_state_dict() "
                    "(or an earlier error); start a new `for batch in loader:`"
                )
            try:
                batch = self._next(it)
            except StopIteration:
                if self._batch != len(self.source):  # never end an epoch short in silence
                    self.close()
                    raise PipelineError(
                        f"DALI ended epoch {self.epoch} after {self._batch} of "
                        f"{len(self.source)} batches; this is a bug in extsrc, please report it"
                    ) from None
                break
            except KeyboardInterrupt:
                # Ctrl-C mid-batch: stop DALI (the helper thread's call has finished or been
                # abandoned), so the next `for` restarts cleanly at this same batch.
                self.close()
                raise
            except Exception as e:
                err = self._explain(e)
                self.close()  # workers and threads stop now; the position stays at this batch
                if err is e:
                    raise
                raise err from e
            d = batch[0]
            out = {name: d[name] for name in self.config.output_names}
            info = d["__info"]  # columns: INFO_COLUMNS (index, epoch, is_pad)
            index, is_pad = info[:, 0].contiguous(), info[:, 2].bool()
            if pin:
                # Page-locked, so `.to("cuda", non_blocking=True)` (to mask pads in the loss) is
                # a real async copy; from pageable memory torch waits for the GPU to go idle
                # first, every step, and the CPU stops running ahead of the GPU.
                index, is_pad = index.pin_memory(), is_pad.pin_memory()
            out["index"] = index
            out["is_pad"] = is_pad
            self._batch += 1
            yield out
        it.reset()
        self._in_epoch = False
        self.epoch += 1
        self._batch = 0

    def _explain(self, e: Exception) -> Exception:
        """Turn a DALI failure into an extsrc error that names the op / file / line first."""
        msg = str(e)
        if "uniform shape" in msg and self.config.resize is None:
            return ValueError(
                "images in a batch have different sizes, so they cannot be stacked into one "
                "tensor; pass resize=(height, width) (or an int) to Loader"
            )
        if isinstance(e, ExtsrcError):  # raised in this process (num_workers=0): already clear
            return e
        low = msg.lower()
        # DALI's messages when its worker pool went away under it: wait briefly for exit codes.
        dead = self._dead_workers(wait="receiving interrupted" in low or "sending tasks" in low)
        if dead:
            return WorkerDiedError(self._died_message(dead))
        translated = _worker_exception(msg) or _op_exception(msg)
        if translated is not None:
            return translated
        if "decoders.image" in msg or "decode" in low or "nvimagecodec" in low:
            return self._decode_failure(msg)
        return PipelineError(
            f"DALI failed while producing {self._where_batch()}: {_dali_text(msg)}"
        )

    # -- failures ---------------------------------------------------------------------------------
    def _make_source(self, start_epoch: int = 0, start_batch: int = 0) -> ShardedSource:
        c = self.config
        return ShardedSource(
            self._feed, batch_size=c.batch_size, shard_id=c.shard_id, num_shards=c.num_shards,
            shuffle=c.shuffle, seed=c.seed, last_batch=c.last_batch, start_epoch=start_epoch,
            start_batch=start_batch, max_pixels=self.max_pixels,
            origin=None if self._orig_index is None else (self.manifest, self._orig_index),
        )

    def _skip_bad(self, manifest: Manifest, kwargs: Mapping[str, Any] | None) -> Manifest:
        import numpy as np

        from extsrc.validate import validate

        # n_jobs: this process's share of the cores, so that every rank of a node validating at
        # once does not start cores x ranks processes.
        defaults = {"max_pixels": self.max_pixels, "n_jobs": _cores_per_process()}
        report = validate(manifest, **{**defaults, **dict(kwargs or {})})
        self.validation = report
        self.skipped = report.problems
        if not report.problems:
            return manifest
        warnings.warn(
            f"extsrc.Loader(on_error='skip'): skipping {report.num_bad} of {len(manifest)} "
            f"samples of {manifest.source} ({report.counts}), e.g. {report.problems[0]}. "
            "loader.skipped lists them all; batch['index'] still refers to the original "
            "manifest",
            stacklevel=3,
        )
        self._orig_index = np.array(report.ok_indices, dtype=np.int64)
        return report.clean_manifest()

    def _where_batch(self) -> str:
        src, b = self.source, self._batch
        if b >= len(src):
            return f"epoch {self.epoch}"
        idx = [int(i) for i in src.plan(self.epoch).batch(b)[0]]
        m = src.manifest
        lines = ", ".join(str(m.lines[i]) for i in idx[:8]) + (", ..." if len(idx) > 8 else "")
        return f"epoch {self.epoch} batch {b} ({m.source} lines {lines})"

    #: Seconds DALI gets to report a dead worker itself before the watchdog steps in.
    _DEAD_WORKER_GRACE = 2.0

    def _worker_procs(self) -> list[Any]:
        """The DALI worker processes (``multiprocessing.Process``) of the built pipeline."""
        if self._built is None or self.config.workers == 0:
            return []
        pool = getattr(getattr(self._built, "_py_pool", None), "pool", None)
        return list(getattr(pool, "_processes", None) or ())

    def _next(self, it: Any) -> Any:
        """``next(it)``, watched: with worker processes the call runs on a helper thread while
        this one checks that the workers live. DALI itself reports most worker deaths, but when a
        worker dies while DALI's shared queue waits for its acknowledgement, DALI blocks forever;
        then the watchdog stops the other workers, wakes the blocked call and raises
        :class:`~extsrc.errors.WorkerDiedError` instead of hanging."""
        procs = self._worker_procs() if self.watchdog else []
        if not procs:
            return next(it)
        dead = _exited(procs)
        if dead:  # died since the last batch, DALI has not noticed (yet): never go on without it
            _stop_processes(procs)
            raise WorkerDiedError(self._died_message(dead))
        if self._pump is None:
            self._pump = _Pump()
            weakref.finalize(self, self._pump.stop)  # a loader never closed frees its thread
        job = self._pump.submit(self._next_call(it))
        try:
            return self._watch(job, procs)
        except KeyboardInterrupt:
            # Never leave DALI's call running while another thread touches the iterator.
            if not job.done.wait(5.0):
                self._pump.stuck = True
            raise

    def _next_call(self, it: Any) -> Any:
        """``next(it)`` for the helper thread, on the caller's CUDA stream: torch's current
        stream is per thread, and DALI copies batches on the current one."""
        if self.config.device_id is None:
            return lambda: next(it)
        import torch

        stream = torch.cuda.current_stream(self.config.device_id)

        def call() -> Any:
            with torch.cuda.stream(stream):
                return next(it)

        return call

    def _watch(self, job: _Job, procs: list[Any]) -> Any:
        """Wait for ``job``; a worker that died while it waits becomes a WorkerDiedError."""
        dead_since = None
        while not job.done.wait(0.2):
            dead = _exited(procs)
            if not dead:
                continue
            now = time.monotonic()
            dead_since = dead_since or now
            if now - dead_since < self._DEAD_WORKER_GRACE:
                continue
            _stop_processes(procs)
            _wake_queues(self._built if self._built is not None else None, len(procs))
            if not job.done.wait(2.0):
                self._pump.stuck = True  # abandoned: close() will not wait on that pipeline
            raise WorkerDiedError(self._died_message(dead))
        return job.result()

    def _dead_workers(self, wait: bool) -> list[tuple[int, int]]:
        """(pid, exit code) of DALI worker processes that have exited."""
        procs = self._worker_procs()
        deadline = time.monotonic() + (2.0 if wait and procs else 0.0)
        while True:
            dead = _exited(procs)
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.02)

    def _died_message(self, dead: list[tuple[int, int]]) -> str:
        # DALI stops the other workers with SIGTERM once one dies: report the first cause.
        culprits = [(p, c) for p, c in dead if c != -signal.SIGTERM] or dead
        parts = []
        for pid, code in culprits:
            if code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                parts.append(f"pid {pid} was killed by {name}")
            else:
                parts.append(f"pid {pid} exited with code {code}")
        oom = any(c == -signal.SIGKILL for _, c in culprits)
        hint = (
            " SIGKILL usually comes from the out-of-memory killer (see `dmesg`): lower "
            "num_workers, prefetch_queue_depth or batch_size." if oom else
            " A crash in native code (a decoder or a C extension in an op) can cause this."
        )
        return (
            f"a DALI worker process died while the loader was producing {self._where_batch()}: "
            f"{'; '.join(parts)}.{hint} All worker processes were stopped. Iterating again "
            "rebuilds the pipeline and resumes at this batch; a new Loader resumes from "
            "loader.state_dict()"
        )

    def _decode_failure(self, msg: str) -> Exception:
        m = re.search(r"Failed to decode sample #(\d+)", msg)
        found = self._find_culprit(int(m.group(1)) if m else None)
        if found is None:
            return PipelineError(
                f"DALI's image decoder failed on {self._where_batch()}, but Pillow decodes every "
                f"file of that batch; DALI said: {_dali_text(msg)}. Check these files (for "
                "example with extsrc.validate(manifest)) or re-encode them as plain JPEG/PNG"
            )
        i, finding = found
        man = self.source.manifest
        err = BadImageError(
            f"{man.source} line {man.lines[i]}: {man.paths[i]}: DALI could not decode this "
            f"file: {finding.message} [{finding.reason}]; {finding.fix}.{UP_FRONT_HINT}"
        )
        err.reason = finding.reason
        return err

    def _find_culprit(self, hint: int | None) -> tuple[int, Any] | None:
        """Decode the samples of the failed batch (and the prefetched ones) with Pillow."""
        src = self.source
        stop = min(len(src), self._batch + self.config.prefetch_queue_depth + 2)
        seen: set[int] = set()
        for b in range(self._batch, stop):
            idx = [int(i) for i in src.plan(self.epoch).batch(b)[0]]
            if b == self._batch and hint is not None and hint < len(idx):
                idx.insert(0, idx[hint])
            for i in idx:
                if i in seen:
                    continue
                seen.add(i)
                finding = check_file(src.manifest.paths[i], decode=True, max_pixels=self.max_pixels)
                if finding is not None:
                    return i, finding
        return None


_DALI_NOISE = ("Critical error in pipeline:", "Current pipeline object is no longer valid.")


def _dali_text(msg: str) -> str:
    """The informative part of a DALI error message, on one line."""
    body = msg.split("encountered:", 1)[-1]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and ln.strip() not in _DALI_NOISE]
    text = " | ".join(lines)
    return text if len(text) <= 600 else text[:597] + "..."


def _worker_exception(msg: str) -> Exception | None:
    """An exception raised by the source in a DALI worker process arrives as traceback text:
    rebuild it as its extsrc type, message first, the worker's traceback after."""
    start = msg.find("Traceback (most recent call last):")
    if start < 0 or "worker" not in msg[:start].lower():
        return None
    tb = msg[start:].rstrip()
    lines = tb.splitlines()
    last_frame = max((k for k, ln in enumerate(lines) if ln.startswith("  ")), default=0)
    exc_text = "\n".join(lines[last_frame + 1:]).strip()
    name, sep, text = exc_text.partition(": ")
    if not sep:
        name, text = exc_text, ""
    cls = getattr(_errors, name.rsplit(".", 1)[-1], None) if name.startswith("extsrc.") else None
    if not (isinstance(cls, type) and issubclass(cls, ExtsrcError)):
        cls, text = PipelineError, f"the data source raised {name} in a DALI worker: {text}"
    return cls(f"{text}\n\nTraceback in the DALI worker process:\n{tb}")


def _op_exception(msg: str) -> Exception | None:
    """An exception raised by an op inside ``python_function``: rebuild it as OpError (or
    OpOutputError for a broken output contract), message (with the op's traceback) first."""
    marker = "DLTensorPythonFunction error: "
    k = msg.find(marker)
    if k < 0:
        return None
    body = msg[k + len(marker):]
    body = body.rpartition("\n\nAt:\n")[0] or body
    for noise in _DALI_NOISE:
        body = body.replace(noise, "")
    name, _, text = body.strip().partition(": ")
    if name.endswith("OpContractError"):
        return OpOutputError(text)
    if name.endswith("OpError"):
        return OpError(text)
    return OpError(f"an op raised {name}: {text}")


def _shutdown_pipeline(pipe: Any, timeout: float = 10.0) -> None:
    """Stop a DALI pipeline's executor and its worker processes now, not at garbage collection
    (a traceback can keep the pipeline alive, and its workers with it). Runs on a helper thread
    so that a pool wedged by a dead worker cannot hang the caller."""
    pool = getattr(pipe, "_py_pool", None)

    def shutdown() -> None:
        try:
            pipe._shutdown()
        except Exception:  # already shut down, or half built
            pass
        if pool is not None:
            try:
                pool.close()
            except Exception:
                pass

    t = threading.Thread(target=shutdown, name="extsrc-dali-shutdown", daemon=True)
    t.start()
    t.join(timeout)


def _exited(procs: Any) -> list[tuple[int, int]]:
    """(pid, exit code) of each of DALI's reader processes that has exited."""
    return [(p.pid, p.exitcode) for p in procs if p.exitcode is not None]


def _stop_processes(procs: list[Any]) -> None:
    """Terminate (then kill) the processes still running, and reap them."""
    live = [p for p in procs if p.exitcode is None]
    for p in live:
        try:
            p.terminate()
        except Exception:
            pass
    for p in live:
        p.join(2.0)
        if p.exitcode is None:
            try:
                p.kill()
            except Exception:
                pass
            p.join(2.0)


def _wake_queues(pipe: Any, n: int) -> None:
    """Release the semaphores DALI's shared queues wait on for a dead worker's acknowledgement
    (``multiprocessing.Condition.notify`` waits for each woken sleeper), so a call blocked there
    returns; the pipeline is abandoned afterwards."""
    pool = getattr(getattr(pipe, "_py_pool", None), "pool", None)
    queues = [getattr(pool, "_general_task_queue", None), getattr(pool, "_result_queue", None)]
    queues += [getattr(c, "dedicated_task_queue", None)
               for c in getattr(pool, "_workers_contexts", None) or ()]
    for q in queues:
        woken = getattr(getattr(q, "cv_not_empty", None), "_woken_count", None)
        for _ in range(n if woken is not None else 0):
            try:
                woken.release()
            except Exception:
                break


class _Job:
    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.done = threading.Event()
        self._outcome: tuple[bool, Any] = (False, None)

    def run(self) -> None:
        try:
            self._outcome = (True, self.fn())
        except BaseException as e:  # handed to the caller, StopIteration included
            self._outcome = (False, e)
        self.fn = None  # drop the iterator (and through it the pipeline) as soon as possible
        self.done.set()

    def result(self) -> Any:
        (ok, value), self._outcome = self._outcome, (False, None)
        if ok:
            return value
        raise value


class _Pump:
    """One daemon thread that runs DALI calls for the loader, so it can wait with a timeout."""

    def __init__(self) -> None:
        self.stuck = False
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="extsrc-dali-pump", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()

    def submit(self, fn: Any) -> _Job:
        job = _Job(fn)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        self._jobs.put(None)
