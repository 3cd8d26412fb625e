"""``Loader``: the PyTorch-facing object. Builds the DALI pipeline and yields dicts of tensors.

Its configuration and the rules it follows are :mod:`extsrc.loading.config`; one pass over the
batches is an :class:`~extsrc.loading.epoch.Epoch`; where it stands is a
:class:`~extsrc.loading.position.ReadPosition`, read and moved by the methods of
:class:`~extsrc.loading.state.Resumable` (``epoch``, ``set_epoch``, the resume methods); the source
of an image loader is :func:`image_source`, and ``on_error="skip"`` is
:mod:`extsrc.loading.skipping`; DALI's private parts (the dead-worker watchdog) are
:mod:`extsrc._dali`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from augment_ops.registry import Op
from extsrc import _dali
from extsrc._dali import lifecycle
from extsrc._dali.run import PipelineRun
from extsrc._util.device import resolve_device
from extsrc._util.mainguard import check_main_guard
from extsrc._util.slowstart import stage
from extsrc.graph.batchformat import BatchFormat
from extsrc.graph.image import build_pipeline
from extsrc.loading.config import (
    HIDDEN_OUTPUTS,
    METADATA_KEYS,
    LoaderConfig,
    RunPlan,
    check_batch_for_samples,
)
from extsrc.loading.distributed import detect, resolve_sharding
from extsrc.loading.epoch import Epoch, to_torch
from extsrc.loading.failures import InFlight, explain
from extsrc.loading.options import (
    DEFAULT_HW_DECODER_LOAD,
    BadFiles,
    OpRuntime,
    Sampling,
    Workers,
    from_flat,
)
from extsrc.loading.position import ReadPosition
from extsrc.loading.skipping import skip_bad, stand_in_problems, validate_images
from extsrc.loading.state import Resumable
from extsrc.ops_runtime.op_inputs import fit_to_inputs
from extsrc.ops_runtime.paths import check_output_dtype, choose_paths
from extsrc.ops_runtime.pool import OpPool, check_picklable, picklable
from extsrc.sources.images import STAND_IN, ShardedSource
from extsrc.sources.manifest import Manifest
from extsrc.sources.shards import is_shard_source, read_shards
from extsrc.sources.storage import StatsDir
from extsrc.sources.table import read_manifest

__all__ = [
    "DEFAULT_HW_DECODER_LOAD", "METADATA_KEYS", "Loader", "LoaderConfig", "check_ops", "plan_run",
]


#: :meth:`Loader.storage_stats` of a manifest of local files (and ``retried_reasons={}``).
NO_STORAGE_STATS = {"reads": 0, "bytes": 0, "bytes_used": 0, "retries": 0, "failures": 0,
                    "cache_hits": 0, "processes": 0}


def plan_run(config: LoaderConfig) -> RunPlan:
    """The explicit step after a config is built: choose each op's path (tracing the ops that
    declare none, :func:`~extsrc.ops_runtime.paths.choose_paths`) and check that the ops an op pool
    of processes will run can be pickled to its workers."""
    override = config.op_runtime.op_path_override
    chosen = choose_paths((*config.transforms, *config.ops), gpu=config.gpu, override=override)
    # A traced op given something other than decoded-like images (a float transform's output)
    # runs on the numpy path, or is refused where the user forced its native path.
    forced = set(chosen) if isinstance(override, str) else set(override or ())
    moved: dict[str, str] = {}

    # An op that cannot be pickled keeps its native path whatever the pool, as the automatic
    # choice keeps it (the path depends on the ops and the device only).
    chosen = fit_to_inputs(config.transforms, config.ops, chosen, forced, moved, picklable)
    plan = RunPlan(config, tuple(chosen.items()))
    if config.op_runtime.op_pool == "process" and plan.op_pool_size > 0:
        for op in plan.numpy_ops:
            try:
                check_picklable(op)
            except ValueError as e:
                if op.name not in moved:
                    raise
                raise ValueError(f"{e}. It runs on the numpy path here because its native path "
                                 f"cannot: {moved[op.name]}") from None
    return plan


def check_ops(config: LoaderConfig, takes_clips: bool) -> None:
    """The ops' declarations a loader can run: a resizable output dtype, whole-clip ops
    (``ndim=4``) only in a video loader, and no rank-2 outputs in a video loader."""
    for op in config.ops:
        check_output_dtype(op)
    for op in (*config.ops, *config.transforms):
        if op.on_clips and not takes_clips:
            raise ValueError(
                f"Loader: op '{op.name}' works on whole video clips (ndim=4); use it "
                "with extsrc.VideoLoader, or register an op on HWC images (ndim=3)"
            )
        if takes_clips and op.ndim == 2:
            raise ValueError(
                f"VideoLoader: op '{op.name}' declares rank-2 outputs; an op on frames "
                "returns HWC frames (ndim=3), an op on whole clips FHWC clips (ndim=4)"
            )


def as_manifest(manifest: Any, on_error: str = "raise") -> Manifest:
    """A :class:`~extsrc.sources.manifest.Manifest`, a manifest file path read, or tar shards
    indexed into byte ranges of their members (``on_error="skip"``: the samples left out while
    indexing go to ``manifest.skipped``, which the loader reports)."""
    if is_shard_source(manifest):
        with warnings.catch_warnings():  # on_error="skip": loader.skipped reports them
            warnings.simplefilter("ignore" if on_error == "skip" else "default")
            manifest = read_shards(manifest, on_error=on_error)
    elif isinstance(manifest, (str, os.PathLike)):
        manifest = read_manifest(manifest)
    if not isinstance(manifest, Manifest):
        raise TypeError(
            f"manifest must be an extsrc.Manifest or a manifest file path, got "
            f"{type(manifest).__name__}"
        )
    return manifest


def with_shards(groups: dict[str, Any], device: Any) -> tuple[dict[str, Any], Any]:
    """The option groups and the device with unset shards and device filled in from the
    launcher (``torchrun``'s rank and local GPU, :mod:`extsrc.loading.distributed`)."""
    s = groups["sampling"]
    shard_id, num_shards, device = resolve_sharding(s.shard_id, s.num_shards, device, detect())
    sampling = dataclasses.replace(s, shard_id=shard_id, num_shards=num_shards)
    return {**groups, "sampling": sampling}, device


def start_run(pipe: Any, config: LoaderConfig, plan: RunPlan) -> PipelineRun:
    """Build the DALI pipeline ``pipe`` and start its iterator, with the slow-start message."""
    n = plan.workers
    readers = f"{n} reader process{'es' if n > 1 else ''}, {plan.method}"
    with stage(f"building the DALI pipeline ({readers})" if n else "building the DALI pipeline"):
        return PipelineRun(pipe, [*config.output_names, *config.hidden_outputs], workers=n,
                           device_id=config.device_id, watchdog=config.workers.watchdog)


def image_source(manifest: Manifest, config: LoaderConfig, indices: Any, stats_dir: str | None,
                 start_epoch: int, start_batch: int) -> ShardedSource:
    """The source of an image loader with ``config``, reading ``indices`` (``None``: every
    sample) from ``(start_epoch, start_batch)`` on, its readers' storage counts in ``stats_dir``."""
    c, s = config, config.sampling
    return ShardedSource(
        manifest, batch_size=c.batch_size, shard_id=s.shard_id, num_shards=s.num_shards,
        shuffle=c.shuffle, seed=c.seed, last_batch=s.last_batch, start_epoch=start_epoch,
        start_batch=start_batch, max_pixels=c.bad_files.max_pixels, indices=indices,
        max_file_bytes=c.bad_files.max_file_bytes,
        skip_unreadable=c.bad_files.on_error == "skip", stats_dir=stats_dir,
        run_length=s.run_length,
    )


def warn_abandoned(pos: ReadPosition) -> None:
    """The warning of an epoch left part-way, whose next iteration is the next epoch."""
    warnings.warn(
        f"extsrc.Loader: epoch {pos.epoch} was left after {pos.batch} of "
        f"{pos.num_batches} batches; this iteration starts epoch {pos.epoch + 1}. "
        f"Call loader.set_epoch({pos.epoch}) first to read epoch {pos.epoch} from "
        "its start instead (or loader.set_epoch(n) before every epoch, as with "
        "DistributedSampler)",
        stacklevel=3,
    )


class Loader(Resumable):
    """Iterate epochs of batches as ``dict[name, torch.Tensor]`` from a labelled manifest.

    The DALI graph: ``ShardedSource`` (raw bytes, read in worker processes) -> image decoding ->
    ``transforms`` (single-output ops that replace the image, in order) -> ``ops`` (each gets the
    image and adds its outputs) -> ``resize`` of every image output -> outputs. On a GPU the resize
    runs there and the image outputs and labels are CUDA tensors (``index`` and ``is_pad`` stay
    on the CPU, for bookkeeping, in page-locked memory: move them with ``non_blocking=True``); on
    the CPU everything runs in DALI's CPU-only mode.

    Each batch holds the outputs under their names (default ``image``, ``<op>_<k>``, ``label``;
    ``output_map`` renames them in that order) plus ``index`` (manifest index of each sample,
    ``int64``) and ``is_pad`` (``bool``: a repeat added by ``last_batch="pad"``, count it in no
    metric). ``len(loader)`` is the number of batches per epoch; each new ``iter(loader)``
    starts the next epoch (see :meth:`__iter__` for loops that stop early and
    :meth:`set_epoch`).

    Arguments, with defaults as a PyTorch ``DataLoader`` user expects them: ``batch_size``;
    ``ops`` / ``transforms`` (op names or :class:`~augment_ops.Op`); ``resize`` (``None``:
    sizes as decoded; an int for a square or ``(height, width)``); ``output_map``;
    ``shuffle=True``; ``seed=0``; ``device`` (``None``: GPU 0 when one is visible, else CPU;
    ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a GPU index; under ``torchrun`` the local GPU);
    ``stages``, DALI callables applied to the main image instead of ``resize`` (see
    :mod:`extsrc.loading.presets`). The rest come in frozen groups, each documented in
    :mod:`extsrc.loading.options`: ``sampling=Sampling(...)`` (shards, ``last_batch="partial"``,
    i.e. ``drop_last=False``; unset shards under ``torchrun`` come from the rank, see
    :mod:`extsrc.loading.distributed`), ``workers=Workers(...)`` (DALI's readers, threads, decoder),
    ``op_runtime=OpRuntime(...)`` (each op's path, ``loader.op_paths`` reporting the choice;
    the pool of worker processes or threads running the numpy path, started as the pipeline is
    built and ended by :meth:`close`; ``op_timeout``), ``bad_files=BadFiles(...)`` and
    ``format=BatchFormat(...)`` (:mod:`extsrc.graph.batchformat`). The flat keywords of earlier
    releases (``num_workers=4``...) still work for one release, with a
    :class:`DeprecationWarning` naming the group to use (:func:`~extsrc.loading.options.from_flat`).

    Errors: a bad file stops iteration naming its manifest line, path and reason
    (``BadFiles(on_error="skip")``: left out up front, listed in ``loader.skipped``); an op's
    failure, contract breach or timeout, and a dead DALI worker, are
    :class:`~extsrc.errors.OpError` (:class:`~extsrc.errors.OpOutputError`,
    :class:`~extsrc.errors.OpTimeoutError`) and :class:`~extsrc.errors.WorkerDiedError`.
    After any error DALI's threads and workers are stopped, and iterating again resumes at the
    failed batch. Arguments are checked at construction, each refused naming it
    (:class:`TypeError` for a wrong type, :class:`ValueError` for a value out of range).

    Resume: :meth:`state_dict` / :meth:`load_state_dict` (see :mod:`extsrc.loading.state`,
    where they are defined).
    """

    def __init__(
        self,
        manifest: Manifest | str | os.PathLike[str] | Sequence[str],
        *,
        batch_size: int,
        ops: Sequence[str | Op] = (),
        transforms: Sequence[str | Op] = (),
        resize: int | tuple[int, int] | None = None,
        output_map: Sequence[str] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        device: Any = None,
        sampling: Sampling | None = None,
        workers: Workers | None = None,
        op_runtime: OpRuntime | None = None,
        bad_files: BadFiles | None = None,
        format: BatchFormat | None = None,
        stages: Sequence[Any] = (),
        **flat: Any,
    ) -> None:
        groups, device = with_shards(self._own_groups(from_flat(type(self).__name__, {
            "sampling": sampling, "workers": workers, "op_runtime": op_runtime,
            "bad_files": bad_files, "format": format}, flat)), device)
        self.manifest = manifest = as_manifest(manifest, groups["bad_files"].on_error)
        self.config = LoaderConfig(
            batch_size=batch_size, ops=ops, transforms=transforms, resize=resize,
            output_map=output_map, shuffle=shuffle, seed=seed, device_id=resolve_device(device),
            stages=stages, **groups, **self._config_names,
        )
        c = self.config
        check_ops(c, self._takes_clips)
        #: The config with the path each op runs on, and the pool and DALI sizes it implies.
        self.plan = plan_run(c)
        check_main_guard(self.plan.workers, self.plan.method)  # before any reader starts
        if c.workers.watchdog and self.plan.workers > 0:
            _dali.check_version()  # the watchdog reads DALI's private worker pool
        #: The problems (``extsrc.Problem``) that ``on_error="skip"`` left out.
        self.skipped: tuple[Any, ...] = ()
        #: The ``ValidationReport`` of ``on_error="skip"`` (``None`` otherwise).
        self.validation: Any = None
        # The manifest indices read (on_error="skip": the good samples), None: all of them.
        self._indices: Any = None
        if c.bad_files.on_error == "skip":  # validate up front; read only the good samples
            self.validation, self._indices = skip_bad(
                manifest, self._validate, c.bad_files.validate_kwargs, type(self).__name__,
                self._samples)
            self.skipped = self.validation.problems
        else:
            manifest.check_root()
        check_batch_for_samples(
            c.batch_size, len(manifest) if self._indices is None else len(self._indices)
        )
        # Reader processes write their object-storage counts here (Loader.storage_stats).
        self._storage_stats = StatsDir() if manifest.storage is not None else None
        self.source = self._make_source(0, 0)
        #: Where the next batch comes from; the epoch iterator advances it.
        self.position = ReadPosition(len(self.source))
        n = self.plan.op_pool_size
        #: The pool running the numpy path's ops in parallel (``None``: they run in DALI's
        #: thread); its workers start as the pipeline is built (for the host resize alone, at
        #: the second batch: see hostresize.ResizeOnly) and end with :meth:`close`.
        self.op_pool = OpPool(n, c.op_runtime.op_pool, c.op_runtime.op_timeout) if n else None
        # Holds the built DALI pipeline (``_run``, kept across epochs) and the op pool, so that
        # a loader dropped without close() has them closed by extsrc's reaper thread, never by
        # a garbage collection (see extsrc._dali.lifecycle).
        self._keeper = lifecycle.watch(self, self.op_pool)
        #: How many times a DALI pipeline was built (once, unless an epoch was left part-way,
        #: the loader closed, an error stopped it, or the read position was moved).
        self.pipeline_builds = 0
        self._warned_abandoned = False
        self._epoch: Epoch | None = None  # the current epoch's iterator

    #: Whether ops on whole video clips (``ndim=4``) are accepted (video loaders).
    _takes_clips = False
    #: The config's names of the main image output, the batch's metadata keys and the
    #: pipeline's bookkeeping outputs after the named ones (see :meth:`_metadata`); no output
    #: may take the last two's names.
    _config_names: Mapping[str, Any] = {
        "image_output": "image", "metadata_keys": METADATA_KEYS, "hidden_outputs": HIDDEN_OUTPUTS}

    # -- public surface ---------------------------------------------------------------------------
    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the tensor outputs in order (metadata keys excluded)."""
        return self.config.output_names

    @property
    def op_paths(self) -> dict[str, str]:
        """The path each op and transform runs on (``"numpy"``, ``"gpu"`` or ``"native"``)."""
        return self.plan.paths

    @property
    def device(self) -> str:
        d = self.config.device_id
        return "cpu" if d is None else f"cuda:{d}"

    @property
    def running(self) -> bool:
        """Whether a DALI pipeline (its threads and worker processes) is up."""
        return self._run is not None

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Epoch:
        """The next epoch's batches (the rest of the current one after an error or
        :meth:`close`); builds the DALI pipeline if none is up.

        A loop that took all ``len(loader)`` batches without asking for one more (Lightning,
        ``zip(range(len(loader)), loader)``) finished its epoch: the pipeline goes on to the
        next one without a rebuild. A loop left part-way (a ``break``, a peek
        ``next(iter(loader))``) abandons the rest of its epoch: this iteration is the next
        epoch, with a warning (once per loader) saying so; :meth:`set_epoch` chooses the epoch
        explicitly.
        """
        self._conclude()
        current, self._epoch = self._epoch, None
        if current is not None and current.started:
            # The previous epoch was left part-way (a `break`): this iteration is the next epoch.
            # Restarting the pipeline there costs one build and reads nothing; finishing the old
            # epoch would read, decode and augment every batch left in it (a million images
            # after a 100-batch probe of ImageNet).
            if not self._warned_abandoned:
                self._warned_abandoned = True
                warn_abandoned(self.position)
            self.close()
            self.position.next_epoch()
        self._epoch = self._new_epoch(self._ensure_run())
        return self._epoch

    def _conclude(self) -> None:
        if self._epoch is not None:
            self._epoch.conclude()

    def close(self) -> None:
        """Stop DALI's threads and worker processes now.

        The position is kept: iterating again rebuilds the pipeline and continues with the
        batches still due (as after an error).
        """
        self._epoch = None
        run, self._run = self._run, None
        if run is not None:
            run.close()
        if self.op_pool is not None:
            self.op_pool.close()

    def storage_stats(self) -> dict[str, Any]:
        """For a manifest of URLs: what the reader processes did, added up: ``reads`` (GETs),
        ``bytes`` (read), ``bytes_used`` (of the objects and shard members those reads were for:
        ``bytes / bytes_used`` is the read amplification of merged range reads), ``retries``
        (transient failures retried), ``failures`` (reads given up on), ``cache_hits``,
        ``retried_reasons`` (retries by exception type) and ``processes``.
        All zero for local files."""
        if self._storage_stats is None:
            return {**NO_STORAGE_STATS, "retried_reasons": {}}
        return self._storage_stats.total()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Loader({len(self.manifest)} samples, batch_size={c.batch_size}, "
            f"outputs={list(c.output_names)}, device={self.device!r}, op_paths={self.op_paths}, "
            f"shard {c.sampling.shard_id}/{c.sampling.num_shards}, {len(self)} batches/epoch)"
        )

    # -- internals --------------------------------------------------------------------------------
    @property
    def _run(self) -> PipelineRun | None:
        """The built DALI pipeline and its iterator (``None``: not running)."""
        return self._keeper.run  # type: ignore[no-any-return]

    @_run.setter
    def _run(self, run: PipelineRun | None) -> None:
        self._keeper.run = run

    def _ensure_run(self) -> PipelineRun:
        if self._run is None:
            epoch, batch = self.position.settle()
            if (self.source.start_epoch, self.source.start_batch) != (epoch, batch):
                self.source = self._make_source(epoch, batch)
            pipe = self._build_pipeline()
            if self.op_pool is not None and self.plan.numpy_ops:
                self.op_pool.start()  # the workers' interpreters start while DALI builds
            self.pipeline_builds += 1
            self._run = start_run(pipe, self.config, self.plan)
        return self._run

    def _new_epoch(self, run: PipelineRun) -> Epoch:
        """An epoch over ``run``, given the loader's parts it works with, not the loader."""
        c = self.config

        def ended(epoch: Epoch) -> None:
            if self._epoch is epoch:
                self._epoch = None

        to_batch = functools.partial(to_torch, names=c.output_names, metadata=self._metadata,
                                     bfloat16=c.format.dtype == "bfloat16", pin=c.gpu)
        return Epoch(run, self.position, self.source, to_batch=to_batch, explain=self._explain,
                     is_current=lambda epoch: self._epoch is epoch, stop=self.close,
                     ended=ended)

    def _build_pipeline(self) -> Any:
        """The DALI pipeline over ``self.source`` (defined, not built)."""
        return build_pipeline(self.source, self.config, self.op_paths, self.op_pool)

    def _metadata(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The per-sample metadata of a batch (``index``, ``is_pad``) from DALI's hidden
        outputs, as CPU tensors."""
        info = outputs["__info"]  # columns: INFO_COLUMNS (index, epoch, is_pad)
        if self.config.bad_files.on_error == "skip" and bool((info[:, 2] == STAND_IN).any()):
            self.skipped += stand_in_problems(self.manifest, self.config.bad_files,
                                              self.skipped, info[info[:, 2] == STAND_IN, 0])
        return {"index": info[:, 0].contiguous(), "is_pad": info[:, 2].bool()}

    def _explain(self, e: Exception, at: InFlight) -> Exception:
        """The extsrc error for DALI's exception ``e`` raised while producing ``at``."""
        c = self.config
        assert self._run is not None  # an epoch is running
        return explain(e, at, run=self._run, resize=c.resize, max_pixels=c.bad_files.max_pixels,
                       lookahead=c.workers.prefetch_queue_depth + 2)

    def _make_source(self, start_epoch: int, start_batch: int) -> ShardedSource:
        stats = None if self._storage_stats is None else self._storage_stats.path
        return image_source(self.manifest, self.config, self._indices, stats, start_epoch,
                            start_batch)

    def _own_groups(self, groups: dict[str, Any]) -> dict[str, Any]:
        """The option groups as this loader runs them (a video loader refuses and replaces
        fields it does not use)."""
        return groups

    #: What the loader's samples are called in messages.
    _samples = "samples"

    def _validate(self, manifest: Manifest, kwargs: dict[str, Any]) -> Any:
        """The report of :func:`extsrc.loading.skipping.validate_images`, with this loader's
        limits."""
        return validate_images(self.config.bad_files, manifest, kwargs)
