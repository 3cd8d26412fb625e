"""Reading a manifest file (CSV, TSV or whitespace text) or a folder path into a
:class:`~extsrc.sources.manifest.Manifest`: :func:`read_manifest`.

This module is the parser: it finds the data lines and the separator, and splits the cells (by
itself for plain layouts, with pandas for quoted ones); whether there is a header and which
columns hold the path and the labels is :mod:`extsrc.sources.columns`. The path rules that every
manifest shares, however it was made, live with the value type in
:mod:`extsrc.sources.manifest`, the label rules in :mod:`extsrc.sources.labels`; a folder path
goes to :func:`extsrc.sources.folders.read_folder`. The manifest, its ``root``, its rows and a
folder may be URLs read from object storage (``read_manifest("s3://bucket/train.csv",
storage_options=...)``; see :mod:`extsrc.sources.storage`).
"""

from __future__ import annotations

import io
import itertools
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from extsrc._util.argcheck import check_bool, check_path
from extsrc._util.slowstart import stage
from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.sources.columns import (
    _LOOKS_LIKE_FILE_RE,
    _WHITESPACE_SEP,
    LABEL_NAMES,
    PATH_NAMES,
    ColumnSpec,
    HeaderSpec,
    LabelColsSpec,
    _check_field_counts,
    _column_desc,
    _decide_header,
    _resolve_columns,
)
from extsrc.sources.folders import read_folder
from extsrc.sources.labels import _parse_labels
from extsrc.sources.manifest import Manifest, _check_files_exist, _resolve_paths, storage_arg
from extsrc.sources.storage import Storage, is_url, url_protocol
from extsrc.sources.where import _Loc, refuse_url

# PATH_NAMES and LABEL_NAMES: the header names read_manifest recognises, importable from here
# (and from the old extsrc.manifest) as before they moved to extsrc.sources.columns.
__all__ = ["LABEL_NAMES", "PATH_NAMES", "Manifest", "read_manifest"]

