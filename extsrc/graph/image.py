"""The DALI graph: ExternalSource of raw bytes -> decode -> registered ops -> resize -> outputs.

This module knows DALI but not PyTorch; :mod:`extsrc.loading.loader` wraps the built pipeline for
torch.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from augment_ops.registry import Op
from extsrc.graph.batchformat import BatchFormat
from extsrc.loading.config import LoaderConfig, RunPlan
from extsrc.ops_runtime.hostresize import HostResize, ResizedOutputs, ResizeOnly, host_resizable
from extsrc.ops_runtime.native import native_outputs, native_reads_sizes, native_sample_scalars
from extsrc.ops_runtime.op_inputs import (
    TRACED_CHANNELS,
    OpInput,
    checked_readers,
    fit_to_inputs,
    op_inputs,
    traced,
)
from extsrc.ops_runtime.pool import OpPool
from extsrc.ops_runtime.runners import BatchOpRunner, DeviceBatchOpRunner, GpuBatchOpRunner
from extsrc.sources.images import INFO_COLUMNS, SOURCE_OUTPUTS, ReaderValues, ShardedSource
from extsrc.sources.manifest import Manifest

__all__ = ["build_pipeline", "dali_seed"]


def dali_seed(seed: int, shard_id: int, start_epoch: int, start_batch: int) -> int:
    """DALI's pipeline seed: a pure function of the loader seed, the shard and where the pipeline
    starts (DALI takes a non-negative 31-bit seed)."""
    return zlib.crc32(f"{seed}/{shard_id}/{start_epoch}/{start_batch}".encode()) & 0x7FFFFFFF


def build_pipeline(
    source: ShardedSource,
    config: LoaderConfig,
    op_paths: Mapping[str, str],
    op_pool: OpPool | None = None,
) -> Any:
    """Build (define; the caller calls ``.build()``) the DALI pipeline that feeds the loader.

    ``config`` gives the ops, transforms, ``resize``, ``stages``, seed, device, the batch format
    and DALI's side (``config.workers``: readers, threads, queue depth, decoder). ``op_paths``
    maps each op and transform name to ``"numpy"``, ``"gpu"`` or ``"native"`` (see
    :mod:`extsrc.ops_runtime.paths`); with them the readers, threads and start method are sized
    (:class:`~extsrc.loading.config.RunPlan`). ``stages`` are callables ``stage(image, gpu=bool)
    -> image`` of DALI operators applied to the main image in place of ``resize`` (the presets
    use them). ``decoder``: ``"mixed"`` decodes with nvJPEG on the GPU (numpy ops then get a host
    copy of the decoded image), ``"cpu"`` decodes on the CPU, ``"auto"`` is ``"mixed"`` on a GPU
    and ``"cpu"`` otherwise. ``hw_decoder_load`` (mixed decoding only; ``None``: DALI's default)
    is the share of JPEGs given to the GPU's hardware JPEG decoder, the rest being decoded by
    nvJPEG's CUDA path with Huffman decoding on DALI's CPU threads.

    ``op_pool`` runs the numpy path's ops over a batch's samples in parallel (``None``: in
    DALI's thread, one sample after another).

    ``config.format`` resizes every image output to ``resize`` and gives it its layout, dtype and
    normalisation (see :mod:`extsrc.graph.batchformat`); the main image made by ``stages`` is left
    as they make it. Without a GPU, uint8 images are resized by Pillow on the host
    (:mod:`extsrc.ops_runtime.hostresize`): by the numpy-path op that made them, in its worker (the
    main image by the first such op that reads it), or else by a resize-only step through the same
    pool.

    Outputs, in order: every image output (``image``, then each op's outputs), the label, then
    ``info`` (manifest index, epoch, pad flag per sample; bookkeeping, never renamed).
    """
    from nvidia.dali.pipeline import Pipeline

    # Every path given is the user's: a traced op whose input its graph cannot take is refused
    # here too, not only by the automatic choice (extsrc.loading.loader.plan_run).
    fit_to_inputs(config.transforms, config.ops, op_paths, forced=set(op_paths))
    plan = RunPlan(config, tuple(op_paths.items()))
    ops, transforms, resize, stages = config.ops, config.transforms, config.resize, config.stages
    device_id, seed, w = config.device_id, config.seed, config.workers
    num_workers = plan.workers
    gpu = device_id is not None
    manifest = source.manifest  # info's indices refer to it
    pipe = Pipeline(
        batch_size=source.batch_size,
        num_threads=plan.threads,
        device_id=device_id,
        # DALI's own randomness (the presets' crops and flips) must differ between shards and
        # continue differently after a resume; numpy ops do not use it.
        seed=dali_seed(seed, source.shard_id, source.start_epoch, source.start_batch),
        prefetch_queue_depth=w.prefetch_queue_depth,
        py_num_workers=max(1, num_workers),
        py_start_method=plan.method,
    )
    uses = _op_uses(transforms, ops, op_paths, seed, gpu)
    programs = [p for _, _, p in uses if p is not None]
    # The operators are defined in this order (DALI seeds its random operators in the order
    # they are made): read, decode, the ops, the host resizes, then the batch format.
    from nvidia.dali import fn

    with pipe:
        encoded, label, info, *values = _read(source, programs, num_workers)
        image = _decode(encoded, w.decoder, gpu, w.hw_decoder_load)
        # The decoded shapes read from the files' headers by DALI's decoder library (EXIF
        # orientation applied): a native op that reads sizes reads them, so its per-sample
        # scalars and check need not wait for the decoder (DALI prunes the operator where no
        # op reads it).
        peeked = fn.peek_image_shape(encoded)
        fmt = config.format
        host = (HostResize(resize, fmt.resize_mode)
                if not gpu and resize is not None and not stages else None)
        nodes = _OpNodes(op_paths, info, iter(values), manifest=manifest, seed=seed,
                         op_pool=op_pool, device_id=device_id, host=host,
                         decoded=image, peeked=peeked)
        images = _apply_ops(nodes, uses, image, len(transforms))
        finished = _resize_on_host(images, host, info, manifest=manifest, seed=seed,
                                   op_pool=op_pool)
        main, extra_images, label = _format(finished, label, fmt, resize, stages, gpu)
        if nodes.read_peeked:
            info = _decoded_as_read(image, peeked, info)
        pipe.set_outputs(main, *extra_images, label, info)
    return pipe


#: One use of an op: the op, its occurrence among the uses of that op (the same op twice draws
#: independent numbers) and, for a traced random op on the native path, what the readers
#: compute for it (:func:`extsrc.ops_runtime.native.native_sample_scalars`).
_Use = tuple[Op, int, Any]


def _op_uses(transforms: Sequence[Op], ops: Sequence[Op], op_paths: Mapping[str, str],
             seed: int, gpu: bool) -> list[_Use]:
    """Each use of an op in order: the transforms, then the ops (on images decoded on the GPU
    where ``gpu``)."""
    uses: list[_Use] = []
    seen: dict[str, int] = {}
    for op in (*transforms, *ops):
        occurrence = seen.get(op.name, 0)
        seen[op.name] = occurrence + 1
        program = (native_sample_scalars(op, seed=seed, occurrence=occurrence, gpu=gpu)
                   if op_paths[op.name] == "native" else None)
        uses.append((op, occurrence, program))
    return uses


def _read(source: ShardedSource, programs: Sequence[Any], num_workers: int) -> Any:
    """The external source's outputs: the file bytes, the label, the info rows, then the values
    the readers compute for the ops' ``programs``."""
    from nvidia.dali import fn

    # Batches the readers prepare ahead: DALI's default, 1, keeps one reader busy at a time.
    # One per reader took extsrc from 12-15k to 18-19k images/s on an H100
    # (benchmarks/README.md, "Reader depth"). DALI takes the argument only with readers.
    readers = {"parallel": True, "prefetch_queue_depth": num_workers} if num_workers > 0 else {}
    return fn.external_source(
        source=ReaderValues(source, programs) if programs else source,
        num_outputs=len(SOURCE_OUTPUTS) + sum(p.num_outputs for p in programs),
        batch=True,
        batch_info=True,
        **readers,
    )


def _decoded_as_read(image: Any, peeked: Any, info: Any) -> Any:
    """``info``, through an operator that stops the pipeline where a decoded image's shape is not
    the one ``fn.peek_image_shape`` read from its header (``peeked``), which native ops read as
    its sizes. Their reshape of the image to it stops it where the two hold other numbers of
    pixels; this also where they hold as many (a transposed shape, were an EXIF orientation
    read otherwise than the decoder applies it). The difference is the start of a slice of the
    sample's info row: out of bounds unless it is 0. Only the info output waits for it.
    :func:`extsrc.loading.failures.explain` names the file."""
    from nvidia.dali import fn, types

    difference = fn.cast(image.shape() - peeked, dtype=types.INT32)
    row = fn.reshape(info, shape=[1, 1, len(INFO_COLUMNS)])
    checked = fn.slice(row, start=difference, shape=[1, 1, len(INFO_COLUMNS)], axes=[0, 1, 2],
                       out_of_bounds_policy="error")
    return fn.reshape(checked, shape=[len(INFO_COLUMNS)])


def _decode(encoded: Any, decoder: str, gpu: bool, hw_decoder_load: float | None) -> Any:
    from nvidia.dali import fn, types

    if decoder == "auto":
        decoder = "mixed" if gpu else "cpu"
    decode_kw = {}
    if decoder == "mixed" and hw_decoder_load is not None:
        decode_kw["hw_decoder_load"] = float(hw_decoder_load)
    return fn.decoders.image(encoded, device=decoder, output_type=types.RGB, **decode_kw)


class _OpNodes:
    """Defines the DALI operators of one use of an op on its path (see
    :mod:`extsrc.ops_runtime.paths`): its outputs as a list of nodes."""

    def __init__(self, op_paths: Mapping[str, str], info: Any, drawn: Iterator[Any], *,
                 manifest: Manifest, seed: int, op_pool: OpPool | None, device_id: int | None,
                 host: HostResize | None, decoded: Any, peeked: Any) -> None:
        self.op_paths, self.info = op_paths, info
        self.decoded, self.peeked = decoded, peeked  # the decoded image, its headers' shapes
        self.read_peeked = False  # whether an op reads them
        self.drawn = drawn  # the readers' values, in the order of the uses' programs
        self.manifest, self.seed, self.op_pool = manifest, seed, op_pool
        self.device_id, self.host = device_id, host

    def fuses(self, op: Op) -> bool:
        """Whether the op's numpy runner resizes its outputs itself (see hostresize)."""
        return (self.host is not None and self.op_paths[op.name] == "numpy"
                and host_resizable(op.dtype, op.ndim))

    def __call__(self, use: _Use, img: Any, given: OpInput, resized: bool = False,
                 with_input: bool = False, readers: tuple[str, ...] = ()) -> list[Any]:
        """``given``: what the use is given (:mod:`extsrc.ops_runtime.op_inputs`); ``readers``:
        the traced ops reading its outputs, whose channel count its runner checks."""
        op, occurrence, program = use
        path = self.op_paths[op.name]
        check = {"channels": TRACED_CHANNELS, "readers": readers} if readers else {}
        if path == "native":
            # A traced graph takes 3 channels; where nothing checked the count of a hand-lowered
            # transform's output, the native path checks it per sample.
            channels = TRACED_CHANNELS if given.unchecked and traced(op, path) else None
            mine = ([next(self.drawn) for _ in range(program.num_outputs)]
                    if program is not None else [])
            shape = None
            if img is self.decoded and native_reads_sizes(op, program, gpu=img.device == "gpu"):
                shape, self.read_peeked = self.peeked, True
            outs = native_outputs(op, img, self.info, manifest=self.manifest, sample_values=mine,
                                  program=program, shape=shape, channels=channels,
                                  after=given.after)
        elif path == "numpy" and img.device == "gpu" and self.op_pool is not None:
            outs = self._numpy_on_device(op, occurrence, img, check)
        elif path == "numpy":
            outs = self._numpy(op, occurrence, img, resized, with_input, check)
        else:
            outs = self._gpu(op, occurrence, img, check)
        return list(outs) if isinstance(outs, (tuple, list)) else [outs]

    def _numpy_on_device(self, op: Op, occurrence: int, img: Any, check: dict[str, Any]) -> Any:
        from nvidia.dali import fn

        # The op pool copies GPU images into its own memory and uploads the outputs.
        assert self.op_pool is not None and self.device_id is not None
        return fn.dl_tensor_python_function(
            img, fn.copy(self.info).gpu(),
            function=DeviceBatchOpRunner(op, seed=self.seed, manifest=self.manifest,
                                         occurrence=occurrence, pool=self.op_pool,
                                         device_id=self.device_id, **check),
            num_outputs=op.num_outputs, batch_processing=True, device="gpu",
        )

    def _numpy(self, op: Op, occurrence: int, img: Any, resized: bool, with_input: bool,
               check: dict[str, Any]) -> Any:
        from nvidia.dali import fn

        # A GPU-decoded image comes back to host memory for the user's numpy code.
        host_img = img.cpu() if img.device == "gpu" else img
        runs = (ResizedOutputs(op, self.host, with_input=with_input)
                if resized and self.host is not None else op)
        return fn.python_function(
            host_img, self.info, function=BatchOpRunner(runs, seed=self.seed,
                                                        manifest=self.manifest,
                                                        occurrence=occurrence, pool=self.op_pool,
                                                        **check),
            num_outputs=runs.num_outputs, batch_processing=True,
        )

    def _gpu(self, op: Op, occurrence: int, img: Any, check: dict[str, Any]) -> Any:
        from nvidia.dali import fn

        # Only random ops need the sample identities (for their generators), and a check of
        # the outputs (to name the sample that fails it).
        # A copy: a CPU node that also feeds a GPU transfer is placed in pinned memory,
        # which torch.from_dlpack rejects when `info` is handed to torch (seen on H100).
        extra = [fn.copy(self.info).gpu()] if op.random or check else []
        return fn.python_function(
            img.gpu(), *extra,
            function=GpuBatchOpRunner(op, seed=self.seed, manifest=self.manifest,
                                      occurrence=occurrence, **check),
            num_outputs=op.num_outputs, batch_processing=True, device="gpu",
        )


#: An image output: its node, whether it is resized already, whether the host may resize it.
_Image = tuple[Any, bool, bool]


def _apply_ops(nodes: _OpNodes, uses: list[_Use], image: Any, n_transforms: int) -> list[_Image]:
    """The transforms in a chain on the main image, then each op on the result: the main image
    and every op output."""
    main: _Image = (image, False, True)
    chain = ([u[0] for u in uses[:n_transforms]], [u[0] for u in uses[n_transforms:]],
             nodes.op_paths)
    given, readers = op_inputs(*chain), checked_readers(*chain)
    for k, use in enumerate(uses[:n_transforms]):
        # Only the last transform's outputs are final, and only when no op reads them.
        fuse = nodes.fuses(use[0]) and k == n_transforms - 1 and len(uses) == n_transforms
        (image,) = nodes(use, image, given[k], resized=fuse, readers=readers[k])
        main = (image, fuse, host_resizable(use[0].dtype, use[0].ndim))
    images = [main]
    for k, use in enumerate(uses[n_transforms:], n_transforms):
        fuse = nodes.fuses(use[0])
        ok = host_resizable(use[0].dtype, use[0].ndim)
        # The first op whose worker resizes its outputs also resizes its input, the main
        # image, when that still needs it: one trip through the pool instead of two (a
        # copy of every decoded image fewer per batch).
        carry = fuse and not images[0][1] and images[0][2]
        outs = nodes(use, image, given[k], resized=fuse, with_input=carry)
        if carry:
            images[0] = (outs.pop(0), True, True)
        images += [(im, fuse, ok) for im in outs]
    return images


def _resize_on_host(images: list[_Image], host: HostResize | None, info: Any, *,
                    manifest: Manifest, seed: int, op_pool: OpPool | None,
                    ) -> list[tuple[Any, bool]]:
    """Each image with whether it is resized: those the host may resize and no op worker did
    get a resize-only step on the host, through the pool (see hostresize)."""
    from nvidia.dali import fn

    finished = []
    for k, (im, done, ok) in enumerate(images):
        if host is not None and ok and not done:
            im = fn.python_function(
                im, info, function=BatchOpRunner(ResizeOnly(host), seed=seed,
                                                 manifest=manifest, occurrence=k,
                                                 pool=op_pool),
                num_outputs=1, batch_processing=True,
            )
            done = True
        finished.append((im, done))
    return finished


def _format(finished: list[tuple[Any, bool]], label: Any, fmt: BatchFormat,
            resize: tuple[int, int] | None, stages: Sequence[Any], gpu: bool,
            ) -> tuple[Any, list[Any], Any]:
    """The main image, the other image outputs and the label, on the loader's device and in the
    batch format (the main image made by ``stages`` in theirs)."""
    images = [im.gpu() if gpu else im for im, _ in finished]
    if gpu:
        label = label.gpu()
    main, extra_images = images[0], images[1:]
    extra_images = [fmt.finish(im, None if done else resize)
                    for im, (_, done) in zip(extra_images, finished[1:], strict=True)]
    if not stages:
        main = fmt.finish(main, None if finished[0][1] else resize)
    for stage in stages:  # the stages make the main image in their own format
        main = stage(main, gpu=gpu)
    return main, extra_images, label
