"""``VideoSource``: the raw-byte source of a video loader, one clip per sample.

It is a :class:`~extsrc.sources.images.ShardedSource` whose samples are clips: with
``clips_per_video``
``K`` the sharded sample list is every selected video repeated ``K`` times, so sharding, shuffling,
the last-batch policy and resume treat each clip as one sample and every clip arrives exactly once
per epoch. For each clip it reads the file's bytes, reads the container's headers
(:func:`extsrc.sources.video.probe.probe_video`: codec, frame count, truncation), refuses a file
DALI could not decode on the loader's device, and picks the clip's first frame
(:func:`extsrc.sources.video.clips.clip_start`), all in DALI's worker processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from extsrc._util.orphan import exit_with_parent
from extsrc._util.textsafe import shown
from extsrc.errors import BadVideoError, SampleReadError
from extsrc.sources.fileread import FileReadProblem, read_regular, sample_read_error, video_fix
from extsrc.sources.images import ShardedSource
from extsrc.sources.sharding import ShardPlan, shard_plan
from extsrc.sources.video.clips import ClipSpec, ShortVideoError, clip_start
from extsrc.sources.video.probe import (
    CODEC_NAMES,
    CPU_CODECS,
    VideoInfo,
    VideoProbeProblem,
    probe_video,
)
from extsrc.sources.video.trim import clip_window
from extsrc.sources.where import reworded_fix

__all__ = ["CLIP_COLUMNS", "VIDEO_SOURCE_OUTPUTS", "VideoSource", "check_video"]

#: What one call returns, in order: encoded bytes (one array per clip: the file, or the clip's
#: window of it), labels, info (as :data:`extsrc.sources.images.INFO_COLUMNS`), each clip's frames
#: numbered as in its encoded bytes (``int32``, ``(B, sequence_length)``, DALI's ``frames``
#: argument) and ``clip`` (``int64``, ``(B, 3)``, :data:`CLIP_COLUMNS`).
VIDEO_SOURCE_OUTPUTS: tuple[str, ...] = ("encoded", "label", "info", "frames", "clip")
#: Columns of the ``clip`` output: first frame, clip number within its video, the video's frames.
CLIP_COLUMNS: tuple[str, ...] = ("start_frame", "clip", "num_frames")

# Appended to every bad-video message: how to find them all at once.
VIDEO_HINT = (
    " To find every bad video up front run extsrc.validate_videos(manifest) and train on "
    "report.clean_manifest(), or pass bad_files=extsrc.BadFiles(on_error='skip') to VideoLoader"
)


def check_video(data: bytes | memoryview, codecs: frozenset[str], device: str) -> VideoInfo:
    """The :class:`VideoInfo` of a file's bytes, or :class:`VideoProbeProblem` when it is not a
    video, is cut short, or is in a codec outside ``codecs`` (those DALI decodes on ``device``,
    ``"cpu"`` or ``"gpu"``)."""
    info = probe_video(data)
    if info.codec not in codecs:
        known = ", ".join(CODEC_NAMES[c] for c in sorted(codecs))
        where = ("on the CPU; the GPU (NVDEC) also decodes H.264, HEVC, AV1 and MPEG-4"
                 if device == "cpu" else "on the GPU")
        raise VideoProbeProblem(
            "unsupported_codec",
            f"its codec is {info.codec_name} ({info.container} container), which DALI does not "
            f"decode {where}; DALI decodes {known} there", codec=info.codec,
        )
    return info


def find_undecodable(source: VideoSource, epoch: int, b: int, limit: int = 64
                     ) -> tuple[int, str] | None:
    """The first clip of batch ``b`` that DALI's CPU video decoder refuses, decoded alone:
    ``(manifest index, DALI's words)``; ``None`` when each decodes alone (or its codec has no
    CPU decoder to try). For the error path only: it builds one small pipeline per clip."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    from extsrc._dali.messages import dali_text

    indices, _ = source.plan(epoch).batch(b)
    encoded, _, _, frames, _ = source.clip_batch(epoch, b)  # what DALI was handed
    clips = zip(indices.tolist(), encoded, frames, strict=True)
    for i, data, wanted in list(clips)[:limit]:
        if probe_video(memoryview(data)).codec not in CPU_CODECS:
            continue
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
        with pipe:
            enc = fn.external_source(name="encoded")
            pipe.set_outputs(fn.decoders.video(enc, frames=[int(f) for f in wanted],
                                               pad_mode="none"))
        try:
            pipe.build()
            pipe.feed_input("encoded", [data])
            pipe.run()
        except Exception as e:
            return i, dali_text(str(e))
        finally:
            del pipe
    return None