# What pandas' C parser splits a whitespace layout on (its delim_whitespace): spaces and tabs,
# not the other characters str.split() takes for whitespace (a no-break space stays data).
_SPACES_RE = re.compile(r"[ \t]+")
_OTHER_SPACE_RE = re.compile(r"[^\S \t]")  # whitespace other than spaces and tabs

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
    storage_options: Mapping[str, object] | Storage | None = None,
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
            Without ``root`` there is no limit, except for a manifest read from a URL: its
            rows may only name objects under its own folder URL (or under ``root``) unless
            ``allow_outside_root=True``, so that a manifest cannot make the loader read other
            buckets with your credentials.
        storage_options: for URLs (``s3://``, ``gs://``, ``https://``, any fsspec protocol):
            the manifest itself, a URL ``root`` (relative rows resolve under it), rows that are
            URLs, or a folder URL ending in ``/`` (``s3://bucket/train/``, read as a folder
            dataset: the class is the first-level prefix). A dict of fsspec options for the
            filesystem (``{"key": ..., "secret": ..., "endpoint_url": ...}`` for s3fs), or a
            :class:`extsrc.sources.storage.Storage` setting concurrency, retries, timeouts and
            a local cache too. ``None``: credentials from the environment.

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
        return read_shards(path, storage_options=storage_options)
    path_col, label_cols, header = _check_read_args(
        path, root, sep, path_col, label_cols, header, check_files, allow_outside_root
    )
    refuse_url(path, "read_manifest: the manifest", allow_storage=True)
    refuse_url(root, "read_manifest: root", allow_storage=True)
    storage = storage_arg(storage_options, "read_manifest")
    source = os.fsdecode(os.fspath(path))
    root_text = None if root is None else os.fsdecode(os.fspath(root))
    if is_url(source) or (root_text is not None and is_url(root_text)):
        with stage(f"reading the manifest {shown(source)}"):
            return _read_url_manifest(
                source, root_text, storage, sep=sep, path_col=path_col, label_cols=label_cols,
                header=header, check_files=check_files, allow_outside_root=allow_outside_root)
    if os.path.isdir(source):
        _refuse_columns(source, sep=sep, path_col=path_col, label_cols=label_cols, header=header)
        return Manifest.from_listing(
            read_folder(source, root=root, allow_outside_root=allow_outside_root))
    where = shown(source)  # the manifest's name as messages show it
    with stage(f"reading the manifest {where}"):
        return _read_file(source, where, root=root, sep=sep, path_col=path_col,
                          label_cols=label_cols, header=header, check_files=check_files,
                          allow_outside_root=allow_outside_root)


def _refuse_columns(source: str, **columns: Any) -> None:
    """A folder dataset has no columns: refuse the column arguments set for it."""
    if columns["header"] == "infer":
        del columns["header"]
    set_args = [f"{k}={v!r}" for k, v in columns.items() if v is not None]
    if set_args:
        raise ManifestError(
            f"{shown(source)}: is a folder, read as a folder dataset (one sub-folder per "
            f"class), which has no columns; drop {', '.join(set_args)}, or pass the "
            ".csv/.tsv/.txt manifest file"
        )


def _read_url_manifest(source: str, root: str | None, storage: Storage | None, *,
                       sep: str | None, path_col: ColumnSpec | None,
                       label_cols: LabelColsSpec | None, header: HeaderSpec, check_files: bool,
                       allow_outside_root: bool) -> Manifest:
    """:func:`read_manifest` where the manifest or its ``root`` is a URL."""
    from extsrc.sources.fileread import FileReadProblem
    from extsrc.sources.storage import require_protocol

    storage = storage or Storage()
    where = shown(source)
    if not is_url(source):
        text = _read_text(source)
        base = None
    else:
        protocol = url_protocol(source)
        assert protocol is not None
        require_protocol(protocol, f"read_manifest({where})")
        if source.endswith("/"):
            given = {"sep": sep, "path_col": path_col, "label_cols": label_cols}
            set_args = [f"{k}={v!r}" for k, v in given.items() if v is not None]
            if set_args or header != "infer":
                raise ManifestError(
                    f"{where}: a folder URL (ending in /) is read as a folder dataset (one "
                    f"prefix per class), which has no columns; drop "
                    f"{', '.join(set_args) or 'header'}, or pass the .csv/.tsv/.txt manifest")
            return _read_url_folder(source, root, storage, allow_outside_root)
        try:
            raw = storage.read(source)
        except FileReadProblem as e:
            cls = ManifestFileNotFoundError if e.reason == "missing" else ManifestError
            raise cls(f"{where}: cannot read the manifest: {e.message}; "
                      f"{'check the URL' if e.reason == 'missing' else e.fix}",
                      path=source, reason=e.reason) from None
        text = _decode_text(raw, source)
        base = source.rsplit("/", 1)[0] + "/"
    root_url = root if root is not None and is_url(root) else (base if root is None else None)
    return _read_file(source, where, root=root, sep=sep, path_col=path_col,
                      label_cols=label_cols, header=header, check_files=check_files,
                      allow_outside_root=allow_outside_root, text=text, root_url=root_url,
                      storage=storage)


def _read_url_folder(url: str, root: str | None, storage: Storage,
                     allow_outside_root: bool) -> Manifest:
    """A folder dataset under a folder URL: every image object under ``url/<class>/``."""
    from extsrc.sources.fileread import FileReadProblem
    from extsrc.sources.folders import IMAGE_EXTENSIONS

    base = url.rstrip("/") + "/"
    where = shown(base)
    try:
        found = storage.list_files(base)
    except FileReadProblem as e:
        raise ManifestFileNotFoundError(
            f"folder {where}: cannot list it: {e.message}; {e.fix}", path=base,
            reason=e.reason) from None
    rel = [f[len(base):] for f in found if f.startswith(base)]
    # As for a local folder: names starting with "." are skipped at every level, and only files
    # with an image extension are listed.
    rel = [r for r in rel if r and not any(p.startswith(".") for p in r.split("/"))
           and os.path.splitext(r)[1].lower() in IMAGE_EXTENSIONS]
    loose = [r for r in rel if "/" not in r]
    if loose:
        raise ManifestError(
            f"folder {where}: {shown(base + loose[0])} is directly in the folder, so it belongs "
            "to no class; move it into a class prefix (<folder>/<class>/<file>) or delete it",
            path=base + loose[0])
    if not rel:
        raise ManifestError(
            f"folder {where}: no image objects under it (looked for "
            f"{' '.join(IMAGE_EXTENSIONS)} under <folder>/<class>/); check the URL")
    rel.sort(key=lambda r: r.split("/"))
    names = [r.split("/", 1)[0] for r in rel]
    classes = sorted(set(names))
    if all(re.fullmatch(r"[0-9]+", c) for c in classes):
        by_value: dict[int, str] = {}
        for c in classes:
            if int(c) in by_value:
                raise ManifestError(f"folder {where}: class prefixes {shown(by_value[int(c)])} "
                                    f"and {shown(c)} are both label {int(c)}; rename one")
            by_value[int(c)] = c
        labels = np.array([int(n) for n in names], dtype=np.int64)
        class_list = None
    else:
        index = {c: k for k, c in enumerate(classes)}
        labels = np.array([index[n] for n in names], dtype=np.int64)
        class_list = classes
    limit = root if root is not None else base
    return Manifest(paths=tuple(base + r for r in rel), labels=labels, classes=class_list,
                    lines=tuple(range(1, len(rel) + 1)), source=base,
                    root=None if allow_outside_root else limit, storage=storage)


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
               header: HeaderSpec, check_files: bool, allow_outside_root: bool,
               text: str | None = None, root_url: str | None = None,
               storage: Storage | None = None) -> Manifest:
    """:func:`read_manifest` of a manifest file, its arguments checked (``where``: the file's
    name as messages show it). ``text``: the manifest's content when it was read already (from
    a URL); ``root_url``: the folder URL relative rows resolve under, and the limit they must
    stay inside unless ``allow_outside_root``."""
    data_lines = _data_lines(_read_text(source) if text is None else text, source, where, sep)
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

    root_dir, limit = _root_and_limit(source, root, root_url, allow_outside_root)
    resolved = _resolve_paths(
        columns[path_pos], line_numbers, loc, root_dir, _column_desc(names, path_pos)
    )
    manifest = Manifest(
        paths=tuple(resolved),
        labels=labels,
        classes=classes,
        lines=tuple(line_numbers),
        source=source,
        root=limit,
        storage=storage,
    )
    if root_url is not None and limit is not None:
        manifest.check_root()  # a URL manifest naming other buckets is refused at once
    if check_files:
        _check_files_exist(resolved, line_numbers, loc, root_dir, manifest.storage)
    return manifest


def _data_lines(text: str, source: str, where: str, sep: str | None) -> list[tuple[int, str]]:
    """The ``(line number, line)`` of every line of ``text`` that is neither blank nor a ``#``
    comment; a comment that reads as a sample, and a manifest without data lines, refused."""
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
    return data_lines


def _root_and_limit(source: str, root: str | os.PathLike[str] | None, root_url: str | None,
                    allow_outside_root: bool) -> tuple[str, str | None]:
    """``(the folder relative rows resolve against, the root they must stay inside or None)``
    of a manifest file (see :func:`read_manifest`'s ``root`` and ``allow_outside_root``)."""
    if root_url is not None:
        return root_url, None if allow_outside_root else root_url
    root_dir = os.path.abspath(
        os.path.dirname(os.path.abspath(source)) if root is None else os.fspath(root)
    )
    return root_dir, root_dir if root is not None and not allow_outside_root else None


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
    check_path(path, f"{fn}: path", "the manifest file", allow_bytes=True)
    check_path(root, f"{fn}: root", "a folder", allow_none=True, allow_bytes=True)
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
    return _decode_text(raw, source)


def _decode_text(raw: bytes, source: str) -> str:
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
