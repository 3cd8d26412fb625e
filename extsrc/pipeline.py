"""The DALI graph: ExternalSource of raw bytes -> decode -> registered ops -> resize -> outputs.

This module knows DALI but not PyTorch; :mod:`extsrc.loader` wraps the built pipeline for torch.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from augment_ops.registry import Op
from extsrc.config import LoaderConfig, RunPlan
from extsrc.hostresize import HostResize, ResizedOutputs, ResizeOnly, host_resizable
from extsrc.oppaths import (
    BatchOpRunner,
    DeviceBatchOpRunner,
    GpuBatchOpRunner,
    native_outputs,
    native_sample_scalars,
)
from extsrc.oppool import OpPool
from extsrc.source import SOURCE_OUTPUTS, ReaderValues, ShardedSource

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
    :mod:`extsrc.oppaths`); with them the readers, threads and start method are sized
    (:class:`~extsrc.config.RunPlan`). ``stages`` are callables ``stage(image, gpu=bool) ->
    image`` of DALI operators applied to the main image in place of ``resize`` (the presets use
    them). ``decoder``: ``"mixed"`` decodes with nvJPEG on the GPU (numpy ops then get a host
    copy of the decoded image), ``"cpu"`` decodes on the CPU, ``"auto"`` is ``"mixed"`` on a GPU
    and ``"cpu"`` otherwise. ``hw_decoder_load`` (mixed decoding only; ``None``: DALI's default)
    is the share of JPEGs given to the GPU's hardware JPEG decoder, the rest being decoded by
    nvJPEG's CUDA path with Huffman decoding on DALI's CPU threads.

    ``op_pool`` runs the numpy path's ops over a batch's samples in parallel (``None``: in
    DALI's thread, one sample after another).

    ``config.format`` resizes every image output to ``resize`` and gives it its layout, dtype and
    normalisation (see :mod:`extsrc.batchformat`); the main image
    made by ``stages`` is left as they make it. Without a GPU, uint8 images are resized by Pillow
    on the host (:mod:`extsrc.hostresize`): by the numpy-path op that made them, in its worker
    (the main image by the first such op that reads it), or else by a resize-only step through
    the same pool.

    Outputs, in order: every image output (``image``, then each op's outputs), the label, then
    ``info`` (manifest index, epoch, pad flag per sample; bookkeeping, never renamed).
    """
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

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
    # Batches the readers prepare ahead: DALI's default, 1, keeps one reader busy at a time.
    # One per reader took extsrc from 12-15k to 18-19k images/s on an H100
    # (benchmarks/README.md, "Reader depth"). DALI takes the argument only with readers.
    readers = {"parallel": True, "prefetch_queue_depth": num_workers} if num_workers > 0 else {}
    # Each use of an op in order, with its occurrence (the same op twice draws independent
    # numbers) and, for a traced random op on the native path, what the readers compute for it.
    uses: list[tuple[Op, int, Any]] = []
    seen: dict[str, int] = {}
    for op in (*transforms, *ops):
        occurrence = seen.get(op.name, 0)
        seen[op.name] = occurrence + 1
        program = (native_sample_scalars(op, seed=seed, occurrence=occurrence)
                   if op_paths[op.name] == "native" else None)
        uses.append((op, occurrence, program))
    programs = [p for _, _, p in uses if p is not None]
    with pipe:
        encoded, label, info, *values = fn.external_source(
            source=ReaderValues(source, programs) if programs else source,
            num_outputs=len(SOURCE_OUTPUTS) + sum(len(p.nodes) for p in programs),
            batch=True,
            batch_info=True,
            **readers,
        )
        decoder = w.decoder
        if decoder == "auto":
            decoder = "mixed" if gpu else "cpu"
        decode_kw = {}
        if decoder == "mixed" and w.hw_decoder_load is not None:
            decode_kw["hw_decoder_load"] = float(w.hw_decoder_load)
        image = fn.decoders.image(encoded, device=decoder, output_type=types.RGB, **decode_kw)
        drawn = iter(values)  # the readers' values, in the order of `programs`
        fmt = config.format
        host = (HostResize(resize, fmt.resize_mode)
                if not gpu and resize is not None and not stages else None)

        def fuses(op: Op) -> bool:
            """Whether the op's numpy runner resizes its outputs itself (see hostresize)."""
            return (host is not None and op_paths[op.name] == "numpy"
                    and host_resizable(op.dtype, op.ndim))

        def run(use: tuple[Op, int, Any], img: Any, resized: bool = False,
                with_input: bool = False) -> list[Any]:
            op, occurrence, program = use
            path = op_paths[op.name]
            if path == "native":
                mine = [next(drawn) for _ in program.nodes] if program is not None else []
                outs = native_outputs(op, img, info, manifest=manifest, sample_values=mine)
            elif path == "numpy" and img.device == "gpu" and op_pool is not None:
                # The op pool copies GPU images into its own memory and uploads the outputs.
                outs = fn.dl_tensor_python_function(
                    img, fn.copy(info).gpu(),
                    function=DeviceBatchOpRunner(op, seed=seed, manifest=manifest,
                                                 occurrence=occurrence, pool=op_pool,
                                                 device_id=device_id),
                    num_outputs=op.num_outputs, batch_processing=True, device="gpu",
                )
            elif path == "numpy":
                # A GPU-decoded image comes back to host memory for the user's numpy code.
                host_img = img.cpu() if img.device == "gpu" else img
                runs = (ResizedOutputs(op, host, with_input=with_input)
                        if resized and host is not None else op)
                outs = fn.python_function(
                    host_img, info, function=BatchOpRunner(runs, seed=seed, manifest=manifest,
                                           occurrence=occurrence, pool=op_pool),
                    num_outputs=runs.num_outputs, batch_processing=True,
                )
            else:  # gpu
                # Only random ops need the sample identities (for their generators).
                # A copy: a CPU node that also feeds a GPU transfer is placed in pinned memory,
                # which torch.from_dlpack rejects when `info` is handed to torch (seen on H100).
                extra = [fn.copy(info).gpu()] if op.random else []
                outs = fn.python_function(
                    img.gpu(), *extra,
                    function=GpuBatchOpRunner(op, seed=seed, manifest=manifest,
                                              occurrence=occurrence),
                    num_outputs=op.num_outputs, batch_processing=True, device="gpu",
                )
            return list(outs) if isinstance(outs, (tuple, list)) else [outs]

        # (image, whether it is resized already, whether the host may resize it)
        n_transforms = len(transforms)
        main: tuple[Any, bool, bool] = (image, False, True)
        for k, use in enumerate(uses[:n_transforms]):
            # Only the last transform's outputs are final, and only when no op reads them.
            fuse = fuses(use[0]) and k == n_transforms - 1 and len(uses) == n_transforms
            (image,) = run(use, image, resized=fuse)
            main = (image, fuse, host_resizable(use[0].dtype, use[0].ndim))
        images = [main]
        for use in uses[n_transforms:]:
            fuse = fuses(use[0])
            ok = host_resizable(use[0].dtype, use[0].ndim)
            # The first op whose worker resizes its outputs also resizes its input, the main
            # image, when that still needs it: one trip through the pool instead of two (a
            # copy of every decoded image fewer per batch).
            carry = fuse and not images[0][1] and images[0][2]
            outs = run(use, image, resized=fuse, with_input=carry)
            if carry:
                images[0] = (outs.pop(0), True, True)
            images += [(im, fuse, ok) for im in outs]
        finished = []
        for k, (im, done, ok) in enumerate(images):
            if host is not None and ok and not done:
                # A resize-only step on the host, through the pool (see hostresize).
                im = fn.python_function(
                    im, info, function=BatchOpRunner(ResizeOnly(host), seed=seed,
                                                     manifest=manifest, occurrence=k,
                                                     pool=op_pool),
                    num_outputs=1, batch_processing=True,
                )
                done = True
            finished.append((im, done))
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
        pipe.set_outputs(main, *extra_images, label, info)
    return pipe
