"""Folder datasets: a :class:`~extsrc.manifest.Manifest` built from an ImageFolder-style tree.

``root/<class>/<image>`` (``train/cat/001.jpg``, ``train/dog/x/002.png``) becomes one sample per
image file, labelled by its class folder. :meth:`Manifest.from_folder` and
:func:`~extsrc.manifest.read_manifest` (given a folder) call :func:`read_folder`; every loader,
:func:`extsrc.validate` and the command line accept a folder through them.

A folder has no manifest lines: a folder manifest's ``source`` is the folder as given with a
trailing ``/``, its ``lines`` are 1-based sample numbers in the listing order, and messages
name a sample as ``folder train/, sample 17`` followed by its path (:func:`sample_where`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from extsrc.argcheck import check_bool
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.textsafe import shown

if TYPE_CHECKING:
    from extsrc.manifest import Manifest

__all__ = ["IMAGE_EXTENSIONS", "file_kind", "is_folder_source", "is_shards_source", "read_folder",
           "reworded_fix", "sample_where"]

#: File extensions (lower case) listed by default: the image formats DALI's decoder reads.
IMAGE_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp",
    ".pnm", ".ppm", ".pgm", ".pbm", ".jp2",
)
_DIGITS_RE = re.compile(r"[0-9]+\Z")  # ASCII digits only, as for manifest labels
_MAX_NAMED = 5


def is_folder_source(source: str) -> bool:
    """Whether a manifest's ``source`` names a folder dataset (it ends with a separator; a
    manifest file's name never does)."""
    return source.endswith(("/", os.sep))


def sample_where(source: str, line: int | str, *, plural: bool = False) -> str:
    """Where a sample comes from, for messages: ``train.csv line 17`` for a manifest file,
    ``folder train/, sample 17`` for a folder (``line`` is then the sample number).
    ``plural`` words a list (``lines 3, 4``)."""
    s = "s" if plural else ""
    if is_folder_source(source):
        return f"folder {shown(source)}, sample{s} {line}"
    if is_shards_source(source):
        return f"shards {shown(source)}, sample{s} {line}"
    return f"{shown(source)} line{s} {line}"


def is_shards_source(source: str) -> bool:
    """Whether a manifest's ``source`` names tar shards (:mod:`extsrc.sources.shards`: a shard,
    a pattern, or a ``{a.tar,b.tar}`` list); its ``lines`` are then sample numbers."""
    return source.lower().endswith((".tar", ".tar}"))


def reworded_fix(fix: str, source: str | None) -> str:
    """``fix`` (how to fix a bad sample) for a folder dataset or tar shards, which have no line
    to drop."""
    if source is not None and is_shards_source(source):
        return fix.replace("drop the line", "remove the sample from its shard").replace(
            "fix the path in the manifest", "fix the member's name in the shard")
    if source is None or not is_folder_source(source):
        return fix
    return fix.replace("drop the line", "delete the file").replace(
        "fix the path in the manifest", "rename the file")


def _check_extensions(extensions: object) -> tuple[str, ...]:
    name = "Manifest.from_folder: extensions"
    if extensions is None:
        return IMAGE_EXTENSIONS
    if isinstance(extensions, (str, bytes)) or not isinstance(extensions, Iterable):
        raise TypeError(
            f"{name} must be a list of file extensions such as ['.jpg', '.png'] or None (the "
            f"image formats DALI decodes), got {type(extensions).__name__} {extensions!r}"
        )
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
) -> Manifest:
    """The folder dataset under ``folder``; see :meth:`extsrc.Manifest.from_folder`."""
    from extsrc.manifest import (  # here: extsrc.manifest imports this module lazily
        Manifest,
        refuse_url,
    )

    fn = "Manifest.from_folder"
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(
            f"{fn}: root must be a folder path (str or os.PathLike), got "
            f"{type(folder).__name__} {folder!r}"
        )
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(
            f"{fn}: root must be a folder (str or os.PathLike) or None, got "
            f"{type(root).__name__} {root!r}"
        )
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
        listed = ", ".join(shown(n) for n in loose[:_MAX_NAMED])
        more = f" and {len(loose) - _MAX_NAMED} more" if len(loose) > _MAX_NAMED else ""
        raise ManifestError(
            f"folder {shown(source)}: {len(loose)} image file(s) directly in the folder "
            f"({listed}{more}) belong to no class; a folder dataset holds one sub-folder per "
            "class (train/cat/1.jpg): move them into a class folder, or delete them"
        )
    if not classes:
        raise ManifestError(
            f"folder {shown(source)}: no class folders; a folder dataset holds one sub-folder "
            "per class, each with that class's images (train/cat/1.jpg, train/dog/2.jpg)"
        )

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

    empty = [k for k, c in enumerate(counts) if c == 0]
    if empty and not allow_empty:
        k = empty[0]
        names = ", ".join(shown(classes[j]) for j in empty[:_MAX_NAMED])
        more = f" and {len(empty) - _MAX_NAMED} more" if len(empty) > _MAX_NAMED else ""
        others = skipped_by_class[k]
        held = (
            f"; it holds {len(others)} file(s) of other types (such as "
            f"{shown(os.path.basename(others[0]))}), listed with extensions=[...]"
            if others else ""
        )
        raise ManifestError(
            f"folder {shown(source)}: {len(empty)} empty class folder(s) ({names}{more}) hold "
            f"no files with an image extension ({' '.join(exts)}){held}; an empty class would "
            "shift the label of every class after it: add its images, delete the folder, or "
            "pass allow_empty=True to keep it as a class without samples"
        )

    if all(map(_DIGITS_RE.match, classes)):
        # Integer class folders: the names are the labels (0/, 1/, 7/), as a seed-style
        # ``int(Path(p).parts[-2])`` reads them; two spellings of one number would merge.
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
        label_array = np.array(values, dtype=np.int64)[np.array(labels, dtype=np.int64)] \
            if labels else np.zeros(0, dtype=np.int64)
        class_list = None
    else:
        label_array = np.array(labels, dtype=np.int64)
        class_list = classes
    if not paths:
        raise ManifestError(
            f"folder {shown(source)}: no image files in its {len(classes)} class folder(s) "
            f"(looked for {' '.join(exts)}); pass extensions=[...] for other file types"
        )
    limit = None if allow_outside_root else (top if root is None else os.fspath(root))
    return Manifest(
        paths=tuple(paths),
        labels=label_array,
        classes=class_list,
        lines=tuple(range(1, len(paths) + 1)),
        source=source,
        root=limit,
    )

