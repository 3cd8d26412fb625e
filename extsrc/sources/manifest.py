"""The :class:`Manifest` value type: a validated, immutable list of samples (resolved file
paths, integer labels, class names, and where each sample came from).

A manifest file (CSV, TSV or ``path label`` text) is read into one by
:func:`extsrc.sources.table.read_manifest`; :meth:`Manifest.from_lists` builds one in code and
:meth:`Manifest.from_folder` from a folder of class sub-folders (``train/cat/1.jpg``, listed by
:mod:`extsrc.sources.folders`). The rules every manifest shares, however it was made, live here:
paths (resolved against a root; URLs and paths the operating system cannot open refused) and the
root every path must stay inside; the label rules (integers ``>= 0`` or class names; missing
values refused) are :mod:`extsrc.sources.labels`. Every sample remembers its 1-based line (or
sample number) so that errors anywhere in extsrc can point at ``manifest.csv line 17``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from extsrc._util.argcheck import check_path, check_sequence
from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError, PathOutsideRootError
from extsrc.sources.folders import FolderListing, read_folder
from extsrc.sources.labels import (
    _is_missing_object,
    _labels_from_objects,
    _validate_classes,
    _validated_label_array,
)
from extsrc.sources.storage import Storage, is_url, join_url, url_protocol
from extsrc.sources.where import (
    _Loc,
    is_folder_source,
    refuse_url,
    sample_where,
    storage_url,
    url_advice,
    url_scheme,
)

__all__ = ["Manifest"]

_FROM_LISTS_SOURCE = "<from_lists>"
_MAX_MISSING_REPORTED = 5



@dataclass(frozen=True, eq=False)
class Manifest:
    """An immutable, validated list of samples: resolved file paths and integer labels.

    Attributes:
        paths: absolute, normalised file paths (``str``), or URLs (``s3://bucket/key``,
            ``.`` and ``..`` collapsed), one per sample.
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
            (see :meth:`outside_root`). For a manifest read from a URL it is a folder URL
            (default: the manifest's own folder).
        storage: how URL paths are read (:class:`extsrc.sources.storage.Storage`: fsspec
            options, concurrency, retries, cache), set when a path or the manifest is a URL;
            ``None`` for local files only. Not part of equality or the fingerprint.

    ``labels`` is always a private read-only copy, so the caller's array is never frozen or
    aliased. Two manifests are equal when all fields are equal.
    """

    paths: tuple[str, ...]
    labels: np.ndarray
    classes: list[str] | None
    lines: tuple[int, ...]
    source: str
    root: str | None = None
    storage: Storage | None = None

    def __post_init__(self) -> None:
        # Normalise through object.__setattr__: the dataclass is frozen, but accepting any
        # sequence/array here and storing tuples / a private read-only copy keeps it immutable.
        source = str(self.source)
        where = shown(source)
        paths = tuple(self.paths)
        # all(map(...)) first: per-element Python checks cost seconds on 1M samples.
        if not (all(map(isinstance, paths, itertools.repeat(str))) and _all_absolute(paths)):
            bad = next(
                ((i, p) for i, p in enumerate(paths)
                 if not isinstance(p, str) or not (os.path.isabs(p) or is_url(p))),
                None,
            )
            if bad is not None:
                raise ManifestError(
                    f"{where}: Manifest.paths[{bad[0]}] must be an absolute path str or a URL, "
                    f"got {bad[1]!r}; use read_manifest() or Manifest.from_lists() to resolve "
                    "relative paths"
                )
            if self.storage is None:
                object.__setattr__(self, "storage", Storage())
        labels = _validated_label_array(self.labels, len(paths), where)
        lines = _validated_lines(self.lines, len(paths), where)
        classes = None if self.classes is None else list(self.classes)
        if classes is not None:
            _validate_classes(classes, labels, where)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "lines", lines)
        object.__setattr__(self, "classes", classes)
        if self.root is not None and not is_url(str(self.root)):
            object.__setattr__(self, "root", os.path.normpath(os.path.abspath(self.root)))
        if self.storage is not None and not isinstance(self.storage, Storage):
            raise TypeError(f"{where}: Manifest.storage must be an extsrc Storage or None, got "
                            f"{type(self.storage).__name__}")

    def __len__(self) -> int:
        return len(self.paths)

    def where(self, index: int) -> str:
        """Where sample ``index`` (0-based) comes from, as messages name it:
        ``train.csv line 17``, or ``folder train/, sample 17`` for a folder dataset."""
        return sample_where(self.source, self.lines[index])

    def outside_root(self, *, follow_symlinks: bool = False) -> list[int]:
        """Indices of paths outside :attr:`root` (none when ``root`` is ``None``).

        Paths are normalised, so ``..`` escapes and absolute paths elsewhere show up without
        touching the disk; ``follow_symlinks=True`` also resolves every path (one ``realpath``
        per file) to catch symlinks that point out of the root.
        """
        if self.root is None:
            return []
        url_root = is_url(self.root)
        prefix = self.root.rstrip("/") + "/" if url_root else os.path.join(self.root, "")
        starts = str.startswith
        if not follow_symlinks and all(map(starts, self.paths, itertools.repeat(prefix))):
            return []
        bad = [i for i, p in enumerate(self.paths) if not p.startswith(prefix)]
        if follow_symlinks and not url_root:  # objects in a bucket have no symlinks
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
        storage_options: Mapping[str, object] | Storage | None = None,
    ) -> Manifest:
        """Build a manifest in code, with the same label rules as :func:`read_manifest`.

        Args:
            paths: file paths; relative ones resolve against ``root``.
            labels: one label per path: integers ``>= 0`` or class names (strings), or one
                row of integers per path (2-D) for several label columns. Strings that look
                like integers count as integers; floats and bools are refused.
            root: folder for relative paths; default: the current working directory. A folder
                URL (``s3://bucket/train/``) resolves relative paths under it; paths may also
                be URLs themselves.
            storage_options: how URLs are read, as for :func:`read_manifest`.

        ``source`` is ``"<from_lists>"`` and ``lines`` are the 1-based item positions, which
        errors name: a missing value (``None``, a float NaN, pandas' ``NA``, an empty string,
        or a label such as ``"nan"``) in either list, a path that is not a str/``os.PathLike``,
        and a path the operating system cannot open (as for :func:`read_manifest`). A single
        str for ``paths`` (or for ``labels``) is a ``TypeError``: it would be read character
        by character.
        """
        loc = _Loc(_FROM_LISTS_SOURCE, "item")
        check_sequence(paths, "Manifest.from_lists: paths",
                       "a list (or other sequence) of file paths", iterable=True,
                       refuse=(os.PathLike,), hint="wrap a single path in a list")
        check_sequence(labels, "Manifest.from_lists: labels",
                       "a list (or array) with one label per path", iterable=True)
        check_path(root, "Manifest.from_lists: root", "a folder path", allow_none=True)
        refuse_url(root, "Manifest.from_lists: root", allow_storage=True)
        storage = storage_arg(storage_options, "Manifest.from_lists")
        paths = list(paths)
        if all(map(isinstance, paths, itertools.repeat(str))):
            path_cells = paths
        else:
            path_cells = [_path_cell_from_object(p, loc, k) for k, p in enumerate(paths, 1)]
        item_lines = list(range(1, len(path_cells) + 1))
        label_array, classes = _labels_from_objects(labels, item_lines, loc)
        root_text = None if root is None else os.fspath(root)
        root_dir = root_text if root_text is not None and is_url(root_text) else \
            os.path.abspath(os.getcwd() if root_text is None else root_text)
        resolved = _resolve_paths(path_cells, item_lines, loc, root_dir, "the paths list")
        return cls(
            paths=tuple(resolved),
            labels=label_array,
            classes=classes,
            lines=tuple(item_lines),
            source=loc.source,
            storage=storage,
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
                the image formats DALI decodes (:data:`extsrc.sources.folders.IMAGE_EXTENSIONS`:
                jpg, jpeg, png, bmp, tif, tiff, webp, pnm, ppm, pgm, pbm, jp2).
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
        return cls.from_listing(read_folder(
            root, extensions=extensions, allow_empty=allow_empty,
            allow_outside_root=allow_outside_root,
        ))

    @classmethod
    def from_listing(cls, listing: FolderListing) -> Manifest:
        """The manifest of a folder dataset listed by :func:`extsrc.sources.folders.read_folder`
        (which lists files and leaves building the value type to this class)."""
        return cls(paths=listing.paths, labels=listing.labels, classes=listing.classes,
                   lines=listing.lines, source=listing.source, root=listing.root)


# --------------------------------------------------------------------------------------------
# Labels


def storage_arg(value: object, fn: str) -> Storage | None:
    """A ``storage_options`` argument of ``fn`` as a :class:`Storage` (``None`` stays ``None``)."""
    if value is None or isinstance(value, Storage):
        return value
    if isinstance(value, Mapping):
        return Storage(value)
    raise TypeError(f"{fn}: storage_options must be a dict of fsspec options, an "
                    f"extsrc.sources.storage.Storage or None, got {type(value).__name__}")


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


def _validated_lines(value: object, n: int, where: str) -> tuple[int, ...]:
    """``Manifest.lines`` checked (one 1-based line number per path, ``n`` of them) as a tuple."""
    line_array = np.asarray(value)
    if (
        line_array.shape != (n,)
        or (line_array.size and line_array.dtype.kind not in "iu")
        or (line_array.size and line_array.min() < 1)
    ):
        raise ManifestError(
            f"{where}: Manifest.lines must hold one 1-based line number per path "
            f"({n}), got {line_array.shape[0] if line_array.ndim else 0} value(s)"
        )
    return tuple(line_array.tolist())


# --------------------------------------------------------------------------------------------
# Paths


def _refuse_url_cells(cells: list[str], lines: list[int], loc: _Loc) -> bool:
    """Refuse, naming the line, a path cell that is a URL no storage reads; whether any cell
    is a storage URL (for which fsspec and its filesystem must be installed)."""
    if ":/" not in "\n".join(cells):  # one scan: 1M-line manifests stay fast
        return False
    from extsrc.sources.storage import require_protocol

    protocols: set[str] = set()
    for cell, number in zip(cells, lines, strict=True):
        scheme = url_scheme(cell)
        if scheme is not None and storage_url(cell):
            protocol = url_protocol(cell)
            if protocol not in protocols:
                require_protocol(protocol, f"{loc.at(number)} ({shown(cell)})")  # type: ignore
                protocols.add(protocol)  # type: ignore[arg-type]
        elif scheme is not None:
            raise ManifestError(
                f"{loc.at(number)}: path {shown(cell)} is a URL ({scheme}://) that cannot be "
                f"read; {url_advice(scheme, cell)}",
                source=loc.source, line=number, path=cell, reason="url",
            )
    return bool(protocols)


def _resolve_paths(
    cells: list[str], lines: list[int], loc: _Loc, root: str, column: str
) -> list[str]:
    if not all(cells):
        number = lines[cells.index("")]
        raise ManifestError(
            f"{loc.at(number)}: empty path in {column}; every sample needs a file path"
        )
    any_url = _refuse_url_cells(cells, lines, loc)
    if any_url or is_url(root):
        return _resolve_with_urls(cells, lines, loc, root)
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


def _resolve_with_urls(cells: list[str], lines: list[int], loc: _Loc, root: str) -> list[str]:
    """Paths where cells or ``root`` are URLs: a URL cell is kept (``.`` and ``..`` collapsed),
    a relative cell resolves under a URL ``root``, an absolute local path is kept."""
    out = []
    for cell, number in zip(cells, lines, strict=True):
        if is_url(cell) or (is_url(root) and not os.path.isabs(cell)):
            joined = join_url(root, cell)
            if joined is None:
                raise ManifestError(
                    f"{loc.at(number)}: path {shown(cell)} climbs above the bucket (or host) of "
                    f"{shown(root if not is_url(cell) else cell)} with '..'; fix the path",
                    source=loc.source, line=number, path=cell, reason="outside_root")
            out.append(joined)
        else:
            out.append(os.path.normpath(os.path.join(root, cell)))
    # The operating system's limits (path and name lengths) apply to local paths only: an
    # object key may be 1,024 bytes with parts longer than a file name may be.
    local = [k for k, p in enumerate(out) if not is_url(p)]
    _refuse_unopenable([out[k] for k in local], [lines[k] for k in local], loc)
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


def _check_files_exist(paths: list[str], lines: list[int], loc: _Loc, root: str,
                       storage: Storage | None = None) -> None:
    urls = [k for k, p in enumerate(paths) if is_url(p)]
    there = dict(zip(urls, storage.exists([paths[k] for k in urls]), strict=True)) \
        if urls and storage is not None else {}
    missing = [(number, p) for k, (p, number) in enumerate(zip(paths, lines, strict=True))
               if not (there[k] if k in there else os.path.isfile(p))]
    if not missing:
        return
    first_line, first_path = missing[0]
    # A FIFO, socket, device or folder exists but is no image file: "not found" would mislead.
    what = ("not a regular file (a folder, FIFO, socket or device)"
            if not is_url(first_path) and os.path.lexists(first_path) else "file not found")
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
