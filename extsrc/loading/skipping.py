"""``BadFiles(on_error="skip")``: a loader's manifest validated up front, its good samples kept.

The loader reads only the samples of :func:`skip_bad`'s indices (``batch['index']`` still counts
in the whole manifest) and lists what it left out in ``loader.skipped``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from extsrc._util.caller import user_stacklevel
from extsrc._util.slowstart import SLOW_SECONDS, stage
from extsrc.loading.config import cores_per_process
from extsrc.loading.options import BadFiles
from extsrc.sources.manifest import Manifest

__all__ = ["good_indices", "skip_bad", "stand_in_problems", "validate_images"]


def skip_bad(
    manifest: Manifest,
    validate: Callable[[Manifest, dict[str, Any]], Any],
    kwargs: Mapping[str, Any] | None,
    who: str,
    what: str,
) -> tuple[Any, Any]:
    """``(report, indices)``: ``validate(manifest, kwargs)``'s report and the indices of the good
    samples (``None``: all), warning how many of the ``what`` (``"samples"``, ``"videos"``) were
    left out. ``who``: the loader's class name, for messages."""
    with stage(f"checking the {len(manifest):,} files of {manifest.source} (on_error='skip')"):
        report = validate(manifest, dict(kwargs or {}))
    return report, good_indices(report, manifest, who, what)


def good_indices(report: Any, manifest: Manifest, who: str, what: str) -> Any:
    """The indices of the good samples of a validation ``report`` (``None``: all), with a
    warning counting the rest; every sample bad is an error."""
    if not report.problems:
        return None
    if len(report.ok_indices) == 0:
        report.clean_manifest()  # raises: every sample is bad, nothing is left to train on
    # Tar shards: the samples left out while indexing count too (manifest.skipped).
    total = len(manifest) + len(getattr(manifest, "skipped", ()))
    warnings.warn(
        f"extsrc.{who}(on_error='skip'): skipping {report.num_bad} of {total} "
        f"{what} of {manifest.source} ({report.counts}), e.g. {report.problems[0]}. "
        "loader.skipped lists them all; batch['index'] still refers to the original "
        "manifest",
        stacklevel=user_stacklevel(),
    )
    return report.ok_indices


def validate_images(bad: BadFiles, manifest: Manifest, kwargs: dict[str, Any]) -> Any:
    """The :class:`~extsrc.ValidationReport` of every image, with the loader's limits: the
    image checks themselves, since an image loader's manifest lists images (the media detection
    of :func:`extsrc.validate`, and the video checks it may pick, are not for it)."""
    from extsrc.validation.images import check_options
    from extsrc.validation.images import validate_images as check_images

    # n_jobs: this process's share of the cores, so that every rank of a node validating at
    # once does not start cores x ranks processes.
    # progress: a bar once validating has taken SLOW_SECONDS, none for a quick one.
    defaults = {"max_pixels": bad.max_pixels, "n_jobs": cores_per_process(),
                "max_file_bytes": bad.max_file_bytes, "progress": SLOW_SECONDS}
    return check_images(manifest, check_options(**{**defaults, **kwargs}))


def stand_in_problems(
    manifest: Manifest, bad: BadFiles, skipped: Sequence[Any], indices: Iterable[Any]
) -> tuple[Any, ...]:
    """The problems of the samples ``indices`` that could not be read during an epoch (a file
    or object deleted, damaged or refused after the up-front check) and went out as ``is_pad``
    rows holding another sample, each not yet in ``skipped`` once, with a warning."""
    from extsrc.sources.imagecheck import check_file
    from extsrc.validation.report import Problem

    known = {p.index for p in skipped}
    m = manifest
    problems = []
    for i in dict.fromkeys(int(i) for i in indices):
        if i in known:
            continue
        finding = check_file(m.paths[i], decode=False, max_pixels=bad.max_pixels,
                             max_file_bytes=bad.max_file_bytes, storage=m.storage)
        reason, message = ((finding.reason, f"{finding.message}; {finding.fix}")
                           if finding is not None else
                           ("unreadable", "could not be read during the epoch"))
        problem = Problem(index=i, line=m.lines[i], path=m.paths[i], reason=reason,
                          message=message, source=m.source)
        problems.append(problem)
        warnings.warn(
            f"extsrc.Loader(on_error='skip'): {problem}; its place in the batch holds "
            "another sample marked is_pad (loader.skipped lists it)", stacklevel=4)
    return tuple(problems)
