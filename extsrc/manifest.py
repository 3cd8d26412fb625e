"""Reading labelled file lists ("manifests") into a validated, immutable :class:`Manifest`.

A manifest lists one sample per line: a file path and one or more labels. Supported layouts:

* CSV (``images/0001.jpg,3``), with or without a header row, quoted paths allowed;
* TSV (``images/0001.jpg<TAB>3``), with or without a header row;
* whitespace-separated text (``/home/data/images/1.JPEG 0``), the classic ``train.txt``.

In every layout blank lines and full-line ``#`` comments are skipped, a UTF-8 BOM and CRLF line
endings are accepted, and every sample remembers its 1-based line in the file so that errors
anywhere in extsrc can point at ``manifest.csv line 17``.

A folder of class sub-folders (``train/cat/1.jpg``) is read as a manifest too:
:meth:`Manifest.from_folder`, or :func:`read_manifest` given the folder (see
:mod:`extsrc.folders`).

Public API: :func:`read_manifest` and :class:`Manifest` (plus ``Manifest.from_lists`` and
``Manifest.from_folder``).
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import os
import re
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from extsrc.argcheck import check_bool
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.slowstart import stage
from extsrc.textsafe import shown

__all__ = ["Manifest", "read_manifest"]

# Header names recognised without being asked, in order of preference.
PATH_NAMES: tuple[str, ...] = ("path", "filepath", "filename", "file", "image", "img")
LABEL_NAMES: tuple[str, ...] = ("label", "labels", "class", "target")
_KNOWN_NAMES = frozenset(PATH_NAMES + LABEL_NAMES)

_INT64_MAX = int(np.iinfo(np.int64).max)
# ASCII digits only: Python's int() would also accept "1_000" and non-ASCII digits, which
# are far more likely to be typos than intended labels.
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][+-]?[0-9]+)\Z")
_LOOKS_LIKE_FILE_RE = re.compile(r"[/\\]|\.[A-Za-z0-9]{1,5}\Z")
_WHITESPACE_SEP = r"\s+"
# What pandas' C parser splits a whitespace layout on (its delim_whitespace): spaces and tabs,
# not the other characters str.split() takes for whitespace (a no-break space stays data).
_SPACES_RE = re.compile(r"[ \t]+")
_OTHER_SPACE_RE = re.compile(r"[^\S \t]")  # whitespace other than spaces and tabs
# How a missing value is spelt in exported tables (pandas' default NA strings, R's NA, Python's
# None): as a label it would silently become a class named "nan".
_MISSING_TEXT = frozenset({
    "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
})
_FROM_LISTS_SOURCE = "<from_lists>"
_MAX_MISSING_REPORTED = 5

ColumnSpec = str | int
LabelColsSpec = str | int | Sequence[str | int]
HeaderSpec = Literal["infer"] | bool | int | None


class _Loc:
    """Formats "where" for messages: ``manifest.csv line 4`` or ``<from_lists> item 4``."""

    def __init__(self, source: str, unit: str = "line") -> None:
        self.source = shown(source)  # messages reach terminals: no control characters
        self.unit = unit

    def at(self, n: int) -> str:
        return f"{self.source} {self.unit} {n}"


@dataclass(frozen=True, eq=False)
class Manifest:
    """An immutable, validated list of samples: resolved file paths and integer labels.

    Attributes:
        paths: absolute, normalised file paths (``str``), one per sample.
        labels: read-only ``np.int64`` array, shape ``(N,)`` for one label column or
            ``(N, k)`` for ``k`` label columns; all values are ``>= 0``.
        classes: sorted class names when the (single) label column held names; ``labels`` are
            then indices into it. ``None`` when labels were integers.
        lines: 1-based line number in ``source`` of every sample (for a folder: its 1-based
            sample number in the listing order).
        source: the manifest path as given to :func:`read_manifest` (``"<from_lists>"`` for
            :meth:`from_lists`; for :meth:`from_folder`, the folder with a trailing ``/``).
        root: the folder every path must stay inside (symlinks followed), set by
            ``read_manifest(root=...)`` unless ``allow_outside_root=True``; ``None``: no limit.
            The Loader, :func:`extsrc.validate` and the source refuse paths outside it
            (see :meth:`outside_root`).

    ``labels`` is always a private read-only copy, so the caller's array is never frozen or
    aliased. Two manifests are equal when all fields are equal.
    """

    paths: tuple[str, ...]
    labels: np.ndarray
    classes: list[str] | None
    lines: tuple[int, ...]
    source: str
    root: str | None = None

    def __post_init__(self) -> None:
        # Normalise through object.__setattr__: the dataclass is frozen, but accepting any
        # sequence/array here and storing tuples / a private read-only copy keeps it immutable.
        source = str(self.source)
        where = shown(source)
        paths = tuple(self.paths)
        # all(map(...)) first: per-element Python checks cost seconds on 1M samples.
        if not (all(map(isinstance, paths, itertools.repeat(str))) and _all_absolute(paths)):
            i, p = next(
                (i, p)
                for i, p in enumerate(paths)
                if not isinstance(p, str) or not os.path.isabs(p)
            )
            raise ManifestError(
                f"{where}: Manifest.paths[{i}] must be an absolute path str, got {p!r}; "
                "use read_manifest() or Manifest.from_lists() to resolve relative paths"
            )
        labels = _validated_label_array(self.labels, len(paths), where)
        line_array = np.asarray(self.lines)
        if (
            line_array.shape != (len(paths),)
            or (line_array.size and line_array.dtype.kind not in "iu")
            or (line_array.size and line_array.min() < 1)
        ):
            raise ManifestError(
                f"{where}: Manifest.lines must hold one 1-based line number per path "
                f"({len(paths)}), got {line_array.shape[0] if line_array.ndim else 0} value(s)"
            )
        lines = tuple(line_array.tolist())
        classes = None if self.classes is None else list(self.classes)
        if classes is not None:
            _validate_classes(classes, labels, where)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "lines", lines)
        object.__setattr__(self, "classes", classes)
        if self.root is not None:
            object.__setattr__(self, "root", os.path.normpath(os.path.abspath(self.root)))

    def __len__(self) -> int:
        return len(self.paths)

    def where(self, index: int) -> str:
        """Where sample ``index`` (0-based) comes from, as messages name it:
        ``train.csv line 17``, or ``folder train/, sample 17`` for a folder dataset."""
        from extsrc.folders import sample_where

        return sample_where(self.source, self.lines[index])

    def outside_root(self, *, follow_symlinks: bool = False) -> list[int]:
        """Indices of paths outside :attr:`root` (none when ``root`` is ``None``).

        Paths are normalised, so ``..`` escapes and absolute paths elsewhere show up without
        touching the disk; ``follow_symlinks=True`` also resolves every path (one ``realpath``
        per file) to catch symlinks that point out of the root.
        """
        if self.root is None:
            return []
        prefix = os.path.join(self.root, "")
        starts = str.startswith
        if not follow_symlinks and all(map(starts, self.paths, itertools.repeat(prefix))):
            return []
        bad = [i for i, p in enumerate(self.paths) if not p.startswith(prefix)]
        if follow_symlinks:
            real_prefix = os.path.join(os.path.realpath(self.root), "")
            seen = set(bad)
            bad += [
                i for i, p in enumerate(self.paths)
                if i not in seen and not os.path.realpath(p).startswith(real_prefix)
            ]
            bad.sort()
        return bad

    def check_root(self) -> None:
        """Raise :class:`~extsrc.errors.PathOutsideRootError` naming the first lines whose path
        leaves :attr:`root` (lexically: ``..`` or an absolute path elsewhere)."""
        bad = self.outside_root()
        if not bad:
            return
        from extsrc.errors import PathOutsideRootError
        from extsrc.folders import is_folder_source, sample_where

        unit = "sample" if is_folder_source(self.source) else "line"
        listed = "; ".join(f"{unit} {self.lines[i]}: {shown(self.paths[i])}" for i in bad[:5])
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise PathOutsideRootError(
            f"{sample_where(self.source, self.lines[bad[0]])}: path {shown(self.paths[bad[0]])} is "
            f"outside the root {shown(self.root)} ({len(bad)} of {len(self)} paths are: "
            f"{listed}{more}); fix the "
            "paths, or pass allow_outside_root=True to read_manifest if this is intended"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Manifest):
            return NotImplemented
        return (
            self.paths == other.paths
            and self.labels.shape == other.labels.shape
            and bool(np.array_equal(self.labels, other.labels))
            and self.classes == other.classes
            and self.lines == other.lines
            and self.source == other.source
            and self.root == other.root
        )

    def __hash__(self) -> int:
        return hash((self.fingerprint(), self.source))

    def __repr__(self) -> str:
        classes = self.classes
        if classes is not None and len(classes) > 8:
            shown = ", ".join(repr(c) for c in classes[:8])
            classes_repr = f"[{shown}, ... ({len(classes)} classes)]"
        else:
            classes_repr = repr(classes)
        return (
            f"Manifest(source={self.source!r}, samples={len(self)}, "
            f"labels_shape={self.labels.shape}, classes={classes_repr})"
        )

    @cached_property
    def _fingerprint(self) -> str:
        # cached_property writes straight into __dict__, which a frozen dataclass allows.
        h = hashlib.sha256()
        h.update(b"extsrc-manifest-v1\0")
        h.update(repr((len(self.paths), self.labels.shape)).encode())
        for p in self.paths:
            # Length-prefix each path so ("ab", "c") and ("a", "bc") cannot collide.
            raw = p.encode("utf-8", "surrogateescape")
            h.update(len(raw).to_bytes(8, "little"))
            h.update(raw)
        h.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        return h.hexdigest()

    def fingerprint(self) -> str:
        """SHA-256 hex digest of the resolved paths and the labels (in order).

        ``source``, ``lines`` and ``classes`` are deliberately left out: moving the manifest,
        adding comments or renaming a class keeps the same samples, so a resume state stays
        valid; changing any path, label or the sample order changes the fingerprint.
        """
        return self._fingerprint

    @classmethod
    def from_lists(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        labels: Sequence[object] | np.ndarray,
        *,
        root: str | os.PathLike[str] | None = None,
    ) -> Manifest:
        """Build a manifest in code, with the same label rules as :func:`read_manifest`.

        Args:
            paths: file paths; relative ones resolve against ``root``.
            labels: one label per path: integers ``>= 0`` or class names (strings), or one
                row of integers per path (2-D) for several label columns. Strings that look
                like integers count as integers; floats and bools are refused.
            root: folder for relative paths; default: the current working directory.

        ``source`` is ``"<from_lists>"`` and ``lines`` are the 1-based item positions, which
        errors name: a missing value (``None``, a float NaN, pandas' ``NA``, an empty string,
        or a label such as ``"nan"``) in either list, a path that is not a str/``os.PathLike``,
        and a path the operating system cannot open (as for :func:`read_manifest`). A single
        str for ``paths`` (or for ``labels``) is a ``TypeError``: it would be read character
        by character.
        """
        loc = _Loc(_FROM_LISTS_SOURCE, "item")
        if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Iterable):
            raise TypeError(
                f"Manifest.from_lists: paths must be a list (or other sequence) of file paths, "
                f"got {type(paths).__name__}; wrap a single path in a list"
            )
        if isinstance(labels, (str, bytes)) or not isinstance(labels, Iterable):
            raise TypeError(
                f"Manifest.from_lists: labels must be a list (or array) with one label per path, "
                f"got {type(labels).__name__}"
            )
        if root is not None and not isinstance(root, (str, os.PathLike)):
            raise TypeError(
                f"Manifest.from_lists: root must be a folder path (str or os.PathLike) or None, "
                f"got {type(root).__name__} {root!r}"
            )
        refuse_url(root, "Manifest.from_lists: root")
        paths = list(paths)
        if all(map(isinstance, paths, itertools.repeat(str))):
            path_cells = paths
        else:
            path_cells = [_path_cell_from_object(p, loc, k) for k, p in enumerate(paths, 1)]
        n = len(path_cells)
        try:
            arr = np.asarray(labels, dtype=object)
        except ValueError:  # ragged rows
            raise ManifestError(
                f"{loc.source}: labels must be one label per path, or rows of the same length; "
                "got rows of different lengths"
            ) from None
        if arr.ndim == 1 and any(isinstance(v, (list, tuple, np.ndarray)) for v in arr):
            raise ManifestError(
                f"{loc.source}: labels must be one label per path, or rows of the same length; "
                "got rows of different lengths"
            )
        if arr.ndim not in (1, 2) or len(arr) != n:
            raise ManifestError(
                f"{loc.source}: expected one label (or one row of labels) per path, got labels "
                f"of shape {arr.shape} for {n} path(s)"
            )
        item_lines = list(range(1, n + 1))
        columns = [arr] if arr.ndim == 1 else [arr[:, j] for j in range(arr.shape[1])]
        if not columns:
            raise ManifestError(f"{loc.source}: labels have no columns (shape {arr.shape})")
        cell_columns = [
            [_label_cell_from_object(v, loc, line) for v, line in zip(col, item_lines, strict=True)]
            for col in columns
        ]
        names = [f"column {j}" for j in range(len(cell_columns))]
        label_array, classes = _parse_labels(cell_columns, names, item_lines, loc)
        root_dir = os.path.abspath(os.getcwd() if root is None else os.fspath(root))
        resolved = _resolve_paths(path_cells, item_lines, loc, root_dir, "the paths list")
        return cls(
            paths=tuple(resolved),
            labels=label_array,
            classes=classes,
            lines=tuple(item_lines),
            source=loc.source,
        )

    @classmethod
    def from_folder(
        cls,
        root: str | os.PathLike[str],
        *,
        extensions: Iterable[str] | None = None,
        allow_empty: bool = False,
        allow_outside_root: bool = False,
    ) -> Manifest:
        """A folder dataset: every image under ``root/<class>/`` is a sample of that class.

        ImageFolder layout (``train/cat/1.jpg``, ``train/dog/2.png``): each sub-folder of
        ``root`` is a class; ``classes`` is their sorted names and labels index into it. When
        every class folder's name is a non-negative integer (``0/``, ``7/``, ``012/``), those
        integers are the labels and ``classes`` is ``None``.

        Args:
            root: the dataset folder.
            extensions: the file types listed, case-insensitive (``[".jpg", "png"]``); default:
                the image formats DALI decodes (:data:`extsrc.folders.IMAGE_EXTENSIONS`: jpg,
                jpeg, png, bmp, tif, tiff, webp, pnm, ppm, pgm, pbm, jp2).
            allow_empty: keep a class folder without images as a class without samples.
            allow_outside_root: allow symlinks that lead outside ``root``.

        Rules:
            * Order: sorted by relative path, compared folder by folder (class by class), so
              the same tree always gives the same samples, labels and fingerprint.
            * Class folders are searched recursively (``cat/2024/1.jpg`` is a ``cat``).
            * Names starting with ``.`` (``.DS_Store``, ``.ipynb_checkpoints``) are skipped,
              files and folders, at every level.
            * Files without one of ``extensions`` are skipped (``notes.txt``, ``Thumbs.db``),
              in the root and in class folders; an image file directly in ``root`` belongs to
              no class and is refused, naming it.
            * A class folder with no listed file is refused, naming it (an empty class shifts
              every later label), unless ``allow_empty=True``. Two integer folder names of one
              number (``7/``, ``07/``) are refused.
            * Symlinked folders and files are followed (a symlink loop is refused). ``root``
              becomes :attr:`root`: a file whose real path lies outside it is refused, naming
              it, when the manifest is used, as for ``read_manifest(root=...)``;
              ``allow_outside_root=True`` lifts that.
            * There are no lines: :attr:`source` is ``root`` as given with a trailing ``/``,
              :attr:`lines` the 1-based sample numbers, and messages name a sample as
              ``folder train/, sample 17: <its path>``.

        Raises:
            ManifestFileNotFoundError: ``root`` is not a folder.
            ManifestError: a rule above is broken, or no image file was found.
        """
        from extsrc.folders import read_folder

        return read_folder(
            root, extensions=extensions, allow_empty=allow_empty,
            allow_outside_root=allow_outside_root,
        )


def read_manifest(
    path: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    sep: str | None = None,
    path_col: ColumnSpec | None = None,
    label_cols: LabelColsSpec | None = None,
    header: HeaderSpec = "infer",
    check_files: bool = False,
    allow_outside_root: bool = False,
) -> Manifest:
    """Read a CSV / TSV / whitespace-separated manifest into a :class:`Manifest`.

    Args:
        path: the manifest file (UTF-8, optional BOM, LF or CRLF line endings), or a folder of
            class sub-folders: then this is ``Manifest.from_folder(path, root=root,
            allow_outside_root=allow_outside_root)`` (its rules apply; ``sep``, ``path_col``,
            ``label_cols`` and ``header`` must keep their defaults).
        root: folder that relative paths resolve against; default: the manifest's folder.
            Paths become ``os.path.normpath(os.path.join(root, p))``; symlinks are not
            followed, absolute paths are kept. A relative ``root`` is taken from the cwd.
            For a folder dataset: the folder its files must stay inside; default: itself.
        sep: field separator. ``None`` sniffs the first non-blank, non-``#`` line: a tab means
            TSV, else a comma means CSV, else fields are separated by runs of whitespace.
        path_col: the path column, by header name or 0-based position. Default: the header
            column named one of ``path, filepath, filename, file, image, img``
            (case-insensitive), else column 0.
        label_cols: the label column(s), by name or position, or a sequence of those.
            Default: the header column named one of ``label, labels, class, target``, else
            every column after the path column.
        header: ``True``/``0``: the first data line is a header; ``False``/``None``: there is
            none; ``"infer"``: decide by one rule, the same whichever columns are chosen
            by position:

            1. If ``path_col``/``label_cols`` name a column (a str), there is a header.
            2. Else the first line is a **sample** when its path cell looks like a file (holds
               ``/`` or ``\\``, or ends in an extension such as ``.jpg``) or one of its label
               cells is an integer: a header never names files or holds numbers, and a sample
               taken for a header would be lost silently, while a bad sample is reported with
               its line (``imgs/a.jpg,target``, ``image 3`` and ``a.jpg,cat`` are samples).
            3. Else it is a **header** when (a) its path or label cells include one of the
               well-known names above (case-insensitive), or (b) one of its label cells sits
               over a column that is an integer on every other line (``fname,y``), or (c) its
               path cell sits over a column whose every other cell looks like a file
               (``fname,species,split`` over ``imgs/a.jpg,cat,train``).
            4. Else it is a sample. Pass ``header=True`` for a header this rule cannot see
               (other names over paths without extensions).
        check_files: check that every listed file exists (raises
            :class:`~extsrc.errors.ManifestFileNotFoundError` naming the first few missing).
        allow_outside_root: when ``root`` is given, every path must stay inside it: a path
            that normalises outside (``..``, an absolute path elsewhere) or a symlink resolving
            outside is refused, naming its line, when the manifest is used (by ``Loader``,
            :func:`extsrc.validate`, and when the file is opened), not by ``read_manifest``
            itself; :meth:`Manifest.check_root` checks it now. ``True`` lifts the limit.
            Without ``root`` there is no limit.

    Rules:
        * Blank lines and lines whose first non-space character is ``#`` are skipped; ``#``
          anywhere else is data. A ``#`` line that reads as a sample (``#1.png,3``: no space
          after ``#``, a file-like first field and as many fields as the data lines) is
          refused, since a file whose name starts with ``#`` would otherwise vanish silently:
          quote the path (``"#1.png",3``) to list the file, or write ``# `` (a space after
          ``#``) to keep the line a comment.
        * Quotes (``"a, b.jpg",3``) protect separators in paths; a quoted field may not span
          lines. Whitespace around cells is ignored, so paths cannot start or end with spaces.
        * Trailing empty fields (``a.jpg,3,``) are ignored; more fields than columns is an error.
        * Labels are integers ``>= 0`` that fit in int64, or, for a single label column, class
          names (every value a non-integer string): ``classes`` is then the sorted unique names
          and labels index into it. Mixing the two, floats (``1.0``), empty, negative or too
          large labels are errors, as are class names when there are several label columns.
        * Missing values are errors, naming the line: an empty path or label, and a label
          written the way exported tables write a missing value (``nan``, ``NaN``, ``NA``,
          ``None``, ``null``, ``<NA>``, ``N/A``, ...), which would otherwise become a class.
          Such text in a path cell stays a file name (if no such file exists, that is
          reported when it is checked or read).
        * Paths the operating system cannot open as given are errors, naming the line: a NUL
          byte, characters the file system's encoding cannot represent, a path or a part of
          it longer than the OS allows.

    Raises:
        ManifestFileNotFoundError: the manifest, or (``check_files``) a listed file, is missing.
        ManifestError: anything malformed; the message names the file and the 1-based line.
        TypeError: an argument of the wrong type (numpy integers count as ints; bools and
            floats are not column positions); ``ValueError`` for one out of range. Messages
            name the argument.
    """
    from extsrc.sources.shards import is_shard_source, read_shards

    if is_shard_source(path):  # tar shards: extsrc.sources.shards.read_shards, label="cls"
        _refuse_shard_args(path, root=root, sep=sep, path_col=path_col, label_cols=label_cols,
                           header=header, check_files=check_files)
        return read_shards(path)
    path_col, label_cols, header = _check_read_args(
        path, root, sep, path_col, label_cols, header, check_files, allow_outside_root
    )
    refuse_url(path, "read_manifest: the manifest")
    refuse_url(root, "read_manifest: root")
    source = os.fsdecode(os.fspath(path))
    if os.path.isdir(source):
        given = {"sep": sep, "path_col": path_col, "label_cols": label_cols}
        if header != "infer":
            given["header"] = header
        set_args = [f"{k}={v!r}" for k, v in given.items() if v is not None]
        if set_args:
            raise ManifestError(
                f"{shown(source)}: is a folder, read as a folder dataset (one sub-folder per "
                f"class), which has no columns; drop {', '.join(set_args)}, or pass the "
                ".csv/.tsv/.txt manifest file"
            )
        from extsrc.folders import read_folder

        return read_folder(source, root=root, allow_outside_root=allow_outside_root)
    where = shown(source)  # the manifest's name as messages show it
    with stage(f"reading the manifest {where}"):
        return _read_file(source, where, root=root, sep=sep, path_col=path_col,
                          label_cols=label_cols, header=header, check_files=check_files,
                          allow_outside_root=allow_outside_root)


def _refuse_shard_args(path: object, **given: object) -> None:
    """Tar shards have no columns or root: refuse the arguments that would be ignored."""
    set_args = [f"{k}={v!r}" for k, v in given.items()
                if v not in (None, False) and not (k == "header" and v == "infer")]
    if set_args:
        raise ManifestError(
            f"{shown(path)}: tar shards have no columns or root; drop {', '.join(set_args)}, or "
            "call extsrc.read_shards(...) for the shards' options (label=, image_extensions=)"
        )


def _read_file(source: str, where: str, *, root: str | os.PathLike[str] | None,
               sep: str | None, path_col: ColumnSpec | None, label_cols: LabelColsSpec | None,
               header: HeaderSpec, check_files: bool, allow_outside_root: bool) -> Manifest:
    """:func:`read_manifest` of a manifest file, its arguments checked (``where``: the file's
    name as messages show it)."""
    text = _read_text(source)
    # Normalise line endings ourselves so our line numbers agree with pandas' record splitting.
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    stripped = list(map(str.strip, physical))
    data_lines = [
        (number, physical[number - 1])
        for number, line in enumerate(stripped, start=1)
        if line and line[0] != "#"
    ]
    _refuse_sample_like_comments(stripped, data_lines, sep, where)
    if not data_lines:
        saw_comment = any(line.startswith("#") for line in stripped)
        what = "only blank and '#' comment lines" if saw_comment else "no data lines"
        raise ManifestError(
            f"{where}: empty manifest ({what}); add lines like {_example_line(sep, source)!r}"
        )

    if sep is None:
        sep = _sniff_sep(data_lines[0][1])
    # Column-major from here on: per-column list operations keep 1M-line manifests fast.
    columns = _parse_columns(where, data_lines, sep)
    counts = _field_counts(columns)
    line_numbers = [number for number, _ in data_lines]
    loc = _Loc(source)

    first = [col[0] for col in columns]
    has_header = _decide_header(header, first, columns, path_col, label_cols, where)
    if has_header:
        header_line = line_numbers[0]
        names: list[str] | None = first[: int(counts[0])]
        columns = [col[1:] for col in columns]
        counts, line_numbers = counts[1:], line_numbers[1:]
        if not line_numbers:
            raise ManifestError(
                f"{where}: empty manifest (only a header on line {header_line}, no data "
                f"lines); add lines like {_example_line(sep, source)!r}"
            )
        ncols = len(names)
    else:
        names = None
        ncols = int(counts[0])

    path_pos, label_pos = _resolve_columns(names, ncols, path_col, label_cols, loc, line_numbers)
    col_names = [_column_desc(names, j) for j in label_pos]
    _check_field_counts(counts, line_numbers, names, ncols, path_pos, label_pos, loc, sep)

    label_columns = [columns[j] for j in label_pos]
    # How to name one label column in label_cols=..., for advice in messages.
    specs = [repr(names[j]) if names is not None and names[j] else str(j) for j in label_pos]
    labels, classes = _parse_labels(
        label_columns, col_names, line_numbers, loc, specs, header_seen=names is not None
    )

    root_dir = os.path.abspath(
        os.path.dirname(os.path.abspath(source)) if root is None else os.fspath(root)
    )
    resolved = _resolve_paths(
        columns[path_pos], line_numbers, loc, root_dir, _column_desc(names, path_pos)
    )
    if check_files:
        _check_files_exist(resolved, line_numbers, loc, root_dir)
    return Manifest(
        paths=tuple(resolved),
        labels=labels,
        classes=classes,
        lines=tuple(line_numbers),
        source=source,
        root=root_dir if root is not None and not allow_outside_root else None,
    )


def _check_read_args(
    path: object,
    root: object,
    sep: object,
    path_col: object,
    label_cols: object,
    header: object,
    check_files: object,
    allow_outside_root: object,
) -> tuple[ColumnSpec | None, LabelColsSpec | None, HeaderSpec]:
    """Type and range checks of read_manifest's arguments; numpy integers become ints."""
    fn = "read_manifest"
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(
            f"{fn}: path must be the manifest file (str or os.PathLike), got "
            f"{type(path).__name__} {path!r}"
        )
    if root is not None and not isinstance(root, (str, bytes, os.PathLike)):
        raise TypeError(
            f"{fn}: root must be a folder (str or os.PathLike) or None, got "
            f"{type(root).__name__} {root!r}"
        )
    if sep is not None:
        if not isinstance(sep, str):
            raise TypeError(f"{fn}: sep must be a str or None (sniff), got {type(sep).__name__}")
        if not sep or any(c in sep for c in '"\n\r'):
            raise ValueError(
                f"{fn}: sep must be a non-empty separator without quotes or line breaks, such as "
                f"',', '\\t' or r'\\s+', got {sep!r}"
            )

    def column(spec: object, name: str) -> ColumnSpec:
        if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, (str, int, np.integer)):
            raise TypeError(
                f"{fn}: {name} must be a column name (str) or a 0-based position (int), got "
                f"{type(spec).__name__} {spec!r}"
            )
        if isinstance(spec, str):
            return spec
        if spec < 0:
            raise ValueError(f"{fn}: {name} must be a 0-based position >= 0, got {int(spec)}")
        return int(spec)

    if path_col is not None:
        path_col = column(path_col, "path_col")
    if label_cols is not None:
        if isinstance(label_cols, (str, int, np.integer, bool, np.bool_)) or not isinstance(
            label_cols, Iterable
        ):
            label_cols = column(label_cols, "label_cols")
        else:
            label_cols = [column(c, "label_cols") for c in label_cols]
    if isinstance(header, np.integer) and not isinstance(header, np.bool_):
        header = int(header)
    elif isinstance(header, np.bool_):
        header = bool(header)
    check_bool(check_files, f"{fn}: check_files")
    check_bool(allow_outside_root, f"{fn}: allow_outside_root")
    return path_col, label_cols, header  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Reading and splitting


