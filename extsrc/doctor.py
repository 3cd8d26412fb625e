"""The manifest doctor: find every bad file of a manifest before training does.

>>> report = extsrc.validate("train.csv")            # doctest: +SKIP
>>> print(report.summary())                          # doctest: +SKIP
>>> report.write_clean("train.clean.csv")            # doctest: +SKIP

Each file gets the checks of :func:`extsrc.imagecheck.check_file`: missing, a directory, not a
regular file, larger than ``max_file_bytes``, unreadable, empty, not an image, a format DALI
cannot decode, a header declaring more than ``max_pixels`` pixels, truncated (JPEG without its end
marker, PNG without ``IEND``), outside the manifest's root, and with ``decode=True`` a full decode
(what it finds and what it cannot: :func:`validate`). Work is spread over worker processes (loky,
joblib's executor) in chunks of files (one task per file would cost more than the checks), with a
progress bar; the workers end before :func:`validate` returns.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from extsrc.argcheck import check_bool, check_int
from extsrc.errors import ManifestError, OutputOverwritesInputError
from extsrc.fileread import DEFAULT_MAX_FILE_BYTES, check_max_file_bytes
from extsrc.folders import is_folder_source, reworded_fix, sample_where
from extsrc.imagecheck import DEFAULT_MAX_PIXELS, REASONS, Finding, check_file
from extsrc.manifest import Manifest, read_manifest
from extsrc.textsafe import shown

__all__ = ["Problem", "ValidationReport", "same_file", "validate"]


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same inode when both exist (symlinks,
    hard links, ``..`` and relative spellings included), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def _relative_base(m: Manifest) -> str:
    """The folder relative paths of ``m`` were resolved against (as well as it is known): its
    root, else the folder of a folder dataset, else the manifest file's folder."""
    if m.root is not None:
        return m.root
    if is_folder_source(m.source):
        return os.path.normpath(os.path.abspath(m.source))
    return os.path.dirname(os.path.abspath(m.source))


def _written_path(p: str, base: str, out_dir: str) -> str:
    """How to write manifest path ``p`` in a manifest kept in ``out_dir``: relative to
    ``out_dir`` when it lies under ``base`` (where the input's relative paths lie), else as
    it is (absolute). ``read_manifest`` of the written file resolves it back to ``p``."""
    if not os.path.isabs(p) or os.path.commonpath([p, base]) != base:
        return p
    rel = os.path.relpath(p, out_dir)
    # A leading "#" would make the line a comment, leading blanks would be stripped.
    return rel if rel[:1] not in ("#", " ", "\t") else os.path.join(".", rel)


