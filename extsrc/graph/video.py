"""The DALI graph of a video loader: ExternalSource of raw bytes -> ``fn.decoders.video`` -> ops on
every frame of a clip -> resize -> outputs.

Registered ops run on the numpy path, frame by frame, with the same random draws for every frame
of a clip (:class:`ClipOpRunner`): a random crop takes the same window from each frame, so the
clip does not jitter. Ops declared on whole clips (``ndim=4``) get the clip at once. This module
knows DALI but not PyTorch.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from augment_ops.registry import Op
from extsrc.errors import RAISED, OpTimeoutError
from extsrc.graph.image import dali_seed
from extsrc.loading.config import LoaderConfig, RunPlan
from extsrc.ops_runtime.runners import BatchOpRunner
from extsrc.sources.video.source import VIDEO_SOURCE_OUTPUTS, VideoSource
from extsrc.sources.where import sample_where

__all__ = ["VIDEO_LAYOUTS", "ClipOpRunner", "build_video_pipeline"]

#: Batch layouts of the video outputs and the per-clip layout DALI makes for each.
VIDEO_LAYOUTS: dict[str, str] = {"NFHWC": "FHWC", "NFCHW": "FCHW", "NCFHW": "CFHW"}


#: Threads that ran a clip op past its time limit, left running, with the error that said so.
_ABANDONED: list[tuple[threading.Thread, OpTimeoutError]] = []


class ClipOpRunner(BatchOpRunner):
    """The numpy path of one op over a batch of clips ``(F, H, W, C)``: the op runs on every
    frame, and a random op gets, for every frame of a clip, a generator in the same state, made
    from (seed, epoch, manifest index, op, clip number). Each output is the frames' outputs
    stacked, ``(F, h, w, c)``. An op on whole clips (``ndim=4``) runs once per clip, with that
    generator.

    With a ``timeout`` (seconds per clip) the batch runs in a daemon thread given that many
    seconds per clip; past it, :class:`~extsrc.errors.OpTimeoutError` names the op and the clip
    it was on. A thread cannot be stopped: it is left running (it does not keep the process
    from exiting), and every clip op of this process refuses to run while it does."""

    #: The clip number of the clip being run (its generator's last key).
    _clip = 0
    #: The manifest index of the clip being run.
    _index = -1

    def __init__(self, op: Op, *, seed: int, manifest: Any, occurrence: int = 0,
                 timeout: float | None = None) -> None:
        super().__init__(op, seed=seed, manifest=manifest, occurrence=occurrence)
        self.timeout = timeout

    def rng(self, index: int, epoch: int) -> np.random.Generator | None:
        if not self.op.random:
            return None
        mask = 0xFFFFFFFFFFFFFFFF
        ss = np.random.SeedSequence([int(self.seed) & mask, int(epoch), int(index),
                                     int(self.salt), int(self._clip)])
        return np.random.Generator(np.random.PCG64(ss))

    def run_clip(self, clip: np.ndarray, index: int, epoch: int, number: int) -> tuple[Any, ...]:
        self._clip, self._index = number, index
        if self.op.on_clips:  # declared ndim=4: the whole clip at once
            return self.run_one(clip, index, epoch)
        # run_one makes a fresh generator for every frame: the same draws for each.
        frames = [self.run_one(frame, index, epoch) for frame in clip]
        return tuple(np.stack([f[k] for f in frames]) for k in range(self.op.num_outputs))

    def __call__(self, clips: list[np.ndarray], infos: list[np.ndarray],  # type: ignore[override]
                 clip_rows: list[np.ndarray]) -> Any:
        if self.timeout is None:
            return self._run_batch(clips, infos, clip_rows)
        _ABANDONED[:] = [(t, e) for t, e in _ABANDONED if t.is_alive()]
        if _ABANDONED:
            first = _ABANDONED[0][1]
            line, path = first.samples[0]
            err = OpTimeoutError(
                f"op '{first.op}' ran past op_timeout={first.timeout:g} s per clip on "
                f"{sample_where(first.source or '', line)} ({path}) and its thread still runs: "
                "threads cannot be stopped, so no clip op runs in this process while it does. "
                "Restart the process",
                op=first.op, timeout=first.timeout, samples=first.samples, source=first.source,
                line=first.line, path=first.path,
            )
            RAISED.append(err)
            raise err
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["out"] = self._run_batch(clips, infos, clip_rows)
            except BaseException as e:
                done["error"] = e

        thread = threading.Thread(target=run, name=f"extsrc-clip-op-{self.op.name}", daemon=True)
        thread.start()
        thread.join(self.timeout * max(1, len(clips)))
        if thread.is_alive():
            index, m = self._index, self.manifest
            err = OpTimeoutError(
                f"op '{self.op.name}' did not finish within op_timeout={self.timeout:g} s per "
                f"clip ({len(clips)} clips in the batch): it was running on clip "
                f"{self._clip} of {self.where(index)}. The op did not return: an endless loop "
                "or a deadlock (in a C extension, a lock), or it is slower than the limit. Its "
                "thread cannot be stopped: it is left running as a daemon thread (it does not "
                "keep the process from exiting), and no clip op runs in this process while it "
                "does; restart the process. Fix the op, or raise the limit with op_timeout=... "
                "(None: no limit)",
                op=self.op.name, timeout=self.timeout, samples=[(m.lines[index], m.paths[index])],
                source=m.source, line=m.lines[index], path=m.paths[index],
            )
            _ABANDONED.append((thread, err))
            RAISED.append(err)
            raise err
        if "error" in done:
            raise done["error"]
        return done["out"]

    def _run_batch(self, clips: list[np.ndarray], infos: list[np.ndarray],
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
    config: LoaderConfig,
    *,
    layout: str,
    op_timeout: float | None = None,
) -> Any:
    """Define the DALI pipeline of a video loader (the caller builds it).

    Outputs, in order: the clip (``video``), each op's outputs, the label, then ``__info``
    (manifest index, epoch, pad flag) and ``__clip`` (first frame, clip number, frame count).
    ``config`` gives the ops, transforms, ``resize``, seed, device, batch format and DALI's side
    (``config.workers``); ``layout`` is one of :data:`VIDEO_LAYOUTS`; ``op_timeout`` limits
    each clip op's seconds per clip (:class:`ClipOpRunner`). On a GPU the clips are decoded
    there (``device="mixed"``, NVDEC), the ops get a host copy.
    """
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    ops, transforms, resize = config.ops, config.transforms, config.resize
    device_id, seed = config.device_id, config.seed
    # Clip ops run on the numpy path, in DALI's thread (no op pool for video).
    plan = RunPlan(config, tuple((op.name, "numpy") for op in (*transforms, *ops)))
    num_workers = plan.workers
    gpu = device_id is not None
    pipe = Pipeline(
        batch_size=source.batch_size, num_threads=plan.threads, device_id=device_id,
        seed=dali_seed(seed, source.shard_id, source.start_epoch, source.start_batch),
        prefetch_queue_depth=config.workers.prefetch_queue_depth,
        py_num_workers=max(1, num_workers), py_start_method=plan.method,
    )
    readers = {"parallel": True, "prefetch_queue_depth": num_workers} if num_workers > 0 else {}
    manifest = source.manifest
    with pipe:
        encoded, label, info, frames, clip = fn.external_source(
            source=source, num_outputs=len(VIDEO_SOURCE_OUTPUTS), batch=True, batch_info=True,
            **readers,
        )
        # `frames` numbers each clip's frames in the bytes it was handed (the file, or the
        # clip's window of it, extsrc.sources.video.trim); frames past a short video's end
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
            runner = ClipOpRunner(op, seed=seed, manifest=manifest, occurrence=occurrence,
                                  timeout=op_timeout)
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
        clips_out = [config.format.finish(c, resize, output_layout=out_layout) for c in clips_out]
        pipe.set_outputs(*clips_out, label, info, clip)
    return pipe

