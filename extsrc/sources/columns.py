"""Which columns of a manifest file hold the path and the labels, and whether its first line is
a header: :func:`_decide_header` (the rule of :func:`extsrc.sources.table.read_manifest`'s
``header="infer"``), :func:`_resolve_columns` (``path_col`` and ``label_cols`` by name or
position, or the well-known names :data:`PATH_NAMES` and :data:`LABEL_NAMES`), and
:func:`_check_field_counts` (every line as wide as the columns it must hold).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import numpy as np

from extsrc.errors import ManifestError
from extsrc.sources.labels import _INT_RE
from extsrc.sources.where import _Loc

# Header names recognised without being asked, in order of preference.
PATH_NAMES: tuple[str, ...] = ("path", "filepath", "filename", "file", "image", "img")
LABEL_NAMES: tuple[str, ...] = ("label", "labels", "class", "target")
_KNOWN_NAMES = frozenset(PATH_NAMES + LABEL_NAMES)

_LOOKS_LIKE_FILE_RE = re.compile(r"[/\\]|\.[A-Za-z0-9]{1,5}\Z")
_WHITESPACE_SEP = r"\s+"

ColumnSpec = str | int
LabelColsSpec = str | int | Sequence[str | int]
HeaderSpec = Literal["infer"] | bool | int | None


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


