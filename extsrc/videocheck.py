"""``validate_videos``: find every bad video of a manifest before training does.

Each file gets the loader's own checks, without decoding a frame: it is read as
:class:`~extsrc.videosource.VideoSource` reads it (:func:`extsrc.fileread.read_regular`: a
missing, unreadable, empty or oversized file, a directory, a path outside the root), its
container is read (:func:`extsrc.videoprobe.probe_video`: not a video, truncated, no video
track, no frames), its codec is compared with those DALI decodes on the device, and its frame
count with one clip's span. The result is the :class:`~extsrc.doctor.ValidationReport` that
:func:`extsrc.validate` gives for images (``clean_manifest()``, ``write_clean()``).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from extsrc.doctor import Problem, ValidationReport
from extsrc.fileread import (
    DEFAULT_MAX_FILE_BYTES,
    FileReadProblem,
    read_regular,
    video_fix,
)
from extsrc.folders import reworded_fix
from extsrc.manifest import Manifest
from extsrc.videoclips import ClipSpec
from extsrc.videoprobe import CPU_CODECS, VideoProbeProblem
from extsrc.videosource import check_video

__all__ = ["check_video_file", "validate_videos"]


def check_video_file(
    path: str, *, codecs: frozenset[str] = CPU_CODECS, clips: ClipSpec | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES, root_real: str | None = None,
) -> tuple[str, str] | None:
    """``(reason, message with its fix)`` for a bad video file, ``None`` for a good one."""
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
    except VideoProbeProblem as e:
        return e.reason, f"{e.message}; {e.fix}"
    return None


def validate_videos(
    manifest: Manifest,
    *,
    clips: ClipSpec | None = None,
    codecs: frozenset[str] = CPU_CODECS,
    n_jobs: int = 4,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    **ignored: object,
) -> ValidationReport:
    """Check every video of ``manifest`` (see the module) and report the bad ones with their
    lines and reasons. ``clips``: also refuse videos shorter than one clip's span (unless its
    ``short_videos`` is ``"pad"``); ``codecs``: those DALI decodes on the device
    (:data:`~extsrc.videoprobe.CPU_CODECS` or :data:`~extsrc.videoprobe.GPU_CODECS`);
    ``n_jobs``: threads reading files. Options of :func:`extsrc.validate` that concern images
    only (``decode``, ``max_pixels``, ``progress``, ``chunk_size``) are accepted and ignored."""
    t0 = time.perf_counter()
    root_real = None if manifest.root is None else os.path.realpath(manifest.root)

    def one(i: int) -> tuple[str, str] | None:
        return check_video_file(manifest.paths[i], codecs=codecs, clips=clips,
                                max_file_bytes=max_file_bytes, root_real=root_real)

    n = len(manifest)
    with ThreadPoolExecutor(max_workers=max(1, int(n_jobs))) as pool:
        found = list(pool.map(one, range(n)))
    problems = tuple(
        Problem(index=i, line=manifest.lines[i], path=manifest.paths[i], reason=f[0],
                message=reworded_fix(f[1], manifest.source), source=manifest.source)
        for i, f in enumerate(found) if f is not None
    )
    ok_indices = np.array([i for i, f in enumerate(found) if f is None], dtype=np.int64)
    ok_indices.flags.writeable = False
    return ValidationReport(manifest=manifest, problems=problems, ok_indices=ok_indices,
                            decode=False, max_pixels=None, seconds=time.perf_counter() - t0,
                            media="video")