def find_too_small(source: VideoSource, epoch: int, b: int, min_size: tuple[int, int]
                   ) -> tuple[int, tuple[int, int]] | None:
    """The first video of batch ``b`` whose frames (as its container says) are narrower or lower
    than ``min_size`` ``(width, height)``, the smallest the GPU's decoder takes for its codec:
    ``(manifest index, (width, height))``; ``None`` when none is (or no container says)."""
    indices, _ = source.plan(epoch).batch(b)
    for i in dict.fromkeys(indices.tolist()):
        info = probe_video(memoryview(source.read(i)))
        if 0 < info.width < min_size[0] or 0 < info.height < min_size[1]:
            return i, (info.width, info.height)
    return None


class VideoSource(ShardedSource):
    """Clip batches of one shard, for ``fn.external_source(batch=True, batch_info=True)``.

    Arguments as :class:`~extsrc.sources.images.ShardedSource`, plus ``clips`` (the
    :class:`~extsrc.sources.video.clips.ClipSpec`), ``codecs`` (what DALI decodes on the loader's
    device),
    ``device`` (``"cpu"`` or ``"gpu"``, for messages) and ``windows`` (hand DALI each clip's
    window of its file, :func:`~extsrc.sources.video.trim.clip_window`, instead of the whole file).
    ``indices`` are the videos read (manifest indices; ``None``: all); ``len(source)`` counts
    batches of clips.
    """

    def __init__(
        self,
        manifest: Any,
        *,
        clips: ClipSpec,
        codecs: frozenset[str],
        device: str = "cpu",
        indices: Sequence[int] | np.ndarray | None = None,
        windows: bool = True,
        **kwargs: Any,
    ) -> None:
        videos = np.arange(len(manifest), dtype=np.int64) if indices is None else np.asarray(
            indices, dtype=np.int64)
        # Clip k of a video sits at position j of this list with j % K == k (np.repeat keeps a
        # video's K copies together), so the clip number needs no table.
        super().__init__(manifest, indices=np.repeat(videos, clips.clips_per_video),
                         check_images=False, **kwargs)
        self.clips = clips
        self.codecs = codecs
        self.device = device
        self.windows = windows
        self._clip_numbers: tuple[int, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_clip_numbers"] = None
        return state

    def plan(self, epoch: int) -> ShardPlan:
        """This shard's plan for ``epoch`` in manifest indices (one entry per clip)."""
        if self._cached is None or self._cached[0] != epoch:
            sel = np.asarray(self.indices)  # set by __init__: one entry per clip
            p = shard_plan(
                len(sel), batch_size=self.batch_size, shard_id=self.shard_id,
                num_shards=self.num_shards, epoch=epoch, shuffle=self.shuffle, seed=self.seed,
                last_batch=self.last_batch, run_length=self.run_length,
            )
            self._clip_numbers = (epoch, p.indices % self.clips.clips_per_video)
            self._cached = (epoch, ShardPlan(sel[p.indices], p.is_pad, p.batch_offsets))
        return self._cached[1]

    def clip_numbers(self, epoch: int, b: int) -> np.ndarray:
        """The clip number (0-based, within its video) of each sample of batch ``b``."""
        plan = self.plan(epoch)  # sets the clip numbers of the same epoch
        numbers = self._clip_numbers[1]  # type: ignore[index]
        lo, hi = int(plan.batch_offsets[b]), int(plan.batch_offsets[b + 1])
        return numbers[lo:hi]

    def bad_video(self, index: int, problem: VideoProbeProblem, codec: str | None = None
                  ) -> BadVideoError:
        m = self.manifest
        path = m.paths[index]
        fix = reworded_fix(problem.fix, m.source)
        return BadVideoError(
            f"{m.where(index)}: {shown(path)}: {problem.message} [{problem.reason}]; "
            f"{fix}.{VIDEO_HINT}",
            source=m.source, line=m.lines[index], path=path, reason=problem.reason, codec=codec,
        )

    def read(self, index: int) -> np.ndarray:
        """The raw bytes of manifest sample ``index``, or an error naming its line and path,
        worded for a video."""
        m = self.manifest
        path, fields = m.paths[index], {"source": m.source, "line": m.lines[index]}
        try:
            data = read_regular(path, max_bytes=self.max_file_bytes, root_real=self._root_real)
        except FileReadProblem as e:
            raise sample_read_error(e, m.where(index), path, VIDEO_HINT,
                                    fix=video_fix(e.reason, e.fix), **fields) from None
        if not data:
            fix = reworded_fix(video_fix("empty", ""), m.source)
            raise SampleReadError(
                f"{m.where(index)}: {shown(path)} is empty (0 bytes); {fix}.{VIDEO_HINT}",
                path=path, reason="empty", **fields)
        return np.frombuffer(data, dtype=np.uint8)

    def probe(self, index: int, data: np.ndarray) -> VideoInfo:
        """The checked :class:`VideoInfo` of manifest sample ``index`` (its bytes ``data``)."""
        try:
            return check_video(memoryview(data), self.codecs, self.device)
        except VideoProbeProblem as e:
            raise self.bad_video(index, e, e.codec) from None

    def start(self, index: int, info: VideoInfo, epoch: int, clip: int) -> int:
        try:
            return clip_start(self.clips, info.num_frames, seed=self.seed, epoch=epoch,
                              index=index, clip=clip)
        except ShortVideoError as e:
            c = self.clips
            problem = VideoProbeProblem(
                "too_short",
                f"the video has {e.num_frames} frames, fewer than one clip spans: "
                f"sequence_length={c.sequence_length} every stride={c.stride} frames spans "
                f"{e.span}",
            )
            raise self.bad_video(index, problem) from None

    def __call__(self, info: Any) -> tuple[Any, ...]:
        exit_with_parent(self._owner_pid)  # in a DALI worker: exit when the main process dies
        epoch, b = self.position(int(info.iteration), int(info.epoch_idx))
        if b >= self._num_batches:
            raise StopIteration
        return self.clip_batch(epoch, b)

    def clip_batch(self, epoch: int, b: int) -> tuple[Any, ...]:
        """Batch ``b`` of ``epoch``: the five outputs of :data:`VIDEO_SOURCE_OUTPUTS`, or the
        first bad video's :class:`~extsrc.errors.BadVideoError`."""
        indices, is_pad = self.plan(epoch).batch(b)
        clip_numbers = self.clip_numbers(epoch, b)
        encoded = []
        clip = np.empty((len(indices), len(CLIP_COLUMNS)), dtype=np.int64)
        frames = np.empty((len(indices), self.clips.sequence_length), dtype=np.int32)
        for j, (i, k) in enumerate(zip(indices, clip_numbers, strict=True)):
            data = self.read(int(i))
            video = self.probe(int(i), data)
            start = self.start(int(i), video, epoch, int(k))
            clip[j] = (start, k, video.num_frames)
            # Past the end (short_videos="pad"): the last frame, repeated.
            wanted = np.minimum(self.clips.frames(start), video.num_frames - 1)
            if self.windows:
                window = clip_window(data, video, wanted)
                data, wanted = window.data, window.frames
            frames[j] = wanted
            encoded.append(data)
        labels, meta = self.labels_and_info(indices, epoch, is_pad)
        return encoded, labels, meta, frames, clip

