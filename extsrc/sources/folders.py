"""Folder datasets: the samples of an ImageFolder-style tree, listed.

``root/<class>/<image>`` (``train/cat/001.jpg``, ``train/dog/x/002.png``) becomes one sample per
image file, labelled by its class folder. :func:`read_folder` lists them as a
:class:`FolderListing`; :meth:`Manifest.from_folder` and
:func:`~extsrc.sources.table.read_manifest` (given a folder) turn that into a
:class:`~extsrc.sources.manifest.Manifest`, and every loader, :func:`extsrc.validate` and the
command line accept a folder through them.

A folder has no manifest lines: a folder manifest's ``source`` is the folder as given with a
trailing ``/``, its ``lines`` are 1-based sample numbers in the listing order, and messages
name a sample as ``folder train/, sample 17`` followed by its path
(:func:`extsrc.sources.where.sample_where`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from extsrc._util.argcheck import check_bool, check_path, check_sequence
from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.sources.where import refuse_url

__all__ = ["IMAGE_EXTENSIONS", "FolderListing", "file_kind", "read_folder"]

#: File extensions (lower case) listed by default: the image formats DALI's decoder reads.
IMAGE_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp",
    ".pnm", ".ppm", ".pgm", ".pbm", ".jp2",
)
_DIGITS_RE = re.compile(r"[0-9]+\Z")  # ASCII digits only, as for manifest labels
_MAX_NAMED = 5


class FolderListing(NamedTuple):
    """What :func:`read_folder` found: the fields of a
    :class:`~extsrc.sources.manifest.Manifest`, which
    :meth:`~extsrc.sources.manifest.Manifest.from_listing` turns into one (this module lists
    files and knows nothing of the value type, so the two do not import each other)."""

    paths: tuple[str, ...]
    labels: np.ndarray
    classes: list[str] | None
    lines: tuple[int, ...]
    source: str
    root: str | None


def _check_extensions(extensions: object) -> tuple[str, ...]:
    name = "Manifest.from_folder: extensions"
    if extensions is None:
        return IMAGE_EXTENSIONS
    check_sequence(extensions, name, "a list of file extensions such as ['.jpg', '.png'] or "
                   "None (the image formats DALI decodes)", iterable=True)
    out = []
    for e in extensions:
        if not isinstance(e, str) or not e.strip(".") or "/" in e or os.sep in e:
            raise ValueError(
                f"{name} must hold extensions such as '.jpg' or 'jpg', got {e!r}"
            )
        out.append("." + e.lower().lstrip("."))
    if not out:
        raise ValueError(f"{name} is empty; pass None for the image formats DALI decodes")
    return tuple(dict.fromkeys(out))


def _entries(folder: str) -> list[os.DirEntry[str]]:
    """The visible entries of ``folder``, sorted by name (hidden ``.`` names skipped)."""
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if not e.name.startswith(".")]
    except OSError as e:
        raise ManifestError(
            f"folder {shown(folder)}: cannot list it ({e.strerror or e}); check that it exists "
            "and is readable"
        ) from None
    entries.sort(key=lambda e: e.name)
    return entries


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks: a symlinked folder is a folder
    except OSError:
        return False


def _walk_files(folder: str, exts: tuple[str, ...], ancestors: tuple[tuple[int, int], ...],
                files: list[str], skipped: list[str]) -> None:
    """Append the files under ``folder`` with one of ``exts`` to ``files`` (part-by-part name
    order, symlinked folders followed), others to ``skipped``; refuse a symlink loop."""
    for e in _entries(folder):
        if _is_dir(e):
            st = os.stat(e.path)
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                raise ManifestError(
                    f"folder {shown(e.path)}: a symlink loop (it leads back to "
                    f"{shown(os.path.realpath(e.path))}, a folder that contains it); remove the "
                    "link or make it a plain folder"
                )
            _walk_files(e.path, exts, (*ancestors, key), files, skipped)
        elif e.name.lower().endswith(exts):
            _refuse_special(e)
            files.append(e.path)  # a dangling link stays listed: reading it names the path
        else:
            skipped.append(e.path)


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, from its ``st_mode``, for messages."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_special(entry: os.DirEntry[str]) -> None:
    """Refuse an image-named entry that is not a regular file (symlinks followed): a FIFO, a
    socket or a device. Reading a FIFO blocks until something writes to it, a device may never
    end; such a file in a class folder is a mistake, named here rather than at training time."""
    if entry.is_file():  # from the directory listing itself for a plain file: no extra syscall
        return
    try:
        mode = entry.stat().st_mode
    except OSError:
        return  # a dangling link: reading it says the file is missing
    raise ManifestError(
        f"folder entry {shown(entry.path)} is {file_kind(mode)}, not a regular file, but has an "
        "image extension: reading it could block forever or never end. Remove it from the "
        "dataset folder (or give it a name without an image extension)"
    )


def read_folder(
    folder: str | os.PathLike[str],
    *,
    extensions: Iterable[str] | None = None,
    allow_empty: bool = False,
    root: str | os.PathLike[str] | None = None,
    allow_outside_root: bool = False,
) -> FolderListing:
    """The folder dataset under ``folder``, listed; see :meth:`extsrc.Manifest.from_folder`
    for the rules. ``root`` (default: ``folder``) is the folder every file must stay in."""
    fn = "Manifest.from_folder"
    check_path(folder, f"{fn}: folder", "a folder path")
    check_path(root, f"{fn}: root", "a folder", allow_none=True)
    refuse_url(folder, f"{fn}: the folder")
    refuse_url(root, f"{fn}: root")
    allow_empty = check_bool(allow_empty, f"{fn}: allow_empty")
    allow_outside_root = check_bool(allow_outside_root, f"{fn}: allow_outside_root")
    exts = _check_extensions(extensions)
    given = os.fsdecode(os.fspath(folder))
    source = os.path.join(given, "")  # the trailing "/" marks a folder source
    top = os.path.normpath(os.path.abspath(given))
    if not os.path.isdir(top):
        raise ManifestFileNotFoundError(
            f"folder {shown(source)}: not found (looked for {shown(top)}); check the path"
        )
    classes, class_dirs = _class_folders(top, exts, source)
    paths, labels, counts, skipped_by_class = _class_files(top, class_dirs, exts)
    if not allow_empty:
        _refuse_empty_classes(classes, counts, skipped_by_class, exts, source)
    label_array, class_list = _labels(classes, labels, source)
    if not paths:
        raise ManifestError(
            f"folder {shown(source)}: no image files in its {len(classes)} class folder(s) "
            f"(looked for {' '.join(exts)}); pass extensions=[...] for other file types"
        )
    limit = None if allow_outside_root else (top if root is None else os.fspath(root))
    return FolderListing(
        paths=tuple(paths),
        labels=label_array,
        classes=class_list,
        lines=tuple(range(1, len(paths) + 1)),
        source=source,
        root=limit,
    )


def _class_folders(top: str, exts: tuple[str, ...], source: str) -> tuple[list[str], list[str]]:
    """The class folders' names and paths directly under ``top``; an image file there (in no
    class) or no class folder at all is refused."""
    classes: list[str] = []
    class_dirs: list[str] = []
    loose: list[str] = []
    for e in _entries(top):
        if _is_dir(e):
            classes.append(e.name)
            class_dirs.append(e.path)
        elif e.name.lower().endswith(exts):
            loose.append(e.name)
    if loose:
        raise ManifestError(
            f"folder {shown(source)}: {len(loose)} image file(s) directly in the folder "
            f"({_some(loose)}) belong to no class; a folder dataset holds one sub-folder per "
            "class (train/cat/1.jpg): move them into a class folder, or delete them"
        )
    if not classes:
        raise ManifestError(
            f"folder {shown(source)}: no class folders; a folder dataset holds one sub-folder "
            "per class, each with that class's images (train/cat/1.jpg, train/dog/2.jpg)"
        )
    return classes, class_dirs


def _some(names: list[str]) -> str:
    """The first :data:`_MAX_NAMED` of ``names``, printable, and how many more there are."""
    more = f" and {len(names) - _MAX_NAMED} more" if len(names) > _MAX_NAMED else ""
    return ", ".join(shown(n) for n in names[:_MAX_NAMED]) + more


def _class_files(
    top: str, class_dirs: list[str], exts: tuple[str, ...]
) -> tuple[list[str], list[int], list[int], list[list[str]]]:
    """``(paths, class numbers, files per class, other files per class)`` of the class folders,
    each walked without leaving it or ``top``."""
    paths: list[str] = []
    labels: list[int] = []
    counts: list[int] = []
    skipped_by_class: list[list[str]] = []
    top_stat = os.stat(top)
    top_key = (top_stat.st_dev, top_stat.st_ino)
    for k, d in enumerate(class_dirs):
        files: list[str] = []
        skipped: list[str] = []
        st = os.stat(d)
        _walk_files(d, exts, (top_key, (st.st_dev, st.st_ino)), files, skipped)
        paths += files
        labels += [k] * len(files)
        counts.append(len(files))
        skipped_by_class.append(skipped)
    return paths, labels, counts, skipped_by_class


def _refuse_empty_classes(classes: list[str], counts: list[int],
                          skipped_by_class: list[list[str]], exts: tuple[str, ...],
                          source: str) -> None:
    """Refuse class folders without images: an empty class would shift every later label."""
    empty = [k for k, c in enumerate(counts) if c == 0]
    if not empty:
        return
    others = skipped_by_class[empty[0]]
    held = (
        f"; it holds {len(others)} file(s) of other types (such as "
        f"{shown(os.path.basename(others[0]))}), listed with extensions=[...]"
        if others else ""
    )
    raise ManifestError(
        f"folder {shown(source)}: {len(empty)} empty class folder(s) "
        f"({_some([classes[j] for j in empty])}) hold "
        f"no files with an image extension ({' '.join(exts)}){held}; an empty class would "
        "shift the label of every class after it: add its images, delete the folder, or "
        "pass allow_empty=True to keep it as a class without samples"
    )


def _labels(classes: list[str], labels: list[int],
            source: str) -> tuple[np.ndarray, list[str] | None]:
    """The int64 label of each file and the class names (``None`` for integer class folders,
    whose names are the labels: 0/, 1/, 7/, as a seed-style ``int(Path(p).parts[-2])`` reads
    them; two spellings of one number would merge)."""
    if not all(map(_DIGITS_RE.match, classes)):
        return np.array(labels, dtype=np.int64), classes
    values = [int(c) for c in classes]
    if max(values) > np.iinfo(np.int64).max:
        raise ManifestError(
            f"folder {shown(source)}: class folder {shown(classes[values.index(max(values))])} "
            "is a number too large for an int64 label; rename it"
        )
    seen: dict[int, str] = {}
    for c, v in zip(classes, values, strict=True):
        if v in seen:
            raise ManifestError(
                f"folder {shown(source)}: class folders {shown(seen[v])} and {shown(c)} "
                f"are both label {v}; rename one"
            )
        seen[v] = c
    if not labels:
        return np.zeros(0, dtype=np.int64), None
    return np.array(values, dtype=np.int64)[np.array(labels, dtype=np.int64)], None
