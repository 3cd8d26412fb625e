"""The DALI graph: ExternalSource of raw bytes -> decode -> registered ops -> resize -> outputs.

This module knows DALI but not PyTorch; :mod:`extsrc.loader` wraps the built pipeline for torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from augment_ops.registry import Op, OpContractError
from extsrc.errors import OpError
from extsrc.manifest import Manifest
from extsrc.seeding import name_salt, sample_rng
from extsrc.source import SOURCE_OUTPUTS, ShardedSource

__all__ = ["BuiltPipeline", "OpRunner", "build_pipeline"]


class OpRunner:
    """Runs one registered op on one sample inside DALI's ``python_function``.

    It receives the decoded image together with the sample's manifest index and epoch, so a random
    op gets the generator of exactly that sample, and a failure names the manifest line.
    """

    def __init__(self, op: Op, *, seed: int, manifest: Manifest) -> None:
        self.op = op
        self.seed = seed
        self.salt = name_salt(op.name)
        self.manifest = manifest

    def where(self, index: int) -> str:
        m = self.manifest
        return f"{m.source} line {m.lines[index]} ({m.paths[index]})"

    def __call__(self, img: np.ndarray, index: np.ndarray, epoch: np.ndarray) -> Any:
        i = int(index)
        rng = sample_rng(self.seed, int(epoch), i, self.salt) if self.op.random else None
        try:
            outs = self.op.apply(np.asarray(img), rng)
        except OpContractError as e:
            raise OpContractError(f"{e} [sample {self.where(i)}]") from None
        except Exception as e:
            raise OpError(
                f"op '{self.op.name}' raised {type(e).__name__}: {e} [sample {self.where(i)}]"
            ) from e
        return outs[0] if self.op.num_outputs == 1 else outs


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
    resize: tuple[int, int] | None,
    device_id: int | None,
    num_threads: int,
    num_workers: int,
    start_method: str,
    prefetch_queue_depth: int,
    seed: int,
    output_names: Sequence[str],
) -> BuiltPipeline:
    """Build the DALI pipeline that feeds the loader.

    Outputs, in order: every image output (``image``, then each op's outputs), the label, then the
    manifest index and the pad flag (metadata for bookkeeping, never renamed).
    """
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    gpu = device_id is not None
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
        # numpy ops need the decoded image in host memory; decode on the GPU only when none runs.
        needs_host = bool(ops or transforms)
        image = fn.decoders.image(
            encoded, device="mixed" if gpu and not needs_host else "cpu", output_type=types.RGB
        )
        for op in transforms:
            image = fn.python_function(
                image, index, epoch, function=OpRunner(op, seed=seed, manifest=source.manifest),
                num_outputs=1,
            )
        images = [image]
        for op in ops:
            outs = fn.python_function(
                image, index, epoch, function=OpRunner(op, seed=seed, manifest=source.manifest),
                num_outputs=op.num_outputs,
            )
            images += list(outs) if op.num_outputs > 1 else [outs]
        if gpu:
            images = [im.gpu() for im in images]
            label = label.gpu()
        if resize is not None:
            h, w = resize
            images = [fn.resize(im, resize_x=w, resize_y=h) for im in images]
        pipe.set_outputs(*images, label, index, is_pad)
    names = tuple(output_names)
    return BuiltPipeline(pipe=pipe, output_names=names, image_outputs=names[:-1])
