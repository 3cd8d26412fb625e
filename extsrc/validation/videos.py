"""``validate_videos``: find every bad video of a manifest before training does.

Each file gets the loader's own checks: it is read as
:class:`~extsrc.sources.video.source.VideoSource` reads it
(:func:`extsrc.sources.fileread.read_regular`: a
missing, unreadable, empty or oversized file, a directory, a path outside the root), its
container is read (:func:`extsrc.sources.video.probe.probe_video`: not a video, truncated, no video
track, no frames, the frames the file really holds), its codec is compared with those DALI
decodes on the device, and its frame count with one clip's span. With ``decode=True`` (the
default) every video in a codec DALI decodes on the CPU is then decoded once through, frame by
frame, by the loader's own decoder (:class:`VideoDecodeCheck`). The result is the
:class:`~extsrc.validation.report.ValidationReport` that :func:`extsrc.validate` gives for images
(``clean_manifest()``, ``write_clean()``).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from extsrc.sources.fileread import (
    DEFAULT_MAX_FILE_BYTES,
    FileReadProblem,
    read_regular,
    video_fix,
)
from extsrc.sources.imagecheck import decode_check
from extsrc.sources.manifest import Manifest
from extsrc.sources.video.clips import ClipSpec
from extsrc.sources.video.probe import CPU_CODECS, VideoInfo, VideoProbeProblem, video_frames
from extsrc.sources.video.source import check_video
from extsrc.sources.where import reworded_fix
from extsrc.validation.report import Problem, ValidationReport

__all__ = ["VideoDecodeCheck", "check_video_file", "validate_videos"]


class VideoDecodeCheck:
    """Decode a whole video with DALI's CPU video decoder (``fn.decoders.video``, the loader's
    decoder on the CPU) and report what it refuses.

    The decoder is asked for the last frame the container holds; DALI decodes every frame from
    the first up to it, so damaged frame data anywhere in the file fails here as it would fail
    a clip in training (DALI refuses a Motion JPEG frame whose Huffman tables or markers are
    broken, a VP8/VP9 frame whose header libvpx cannot read). A file whose decoder finds fewer
    frames than its container lists is ``truncated``; one that gives no frame or an empty one
    is refused too.

    DALI decodes much damage into wrong pixels without a word, so each Motion JPEG frame of an
    AVI or Matroska file is also decoded by libjpeg-turbo with its corrupt-data warnings taken
    as errors (:func:`extsrc.sources.imagecheck.decode_check`, as ``validate`` checks JPEG images):
    random or zeroed entropy-coded data, data ending early. Frames without their own Huffman
    tables (AVI1 Motion JPEG, whose decoders supply the standard ones) get DALI's check only.
    VP8 and VP9 carry no checksums: damage to a frame's compressed data past its header mostly
    decodes to wrong pixels, in DALI as in any decoder, and is not found.

    One pipeline is reused file after file and built anew after a failure (DALI leaves a failed
    pipeline unusable); one object per thread."""

    def __init__(self) -> None:
        self._pipe: Any = None

    def _build(self) -> Any:
        from nvidia.dali import fn
        from nvidia.dali.pipeline import Pipeline

        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
        with pipe:
            encoded = fn.external_source(name="encoded")
            frames = fn.external_source(name="frames")
            pipe.set_outputs(fn.decoders.video(encoded, frames=frames, pad_mode="none"))
        pipe.build()
        return pipe

    def check(self, data: bytes, info: VideoInfo) -> VideoProbeProblem | None:
        """What DALI's decoder refuses in ``data`` (a video of ``info``), ``None`` when every
        frame decodes (or its codec has no CPU decoder to try)."""
        from extsrc._dali.messages import dali_text

        if info.codec not in CPU_CODECS:
            return None
        last = info.num_frames - 1
        try:
            if self._pipe is None:
                self._pipe = self._build()
            self._pipe.feed_input("encoded", [np.frombuffer(data, dtype=np.uint8)])
            self._pipe.feed_input("frames", [np.array([last], dtype=np.int32)])
            (out,) = self._pipe.run()
            shape = tuple(out.as_array().shape)
        except Exception as e:
            self._pipe = None  # a pipeline that failed is not run again
            said = dali_text(str(e))
            if "out-of-bounds frame index" in said:
                return VideoProbeProblem(
                    "truncated", f"its container lists {info.num_frames} frames but DALI's "
                    f"video decoder finds fewer (DALI said: {said})")
            return VideoProbeProblem(
                "corrupt", f"DALI's video decoder refuses its frame data (DALI said: {said})")
        if len(shape) != 5 or shape[1] != 1 or 0 in shape:
            return VideoProbeProblem(
                "corrupt", f"DALI's video decoder gave {shape[1:]} (frames, height, width, "
                f"channels) for frame {last} of {info.num_frames}")
        return _jpeg_frames_check(data, info) if info.codec == "mjpeg" else None

    def close(self) -> None:
        """Release the pipeline (its threads and buffers)."""
        self._pipe = None


def _jpeg_frames_check(data: bytes, info: VideoInfo) -> VideoProbeProblem | None:
    """The first Motion JPEG frame of ``data`` that libjpeg-turbo finds damaged (AVI and
    Matroska files whose frames carry Huffman tables), as a ``corrupt`` problem."""
    ranges = video_frames(data) or []
    frames = [data[offset:offset + size] for offset, size in ranges]
    if not any(b"\xff\xc4" in f[:max(0, f.find(b"\xff\xda"))] for f in frames):
        return None  # AVI1 Motion JPEG: no tables in any frame, the decoder's defaults apply
    for k, ((offset, size), frame) in enumerate(zip(ranges, frames, strict=True)):
        finding = decode_check(frame)
        if finding is not None:
            return VideoProbeProblem(
                "corrupt", f"frame {k} of {info.num_frames} (bytes {offset:,} to "
                f"{offset + size:,}): {finding.message}; DALI's video decoder turns it into "
                "wrong pixels")
    return None


def check_video_file(
    path: str, *, codecs: frozenset[str] = CPU_CODECS, clips: ClipSpec | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES, root_real: str | None = None,
    decoder: VideoDecodeCheck | None = None,
) -> tuple[str, str] | None:
    """``(reason, message with its fix)`` for a bad video file, ``None`` for a good one;
    ``decoder``: also decode it (see :class:`VideoDecodeCheck`)."""
    try:
        data = read_regular(path, max_bytes=max_file_bytes, root_real=root_real)
    except FileReadProblem as e:
        return e.reason, f"{e.message}; {video_fix(e.reason, e.fix)}"
    if not data:
        return "empty", f"the file has 0 bytes; {video_fix('empty', '')}"
    try:
        info = check_video(data, codecs, "cpu" if codecs == CPU_CODECS else "gpu")
        if clips is not None and clips.short_videos == "error" and info.num_frames < clips.span:
            raise VideoProbeProblem(
                "too_short",
                f"the video has {info.num_frames} frames, fewer than one clip spans: "
                f"sequence_length={clips.sequence_length} every stride={clips.stride} frames "
                f"spans {clips.span}",
            )
        problem = decoder.check(data, info) if decoder is not None else None
        if problem is not None:
            raise problem
    except VideoProbeProblem as e:
        return e.reason, f"{e.message}; {e.fix}"
    return None


def validate_videos(
    manifest: Manifest,
    *,
    clips: ClipSpec | None = None,
    codecs: frozenset[str] = CPU_CODECS,
    decode: bool = True,
    n_jobs: int = 4,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    **ignored: object,
) -> ValidationReport:
    """Check every video of ``manifest`` (see the module) and report the bad ones with their
    lines and reasons. ``clips``: also refuse videos shorter than one clip's span (unless its
    ``short_videos`` is ``"pad"``); ``codecs``: those DALI decodes on the device
    (:data:`~extsrc.sources.video.probe.CPU_CODECS` or
    :data:`~extsrc.sources.video.probe.GPU_CODECS`);
    ``n_jobs``: threads reading (and decoding) files. Options of :func:`extsrc.validate` that
    concern images only (``max_pixels``, ``progress``, ``chunk_size``) are accepted and ignored.

    ``decode=True`` (default): also decode every frame of each VP8, VP9 and Motion JPEG video
    with DALI's CPU decoder, and every Motion JPEG frame with libjpeg-turbo
    (:class:`VideoDecodeCheck` says what each finds), for damaged frame data the containers
    cannot show (reason ``"corrupt"``). It costs one full decode per video (two for Motion
    JPEG): 300 frames of 640x480 noise took 0.8 to 1.6 s as VP9 and 1.7 to 3.2 s as Motion JPEG
    on one busy core, against 2 to 30 ms for the container checks of the same files. H.264,
    HEVC, AV1 and MPEG-4 (decoded only on a GPU) are not decoded here: their damage is found
    when the loader meets it. Never found: damage that still decodes (wrong pixels in a valid
    stream, most damage inside VP8/VP9 frames), and files that change after the check."""
    t0 = time.perf_counter()
    root_real = None if manifest.root is None else os.path.realpath(manifest.root)
    decode = bool(decode)
    local = threading.local()
    decoders: list[VideoDecodeCheck] = []
    lock = threading.Lock()

    def decoder() -> VideoDecodeCheck | None:
        if not decode:
            return None
        d = getattr(local, "decoder", None)
        if d is None:
            d = local.decoder = VideoDecodeCheck()
            with lock:
                decoders.append(d)
        return d

    def one(i: int) -> tuple[str, str] | None:
        return check_video_file(manifest.paths[i], codecs=codecs, clips=clips,
                                max_file_bytes=max_file_bytes, root_real=root_real,
                                decoder=decoder())

    n = len(manifest)
    try:
        with ThreadPoolExecutor(max_workers=max(1, int(n_jobs))) as pool:
            found = list(pool.map(one, range(n)))
    finally:
        for d in decoders:
            d.close()
    problems = tuple(
        Problem(index=i, line=manifest.lines[i], path=manifest.paths[i], reason=f[0],
                message=reworded_fix(f[1], manifest.source), source=manifest.source)
        for i, f in enumerate(found) if f is not None
    )
    ok_indices = np.array([i for i, f in enumerate(found) if f is None], dtype=np.int64)
    ok_indices.flags.writeable = False
    return ValidationReport(manifest=manifest, problems=problems, ok_indices=ok_indices,
                            decode=decode, max_pixels=None, seconds=time.perf_counter() - t0,
                            media="video")
