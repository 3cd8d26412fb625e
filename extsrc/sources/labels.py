"""The label rules every manifest shares, however it was made (a file, lists, a folder, tar
shards): labels are integers ``>= 0`` that fit in int64, or, for a single label column, class
names (every value a non-integer string; ``classes`` is then their sorted unique names and the
labels index into it). Floats, bools, negative or too large integers, a mix of integers and
names, names in several label columns, and missing values (``None``, NaN, pandas' NA, and the
texts exported tables write for them: ``nan``, ``NA``, ``null``...) are refused, naming the line
or item (:class:`~extsrc.sources.where._Loc`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np

from extsrc.errors import ManifestError
from extsrc.sources.where import _Loc

_INT64_MAX = int(np.iinfo(np.int64).max)
# ASCII digits only: Python's int() would also accept "1_000" and non-ASCII digits, which
# are far more likely to be typos than intended labels.
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][+-]?[0-9]+)\Z")
# How a missing value is spelt in exported tables (pandas' default NA strings, R's NA, Python's
# None): as a label it would silently become a class named "nan".
_MISSING_TEXT = frozenset({
    "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
})


def _is_missing_object(value: object) -> bool:
    """None, a float NaN, pandas' NA/NaT: a missing value, whatever produced it."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return value != value  # NaN
    return type(value).__name__ in ("NAType", "NaTType")


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


def _labels_from_objects(
    labels: Sequence[object] | np.ndarray, item_lines: list[int], loc: _Loc
) -> tuple[np.ndarray, list[str] | None]:
    """:meth:`Manifest.from_lists`'s ``labels`` (one per item of ``item_lines``: a label or a
    row of labels) as the label array and classes, by the rules of :func:`_parse_labels`."""
    n = len(item_lines)
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
    columns = [arr] if arr.ndim == 1 else [arr[:, j] for j in range(arr.shape[1])]
    if not columns:
        raise ManifestError(f"{loc.source}: labels have no columns (shape {arr.shape})")
    cell_columns = [
        [_label_cell_from_object(v, loc, line) for v, line in zip(col, item_lines, strict=True)]
        for col in columns
    ]
    names = [f"column {j}" for j in range(len(cell_columns))]
    return _parse_labels(cell_columns, names, item_lines, loc)


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