def _read_text(source: str) -> str:
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ManifestFileNotFoundError(
            f"{shown(source)}: manifest file not found (looked for "
            f"{shown(os.path.abspath(source))}); "
            "check the path"
        ) from None
    except IsADirectoryError:
        raise ManifestError(
            f"{shown(source)}: is a directory, not a manifest file; pass the path of the "
            ".csv/.tsv/.txt file inside it"
        ) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ManifestError(
            f"{shown(source)} line {line}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset "
            f"{e.start}); save the manifest as UTF-8"
        ) from None


def _split_simple(text: str, sep: str) -> list[str]:
    """Fields of one line without quote handling (enough to judge what a line looks like)."""
    if sep == _WHITESPACE_SEP:
        return text.split()
    parts = text.split(sep) if len(sep) == 1 else re.split(sep, text)
    fields = [f.strip() for f in parts]
    while fields and not fields[-1]:
        fields.pop()
    return fields


def _refuse_sample_like_comments(
    stripped: list[str], data_lines: list[tuple[int, str]], sep: str | None, where: str
) -> None:
    """Refuse ``#1.png,3``: a full-line comment by the rules, but it reads as a sample, and
    skipping it would drop the file ``#1.png`` silently."""
    if len(data_lines) + stripped.count("") == len(stripped):
        return  # no comment lines (counted in C: 1M-line manifests stay fast)
    for number, line in enumerate(stripped, start=1):
        if line[:1] != "#" or len(line) < 2 or line[1].isspace() or line[1] == "#":
            continue
        body = line[1:]
        line_sep = sep if sep is not None else _sniff_sep(data_lines[0][1] if data_lines else body)
        fields = _split_simple(body, line_sep)
        if len(fields) < 2 or not all(fields):
            continue
        if data_lines and len(fields) != len(_split_simple(data_lines[0][1], line_sep)):
            continue
        if line_sep != _WHITESPACE_SEP and any(c.isspace() for c in fields[0]):
            continue  # prose, not a path
        if _LOOKS_LIKE_FILE_RE.search(fields[0]):
            q = '"'
            raise ManifestError(
                f"{where} line {number}: starts with '#', which marks a comment, but reads as a "
                f"sample ({shown(line)!r}); quote the path ({q}#{shown(fields[0])}{q},...) to "
                "list a file whose name starts with '#', or write '# ' (a space after '#') to "
                "keep the line a comment"
            )


