"""``Loader``: the PyTorch-facing object. Builds the DALI pipeline and yields dicts of tensors.

Its configuration and the rules it follows are :mod:`extsrc.config`; one pass over the batches is
an :class:`~extsrc.epoch.Epoch`; where it stands is a :class:`~extsrc.position.ReadPosition`;
DALI's private parts (the dead-worker watchdog) are :mod:`extsrc._dali`.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from augment_ops.registry import Op
from extsrc import _dali
from extsrc._dali import lifecycle
from extsrc._dali.run import PipelineRun
from extsrc.batchformat import Dtype, Layout, Normalize, ResizeMode
from extsrc.config import (
    DEFAULT_HW_DECODER_LOAD,
    HIDDEN_OUTPUTS,
    METADATA_KEYS,
    LoaderConfig,
    LoaderOptions,
    as_ops,
    as_size,
    check_batch_for_samples,
    check_loader_arguments,
    cores_per_process,
    normalise_op_path,
)
from extsrc.device import resolve_device
from extsrc.distributed import detect, resolve_sharding
from extsrc.epoch import Epoch
from extsrc.errors import PipelineError
from extsrc.failures import InFlight, explain
from extsrc.fileread import DEFAULT_MAX_FILE_BYTES
from extsrc.imagecheck import DEFAULT_MAX_PIXELS
from extsrc.mainguard import check_main_guard
from extsrc.manifest import Manifest, read_manifest
from extsrc.oppaths import check_output_dtype
from extsrc.oppool import OpPool
from extsrc.pipeline import build_pipeline
from extsrc.position import ReadPosition
from extsrc.sharding import LastBatch, check_int, pad_plan_unchanged_by_balancing
from extsrc.slowstart import SLOW_SECONDS, stage
from extsrc.source import ShardedSource
from extsrc.sources.shards import is_shard_source, read_shards
from extsrc.state import (
    FILLED_IN_ORDER,
    SHARDING,
    check_state,
    describe_ops,
    describe_stages,
    make_state,
)

__all__ = ["DEFAULT_HW_DECODER_LOAD", "METADATA_KEYS", "Loader", "LoaderConfig"]


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
    ``int64``) and ``is_pad`` (``bool``: a repeat added by ``last_batch="pad"``, count it in no
    metric). ``len(loader)``
    is the number of batches per epoch; each new ``iter(loader)`` starts the next epoch (see
    :meth:`__iter__` for loops that stop early and :meth:`set_epoch`).

    Defaults, chosen as a PyTorch ``DataLoader`` user expects them: ``shuffle=True``, ``seed=0``,
    ``last_batch="partial"`` (``drop_last=False``: every sample once per epoch, the last batch
    may be short, nothing repeated; under sharding every shard still gets the same number of
    batches, see :mod:`extsrc.sharding`), ``resize=None``, ``resize_mode="shorter_side"``,
    ``layout="NHWC"``, ``dtype="uint8"``, ``normalize=None``, ``device=None``,
    ``num_workers=None`` and ``num_threads=None`` (from the core count; an eighth of the cores
    each, 2 and 2 on 16, on a GPU loader whose numpy-path ops run in an op pool, which wants
    the cores),
    ``prefetch_queue_depth=2``, ``op_path=None``, ``decoder="auto"``, ``on_error="raise"``,
    ``max_pixels=DEFAULT_MAX_PIXELS``, ``watchdog=True``. ``last_batch="pad"`` fills the last
    batches with repeats marked ``is_pad`` (every batch full: ``torch.compile`` without
    recompiling for a short batch); ``"drop"`` leaves the remainder out.

    ``device``: ``None`` (GPU 0 when one is visible, else CPU), ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or a GPU index.

    ``op_path`` chooses how ops run: ``None`` picks per op the fastest path it declares that the
    device supports (``"native"`` DALI operators, then ``"gpu"`` CuPy on a GPU, then ``"numpy"``
    ``python_function`` on the CPU); a string forces one path for every op (``"numpy"``: the
    user's numpy functions as written); a dict forces it per op name. ``loader.op_paths``
    reports the choice. Ops on the numpy path run for the samples of a batch in parallel:
    ``op_workers`` (``None``: the cores this process may use, its CPU affinity divided by
    ``LOCAL_WORLD_SIZE`` under torchrun; ``0``: one after another in DALI's thread) worker
    processes (``op_pool="process"``, started as the pipeline is built, ended by :meth:`close`) or
    threads (``op_pool="thread"``: no copies, for ops that release the GIL, as numpy's array
    loops and OpenCV do). The batches are the same whatever the number of workers.
    ``op_timeout`` (seconds per sample, default ``None``: no limit) stops an op that never
    returns with :class:`~extsrc.errors.OpTimeoutError` naming the op and the samples in flight:
    a late worker process is killed (iterating again starts new ones); a late thread cannot be
    stopped, is left running as a daemon thread, and the loader then refuses to run ops in this
    process while it runs. It needs a pool: ``op_workers=1`` gives one, ``op_workers=0`` is
    refused. No default limit: an op's time depends on the images and the machine, and killing
    a slow but healthy op would fail a run that would have finished.
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
    decoder still rejects is found by decoding its batch with Pillow, else by the sample number
    DALI's error gives (a file only DALI refuses). With ``on_error="raise"``
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

    ``max_file_bytes`` (default 256 MiB, the source's): a listed file larger than this is refused
    before it is read, naming its line (``None``: no limit); ``on_error="skip"`` validates with
    the same limit.

    Arguments are checked at construction, each refused naming it (:class:`TypeError` for a
    wrong type: numpy integers are taken where an int is due, floats and bools are not;
    :class:`ValueError` for a value out of range, e.g. a batch larger than 1,000 times the
    samples). The rules and ranges live in :mod:`extsrc.config`.

    Resume: :meth:`state_dict` / :meth:`load_state_dict` (see :mod:`extsrc.state`).

    Batch format of every image output (``image`` and the op outputs), made inside DALI after
    the ops (on the GPU when the loader runs there); :mod:`extsrc.batchformat` has the details.
    ``resize`` (``None``: sizes as decoded; an int for a square or ``(height, width)``) with
    ``resize_mode`` ``"shorter_side"`` (aspect kept, centre crop, like torchvision
    ``Resize(s)`` + ``CenterCrop(s)``) or ``"stretch"``; ``normalize`` ``None`` (0-255),
    ``"scale"`` (/ 255) or ``(mean, std)`` in 0-255 units; ``dtype`` ``"uint8"`` (needs
    ``normalize=None``), ``"float32"``, ``"float16"`` or ``"bfloat16"``; ``layout`` ``"NHWC"``
    or ``"NCHW"``. With ``stages`` (the presets) the format applies to the op outputs.
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
        shard_id: int | None = None,
        num_shards: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        last_batch: LastBatch = "partial",
        device: Any = None,
        num_workers: int | None = None,
        num_threads: int | None = None,
        start_method: str | None = None,
        prefetch_queue_depth: int = 2,
        op_path: str | Mapping[str, str] | None = None,
        op_workers: int | None = None,
        op_pool: str = "process",
        op_timeout: float | None = None,
        stages: Sequence[Any] = (),
        decoder: str = "auto",
        hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD,
        on_error: str = "raise",
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        validate_kwargs: Mapping[str, Any] | None = None,
        watchdog: bool = True,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        layout: Layout = "NHWC",
        dtype: Dtype = "uint8",
        normalize: Normalize = None,
        resize_mode: ResizeMode = "shorter_side",
    ) -> None:
        shard_id, num_shards, device = resolve_sharding(shard_id, num_shards, device, detect())
        if is_shard_source(manifest):  # tar shards, indexed into byte ranges of their members
            with warnings.catch_warnings():  # on_error="skip": loader.skipped reports them
                warnings.simplefilter("ignore" if on_error == "skip" else "default")
                manifest = read_shards(manifest, on_error="skip" if on_error == "skip" else "raise")
        elif isinstance(manifest, (str, os.PathLike)):
            manifest = read_manifest(manifest)
        if not isinstance(manifest, Manifest):
            raise TypeError(
                f"manifest must be an extsrc.Manifest or a manifest file path, got "
                f"{type(manifest).__name__}"
            )
        self.manifest = manifest
        check_loader_arguments(output_map=output_map, stages=stages, ops=ops,
                               transforms=transforms)
        for op in as_ops(ops, "ops"):
            check_output_dtype(op)
        if not self._takes_clips:
            for op in (*as_ops(ops, "ops"), *as_ops(transforms, "transforms")):
                if op.on_clips:
                    raise ValueError(
                        f"Loader: op '{op.name}' works on whole video clips (ndim=4); use it "
                        "with extsrc.VideoLoader, or register an op on HWC images (ndim=3)"
                    )
        #: The arguments about bad files and DALI's workers, checked.
        self.options = LoaderOptions(
            on_error=on_error, max_pixels=max_pixels, max_file_bytes=max_file_bytes,
            validate_kwargs=validate_kwargs, watchdog=watchdog,
        )
        self.config = LoaderConfig(
            batch_size=batch_size, ops=as_ops(ops, "ops"),
            transforms=as_ops(transforms, "transforms"),
            resize=as_size(resize), output_map=None if output_map is None else tuple(output_map),
            shard_id=shard_id, num_shards=num_shards, shuffle=shuffle, seed=seed,
            last_batch=last_batch, device_id=resolve_device(device), num_workers=num_workers,
            num_threads=num_threads, start_method=start_method,
            prefetch_queue_depth=prefetch_queue_depth, op_path=normalise_op_path(op_path),
            op_workers=op_workers, op_pool=op_pool, op_timeout=op_timeout,
            stages=tuple(stages), decoder=decoder, hw_decoder_load=hw_decoder_load,
            layout=layout, dtype=dtype, normalize=normalize, resize_mode=resize_mode,
            metadata_keys=self._metadata_keys, hidden_outputs=self._hidden_outputs,
        )
        check_main_guard(self.config.workers, self.config.method)  # before any reader starts
        self.on_error = self.options.on_error
        self.max_pixels = self.options.max_pixels
        self.max_file_bytes = self.options.max_file_bytes
        self.watchdog = self.options.watchdog
        if self.watchdog and self.config.workers > 0:
            _dali.check_version()  # the watchdog reads DALI's private worker pool
        #: The problems (``extsrc.Problem``) that ``on_error="skip"`` left out.
        self.skipped: tuple[Any, ...] = ()
        #: The ``ValidationReport`` of ``on_error="skip"`` (``None`` otherwise).
        self.validation: Any = None
        # The manifest indices read (on_error="skip": the good samples), None: all of them.
        self._indices: Any = None
        if on_error == "skip":
            with stage(f"checking the {len(manifest):,} files of {manifest.source} "
                       "(on_error='skip')"):
                self._indices = self._skip_bad(manifest, validate_kwargs)
        else:
            manifest.check_root()
        check_batch_for_samples(
            self.config.batch_size, len(manifest) if self._indices is None else len(self._indices)
        )
        self.source = self._make_source(0, 0)
        #: Where the next batch comes from; the epoch iterator advances it.
        self.position = ReadPosition(len(self.source))
        workers = self.config.op_pool_size
        #: The pool running the numpy path's ops in parallel (``None``: they run in DALI's
        #: thread); its workers start as the pipeline is built (for the host resize alone, at
        #: the second batch: see hostresize.ResizeOnly) and end with :meth:`close`.
        self.op_pool = (OpPool(workers, self.config.op_pool, self.config.op_timeout)
                        if workers else None)
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

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (after a loop that took every batch of epoch
        ``e``, ``e + 1``; after one left part-way, still ``e``: the next ``iter()`` abandons
        the rest of it, see :meth:`__iter__`)."""
        return self.position.due()[0]

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
                pos = self.position
                warnings.warn(
                    f"extsrc.Loader: epoch {pos.epoch} was left after {pos.batch} of "
                    f"{pos.num_batches} batches; this iteration starts epoch {pos.epoch + 1}. "
                    f"Call loader.set_epoch({pos.epoch}) first to read epoch {pos.epoch} from "
                    "its start instead (or loader.set_epoch(n) before every epoch, as with "
                    "DistributedSampler)",
                    stacklevel=2,
                )
            self.close()
            self.position.next_epoch()
        self._epoch = Epoch(self, self._ensure_run())
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` from its first batch (its shuffle and its
        random op results), as ``DistributedSampler.set_epoch`` does.

        Setting the epoch that comes next anyway (``set_epoch(e)`` before every epoch ``e`` of
        a loop that reads whole epochs) keeps the pipeline; any other epoch, or the current
        one after a part-way loop, restarts it there (one build, nothing read twice).
        """
        check_int("epoch", epoch, 0)
        self._conclude()
        current = self._epoch
        if self.position.due() == (epoch, 0) and (current is None or not current.started):
            return
        self.close()
        self.position.move_to(epoch, 0)

    def _conclude(self) -> None:
        """End the current epoch in place if every batch of it was taken: DALI's end of epoch is
        read (the source stops at the epoch's end, so nothing of the next epoch was read) and
        the pipeline resets for the next one."""
        current = self._epoch
        pos = self.position
        if current is None or not current.started or pos.batch < pos.num_batches:
            return
        try:
            next(current)
        except StopIteration:
            return
        self.close()
        raise PipelineError(
            f"DALI gave a batch past the end of epoch {pos.epoch} ({pos.num_batches} batches); "
            "this is a bug in extsrc, please report it"
        )

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

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands, as a JSON-serialisable dict (see :mod:`extsrc.state`).

        ``{"version": 1, "epoch": e, "batch": b, "config": {...}}``: the next batch is batch
        ``b`` of epoch ``e`` (``b`` batches of the epoch were yielded). Save it with your model
        checkpoint; a Loader built the same way resumes from it with :meth:`load_state_dict`.
        Taken after a ``break``, it points at the rest of the interrupted epoch (while this
        loader's next ``for`` would start the next epoch).
        """
        epoch, batch = self.position.due()
        return make_state(epoch, batch, self._state_config())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next ``for batch in loader`` yields exactly the
        batches that were still due (same order, same random op results), then whole epochs.
        DALI's own randomness (the presets' crops and flips) is seeded per shard and resume
        point: reproducible for the same start, but not bit-identical to an uninterrupted run.

        Call it before iterating or between epochs. A state from another configuration (batch
        size, shards, seed, shuffle, last_batch, manifest content, ops, resize, stages and their
        parameters, resize_mode) raises :class:`~extsrc.errors.StateMismatchError` listing what
        differs; ``layout``, ``dtype`` and ``normalize`` may change between runs. So does a
        state saved before shards were balanced where its ``last_batch="pad"`` plan differs
        (:func:`~extsrc.sharding.pad_plan_unchanged_by_balancing`), naming the epoch to restart.
        """
        c, src = self.config, self.source
        samples = len(self.manifest) if src.indices is None else len(src.indices)
        unchanged = pad_plan_unchanged_by_balancing(
            samples, batch_size=c.batch_size, num_shards=c.num_shards, last_batch=c.last_batch)
        epoch, batch = check_state(state, self._state_config(), len(self), implied={
            "sharding": SHARDING if unchanged else FILLED_IN_ORDER})
        self.close()
        self.position.move_to(epoch, batch)

    def _state_config(self) -> dict[str, Any]:
        c = self.config
        m = self.manifest
        config = {
            "batch_size": c.batch_size,
            "shard_id": c.shard_id,
            "num_shards": c.num_shards,
            "seed": c.seed,
            "shuffle": c.shuffle,
            "last_batch": c.last_batch,
            "num_samples": len(m) if self._indices is None else len(self._indices),
            "manifest": m.fingerprint(),
            "ops": describe_ops(c.ops),
            "transforms": describe_ops(c.transforms),
            "resize": None if c.resize is None else list(c.resize),
            # Which pixels a resized image keeps; layout, dtype and normalize only present them.
            "resize_mode": c.resize_mode,
            "stages": describe_stages(c.stages),
            "sharding": SHARDING,  # which arithmetic placed the samples (extsrc.sharding)
        }
        if self._indices is not None:  # on_error="skip": which samples are read counts too
            config["indices"] = hashlib.sha256(self._indices.tobytes()).hexdigest()
        return config

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
            c = self.config
            pipe = self._build_pipeline()
            if self.op_pool is not None and c.numpy_ops:
                self.op_pool.start()  # the workers' interpreters start while DALI builds
            self.pipeline_builds += 1
            readers = f"{c.workers} reader process{'es' if c.workers > 1 else ''}, {c.method}"
            with stage(f"building the DALI pipeline ({readers})" if c.workers else
                       "building the DALI pipeline"):
                self._run = PipelineRun(
                    pipe, [*c.output_names, *self._hidden_outputs], workers=c.workers,
                    device_id=c.device_id, watchdog=self.watchdog,
                )
        return self._run

    #: The pipeline's bookkeeping outputs after the named ones (see :meth:`_metadata`), and the
    #: metadata keys it makes of them; no output may take these names.
    _hidden_outputs: tuple[str, ...] = HIDDEN_OUTPUTS
    _metadata_keys: tuple[str, ...] = METADATA_KEYS

    def _build_pipeline(self) -> Any:
        """The DALI pipeline over ``self.source`` (defined, not built)."""
        c = self.config
        return build_pipeline(
            self.source, ops=c.ops, transforms=c.transforms, op_paths=self.op_paths,
            resize=c.resize, stages=c.stages, decoder=c.decoder,
            hw_decoder_load=c.hw_decoder_load, batch_format=c.batch_format,
            device_id=c.device_id, num_threads=c.threads, num_workers=c.workers,
            start_method=c.method, prefetch_queue_depth=c.prefetch_queue_depth, seed=c.seed,
            op_pool=self.op_pool,
        )

    def _metadata(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The per-sample metadata of a batch (``index``, ``is_pad``) from DALI's hidden
        outputs, as CPU tensors."""
        info = outputs["__info"]  # columns: INFO_COLUMNS (index, epoch, is_pad)
        return {"index": info[:, 0].contiguous(), "is_pad": info[:, 2].bool()}

    def _explain(self, e: Exception, at: InFlight) -> Exception:
        """The extsrc error for DALI's exception ``e`` raised while producing ``at``."""
        c = self.config
        assert self._run is not None  # an epoch is running
        return explain(e, at, run=self._run, resize=c.resize, max_pixels=self.max_pixels,
                       lookahead=c.prefetch_queue_depth + 2)

    def _make_source(self, start_epoch: int, start_batch: int) -> ShardedSource:
        c = self.config
        return ShardedSource(
            self.manifest, batch_size=c.batch_size, shard_id=c.shard_id, num_shards=c.num_shards,
            shuffle=c.shuffle, seed=c.seed, last_batch=c.last_batch, start_epoch=start_epoch,
            start_batch=start_batch, max_pixels=self.max_pixels, indices=self._indices,
            max_file_bytes=self.max_file_bytes,
        )

    def _skip_bad(self, manifest: Manifest, kwargs: Mapping[str, Any] | None) -> Any:
        """on_error="skip": validate up front; the indices of the good samples (None: all)."""
        from extsrc.doctor import validate

        # n_jobs: this process's share of the cores, so that every rank of a node validating at
        # once does not start cores x ranks processes.
        # progress: a bar once validating has taken SLOW_SECONDS, none for a quick one.
        defaults = {"max_pixels": self.max_pixels, "n_jobs": cores_per_process(),
                    "max_file_bytes": self.max_file_bytes, "progress": SLOW_SECONDS}
        report = validate(manifest, **{**defaults, **dict(kwargs or {})})
        self.validation = report
        self.skipped = report.problems
        if not report.problems:
            return None
        if len(report.ok_indices) == 0:
            report.clean_manifest()  # raises: every sample is bad, nothing is left to train on
        # Tar shards: the samples left out while indexing count too (manifest.skipped).
        total = len(manifest) + len(getattr(manifest, "skipped", ()))
        warnings.warn(
            f"extsrc.Loader(on_error='skip'): skipping {report.num_bad} of {total} "
            f"samples of {manifest.source} ({report.counts}), e.g. {report.problems[0]}. "
            "loader.skipped lists them all; batch['index'] still refers to the original "
            "manifest",
            stacklevel=3,
        )
        return report.ok_indices
