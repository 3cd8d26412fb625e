"""``VideoLoader``: batches of video clips from a labelled manifest, through DALI's video decoder.

A :class:`~extsrc.loading.loader.Loader` whose samples are clips: the same manifest (CSV, text, or a
folder of class folders holding videos), sharding, ``last_batch``, seed, resume, ``on_error``,
``output_map``, ``device`` and DDP behaviour, the same epochs and errors; only the source
(:class:`~extsrc.sources.video.source.VideoSource`), the graph (:mod:`extsrc.graph.video`) and the
batch's keys differ.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from augment_ops.registry import Op
from extsrc._dali.messages import read_failure
from extsrc._util.textsafe import shown
from extsrc.errors import ExtsrcError, PipelineError
from extsrc.graph.batchformat import BatchFormat
from extsrc.graph.video import VIDEO_LAYOUTS, build_video_pipeline
from extsrc.loading.failures import InFlight, explain
from extsrc.loading.loader import Loader
from extsrc.loading.options import (
    DEFAULT_HW_DECODER_LOAD,
    BadFiles,
    OpRuntime,
    Sampling,
    Workers,
)
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS
from extsrc.sources.manifest import Manifest
from extsrc.sources.table import read_manifest
from extsrc.sources.video.clips import ClipPolicy, ClipSpec, ShortVideos
from extsrc.sources.video.probe import CPU_CODECS, GPU_CODECS, VIDEO_EXTENSIONS, VideoProbeProblem
from extsrc.sources.video.source import VIDEO_HINT, VideoSource, find_too_small, find_undecodable

#: DALI's words when NVDEC refuses a frame size, e.g. "Video is too small in at least one
#: dimension. Provided: 64x48 vs supported:128x128" (DALI 2.4, frames_decoder_gpu.cc).
_TOO_SMALL = re.compile(r"too small in at least one dimension\. Provided: \d+x\d+ vs "
                        r"supported: ?(?P<w>\d+)x(?P<h>\d+)")

#: DALI's words when a clip asks for a frame past the decoder's own count (pad_mode="none").
_OUT_OF_BOUNDS = "out-of-bounds frame index"

__all__ = ["VIDEO_METADATA_KEYS", "VideoLayout", "VideoLoader"]

VideoLayout = Literal["NFHWC", "NFCHW", "NCFHW"]
#: Keys every video batch carries besides the named outputs.
VIDEO_METADATA_KEYS: tuple[str, ...] = ("index", "is_pad", "start_frame", "num_frames")


def _read(manifest: Manifest | str | os.PathLike[str]) -> Manifest:
    """A manifest path or a folder of class folders holding videos, read. Videos are read from
    local files only (DALI's video readers open files by name): a URL is refused."""
    from extsrc.sources.where import refuse_url

    if isinstance(manifest, (str, os.PathLike)):
        refuse_url(manifest, "VideoLoader: the manifest")
        if os.path.isdir(manifest):
            return Manifest.from_folder(manifest, extensions=VIDEO_EXTENSIONS)
        manifest = read_manifest(manifest)
    if isinstance(manifest, Manifest) and manifest.storage is not None:
        from extsrc.sources.storage import is_url

        i = next((i for i, p in enumerate(manifest.paths) if is_url(p)), None)
        if i is not None:
            refuse_url(manifest.paths[i], f"VideoLoader: {manifest.where(i)}: the video")
    return manifest  # type: ignore[return-value]


#: Fields of the option groups that a video loader does not use, with their defaults and why.
_NOT_FOR_VIDEO: tuple[tuple[str, str, Any, str], ...] = (
    ("op_runtime", "op_path", None, "clip ops run on the numpy path"),
    ("op_runtime", "op_workers", None, "clip ops run in DALI's thread, without an op pool"),
    ("op_runtime", "op_pool", "process", "clip ops run in DALI's thread, without an op pool"),
    ("workers", "decoder", "auto", "videos go to DALI's video decoder"),
    ("workers", "hw_decoder_load", DEFAULT_HW_DECODER_LOAD, "it shares out JPEGs, not videos"),
    ("bad_files", "max_pixels", DEFAULT_MAX_PIXELS, "a video's frame size is checked by "
     "its codec's decoder"),
    ("format", "layout", "NHWC", "a video loader takes layout= ('NFHWC', 'NFCHW' or 'NCFHW')"),
)


def _check_video_groups(groups: Mapping[str, Any]) -> None:
    """Refuse, naming it, a group field set that a video loader would otherwise ignore."""
    for group, name, default, why in _NOT_FOR_VIDEO:
        value = getattr(groups[group], name)
        if value != default:
            raise ValueError(
                f"VideoLoader: {group}.{name}={value!r} does not apply to video ({why}); leave "
                "it at its default"
            )


def _clip_spec(clips: ClipSpec | None, **flat: Any) -> ClipSpec:
    """The clips to cut: ``clips=ClipSpec(...)``, or the same fields as keywords (not both)."""
    if clips is None:
        if flat["sequence_length"] is None:
            raise TypeError("VideoLoader needs sequence_length=N (frames per clip) or "
                            "clips=ClipSpec(sequence_length=N, ...)")
        return ClipSpec(**flat)
    if not isinstance(clips, ClipSpec):
        raise TypeError(f"VideoLoader: clips must be an extsrc.ClipSpec, got "
                        f"{type(clips).__name__} {clips!r}")
    defaults = {"sequence_length": None, "stride": 1, "clip": "random", "clips_per_video": 1,
                "short_videos": "error"}
    given = sorted(k for k, v in flat.items() if v != defaults[k])
    if given:
        raise TypeError(f"VideoLoader: {', '.join(given)} given both on its own and in "
                        "clips=ClipSpec(...); pass it in clips only")
    return clips


class VideoLoader(Loader):
    """Iterate epochs of batches of video clips as ``dict[name, torch.Tensor]``.

    Each manifest line names a video file (AVI, Matroska/WebM or MP4/MOV) and its label; a
    folder works too (each sub-folder a class, :meth:`Manifest.from_folder` with
    :data:`~extsrc.sources.video.probe.VIDEO_EXTENSIONS`). The DALI graph: raw bytes read in worker
    processes -> ``fn.decoders.video`` (the CPU decodes VP8, VP9 and Motion JPEG; on a GPU NVDEC
    also decodes H.264, HEVC, AV1 and MPEG-4) -> ``transforms`` and ``ops`` on every frame of
    the clip -> ``resize`` of every frame -> outputs.

    Clips (:mod:`extsrc.sources.video.clips`, the keywords below or ``clips=ClipSpec(...)``):
    ``sequence_length`` frames every ``stride`` frames;
    ``clip="random"`` (default) starts each at a frame drawn from (seed, epoch, manifest index,
    clip number), ``"uniform"`` spreads ``clips_per_video`` clips evenly over the video,
    ``"center"`` takes the middle one. With ``clips_per_video=K`` every video gives ``K``
    samples per epoch, each sharded, shuffled and counted as one. ``short_videos="error"``
    (default) refuses a video shorter than one clip's span naming its line; ``"pad"`` starts
    such a clip at frame 0 and repeats the last frame.

    Batch: ``video`` ``(B, F, H, W, C)`` (``layout="NFHWC"``; ``"NFCHW"`` gives
    ``(B, F, C, H, W)``, ``"NCFHW"`` ``(B, C, F, H, W)`` as video models take it), ``uint8`` or
    ``format=BatchFormat(dtype=..., normalize=...)`` as :class:`~extsrc.loading.loader.Loader` (the
    layout is ``layout=``, not the format's); ``<op>_<k>`` for each op
    output; ``label``; and on the CPU ``index`` (manifest index), ``is_pad``, ``start_frame``
    (the clip's first frame) and ``num_frames`` (the video's frame count), all ``(B,)``.
    ``resize`` and the format's ``resize_mode`` apply to every frame alike; without ``resize``
    the videos of a batch must share one frame size.

    Ops (registered with ``@augment_op``) run on the numpy path, once per frame, and a random op
    draws the same numbers for every frame of a clip (a random crop cuts the same window from
    each frame); an op declared with ``ndim=4`` gets the whole ``(F, H, W, C)`` clip at once
    and returns clips. ``transforms`` replace the clip, ``ops`` add outputs.
    ``loader.op_paths`` reports ``"numpy"`` for each. ``OpRuntime(op_timeout=...)`` (seconds
    per clip,
    default ``None``: no limit) stops a clip op that never returns with
    :class:`~extsrc.errors.OpTimeoutError` naming the op and the clip; the ops run in a thread
    of this process, which cannot be stopped: it is left running as a daemon thread and no
    clip op runs in the process while it does.

    Bad files: each video's container is read before DALI sees it; a file that is not a video,
    is cut short, holds no video track, is in a codec DALI cannot decode on the loader's device
    or is too short raises :class:`~extsrc.errors.BadVideoError` naming the manifest line, the
    path and the codec (``on_error="raise"``); when DALI's decoder still fails, the clips of
    the failed batch are decoded one by one to name the file (reason ``"corrupt"``). Bad files
    are left out after
    :func:`~extsrc.validation.videos.validate_videos` (``on_error="skip"``, listed in
    ``loader.skipped``), which decodes every VP8, VP9 and Motion JPEG video once through to
    find damaged frames as well (``validate_kwargs={"decode": False}``: container checks only).

    Windows (:mod:`extsrc.sources.video.trim`): DALI decodes every frame from a file's first to a
    clip's last, so by default (``windows=True``) each clip's decoder gets a smaller file cut from
    the original in the reader processes (MP4/MOV): the samples from the last key frame before the
    clip to the clip's last frame, less the frames nothing references that the clip does not
    take. Where no cut is provably safe the whole file is decoded. ``windows=False`` always
    hands DALI the whole file.

    Everything else (``batch_size``, ``sampling`` and ``torchrun``, ``shuffle``, ``seed``,
    ``device``, ``workers``, ``bad_files``, ``state_dict``/``load_state_dict``, ``set_epoch``,
    ``close``) is :class:`~extsrc.loading.loader.Loader`'s. Group fields a video loader does not use
    (``OpRuntime.op_path``, ``op_workers``, ``op_pool``; ``Workers.decoder``,
    ``hw_decoder_load``; ``BadFiles.max_pixels``; ``BatchFormat.layout``) are refused unless
    left at their defaults.
    """

    _takes_clips = True
    _config_names: Mapping[str, Any] = {
        "image_output": "video", "metadata_keys": VIDEO_METADATA_KEYS,
        "hidden_outputs": ("__info", "__clip")}

    def __init__(
        self,
        manifest: Manifest | str | os.PathLike[str],
        *,
        batch_size: int,
        sequence_length: int | None = None,
        stride: int = 1,
        clip: ClipPolicy = "random",
        clips_per_video: int = 1,
        short_videos: ShortVideos = "error",
        clips: ClipSpec | None = None,
        ops: Sequence[str | Op] = (),
        transforms: Sequence[str | Op] = (),
        resize: int | tuple[int, int] | None = None,
        layout: VideoLayout = "NFHWC",
        output_map: Sequence[str] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        device: Any = None,
        windows: bool = True,
        sampling: Sampling | None = None,
        workers: Workers | None = None,
        op_runtime: OpRuntime | None = None,
        bad_files: BadFiles | None = None,
        format: BatchFormat | None = None,
        **flat: Any,
    ) -> None:
        if not isinstance(windows, bool):
            raise TypeError(f"VideoLoader: windows must be True or False, got {windows!r}")
        #: Whether each clip's decoder gets only its window of the file (extsrc.sources.video.trim).
        self.windows = windows
        #: The clip policy, checked.
        self.clips = _clip_spec(clips, sequence_length=sequence_length, stride=stride, clip=clip,
                                clips_per_video=clips_per_video, short_videos=short_videos)
        if not isinstance(layout, str) or layout not in VIDEO_LAYOUTS:
            raise ValueError(
                f"VideoLoader: layout must be one of {list(VIDEO_LAYOUTS)}, got "
                f"{layout!r}"
            )
        self.layout = layout
        super().__init__(
            _read(manifest), batch_size=batch_size, ops=ops, transforms=transforms,
            resize=resize, output_map=output_map, shuffle=shuffle, seed=seed, device=device,
            sampling=sampling, workers=workers, op_runtime=op_runtime, bad_files=bad_files,
            format=format, **flat,
        )

    def _own_groups(self, groups: dict[str, Any]) -> dict[str, Any]:
        _check_video_groups(groups)
        #: Seconds per clip a clip op may take (None: no limit); see ClipOpRunner.
        self.op_timeout = groups["op_runtime"].op_timeout
        return {
            **groups,
            # Clip ops run per frame in DALI's thread (a thread of their own with op_timeout):
            # no op pool (extsrc.ops_runtime.pool) for video yet; the video decoder is DALI's own.
            "op_runtime": OpRuntime(op_path="numpy", op_workers=0),
            "workers": dataclasses.replace(groups["workers"], decoder="cpu"),
            "bad_files": dataclasses.replace(groups["bad_files"], max_pixels=None),
        }

    # -- what differs from Loader -----------------------------------------------------------------
    @property
    def codecs(self) -> frozenset[str]:
        """The codecs DALI decodes on this loader's device."""
        return CPU_CODECS if self.config.device_id is None else GPU_CODECS

    def _make_source(self, start_epoch: int, start_batch: int) -> VideoSource:
        c, s = self.config, self.config.sampling
        return VideoSource(
            self.manifest, clips=self.clips, codecs=self.codecs,
            device="cpu" if c.device_id is None else "gpu", batch_size=c.batch_size,
            shard_id=s.shard_id, num_shards=s.num_shards, shuffle=c.shuffle, seed=c.seed,
            last_batch=s.last_batch, start_epoch=start_epoch, start_batch=start_batch,
            max_pixels=None, indices=self._indices, max_file_bytes=c.bad_files.max_file_bytes,
            windows=self.windows, run_length=s.run_length,
        )

    def _build_pipeline(self) -> Any:
        assert isinstance(self.source, VideoSource)
        return build_video_pipeline(self.source, self.config, layout=self.layout,
                                    op_timeout=self.op_timeout)

    def _metadata(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        meta = super()._metadata(outputs)
        clip = outputs["__clip"]  # columns: CLIP_COLUMNS (start_frame, clip, num_frames)
        meta["start_frame"] = clip[:, 0].contiguous()
        meta["num_frames"] = clip[:, 2].contiguous()
        return meta

    def _explain(self, e: Exception, at: InFlight) -> Exception:
        if isinstance(e, ExtsrcError):
            return e
        source = at.source
        in_batch = isinstance(source, VideoSource) and at.batch < len(source)
        f = read_failure(str(e))
        if in_batch and f.kind == "worker":
            # A bad video in a worker process: the same batch read again here gives the error
            # object with its fields (line, path, reason, codec).
            try:
                source.clip_batch(at.epoch, at.batch)  # type: ignore[attr-defined]
            except ExtsrcError as err:
                return err
        if f.uneven_shapes and self.config.resize is None:
            return ValueError(
                "the videos of a batch have frames of different sizes, so their clips cannot "
                "be stacked into one tensor; pass resize=(height, width) (or an int) to "
                "VideoLoader, or re-encode the videos to one frame size (e.g. ffmpeg -i IN "
                "-vf scale=W:H OUT.webm)"
            )
        if f.kind in ("worker", "op") or f.uneven_shapes or f.pool_lost:
            # Dead workers, an op's error, frames of different sizes: the Loader's wording.
            return explain(e, at, run=self._run, resize=self.config.resize, max_pixels=None,
                           lookahead=0)
        small = _TOO_SMALL.search(f.text)
        if in_batch and small is not None:
            # NVDEC's smallest frame for the codec (DALI reads it from the GPU's capabilities).
            min_size = (int(small["w"]), int(small["h"]))
            hit = find_too_small(source, at.epoch, at.batch, min_size)  # type: ignore[arg-type]
            if hit is not None:
                i, (w, h) = hit
                problem = VideoProbeProblem(
                    "too_small_for_gpu",
                    f"its frames are {w}x{h}; the GPU's video decoder takes this codec from "
                    f"{min_size[0]}x{min_size[1]} up")
                return source.bad_video(i, problem)  # type: ignore[attr-defined]
        if in_batch:  # the decoder refused a file whose container reads well: which one?
            found = find_undecodable(source, at.epoch, at.batch)  # type: ignore[arg-type]
            if found is not None:
                i, said = found
                if _OUT_OF_BOUNDS in said:  # the decoder counts fewer frames than the container
                    info = source.probe(i, source.read(i))  # type: ignore[attr-defined]
                    problem = VideoProbeProblem(
                        "truncated", f"its container lists {info.num_frames} frames but DALI's "
                        f"video decoder finds fewer (DALI said: {said})")
                else:
                    problem = VideoProbeProblem(
                        "corrupt", f"DALI's video decoder refuses it (DALI said: {said})")
                return source.bad_video(i, problem)  # type: ignore[attr-defined]
        return PipelineError(
            f"DALI's video decoder failed while producing {at.where()}; DALI said: "
            f"{shown(f.text)}. Check these videos by decoding them (ffmpeg -v error -i FILE "
            f"-f null -) or re-encode them.{VIDEO_HINT}"
        )

    def _state_config(self) -> dict[str, Any]:
        config = super()._state_config()
        c = self.clips
        config["video"] = {"sequence_length": c.sequence_length, "stride": c.stride,
                           "clip": c.clip, "clips_per_video": c.clips_per_video,
                           "short_videos": c.short_videos}
        return config

    _samples = "videos"

    def _validate(self, manifest: Manifest, kwargs: dict[str, Any]) -> Any:
        """Every video's container read up front
        (:func:`~extsrc.validation.videos.validate_videos`)."""
        from extsrc.validation.videos import validate_videos

        return validate_videos(manifest, clips=self.clips, codecs=self.codecs,
                               max_file_bytes=self.config.bad_files.max_file_bytes, **kwargs)

    def __repr__(self) -> str:
        c, v = self.config, self.clips
        return (
            f"VideoLoader({len(self.manifest)} videos, batch_size={c.batch_size}, "
            f"sequence_length={v.sequence_length}, stride={v.stride}, clip={v.clip!r}, "
            f"clips_per_video={v.clips_per_video}, outputs={list(c.output_names)}, "
            f"device={self.device!r}, shard {c.sampling.shard_id}/{c.sampling.num_shards}, "
            f"{len(self)} batches/epoch)"
        )