def _sniff_sep(first_line: str) -> str:
    if "\t" in first_line:
        return "\t"
    if "," in first_line:
        return ","
    return _WHITESPACE_SEP


def _example_line(sep: str | None, source: str) -> str:
    if sep is None:
        ext = os.path.splitext(source)[1].lower()
        sep = {".tsv": "\t", ".txt": " "}.get(ext, ",")
    if sep == _WHITESPACE_SEP:
        sep = " "
    return f"images/0001.jpg{sep}3"


def _max_fields(texts: list[str], sep: str) -> int:
    """Upper bound on the fields of any line (quoting can only merge fields, never split)."""
    if sep == _WHITESPACE_SEP:
        # Fields are split at spaces and tabs only; str.split() also splits at other whitespace
        # (a form feed between spaces is a field of its own to the parser).
        if any(map(_OTHER_SPACE_RE.search, texts)):
            return max(len(_SPACES_RE.split(t)) for t in texts)
        return max(map(len, map(str.split, texts)))
    if len(sep) == 1:
        return max(map(str.count, texts, itertools.repeat(sep))) + 1
    return max(len(re.split(sep, t)) for t in texts)


# Lines of different widths split one by one up to here, by pandas from here on.
_PLAIN_RAGGED_MAX = 50_000


def _split_plain(texts: list[str], sep: str, width: int) -> list[list[str]] | None:
    """The cells of ``texts`` as :func:`_parse_columns` returns them, without pandas, when no
    line needs a CSV parser: a comma, a tab or whitespace between fields, and no quote or NUL
    anywhere. ``None`` otherwise.

    Importing pandas takes 0.2-0.7 s, more than reading a manifest of 100k plain lines does;
    most manifests are such lines. ``tests/test_manifest.py`` checks that both splits agree."""
    if sep not in (",", "\t", _WHITESPACE_SEP):
        return None
    joined = "\n".join(texts)
    if '"' in joined or "\0" in joined:
        return None
    # Every line as wide as the widest (no line has more than `width` fields): one split of
    # the whole text, in C.
    flat = (_SPACES_RE.split(joined.replace("\n", " ")) if sep == _WHITESPACE_SEP
            else joined.replace("\n", sep).split(sep))
    if len(flat) == width * len(texts):
        return [list(map(str.strip, flat[j::width])) for j in range(width)]
    if len(texts) > _PLAIN_RAGGED_MAX:
        return None  # pandas splits many lines of different widths faster
    rows = (map(_SPACES_RE.split, texts) if sep == _WHITESPACE_SEP
            else (t.split(sep) for t in texts))
    pad = [""] * width
    rows = [row if len(row) == width else row + pad[len(row):] for row in rows]
    return [list(map(str.strip, col)) for col in zip(*rows, strict=True)]


