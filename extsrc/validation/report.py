"""What a validation found: :class:`Problem` (one bad sample) and :class:`ValidationReport` (every
problem of a manifest, its good samples, a summary, and the clean manifest to train on).

Both the image checks (:mod:`extsrc.validation.images`) and the video checks
(:mod:`extsrc.validation.videos`) build these, and :func:`extsrc.validate` returns them.
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extsrc._util.argcheck import check_int, check_path
from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, OutputOverwritesInputError
from extsrc.sources.imagecheck import REASONS
from extsrc.sources.manifest import Manifest
from extsrc.sources.where import is_folder_source, sample_where

__all__ = ["Problem", "ValidationReport", "same_file"]


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
    code (see :data:`extsrc.sources.imagecheck.REASONS`) and a ``message`` saying what is wrong and
    how to fix it. ``source`` is the manifest file."""

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
            storage=m.storage,
        )

    def write_clean(self, path: str | os.PathLike[str]) -> Path:
        """Write the good samples as a CSV manifest (``path,label`` header); reading it back
        with :func:`~extsrc.sources.table.read_manifest` (no ``root=``) gives exactly these samples.

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
        check_path(path, "ValidationReport.write_clean: path", "a file path")
        if hasattr(self.manifest, "shards"):
            raise ManifestError(
                f"write_clean: {shown(self.manifest.source)} is tar shards, whose members a CSV "
                "manifest cannot list; train on report.clean_manifest(), or pass "
                "bad_files=extsrc.BadFiles(on_error='skip') to the Loader, or rewrite the shards "
                "without the bad samples")
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
        File names are escaped (:func:`extsrc._util.textsafe.shown`)."""
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
            "report.write_clean('clean.csv'), or pass bad_files=extsrc.BadFiles(on_error='skip') "
            "to extsrc."
            f"{'VideoLoader' if self.media == 'video' else 'Loader'}."
        )
        return "\n".join(lines)

    def _meaning(self, reason: str) -> str:
        if self.media == "video":
            from extsrc.sources.video.probe import VIDEO_REASONS

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
