"""The manifest doctor, :func:`validate`: find every bad file of a manifest before training does.

>>> report = extsrc.validate("train.csv")            # doctest: +SKIP
>>> print(report.summary())                          # doctest: +SKIP
>>> report.write_clean("train.clean.csv")            # doctest: +SKIP

:func:`validate` reads the manifest (a file, a folder, or a :class:`Manifest`), decides whether it
lists images or videos (``media="auto"``), and runs the image checks
(:func:`extsrc.validation.images.validate_images`) or the video checks
(:func:`extsrc.validation.videos.validate_videos`). A loader, which knows its media, calls the
checks of its media directly.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

from extsrc.errors import ManifestError
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS
from extsrc.sources.manifest import Manifest
from extsrc.sources.table import read_manifest
from extsrc.validation.images import CheckOptions, check_options, validate_images
from extsrc.validation.report import Problem, ValidationReport

__all__ = ["Problem", "ValidationReport", "validate"]


def _read_media(
    manifest: Manifest | str | bytes | os.PathLike[str], media: str
) -> tuple[Manifest, str]:
    """The manifest read (a folder of videos with the video extensions) and ``media`` resolved
    (``"auto"``: see :func:`validate`)."""
    from extsrc.sources.video.probe import VIDEO_EXTENSIONS

    if not isinstance(manifest, Manifest):
        path = manifest
        from extsrc.sources.shards import is_shard_source, read_shards

        if is_shard_source(path):  # problems found while indexing join the report
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                manifest = read_shards(path, on_error="skip")
            return manifest, "image" if media == "auto" else media
        if os.path.isdir(path) and media != "image":
            try:
                videos = Manifest.from_folder(path, extensions=VIDEO_EXTENSIONS)
            except ManifestError:
                if media == "video":
                    raise
                videos = None
            if videos is not None:
                if media == "video":
                    return videos, "video"
                try:  # a folder of videos, unless it holds images too
                    return read_manifest(path), "image"
                except ManifestError:
                    return videos, "video"
        manifest = read_manifest(path)
    if media == "auto":
        exts = tuple(VIDEO_EXTENSIONS)
        video = len(manifest) > 0 and all(p.lower().endswith(exts) for p in manifest.paths)
        media = "video" if video else "image"
    return manifest, media


def validate(
    manifest: Manifest | str | os.PathLike[str],
    *,
    decode: bool = True,
    n_jobs: int = -1,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    progress: bool | float = True,
    chunk_size: int | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    media: Literal["auto", "image", "video"] = "auto",
    device: Any = None,
    clips: Any = None,
) -> ValidationReport:
    """Check every file of ``manifest`` and report the bad ones with their lines and reasons.

    ``media``: ``"image"``, ``"video"``, or ``"auto"`` (default): videos when every listed path
    ends with a video extension (:data:`extsrc.sources.video.probe.VIDEO_EXTENSIONS`), or when a
    folder holds videos and no images. Videos get the checks of
    :func:`extsrc.validation.videos.validate_videos` (container, truncation, codec, and with
    ``clips``, a :class:`~extsrc.sources.video.clips.ClipSpec`, the length), against the codecs
    DALI decodes on ``device`` (``None``: the GPU when one is visible, as the loaders pick it),
    and with ``decode`` a full decode of each VP8, VP9 and
    Motion JPEG video by DALI's CPU decoder (cost and coverage:
    :func:`~extsrc.validation.videos.validate_videos`); ``max_pixels`` and ``chunk_size`` concern
    images only.

    Args:
        manifest: a :class:`~extsrc.sources.manifest.Manifest`, or the path of a manifest file
            or of a folder dataset (read with :func:`~extsrc.sources.table.read_manifest` defaults).
        decode: also decode every image fully (much slower than the header checks, which read
            only the first and last 64 KiB of large files). See "What is found" below.
        n_jobs: worker processes (joblib convention: ``-1`` all cores, ``-2`` all but one, ``1``
            in this process); they end before ``validate`` returns.
        max_pixels: largest pixel count a header may declare (decompression-bomb guard);
            ``None``: no limit. The loader uses the same default.
        progress: show a tqdm progress bar (on stderr); a float of seconds: show it once
            validating has taken that long (a Loader's ``on_error="skip"`` passes
            :data:`extsrc._util.slowstart.SLOW_SECONDS`: no bar for a quick check).
        chunk_size: files per task; default: enough for ~8 tasks per worker, at most
            4096 (256 with ``decode``) so the progress bar moves.
        max_file_bytes: largest file read (default 256 MiB, as the loader's); a larger one is
            reported as ``file_too_large`` without being read. ``None``: no limit.

    What is found:
        Always (no decoding): a missing path, a directory, a FIFO/device/socket (never opened
        for reading), a path the OS cannot open, a file larger than ``max_file_bytes``, an
        unreadable or empty file, a file outside the manifest's root (symlinks followed), a
        file that is not an image or is in a format DALI does not decode, a header declaring
        more than ``max_pixels`` pixels, a broken JPEG marker structure or PNG header, and a
        JPEG without its end marker after the image data or a PNG without ``IEND``
        (truncated).

        With ``decode=True``, in addition: JPEGs are decoded by libjpeg-turbo with its
        corrupt-data warnings taken as errors, so damage that Pillow and DALI decode into noise
        without a word is found: random or zeroed entropy-coded data, bad Huffman or arithmetic
        codes, data ending before the last block ("premature end of data segment") or
        decoding in fewer bytes than the scan holds ("extraneous bytes before marker"; a few
        encoders also leave such bytes in whole images, reported all the same, with libjpeg's
        words), wrong restart markers, inconsistent progressive scans. Other formats are
        decoded by Pillow, which finds what makes its decoder fail (damaged PNG/zlib data, CRC
        errors, short data); before that a PNG's image data is inflated and counted, because a
        stream ending before the last row is refused by DALI ("Not enough image data") but
        decoded by Pillow, the missing rows black.

        Never found: damage that still decodes as well-formed data (bytes replaced by others
        that happen to form valid codes of the right length: wrong pixels, valid stream);
        damage in metadata the decoders skip (EXIF, ICC profiles, trailing bytes after the end
        marker); a valid image with the wrong content or label; files that change after the
        check. A file DALI rejects although Pillow and libjpeg-turbo decode it is found only
        when the loader meets it.

    Cost: libjpeg-turbo's strict decode costs about what Pillow's decode does (0.05 ms for a
    101x99 JPEG, 5.6 ms for a 1000x990 one, against Pillow's 0.19 and 6.5 ms, one core). A PNG's
    data is inflated twice, counted and then decoded: for a 1000x990 PNG the count took 3.5 ms
    (smooth content, 5 KB) to 12 ms (noise, 3 MB) beside Pillow's 17 and 21 ms (one core).

    Returns a :class:`ValidationReport`; nothing is raised for bad files.
    """
    if not isinstance(manifest, (Manifest, str, bytes, os.PathLike)):
        raise TypeError(
            "validate: manifest must be an extsrc.Manifest or a manifest file or folder path, got "
            f"{type(manifest).__name__}"
        )
    checks = check_options(decode=decode, n_jobs=n_jobs, max_pixels=max_pixels, progress=progress,
                           chunk_size=chunk_size, max_file_bytes=max_file_bytes)
    if media not in ("auto", "image", "video"):
        raise ValueError(f"validate: media must be 'auto', 'image' or 'video', got {media!r}")
    manifest, media = _read_media(manifest, media)
    if media == "video":
        return _validate_videos(manifest, checks, device, clips)
    return validate_images(manifest, checks)


def _validate_videos(
    manifest: Manifest, checks: CheckOptions, device: Any, clips: Any
) -> ValidationReport:
    """The video checks of :func:`validate`, against the codecs DALI decodes on ``device``."""
    from joblib import effective_n_jobs

    from extsrc._util.device import resolve_device
    from extsrc.sources.video.probe import CPU_CODECS, GPU_CODECS
    from extsrc.validation.videos import validate_videos

    codecs = CPU_CODECS if resolve_device(device) is None else GPU_CODECS
    return validate_videos(manifest, clips=clips, codecs=codecs, decode=checks.decode,
                           n_jobs=effective_n_jobs(checks.n_jobs),
                           max_file_bytes=checks.max_file_bytes)