def _parse_columns(source: str, data_lines: list[tuple[int, str]], sep: str) -> list[list[str]]:
    """Split data lines into stripped cells (with pandas' CSV parser where quotes or a
    separator other than a comma, a tab or whitespace need it).

    Returns one list per column (as many as the widest line could have), each holding one
    cell per data line, in order; absent fields are "".
    """
    whitespace = sep == _WHITESPACE_SEP
    # Whitespace layouts: strip each line so indentation never creates an empty first field.
    texts = [line for _, line in data_lines]
    if whitespace:
        texts = list(map(str.strip, texts))
    width = _max_fields(texts, sep)
    plain = _split_plain(texts, sep, width)
    if plain is not None:
        return plain
    return _split_csv(source, data_lines, texts, sep, width)


def _split_csv(source: str, data_lines: list[tuple[int, str]], texts: list[str], sep: str,
               width: int) -> list[list[str]]:
    """:func:`_parse_columns` with pandas' parser (``texts``: the data lines as it splits
    them, ``width``: the most fields a line may have)."""
    import pandas as pd

    whitespace = sep == _WHITESPACE_SEP
    engine = "c" if whitespace or len(sep) == 1 else "python"
    kwargs: dict[str, object] = {}
    if not whitespace:
        # Lets `a.jpg, "b c"` and ` "a, b.jpg",3` parse as quoted fields.
        kwargs["skipinitialspace"] = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.StringIO("\n".join(texts) + "\n"),
                sep=sep,
                header=None,
                names=list(range(width)),
                index_col=False,
                # Strings in, conversion by hand: "1.0", "" and "-3" must reach our checks.
                dtype=str,
                na_filter=False,
                keep_default_na=False,
                # Blank and comment lines are already gone; only full-line comments exist.
                skip_blank_lines=False,
                comment=None,
                quotechar='"',
                engine=engine,
                **kwargs,
            )
    except pd.errors.ParserError as e:
        # pandas counts records from 0 in our comment-free text: map back to the file line.
        match = re.search(r"EOF inside string starting at row (\d+)", str(e))
        if match and int(match.group(1)) < len(data_lines):
            raise ManifestError(
                f"{source} line {data_lines[int(match.group(1))][0]}: unclosed quote '\"' (the "
                "field runs to the end of the file); close the quote on the same line"
            ) from None
        raise ManifestError(
            f"{source}: cannot split into fields ({e}); check for an unclosed quote '\"'"
        ) from None
    if len(frame) != len(data_lines):
        # Fewer records than lines: a quoted field swallowed a line break.
        culprit = next(
            (
                number
                for (number, _), t in zip(data_lines, texts, strict=True)
                if t.count('"') % 2 == 1
            ),
            None,
        )
        where = f"{source} line {culprit}" if culprit is not None else source
        raise ManifestError(
            f"{where}: a quoted field continues onto the next line; line breaks inside paths "
            "are not supported, so close the quote '\"' on the same line"
        )
    # The python engine (regex seps) leaves absent fields as NaN rather than "".
    return [list(map(str.strip, frame[j].fillna("").astype(object).tolist())) for j in range(width)]


