"""The image checks of a manifest: every file gets the checks of
:func:`extsrc.sources.imagecheck.check_file` (missing, a directory, not a regular file, larger
than ``max_file_bytes``, unreadable, empty, not an image, a format DALI cannot decode, a header
declaring more than ``max_pixels`` pixels, truncated: a JPEG without its end marker, a PNG
without ``IEND``; outside the manifest's root; and with ``decode=True`` a full decode: what it
finds and what it cannot, :func:`extsrc.validate`).

Work is spread over worker processes (loky, joblib's executor) in chunks of files (one task per
file would cost more than the checks), with a progress bar; the workers end before
:func:`validate_images` returns. The image loader's ``on_error="skip"`` calls
:func:`validate_images` directly; :func:`extsrc.validate` calls it for a manifest of images.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from extsrc._util.argcheck import check_bool, check_int
from extsrc._util.textsafe import shown
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, check_max_file_bytes
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, Finding, check_file
from extsrc.sources.manifest import Manifest
from extsrc.sources.where import reworded_fix
from extsrc.validation.report import Problem, ValidationReport

__all__ = ["CheckOptions", "check_options", "validate_images"]


class CheckOptions(NamedTuple):
    """The options of :func:`extsrc.validate` checked by :func:`check_options`; ``delay`` is the
    seconds before the progress bar shows (a float ``progress``, which then reads ``True``)."""

    decode: bool
    n_jobs: int
    max_pixels: int | None
    progress: bool
    delay: float
    chunk_size: int | None
    max_file_bytes: int | None


def check_options(
    *, decode: object = True, n_jobs: object = -1, max_pixels: object = DEFAULT_MAX_PIXELS,
    progress: object = True, chunk_size: object = None,
    max_file_bytes: object = DEFAULT_MAX_FILE_BYTES,
) -> CheckOptions:
    """The options of :func:`extsrc.validate` checked, each refusal naming the option (the
    defaults are :func:`extsrc.validate`'s)."""
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
    return CheckOptions(decode, n_jobs, max_pixels, progress, delay,  # type: ignore[arg-type]
                       chunk_size, max_file_bytes)


def validate_images(manifest: Manifest, checks: CheckOptions | None = None) -> ValidationReport:
    """Check every file of ``manifest`` as an image, with the options ``checks`` (from
    :func:`check_options`; ``None``: :func:`extsrc.validate`'s defaults)."""
    if not isinstance(manifest, Manifest):
        raise TypeError(
            f"validate_images: manifest must be an extsrc.Manifest, got {type(manifest).__name__}"
        )
    decode, n_jobs, max_pixels, progress, delay, chunk_size, max_file_bytes = (
        check_options() if checks is None else checks)
    t0 = time.perf_counter()
    n = len(manifest)
    from extsrc.sources.storage import is_url

    root_real = (None if manifest.root is None or is_url(manifest.root)
                 else os.path.realpath(manifest.root))
    lexical_out = set(manifest.outside_root())
    todo = [i for i in range(n) if i not in lexical_out] if lexical_out else range(n)
    # Tar shards: a sample is a byte range of its shard, checked by the shards module.
    paths = ([manifest.range(i) for i in todo] if hasattr(manifest, "range")
             else [manifest.paths[i] for i in todo])

    from joblib import effective_n_jobs
    from tqdm.auto import tqdm

    workers = effective_n_jobs(n_jobs)
    cap = 256 if decode else 4096
    size = chunk_size or max(16, min(cap, math.ceil(len(paths) / (workers * 8)) or 1))
    starts = range(0, len(paths), size)
    args = (decode, max_pixels, root_real, max_file_bytes, manifest.storage)
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


def _check_chunk(
    start: int, paths: list[str], decode: bool, max_pixels: int | None, root_real: str | None,
    max_file_bytes: int | None, storage: Any = None,
) -> tuple[int, list[tuple[int, str, str]]]:
    """Run on a worker: the problems of ``paths`` as ``(offset, reason, message)``. URLs are
    read through ``storage``, many at once."""
    found = []
    fetched: dict[int, Any] = {}
    if storage is not None:
        from extsrc.sources.storage import is_url

        at = [k for k, p in enumerate(paths) if isinstance(p, str) and is_url(p)]
        got = storage.read_many([paths[k] for k in at], max_bytes=max_file_bytes)
        fetched = dict(zip(at, got, strict=True))
    for k, p in enumerate(paths):
        if isinstance(p, tuple):  # a tar shard's member: ShardManifest.range's fields
            from extsrc.sources.shards import check_range

            f = check_range(*p, decode=decode, max_pixels=max_pixels,
                            max_file_bytes=max_file_bytes)
        else:
            f = check_file(p, decode=decode, max_pixels=max_pixels, root_real=root_real,
                           max_file_bytes=max_file_bytes, storage=storage, data=fetched.get(k))
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
