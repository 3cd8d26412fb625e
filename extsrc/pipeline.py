"""The DALI graph: ExternalSource of raw bytes -> decode -> registered ops -> resize -> outputs.

This module knows DALI but not PyTorch; :mod:`extsrc.loader` wraps the built pipeline for torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from augment_ops.registry import Op
from extsrc.oppaths import BatchOpRunner, GpuBatchOpRunner
from extsrc.source import SOURCE_OUTPUTS, ShardedSource

__all__ = ["BuiltPipeline", "build_pipeline", "default_output_names"]


@dataclass(frozen=True)
class BuiltPipeline:
    """A built DALI pipeline and the names of its outputs, in order."""

    pipe: Any
    output_names: tuple[str, ...]
    image_outputs: tuple[str, ...]


def default_output_names(ops: Sequence[Op]) -> tuple[str, ...]:
    """``image``, then ``<op>_<k>`` for each op output, then ``label``."""
    names = ["image"]
    for op in ops:
        names += [f"{op.name}_{k}" for k in range(op.num_outputs)]
    names.append("label")
    return tuple(names)


def build_pipeline(
    source: ShardedSource,
    *,
    ops: Sequence[Op],
    transforms: Sequence[Op],
    paths: Mapping[str, str],
    resize: tuple[int, int] | None,
    device_id: int | None,
    num_threads: int,
    num_workers: int,
    start_method: str,
    prefetch_queue_depth: int,
    seed: int,
    output_names: Sequence[str],
    stages: Sequence[Any] = (),
) -> BuiltPipeline:
    """Build the DALI pipeline that feeds the loader.

    ``paths`` maps each op and transform name to ``"numpy"``, ``"gpu"`` or ``"native"`` (see
    :mod:`extsrc.oppaths`). ``stages`` are callables ``stage(image, gpu=bool) -> image`` of DALI
    operators applied to the main image in place of ``resize`` (the presets use them).

    Outputs, in order: every image output (``image``, then each op's outputs), the label, then the
    manifest index and the pad flag (metadata for bookkeeping, never renamed).
    """
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    gpu = device_id is not None
    manifest = source.manifest
    pipe = Pipeline(
        batch_size=source.batch_size,
        num_threads=num_threads,
        device_id=device_id,
        seed=seed,
        prefetch_queue_depth=prefetch_queue_depth,
        py_num_workers=max(1, num_workers),
        py_start_method=start_method,
    )
    with pipe:
        encoded, label, index, epoch, is_pad = fn.external_source(
            source=source,
            num_outputs=len(SOURCE_OUTPUTS),
            batch=True,
            batch_info=True,
            parallel=num_workers > 0,
        )
        # The numpy path needs the image in host memory: decode on the CPU when any op takes it
        # (the card's recipe); otherwise decode on the GPU (nvJPEG) when there is one.
        host_image = not gpu or any(paths[op.name] == "numpy" for op in (*transforms, *ops))
        image = fn.decoders.image(
            encoded, device="cpu" if host_image else "mixed", output_type=types.RGB
        )
        keys = None

        def run(op: Op, img: Any) -> list[Any]:
            nonlocal keys
            path = paths[op.name]
            if path == "native":
                outs = op.impls["native"](img, **dict(op.params))
            elif path == "numpy":
                outs = fn.python_function(
                    img, index, epoch, function=BatchOpRunner(op, seed=seed, manifest=manifest),
                    num_outputs=op.num_outputs, batch_processing=True,
                )
            else:  # gpu
                extra = []
                if op.random:
                    if keys is None:
                        keys = fn.stack(index, epoch).gpu()
                    extra = [keys]
                outs = fn.python_function(
                    img.gpu(), *extra,
                    function=GpuBatchOpRunner(op, seed=seed, manifest=manifest),
                    num_outputs=op.num_outputs, batch_processing=True, device="gpu",
                )
            return list(outs) if isinstance(outs, (tuple, list)) else [outs]

        for op in transforms:
            (image,) = run(op, image)
        images = [image]
        for op in ops:
            images += run(op, image)
        if gpu:
            images = [im.gpu() for im in images]
            label = label.gpu()
        main, extra_images = images[0], images[1:]
        if resize is not None:
            h, w = resize
            extra_images = [fn.resize(im, resize_x=w, resize_y=h) for im in extra_images]
            if not stages:
                main = fn.resize(main, resize_x=w, resize_y=h)
        for stage in stages:
            main = stage(main, gpu=gpu)
        pipe.set_outputs(main, *extra_images, label, index, is_pad)
    names = tuple(output_names)
    return BuiltPipeline(pipe=pipe, output_names=names, image_outputs=names[:-1])