def _field_counts(columns: list[list[str]]) -> np.ndarray:
    """Per line: fields up to the last non-empty one (trailing empty fields are ignored)."""
    n = len(columns[0])
    counts = np.zeros(n, dtype=np.int64)
    for j, col in enumerate(columns):
        # Later columns overwrite earlier ones, leaving (last non-empty position + 1).
        counts[np.fromiter(map(bool, col), dtype=bool, count=n)] = j + 1
    return counts


# --------------------------------------------------------------------------------------------
# Header and columns


def _decide_header(
    header: HeaderSpec,
    first: list[str],
    columns: list[list[str]],
    path_col: ColumnSpec | None,
    label_cols: LabelColsSpec | None,
    source: str,
) -> bool:
    wants_names = isinstance(path_col, str) or any(
        isinstance(c, str) for c in _as_label_list(label_cols)
    )
    if header is True or (type(header) is int and header == 0):
        return True
    if header is False or header is None:
        if wants_names:
            raise ManifestError(
                f"{source}: path_col={path_col!r}, label_cols={label_cols!r} name columns, "
                "but header=False; pass header=True or give column positions as ints"
            )
        return False
    if header != "infer":
        raise ManifestError(
            f"{source}: header must be 'infer', True (or 0) or False (or None), got {header!r}"
        )
    if wants_names:
        return True
    path_pos = path_col if isinstance(path_col, int) else 0
    if label_cols is None:
        label_pos = list(
            range(path_pos + 1, max((j + 1 for j, c in enumerate(first) if c), default=0))
        )
    else:
        label_pos = [c for c in _as_label_list(label_cols) if isinstance(c, int)]
    label_pos = [p for p in label_pos if 0 <= p < len(first) and first[p]]
    path_cell = first[path_pos] if 0 <= path_pos < len(first) else ""
    # (1) A first line that names a file, or carries an integer label, is a sample: dropping it
    # as a header would lose it silently; as a sample, a bad one is reported with its line.
    if _LOOKS_LIKE_FILE_RE.search(path_cell) or any(_INT_RE.match(first[p]) for p in label_pos):
        return False
    # (2a) Well-known column names.
    if any(first[p].lower() in _KNOWN_NAMES for p in [path_pos, *label_pos] if p < len(first)):
        return True
    if len(columns[0]) < 2:
        return False
    # (2b) A word over a column of integers is that column's name.
    for p in label_pos:
        if all(map(_INT_RE.match, columns[p][1:])):
            return True
    # (2c) A cell that is not a file name over a column of file names is that column's name.
    if 0 <= path_pos < len(columns):
        return all(map(_LOOKS_LIKE_FILE_RE.search, columns[path_pos][1:]))
    return False


