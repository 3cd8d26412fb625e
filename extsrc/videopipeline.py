"""The DALI graph of a video loader: ExternalSource of raw bytes -> ``fn.decoders.video`` -> ops on
every frame of a clip -> resize -> outputs.

Registered ops run on the numpy path, frame by frame, with the same random draws for every frame
of a clip (:class:`ClipOpRunner`): a random crop takes the same window from each frame, so the
clip does not jitter. Ops declared on whole clips (``ndim=4``) get the clip at once. This module
knows DALI but not PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from augment_ops.registry import Op
from extsrc.batchformat import BatchFormat
from extsrc.oppaths import BatchOpRunner
from extsrc.pipeline import dali_seed
from extsrc.videosource import VIDEO_SOURCE_OUTPUTS, VideoSource

__all__ = ["VIDEO_LAYOUTS", "ClipOpRunner", "build_video_pipeline"]

#: Batch layouts of the video outputs and the per-clip layout DALI makes for each.
VIDEO_LAYOUTS: dict[str, str] = {"NFHWC": "FHWC", "NFCHW": "FCHW", "NCFHW": "CFHW"}


class ClipOpRunner(BatchOpRunner):
    """The numpy path of one op over a batch of clips ``(F, H, W, C)``: the op runs on every
    frame, and a random op gets, for every frame of a clip, a generator in the same state, made
    from (seed, epoch, manifest index, op, clip number). Each output is the frames' outputs
    stacked, ``(F, h, w, c)``. An op on whole clips (``ndim=4``) runs once per clip, with that
    generator."""

    #: The clip number of the clip being run (its generator's last key).
    _clip = 0

    def rng(self, index: int, epoch: int) -> np.random.Generator | None:
        if not self.op.random:
            return None
        mask = 0xFFFFFFFFFFFFFFFF
        ss = np.random.SeedSequence([int(self.seed) & mask, int(epoch), int(index),
                                     int(self.salt), int(self._clip)])
        return np.random.Generator(np.random.PCG64(ss))

    def run_clip(self, clip: np.ndarray, index: int, epoch: int, number: int) -> tuple[Any, ...]:
        self._clip = number
        if self.op.on_clips:  # declared ndim=4: the whole clip at once
            return self.run_one(clip, index, epoch)
        # run_one makes a fresh generator for every frame: the same draws for each.
        frames = [self.run_one(frame, index, epoch) for frame in clip]
        return tuple(np.stack([f[k] for f in frames]) for k in range(self.op.num_outputs))

    def __call__(self, clips: list[np.ndarray], infos: list[np.ndarray],  # type: ignore[override]
                 clip_rows: list[np.ndarray]) -> Any:
        results = [
            self.run_clip(c, int(info[0]), int(info[1]), int(row[1]))
            for c, info, row in zip(clips, infos, clip_rows, strict=True)
        ]
        if self.op.num_outputs == 1:
            return [r[0] for r in results]
        return tuple([r[k] for r in results] for k in range(self.op.num_outputs))


def build_video_pipeline(
    source: VideoSource,
    *,
    ops: Sequence[Op],
    transforms: Sequence[Op],
    resize: tuple[int, int] | None,
    batch_format: BatchFormat,
    layout: str,
    device_id: int | None,
    num_threads: int,
    num_workers: int,
    start_method: str,
    prefetch_queue_depth: int,
    seed: int,
) -> Any:
    """Define the DALI pipeline of a video loader (the caller builds it).

    Outputs, in order: the clip (``video``), each op's outputs, the label, then ``__info``
    (manifest index, epoch, pad flag) and ``__clip`` (first frame, clip number, frame count).
    On a GPU the clips are decoded there (``device="mixed"``, NVDEC), the ops get a host copy.
    """
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    gpu = device_id is not None
    pipe = Pipeline(
        batch_size=source.batch_size, num_threads=num_threads, device_id=device_id,
        seed=dali_seed(seed, source.shard_id, source.start_epoch, source.start_batch),
        prefetch_queue_depth=prefetch_queue_depth, py_num_workers=max(1, num_workers),
        py_start_method=start_method,
    )
    readers = {"parallel": True, "prefetch_queue_depth": num_workers} if num_workers > 0 else {}
    manifest = source.manifest
    with pipe:
        encoded, label, info, frames, clip = fn.external_source(
            source=source, num_outputs=len(VIDEO_SOURCE_OUTPUTS), batch=True, batch_info=True,
            **readers,
        )
        # `frames` numbers each clip's frames in the bytes it was handed (the file, or the
        # clip's window of it, extsrc.videotrim); frames past a short video's end
        # (short_videos="pad") are its last frame, repeated, in that list already. So no frame
        # asked for lies past the end as the container counts it, and pad_mode="none" makes a
        # file whose decoder finds fewer frames fail (VideoLoader names it) instead of
        # repeating its last frame.
        video = fn.decoders.video(encoded, device="mixed" if gpu else "cpu", frames=frames,
                                  pad_mode="none")
        seen: dict[str, int] = {}

        def run(op: Op, clip_node: Any) -> list[Any]:
            occurrence = seen.get(op.name, 0)  # the same op twice draws independent numbers
            seen[op.name] = occurrence + 1
            host = clip_node.cpu() if clip_node.device == "gpu" else clip_node
            runner = ClipOpRunner(op, seed=seed, manifest=manifest, occurrence=occurrence)
            outs = fn.python_function(host, info, clip, function=runner,
                                      num_outputs=op.num_outputs, batch_processing=True)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            return [fn.reshape(o, layout="FHWC") for o in outs]

        for op in transforms:
            (video,) = run(op, video)
        clips_out = [video]
        for op in ops:
            clips_out += run(op, video)
        if gpu:
            clips_out = [c.gpu() for c in clips_out]
            label = label.gpu()
        out_layout = VIDEO_LAYOUTS[layout]
        clips_out = [batch_format.finish(c, resize, output_layout=out_layout) for c in clips_out]
        pipe.set_outputs(*clips_out, label, info, clip)
    return pipe