@dataclass(frozen=True)
class Problem:
    """One bad sample: its manifest ``index`` and 1-based ``line``, its ``path``, a ``reason``
    code (see :data:`extsrc.imagecheck.REASONS`) and a ``message`` saying what is wrong and how to
    fix it. ``source`` is the manifest file."""

    index: int
    line: int
    path: str
    reason: str
    message: str
    source: str

    def __str__(self) -> str:
        if self.index < 0:  # found while tar shards were indexed: the path names shard + member
            return f"{shown(self.path)}: {self.message} [{self.reason}]"
        # Escaped: a file name may carry terminal control sequences.
        return (
            f"{sample_where(self.source, self.line)}: {shown(self.path)}: {self.message} "
            f"[{self.reason}]"
        )


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` sets it process-wide, and a
    file another thread creates meanwhile would get the temporary value)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022  # the usual one, where /proc does not say


@dataclass(frozen=True, eq=False)
class ValidationReport:
    """What :func:`validate` found. ``problems`` are in manifest order; ``ok_indices`` (read-only
    ``int64`` array) are the manifest indices of the good samples."""

    manifest: Manifest
    problems: tuple[Problem, ...]
    ok_indices: np.ndarray
    decode: bool
    max_pixels: int | None
    seconds: float
    #: What the files were checked as: ``"image"`` or ``"video"`` (see :func:`validate`).
    media: str = "image"

    @property
    def ok(self) -> bool:
        """``True`` when no file has a problem."""
        return not self.problems

    @property
    def num_checked(self) -> int:
        return len(self.manifest)

    @property
    def num_bad(self) -> int:
        return len(self.problems)

    @property
    def counts(self) -> dict[str, int]:
        """Problems per reason code, most frequent first."""
        return dict(Counter(p.reason for p in self.problems).most_common())

    @property
    def rate(self) -> float:
        """Files checked per second."""
        return self.num_checked / self.seconds if self.seconds > 0 else float("inf")

    def clean_manifest(self) -> Manifest:
        """The manifest without the bad samples. Lines and ``source`` stay those of the original
        file, so later messages still point at the right line."""
        m = self.manifest
        if len(self.ok_indices) == 0:
            raise ManifestError(
                f"{shown(m.source)}: every one of the {len(m)} samples is bad ({self.counts}); "
                "nothing "
                "is left to train on. Check the paths and root= first"
            )
        if not self.problems:
            return m
        keep = self.ok_indices
        if hasattr(m, "select"):  # tar shards: samples are byte ranges the copy must keep
            return m.select(keep)
        return Manifest(
            paths=tuple(m.paths[i] for i in keep),
            labels=m.labels[keep],
            classes=m.classes,
            lines=tuple(m.lines[i] for i in keep),
            source=m.source,
            root=m.root,
        )

    def write_clean(self, path: str | os.PathLike[str]) -> Path:
        """Write the good samples as a CSV manifest (``path,label`` header); reading it back
        with :func:`~extsrc.manifest.read_manifest` (no ``root=``) gives exactly these samples.

        Paths under the folder the input's relative paths resolved against (its root, or the
        manifest's folder) are written relative to the new file's folder, so a dataset moved
        with its manifests keeps working; other paths are written absolute. Class-name labels
        are written as names when every class keeps at least one sample (so reading the file
        back gives the same label indices), else as integer indices (with a warning). Several
        label columns become ``label_0, label_1, ...``. Missing folders are created. The file
        is written whole and then renamed into place, so a failure leaves any earlier file at
        ``path`` as it was. Returns the path.

        Raises:
            OutputOverwritesInputError: ``path`` is the manifest file being cleaned (however
                spelled: a symlink, a relative path); nothing is written.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                "ValidationReport.write_clean: path must be a file path (str or os.PathLike), "
                f"got {type(path).__name__} {path!r}"
            )
        if hasattr(self.manifest, "shards"):
            raise ManifestError(
                f"write_clean: {shown(self.manifest.source)} is tar shards, whose members a CSV "
                "manifest cannot list; train on report.clean_manifest() or pass on_error='skip' "
                "to the Loader, or rewrite the shards without the bad samples")
        out = Path(path)
        src = self.manifest.source
        if not is_folder_source(src) and same_file(out, src):
            raise OutputOverwritesInputError(
                f"write_clean: {shown(out)} is the manifest being cleaned ({shown(src)}); "
                "writing it would replace the input: choose another file name, such as "
                f"{shown(Path(src).stem + '.clean.csv')}",
                path=str(out), source=src,
            )
        m = self.clean_manifest()
        labels = m.labels
        names = ["label"] if labels.ndim == 1 else [f"label_{j}" for j in range(labels.shape[1])]
        as_names = False
        if m.classes is not None:
            as_names = len(np.unique(labels)) == len(m.classes)
            if not as_names:
                warnings.warn(
                    f"{shown(out)}: some classes have no good sample left, so labels are written "
                    "as integer indices (class names would renumber them on reading)",
                    stacklevel=2,
                )
        rows = labels.reshape(len(m), -1).tolist()
        out.parent.mkdir(parents=True, exist_ok=True)
        base, out_dir = _relative_base(m), os.path.dirname(os.path.abspath(out))
        paths = [_written_path(p, base, out_dir) for p in m.paths]
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # as open() would have made it, not mkstemp's 0600
            with open(fd, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(["path", *names])
                if as_names:
                    assert m.classes is not None
                    cls = m.classes
                    w.writerows([p, cls[r[0]]] for p, r in zip(paths, rows, strict=True))
                else:
                    w.writerows([p, *r] for p, r in zip(paths, rows, strict=True))
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return out

    def summary(self, max_problems: int = 20) -> str:
        """A human-readable report: counts per reason, then the first ``max_problems`` problems.
        File names are escaped (:func:`extsrc.textsafe.shown`)."""
        max_problems = check_int(max_problems, "ValidationReport.summary: max_problems",
                                 minimum=0)
        m = self.manifest
        head = (
            f"extsrc.validate: {shown(m.source)}: {self.num_checked} file(s) checked "
            f"(decode={self.decode}) in {self.seconds:.1f} s ({self.rate:,.0f} files/s): "
            f"{len(self.ok_indices)} ok, {self.num_bad} bad"
        )
        if self.ok:
            return head
        lines = [head]
        lines += [f"  {reason}: {n}  ({self._meaning(reason)})" for reason, n in
                  self.counts.items()]
        lines += [f"  {p}" for p in self.problems[:max_problems]]
        if self.num_bad > max_problems:
            lines.append(f"  ... and {self.num_bad - max_problems} more (see report.problems)")
        lines.append(
            f"Train on the {len(self.ok_indices)} good samples with report.clean_manifest() or "
            "report.write_clean('clean.csv'), or pass on_error='skip' to extsrc."
            f"{'VideoLoader' if self.media == 'video' else 'Loader'}."
        )
        return "\n".join(lines)

    def _meaning(self, reason: str) -> str:
        if self.media == "video":
            from extsrc.videoprobe import VIDEO_REASONS

            if reason in VIDEO_REASONS:
                return VIDEO_REASONS[reason][0]
        return REASONS.get(reason, "")

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return (
            f"ValidationReport({self.manifest.source!r}, checked={self.num_checked}, "
            f"bad={self.num_bad}, counts={self.counts})"
        )


def _check_chunk(
    start: int, paths: list[str], decode: bool, max_pixels: int | None, root_real: str | None,
    max_file_bytes: int | None,
) -> tuple[int, list[tuple[int, str, str]]]:
    """Run on a worker: the problems of ``paths`` as ``(offset, reason, message)``."""
    found = []
    for k, p in enumerate(paths):
        if isinstance(p, tuple):  # a tar shard's member: (shard, offset, size, storage options)
            from extsrc.sources.shards import check_range

            f = check_range(*p, decode=decode, max_pixels=max_pixels,
                            max_file_bytes=max_file_bytes)
        else:
            f = check_file(p, decode=decode, max_pixels=max_pixels, root_real=root_real,
                           max_file_bytes=max_file_bytes)
        if f is not None:
            found.append((k, f.reason, f"{f.message}; {f.fix}"))
    return start, found


def _run_chunks(
    paths: list[str], starts: range, size: int, args: tuple, workers: int
) -> Iterator[tuple[int, list[tuple[int, str, str]]]]:
    """``_check_chunk`` over every chunk, in this process or in ``workers`` processes.

    The worker processes belong to this call: they are shut down (and joined) before it
    returns, also on an error or Ctrl-C, so no idle pool lingers after :func:`validate`
    (joblib's shared pool would keep them for 300 s). loky's executor, as joblib's, starts
    fresh interpreters that neither fork DALI's or CUDA's threads nor re-import ``__main__``.
    """
    if workers == 1 or len(starts) <= 1:
        for s in starts:
            yield _check_chunk(s, paths[s:s + size], *args)
        return
    from concurrent.futures import as_completed

    from joblib.externals.loky import ProcessPoolExecutor

    executor = ProcessPoolExecutor(max_workers=min(workers, len(starts)))
    finished = False
    try:
        futures = [executor.submit(_check_chunk, s, paths[s:s + size], *args) for s in starts]
        for future in as_completed(futures):
            yield future.result()
        finished = True
    finally:
        # Also reached when the caller stops early (GeneratorExit): kill rather than wait then.
        executor.shutdown(wait=True, kill_workers=not finished)


def _read_media(
    manifest: Manifest | str | bytes | os.PathLike[str], media: str
) -> tuple[Manifest, str]:
    """The manifest read (a folder of videos with the video extensions) and ``media`` resolved
    (``"auto"``: see :func:`validate`)."""
    from extsrc.videoprobe import VIDEO_EXTENSIONS

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
    ends with a video extension (:data:`extsrc.videoprobe.VIDEO_EXTENSIONS`), or when a folder
    holds videos and no images. Videos get :func:`extsrc.videocheck.validate_videos`'s checks
    (container, truncation, codec, and with ``clips``, a :class:`~extsrc.videoclips.ClipSpec`,
    the length), against the codecs DALI decodes on ``device`` (``None``: the GPU when one is
    visible, as the loaders pick it), and with ``decode`` a full decode of each VP8, VP9 and
    Motion JPEG video by DALI's CPU decoder (cost and coverage:
    :func:`~extsrc.videocheck.validate_videos`); ``max_pixels`` and ``chunk_size`` concern
    images only.

    Args:
        manifest: a :class:`~extsrc.manifest.Manifest`, or the path of a manifest file or of a
            folder dataset (read with :func:`~extsrc.manifest.read_manifest` defaults).
        decode: also decode every image fully (much slower than the header checks, which read
            only the first and last 64 KiB of large files). See "What is found" below.
        n_jobs: worker processes (joblib convention: ``-1`` all cores, ``-2`` all but one, ``1``
            in this process); they end before ``validate`` returns.
        max_pixels: largest pixel count a header may declare (decompression-bomb guard);
            ``None``: no limit. The loader uses the same default.
        progress: show a tqdm progress bar (on stderr); a float of seconds: show it once
            validating has taken that long (a Loader's ``on_error="skip"`` passes
            :data:`extsrc.slowstart.SLOW_SECONDS`: no bar for a quick check).
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
    decode = check_bool(decode, "validate: decode")
    delay = 0.0
    if isinstance(progress, float):  # an int stays refused: progress=1 reads as True
        if not (progress >= 0 and math.isfinite(progress)):
            raise ValueError(f"validate: progress must be a bool or seconds >= 0, got {progress!r}")
        delay, progress = float(progress), True
    progress = check_bool(progress, "validate: progress")
    cpus = os.cpu_count() or 1
    n_jobs = check_int(n_jobs, "validate: n_jobs", minimum=-cpus, maximum=max(64, 8 * cpus),
                       what=f"worker processes; -1: all {cpus} cores, -2: all but one")
    if n_jobs == 0:
        raise ValueError("validate: n_jobs must not be 0; pass 1 to check in this process or -1 "
                         "for one worker per core")
    max_pixels = check_int(max_pixels, "validate: max_pixels", minimum=1, allow_none=True)
    chunk_size = check_int(chunk_size, "validate: chunk_size", minimum=1, allow_none=True,
                           what="files per task")
    max_file_bytes = check_max_file_bytes(max_file_bytes, "validate: max_file_bytes")
    if media not in ("auto", "image", "video"):
        raise ValueError(f"validate: media must be 'auto', 'image' or 'video', got {media!r}")
    manifest, media = _read_media(manifest, media)
    if media == "video":
        from joblib import effective_n_jobs

        from extsrc.device import resolve_device
        from extsrc.videocheck import validate_videos
        from extsrc.videoprobe import CPU_CODECS, GPU_CODECS

        codecs = CPU_CODECS if resolve_device(device) is None else GPU_CODECS
        return validate_videos(manifest, clips=clips, codecs=codecs, decode=decode,
                               n_jobs=effective_n_jobs(n_jobs), max_file_bytes=max_file_bytes)
    t0 = time.perf_counter()
    n = len(manifest)
    root_real = None if manifest.root is None else os.path.realpath(manifest.root)
    lexical_out = set(manifest.outside_root())
    todo = [i for i in range(n) if i not in lexical_out] if lexical_out else range(n)
    paths = ([manifest.range(i) for i in todo] if hasattr(manifest, "range")
             else [manifest.paths[i] for i in todo])

    from joblib import effective_n_jobs
    from tqdm.auto import tqdm

    workers = effective_n_jobs(n_jobs)
    cap = 256 if decode else 4096
    size = chunk_size or max(16, min(cap, math.ceil(len(paths) / (workers * 8)) or 1))
    starts = range(0, len(paths), size)
    args = (decode, max_pixels, root_real, max_file_bytes)
    found: dict[int, tuple[str, str]] = {}
    with tqdm(total=n, unit="file", desc="extsrc.validate", disable=not progress,
              smoothing=0.1, delay=delay) as bar:
        bar.update(len(lexical_out))
        for s, chunk_found in _run_chunks(paths, starts, size, args, workers):
            for k, reason, message in chunk_found:
                found[todo[s + k]] = (reason, message)
            bar.update(min(size, len(paths) - s))
    for i in lexical_out:
        f = Finding("outside_root", f"outside the root {shown(manifest.root)}")
        found[i] = (f.reason, f"{f.message}; {f.fix}")  # as _check_chunk words its findings
    problems = tuple(
        Problem(index=i, line=manifest.lines[i], path=manifest.paths[i], reason=r,
                message=reworded_fix(msg, manifest.source), source=manifest.source)
        for i, (r, msg) in sorted(found.items())
    )
    # Tar shards: what indexing left out (on_error='skip'), reported beside the members' problems.
    problems = tuple(
        Problem(index=-1, line=0, path=p.path, reason=p.reason, message=f"{p.message}; {p.fix}",
                source=manifest.source)
        for p in getattr(manifest, "skipped", ())
    ) + problems
    ok = np.ones(n, dtype=bool)
    ok[list(found)] = False
    ok_indices = np.flatnonzero(ok).astype(np.int64)
    ok_indices.flags.writeable = False
    return ValidationReport(
        manifest=manifest, problems=problems, ok_indices=ok_indices, decode=decode,
        max_pixels=max_pixels, seconds=time.perf_counter() - t0,
    )