def _as_label_list(label_cols: LabelColsSpec | None) -> list[str | int]:
    if label_cols is None:
        return []
    if isinstance(label_cols, (str, int)):
        return [label_cols]
    return list(label_cols)


def _column_desc(names: list[str] | None, pos: int) -> str:
    if names is not None and pos < len(names) and names[pos]:
        return f"column {names[pos]!r}"
    return f"column {pos}"


def _resolve_columns(
    names: list[str] | None,
    ncols: int,
    path_col: ColumnSpec | None,
    label_cols: LabelColsSpec | None,
    loc: _Loc,
    line_numbers: list[int],
) -> tuple[int, list[int]]:
    source = loc.source

    def lookup(spec: ColumnSpec, role: str, suggest: list[int]) -> int:
        if isinstance(spec, bool) or not isinstance(spec, (str, int)):
            raise ManifestError(
                f"{source}: {role} must be a column name (str) or position (int), got {spec!r}"
            )
        if isinstance(spec, int):
            if not 0 <= spec < max(ncols, 1):
                raise ManifestError(
                    f"{source}: {role}={spec} is out of range; the manifest has {ncols} "
                    f"column(s) (positions 0..{ncols - 1})"
                )
            return spec
        assert names is not None  # _decide_header guarantees a header when names are used
        hits = [j for j, name in enumerate(names) if name == spec]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise ManifestError(
                f"{source}: column {spec!r} appears {len(hits)} times in the header "
                f"(positions {hits}); rename one or pass {role} as a position"
            )
        hint = ""
        if len(suggest) == 1:
            hint = f"; pass {role}={names[suggest[0]]!r}"
        elif suggest:
            hint = f"; pass {role}= one of {[names[j] for j in suggest]}"
        raise ManifestError(
            f"{source}: no column {spec!r}; columns are {names}{hint} "
            "(the first line was read as the header)"
        )

    all_cols = list(range(ncols))
    if path_col is not None:
        path_pos = lookup(path_col, "path_col", all_cols)
    else:
        path_pos = _find_named(names, PATH_NAMES, exclude=None)
        if path_pos is None:
            path_pos = 0

    if label_cols is not None:
        specs = _as_label_list(label_cols)
        if not specs:
            raise ManifestError(f"{source}: label_cols is empty; name at least one label column")
        others = [j for j in all_cols if j != path_pos]
        label_pos = [lookup(s, "label_cols", others) for s in specs]
    else:
        named = _find_named(names, LABEL_NAMES, exclude=path_pos)
        label_pos = [named] if named is not None else list(range(path_pos + 1, ncols))

    if path_pos in label_pos:
        raise ManifestError(
            f"{source}: {_column_desc(names, path_pos)} is both the path column and a label "
            "column; pass different path_col and label_cols"
        )
    if len(set(label_pos)) != len(label_pos):
        raise ManifestError(f"{source}: label_cols={label_cols!r} lists a column twice")
    if not label_pos:
        if names is None:
            # No header: the first line alone decided the column count.
            raise ManifestError(
                f"{loc.at(line_numbers[0])}: expected a path and at least one label, got "
                f"{ncols} field(s)"
            )
        raise ManifestError(
            f"{source}: no label column: the header {names} has no column named one of "
            f"{list(LABEL_NAMES)} and none after the path column; pass label_cols=..."
        )
    return path_pos, label_pos


def _find_named(
    names: list[str] | None, wanted: tuple[str, ...], exclude: int | None
) -> int | None:
    if names is None:
        return None
    lowered = [n.lower() for n in names]
    for want in wanted:
        for j, name in enumerate(lowered):
            if name == want and j != exclude:
                return j
    return None


def _check_field_counts(
    counts: np.ndarray,
    line_numbers: list[int],
    names: list[str] | None,
    ncols: int,
    path_pos: int,
    label_pos: list[int],
    loc: _Loc,
    sep: str,
) -> None:
    needed = max(path_pos, *label_pos) + 1
    like = f" (columns {names})" if names is not None else f" like line {line_numbers[0]}"
    bad = np.flatnonzero((counts > ncols) | (counts < needed))
    if bad.size:
        number, count = line_numbers[bad[0]], int(counts[bad[0]])
        if count > ncols:
            quote_hint = (
                '; quote paths that contain the separator, e.g. "a, b.jpg",3'
                if sep == ","
                else '; quote paths that contain spaces, e.g. "a b.jpg" 3'
                if sep == _WHITESPACE_SEP
                else ""
            )
            raise ManifestError(
                f"{loc.at(number)}: expected {ncols} field(s){like}, got {count}{quote_hint}"
            )
        if count < needed:
            if count < 2:
                raise ManifestError(
                    f"{loc.at(number)}: expected a path and at least one label, got "
                    f"{count} field(s)"
                )
            raise ManifestError(f"{loc.at(number)}: expected {ncols} field(s){like}, got {count}")


# --------------------------------------------------------------------------------------------
# Labels


def _is_missing_object(value: object) -> bool:
    """None, a float NaN, pandas' NA/NaT: a missing value, whatever produced it."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return value != value  # NaN
    return type(value).__name__ in ("NAType", "NaTType")


def _path_cell_from_object(value: object, loc: _Loc, line: int) -> str:
    if isinstance(value, (str, bytes, os.PathLike)):
        return os.fsdecode(os.fspath(value))
    if _is_missing_object(value):
        raise ManifestError(
            f"{loc.at(line)}: missing path ({value!r}); every sample needs a file path: fill it "
            "in or drop the sample"
        )
    raise ManifestError(
        f"{loc.at(line)}: path {value!r} has type {type(value).__name__}; paths must be str or "
        "os.PathLike"
    )


def _label_cell_from_object(value: object, loc: _Loc, line: int) -> str:
    if _is_missing_object(value):
        raise ManifestError(
            f"{loc.at(line)}: missing label ({value!r}); every sample needs a label (an "
            "integer >= 0 or a class name): fill it in or drop the sample"
        )
    if isinstance(value, (bool, np.bool_)):
        raise ManifestError(
            f"{loc.at(line)}: label {value!r} is a bool; labels must be integers >= 0 or "
            "class names"
        )
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (str, float, np.floating)):
        # Floats become "1.0" / "1.5" so the shared checks refuse them with the usual message.
        return str(value).strip()
    raise ManifestError(
        f"{loc.at(line)}: label {value!r} has type {type(value).__name__}; labels must be "
        "integers >= 0 or class names (str)"
    )


def _parse_labels(
    columns: list[list[str]],
    col_names: list[str],
    lines: list[int],
    loc: _Loc,
    specs: list[str] | None = None,
    header_seen: bool = True,
) -> tuple[np.ndarray, list[str] | None]:
    """Turn label cells (strings, one list per column) into an int64 array (+ classes)."""
    several = len(columns) > 1
    out = np.empty((len(lines), len(columns)), dtype=np.int64)
    classes: list[str] | None = None
    for j, (cells, col_name) in enumerate(zip(columns, col_names, strict=True)):
        where = f" in {col_name}" if several else ""
        if _all_small_unsigned_ints(cells):
            out[:, j] = np.fromiter(map(int, cells), dtype=np.int64, count=len(cells))
            continue
        # Slow path, cell by cell, to classify and to name the first offending line.
        ints: list[int] = []  # indices (into cells) of integer-looking cells
        names: list[int] = []
        for i, s in enumerate(cells):
            if not s:
                raise ManifestError(
                    f"{loc.at(lines[i])}: empty label{where}; every sample needs a label "
                    "(an integer >= 0 or a class name)"
                )
            if s in _MISSING_TEXT:
                raise ManifestError(
                    f"{loc.at(lines[i])}: missing label {s!r}{where} (how exported tables "
                    "write a missing value); every sample needs a label (an integer >= 0 or a "
                    "class name): fill it in or drop the line"
                )
            if _INT_RE.match(s):
                ints.append(i)
            elif _FLOAT_RE.match(s):
                value = float(s)
                fix = f"; write {int(value)}" if value.is_integer() else ""
                raise ManifestError(
                    f"{loc.at(lines[i])}: label {s!r}{where} is not an integer; labels must "
                    f"be integers >= 0 (class indices), not decimals{fix}"
                )
            else:
                names.append(i)
        if ints and names:
            _raise_mixed(cells, ints, names, lines, loc, where, header_seen)
        if names:
            if several:
                spec = specs[j] if specs else str(j)
                header_hint = "" if header_seen else (
                    " (and header=True if the first line holds column names)"
                )
                raise ManifestError(
                    f"{loc.at(lines[names[0]])}: label {cells[names[0]]!r}{where} is a class "
                    f"name, but only a single label column may hold class names (there are "
                    f"{len(columns)}: {col_names}); use integer class indices, or pass the "
                    f"one label column, e.g. label_cols={spec}{header_hint}"
                )
            classes = sorted(set(cells))
            index = {name: k for k, name in enumerate(classes)}
            out[:, j] = [index[s] for s in cells]
            continue
        values = []
        for i, s in enumerate(cells):
            v = int(s)
            if v < 0:
                raise ManifestError(
                    f"{loc.at(lines[i])}: negative label {s}{where}; labels must be integers "
                    ">= 0 (class indices)"
                )
            if v > _INT64_MAX:
                raise ManifestError(
                    f"{loc.at(lines[i])}: label {s}{where} does not fit in int64 (max "
                    f"{_INT64_MAX}); labels must be class indices"
                )
            values.append(v)
        out[:, j] = np.array(values, dtype=np.int64)
    labels = out[:, 0].copy() if len(columns) == 1 else out
    return labels, classes


def _all_small_unsigned_ints(cells: list[str]) -> bool:
    """Fast path: every cell is ASCII digits and short enough to fit in int64."""
    if not cells or not all(cells) or max(map(len, cells)) > 18:
        return False
    joined = "".join(cells)
    return joined.isascii() and joined.isdigit()


def _raise_mixed(
    cells: list[str],
    ints: list[int],
    names: list[int],
    lines: list[int],
    loc: _Loc,
    where: str,
    header_seen: bool = True,
) -> None:
    # Blame the minority kind (ties: whatever the first row is not), pointing at the majority.
    ints_expected = len(ints) > len(names) or (len(ints) == len(names) and ints[0] < names[0])
    rule = "labels must be all integers >= 0 or all class names"
    if ints_expected:
        bad, ref = names[0], ints[0]
        # The first line read as a sample (its path looks like a file) may be a header after
        # all, with an unusual path column name such as "img.path".
        header_hint = (
            f"; pass header=True if {loc.unit} {lines[bad]} holds column names"
            if bad == 0 and not header_seen else ""
        )
        raise ManifestError(
            f"{loc.at(lines[bad])}: label {cells[bad]!r}{where} is not an integer; {rule} "
            f"(got a mix: {loc.unit} {lines[ref]} has integer {cells[ref]}){header_hint}"
        )
    bad, ref = ints[0], names[0]
    raise ManifestError(
        f"{loc.at(lines[bad])}: label {cells[bad]!r}{where} is an integer but other labels are "
        f"class names; {rule} (got a mix: {loc.unit} {lines[ref]} has class name "
        f"{cells[ref]!r})"
    )


def _validated_label_array(value: object, n: int, source: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ManifestError(
            f"{source}: Manifest.labels must be an integer array, got dtype {arr.dtype}; "
            "use Manifest.from_lists() to convert class names"
        )
    if arr.ndim not in (1, 2) or len(arr) != n or (arr.ndim == 2 and arr.shape[1] == 0):
        raise ManifestError(
            f"{source}: Manifest.labels must have shape ({n},) or ({n}, k), got {arr.shape}"
        )
    if arr.size and (arr.min() < 0 or (arr.dtype.kind == "u" and arr.max() > _INT64_MAX)):
        raise ManifestError(
            f"{source}: Manifest.labels must be integers >= 0 that fit in int64 "
            f"(got min {arr.min()}, max {arr.max()})"
        )
    labels = arr.astype(np.int64, copy=True)
    labels.flags.writeable = False
    return labels


def _validate_classes(classes: list[str], labels: np.ndarray, source: str) -> None:
    if not all(isinstance(c, str) for c in classes) or any(
        a >= b for a, b in itertools.pairwise(classes)
    ):
        raise ManifestError(
            f"{source}: Manifest.classes must be sorted, unique strings, got {classes[:8]!r}"
        )
    if labels.ndim != 1:
        raise ManifestError(
            f"{source}: Manifest.classes needs a single label column, labels have shape "
            f"{labels.shape}"
        )
    if labels.size and labels.max() >= len(classes):
        raise ManifestError(
            f"{source}: label {labels.max()} is out of range for {len(classes)} classes"
        )


# --------------------------------------------------------------------------------------------
# Paths


#: The start of a URL: a scheme of two or more characters and ``://`` (one letter before the
#: colon is a Windows drive, ``C:\\data`` or ``C:/data``), or a storage or web scheme with one
#: slash, as ``pathlib.Path("s3://bucket")`` collapses it.
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+)://"
    r"|(?P<collapsed>s3|s3a|gs|gcs|az|abfss?|wasbs?|hdfs|https?|ftp|file):/(?!/)",
    re.IGNORECASE,
)
_URL_ADVICE = (
    "URLs and object storage are not supported yet, so it would be read as a local path. "
    "Download the files (aws s3 sync, gsutil -m rsync, wget) and list their local paths, or "
    "mount the bucket (s3fs, gcsfuse) and list the paths under the mount point"
)


def url_scheme(text: str) -> str | None:
    """The scheme (``"s3"``, ``"https"``...) when ``text`` starts with a URL, else ``None``."""
    m = _URL.match(text.strip())
    return None if m is None else (m["scheme"] or m["collapsed"]).lower()


def _url_advice(scheme: str) -> str:
    if scheme == "file":
        return ("file:// URLs are not supported: drop the file:// prefix and list the local "
                "path itself")
    return _URL_ADVICE


def refuse_url(value: object, what: str) -> None:
    """Refuse a manifest, folder or ``root`` argument that is a URL (``s3://...``,
    ``https://...``, any ``scheme://``) with a :class:`~extsrc.errors.ManifestError` saying
    what to do, instead of a file-not-found error about a local path made of the URL."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(value))
    scheme = url_scheme(text)
    if scheme is not None:
        raise ManifestError(
            f"{what} {shown(text)} is a URL ({scheme}://), and extsrc reads local files only; "
            f"{_url_advice(scheme)}",
            path=text, reason="url",
        )


def _refuse_url_cells(cells: list[str], lines: list[int], loc: _Loc) -> None:
    """Refuse, naming the line, a path cell that is a URL."""
    if ":/" not in "\n".join(cells):  # one scan: 1M-line manifests stay fast
        return
    for cell, number in zip(cells, lines, strict=True):
        scheme = url_scheme(cell)
        if scheme is not None:
            raise ManifestError(
                f"{loc.at(number)}: path {shown(cell)} is a URL ({scheme}://), and extsrc reads "
                f"local files only; {_url_advice(scheme)}",
                source=loc.source, line=number, path=cell, reason="url",
            )


def _resolve_paths(
    cells: list[str], lines: list[int], loc: _Loc, root: str, column: str
) -> list[str]:
    if not all(cells):
        number = lines[cells.index("")]
        raise ManifestError(
            f"{loc.at(number)}: empty path in {column}; every sample needs a file path"
        )
    _refuse_url_cells(cells, lines, loc)
    # Text such as "NA" or "nan" stays a file name here (a file may be called that; if none is,
    # the missing file is reported with its line), unlike in labels, where it would silently
    # become a class.
    # Same as normpath(join(root, cell)) (absolute cells kept), minus join's per-call cost;
    # normpath does not touch symlinks.
    normpath = os.path.normpath
    if os.name == "posix":
        prefix = os.path.join(root, "")
        out = [normpath(c if c[0] == "/" else prefix + c) for c in cells]
    else:
        out = [normpath(os.path.join(root, c)) for c in cells]
    _refuse_unopenable(out, lines, loc)
    return out


@functools.cache
def _os_path_limits() -> tuple[int, int]:
    """(longest path, longest path component) in bytes that the OS opens (POSIX: PATH_MAX - 1
    and NAME_MAX of the root file system; defaults where it does not say)."""
    def conf(name: str, default: int) -> int:
        try:
            value = os.pathconf("/", name)
        except (OSError, ValueError, AttributeError):
            return default
        return value if value and value > 0 else default

    return conf("PC_PATH_MAX", 4096) - 1, conf("PC_NAME_MAX", 255)


def _refuse_unopenable(paths: list[str], lines: list[int], loc: _Loc) -> None:
    """Refuse, naming the line, paths the operating system cannot open as given: a NUL byte,
    characters the file system's encoding cannot represent, or too long (whole or one part).
    Checked here so that no later open fails with a bare ValueError."""
    if not paths:
        return
    joined = "\n".join(paths)
    if "\0" in joined:
        i = next(i for i, p in enumerate(paths) if "\0" in p)
        raise ManifestError(
            f"{loc.at(lines[i])}: path {shown(paths[i])} holds a NUL byte (\\x00), which no "
            "file name can contain; fix the path"
        )
    try:
        os.fsencode(joined)
    except UnicodeEncodeError:
        for i, p in enumerate(paths):
            try:
                os.fsencode(p)
            except UnicodeEncodeError as e:
                raise ManifestError(
                    f"{loc.at(lines[i])}: path {shown(p)} holds {shown(p[e.start:e.end])}, "
                    f"which the file system's encoding ({sys.getfilesystemencoding()}) "
                    "cannot represent; fix the path"
                ) from None
    path_max, name_max = _os_path_limits()
    # A UTF-8 character takes at most 4 bytes: below this no path can be too long.
    if max(map(len, paths)) * 4 <= name_max:
        return
    for i, p in enumerate(paths):
        raw = os.fsencode(p)
        if len(raw) <= name_max:
            continue
        long_part = max(raw.split(b"/"), key=len)
        if len(raw) > path_max or len(long_part) > name_max:
            limit = (
                f"{len(raw):,} bytes, more than the {path_max:,} a path may have"
                if len(raw) > path_max
                else f"a part of {len(long_part):,} bytes, more than the {name_max} a file or "
                "folder name may have"
            )
            raise ManifestError(
                f"{loc.at(lines[i])}: path {shown(p[:120])}... is too long for the operating "
                f"system ({limit}); shorten it"
            )


def _all_absolute(paths: Sequence[str]) -> bool:
    if os.name == "posix":
        # os.path.isabs is pure Python; C-level startswith is several times faster.
        return all(map(str.startswith, paths, itertools.repeat("/")))
    return all(map(os.path.isabs, paths))


def _check_files_exist(paths: list[str], lines: list[int], loc: _Loc, root: str) -> None:
    missing = [(number, p) for p, number in zip(paths, lines, strict=True) if not os.path.isfile(p)]
    if not missing:
        return
    first_line, first_path = missing[0]
    # A FIFO, socket, device or folder exists but is no image file: "not found" would mislead.
    what = ("not a regular file (a folder, FIFO, socket or device)"
            if os.path.lexists(first_path) else "file not found")
    context = (
        f"resolved against root {shown(root)}; pass root=... if paths are relative to another "
        "folder"
    )
    if len(missing) == 1:
        detail = f"({context})"
    else:
        listed = "; ".join(
            f"{loc.unit} {n}: {shown(p)}" for n, p in missing[:_MAX_MISSING_REPORTED]
        )
        more = len(missing) - _MAX_MISSING_REPORTED
        tail = f"; and {more} more" if more > 0 else ""
        detail = f"({len(missing)} of {len(paths)} files missing: {listed}{tail}; {context})"
    raise ManifestFileNotFoundError(
        f"{loc.at(first_line)}: {what}: {shown(first_path)} {detail}"
    )
