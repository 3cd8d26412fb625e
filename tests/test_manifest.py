"""Tests for extsrc.sources.manifest: every manifest layout, its quirks, and every error message."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extsrc._util.textsafe import shown
from extsrc.errors import ExtsrcError, ManifestError, ManifestFileNotFoundError
from extsrc.sources.folders import read_folder
from extsrc.sources.manifest import Manifest
from extsrc.sources.table import read_manifest


def write(path: Path, data: bytes) -> Path:
    # Explicit bytes so BOMs, CRLF and tabs reach the parser exactly as written.
    path.write_bytes(data)
    return path


def resolved(folder: Path, *names: str) -> tuple[str, ...]:
    return tuple(os.path.normpath(os.path.join(folder, n)) for n in names)


# ------------------------------------------------------------------------------------------
# CSV


def test_csv_with_header(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"path,label\nimages/a.jpg,3\nimages/b.jpg,0\n")
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "images/a.jpg", "images/b.jpg")
    assert m.labels.tolist() == [3, 0]
    assert m.labels.dtype == np.int64 and m.labels.shape == (2,)
    assert m.classes is None
    assert m.lines == (2, 3)
    assert m.source == str(f)
    assert len(m) == 2


@pytest.mark.parametrize(("name", "data", "kwargs", "paths", "labels", "lines"), [
    pytest.param("m.csv", b"id,Label,Image\n7,1,a.jpg\n8,2,b.jpg\n", {},
                 ("a.jpg", "b.jpg"), [1, 2], None, id="csv_reordered_named_columns"),
    pytest.param("m.csv", b"y,x,file_name\n5,9,a.jpg\n6,8,b.jpg\n",
                 {"path_col": "file_name", "label_cols": "x"},
                 ("a.jpg", "b.jpg"), [9, 8], None, id="csv_columns_by_name"),
    pytest.param("m.csv", b"y,x,file_name\n5,9,a.jpg\n6,8,b.jpg\n",
                 {"path_col": 2, "label_cols": 0, "header": True},
                 ("a.jpg", "b.jpg"), [5, 6], (2, 3), id="csv_columns_by_position_with_header"),
    pytest.param("m.csv", b"5,a.jpg,9\n6,b.jpg,8\n", {"path_col": 1, "label_cols": [2]},
                 ("a.jpg", "b.jpg"), [9, 8], (1, 2), id="csv_columns_by_position_without_header"),
    pytest.param("m.csv", b"a.jpg,3\nb.jpg,4\n", {},
                 ("a.jpg", "b.jpg"), [3, 4], (1, 2), id="csv_without_header"),
    # Unknown column names, but "y" over an all-integer column can only be a header.
    pytest.param("m.csv", b"fname,y\na.jpg,3\nb.jpg,4\n", {},
                 ("a.jpg", "b.jpg"), [3, 4], (2, 3), id="header_inferred_from_integer_column"),
    pytest.param("m.tsv", b"path\tlabel\na b.jpg\t3\nc,d.jpg\t4\n", {},
                 ("a b.jpg", "c,d.jpg"), [3, 4], None, id="tsv"),
    pytest.param("m.tsv", b"a.jpg\t3\r\nb.jpg\t4\r\n", {},
                 ("a.jpg", "b.jpg"), [3, 4], (1, 2), id="tsv_without_header_crlf"),
    pytest.param("m.txt", b"a,b.jpg;3\nc d.jpg;4\n", {"sep": ";"},
                 ("a,b.jpg", "c d.jpg"), [3, 4], None, id="explicit_sep_overrides_sniffing"),
])
def test_layout_read(tmp_path: Path, name: str, data: bytes, kwargs: dict, paths: tuple,
                     labels: list, lines: tuple | None) -> None:
    """Columns by header name, by position, with and without a header; TSV; ``sep``. ``lines``
    ``None``: not the case's point."""
    m = read_manifest(write(tmp_path / name, data), **kwargs)
    assert m.paths == resolved(tmp_path, *paths)
    assert m.labels.tolist() == labels
    if lines is not None:
        assert m.lines == lines


def test_bad_first_sample_is_not_taken_for_a_header(tmp_path: Path) -> None:
    f = write(tmp_path / "manifest.csv", b"a.jpg,cat\nb.jpg,1\nc.jpg,2\n")
    with pytest.raises(ManifestError, match=r"line 1: label 'cat' is not an integer.*line 2 has"):
        read_manifest(f)


@pytest.mark.parametrize("header", [True, 0])
def test_explicit_header(tmp_path: Path, header: object) -> None:
    f = write(tmp_path / "m.csv", b"fname,species\na.jpg,cat\nb.jpg,dog\n")
    m = read_manifest(f, header=header)  # type: ignore[arg-type]
    assert m.classes == ["cat", "dog"]
    assert m.lines == (2, 3)


@pytest.mark.parametrize("header", [False, None])
def test_explicit_no_header(tmp_path: Path, header: object) -> None:
    # "label.jpg" would not trigger inference anyway; "image" as a path would.
    f = write(tmp_path / "m.csv", b"image,3\nb.jpg,4\n")
    m = read_manifest(f, header=header)  # type: ignore[arg-type]
    assert m.paths == resolved(tmp_path, "image", "b.jpg")
    assert m.labels.tolist() == [3, 4]


def test_quoted_paths_with_commas_and_spaces(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b'path,label\n"a, b.jpg",3\n"my dir/c d.jpg",4\n"q""x.jpg",5\n')
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "a, b.jpg", "my dir/c d.jpg", 'q"x.jpg')
    assert m.labels.tolist() == [3, 4, 5]


def test_hash_inside_csv_path_is_data(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b'a#1.jpg,3\n"#b.jpg",4\n# c.jpg,5\n#note: fix later\n')
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "a#1.jpg", "#b.jpg")
    assert m.lines == (1, 2)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"a.png,1\n#1.png,2\nb.png,3\n", 2),  # the reported case
        (b"#1.png,2\n", 1),  # the only line
        (b"a.png 1\n#imgs/x 2\n", 2),  # whitespace layout, a folder in the path
        (b"path\tlabel\n#1.png\tcat\n", 2),  # TSV with a header
    ],
)
def test_unquoted_hash_file_name_is_not_skipped_silently(tmp_path, data, line):
    """Case 2: an unquoted file name starting with '#' was skipped as a comment."""
    f = write(tmp_path / "m.csv", data)
    with pytest.raises(ManifestError, match=rf"m\.csv line {line}: starts with '#', which marks "
                       r"a comment, but reads as a sample .*quote the path \(\"#.*write '# '"):
        read_manifest(f)


def test_hash_advice_leads_to_a_correct_result(tmp_path: Path) -> None:
    quoted = read_manifest(write(tmp_path / "q.csv", b'a.png,1\n"#1.png",2\n'))
    assert quoted.paths == resolved(tmp_path, "a.png", "#1.png") and quoted.lines == (1, 2)
    commented = read_manifest(write(tmp_path / "c.csv", b"a.png,1\n# 1.png,2\n"))
    assert commented.paths == resolved(tmp_path, "a.png") and commented.lines == (1,)


def test_utf8_bom_and_crlf(tmp_path: Path) -> None:
    f = write(
        tmp_path / "m.csv", b"\xef\xbb\xbfpath,label\r\nd\xc3\xa9j\xc3\xa0.jpg,1\r\nb.jpg,2\r\n"
    )
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "déjà.jpg", "b.jpg")
    assert m.labels.tolist() == [1, 2]
    assert m.lines == (2, 3)


def test_bom_without_header(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"\xef\xbb\xbfa.jpg,1\r\nb.jpg,2")
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "a.jpg", "b.jpg")


def test_spaces_around_cells_are_ignored(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b'path, label\n a.jpg , 3\n "b, c.jpg", 4 \n')
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "a.jpg", "b, c.jpg")
    assert m.labels.tolist() == [3, 4]


def test_trailing_empty_field_is_ignored(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"a.jpg,3,\nb.jpg,4,\n")
    assert read_manifest(f).labels.tolist() == [3, 4]


def test_na_like_strings_are_not_missing(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"NA,1\nnan,2\nNULL,3\n")
    m = read_manifest(f)
    assert m.paths == resolved(tmp_path, "NA", "nan", "NULL")


# ------------------------------------------------------------------------------------------
# TSV and whitespace text


def test_whitespace_text_with_blanks_and_comments(tmp_path: Path) -> None:
    f = write(
        tmp_path / "train.txt",
        b"# ImageNet subset\n"
        b"\n"
        b"/home/data/images/1.JPEG 0\n"
        b"   # indented comment\n"
        b"\t\n"
        b"/home/data/images/2.JPEG\t\t 7\n"
        b"  /home/data/images/3.JPEG   12  \n"
        b'"/home/data/my images/4.JPEG" 5\n'
        b"\n",
    )
    m = read_manifest(f)
    assert m.paths == (
        "/home/data/images/1.JPEG",
        "/home/data/images/2.JPEG",
        "/home/data/images/3.JPEG",
        "/home/data/my images/4.JPEG",
    )
    assert m.labels.tolist() == [0, 7, 12, 5]
    assert m.lines == (3, 6, 7, 8)


def test_whitespace_text_with_header(tmp_path: Path) -> None:
    f = write(tmp_path / "m.txt", b"path label\na.jpg 1\n")
    m = read_manifest(f)
    assert m.lines == (2,)


# ------------------------------------------------------------------------------------------
# Labels


def test_multiple_label_columns(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"path,a,b,c\nx.jpg,1,2,3\ny.jpg,4,5,6\n")
    m = read_manifest(f)
    assert m.labels.shape == (2, 3)
    assert m.labels.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_multiple_label_columns_by_name(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"a,path,b,c\n1,x.jpg,2,3\n4,y.jpg,5,6\n")
    m = read_manifest(f, label_cols=["c", "a"])
    assert m.labels.tolist() == [[3, 1], [6, 4]]


def test_class_names(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"path,label\na.jpg,dog\nb.jpg,cat\nc.jpg,dog\nd.jpg,ant\n")
    m = read_manifest(f)
    assert m.classes == ["ant", "cat", "dog"]
    assert m.labels.tolist() == [2, 1, 2, 0]
    assert m.labels.dtype == np.int64


def test_class_names_without_header_in_text(tmp_path: Path) -> None:
    f = write(tmp_path / "m.txt", b"a.jpg tabby_cat\nb.jpg golden-retriever\n")
    m = read_manifest(f)
    assert m.classes == ["golden-retriever", "tabby_cat"]
    assert m.labels.tolist() == [1, 0]


def test_large_labels_arrive_intact(tmp_path: Path) -> None:
    big = 2**40
    f = write(tmp_path / "m.csv", f"a.jpg,300\nb.jpg,70000\nc.jpg,{big}\nd.jpg,+5\n".encode())
    m = read_manifest(f)
    assert m.labels.dtype == np.int64
    assert m.labels.tolist() == [300, 70000, big, 5]


def test_int64_max_label(tmp_path: Path) -> None:
    top = 2**63 - 1
    f = write(tmp_path / "m.csv", f"a.jpg,{top}\n".encode())
    assert read_manifest(f).labels.tolist() == [top]


# ------------------------------------------------------------------------------------------
# Paths


def test_relative_paths_resolve_against_manifest_folder(tmp_path: Path, monkeypatch) -> None:
    sub = tmp_path / "lists"
    sub.mkdir()
    f = write(sub / "m.csv", b"../images/./a.jpg,1\nb.jpg,2\n")
    monkeypatch.chdir(tmp_path)  # the cwd must not matter
    m = read_manifest(Path("lists") / "m.csv")
    assert m.paths == (str(tmp_path / "images" / "a.jpg"), str(sub / "b.jpg"))
    assert m.source == os.path.join("lists", "m.csv")
    assert f.exists()


def test_relative_paths_resolve_against_root(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"a.jpg,1\nsub/b.jpg,2\n")
    m = read_manifest(f, root=tmp_path / "data")
    assert m.paths == (str(tmp_path / "data" / "a.jpg"), str(tmp_path / "data" / "sub" / "b.jpg"))


def test_absolute_paths_kept(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"/abs/x//y/../a.jpg,1\nrel.jpg,2\n")
    m = read_manifest(f, root="/elsewhere")
    assert m.paths == ("/abs/x/a.jpg", "/elsewhere/rel.jpg")


def test_symlinks_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    f = write(tmp_path / "m.csv", b"link/a.jpg,1\n")
    assert read_manifest(f).paths == (str(tmp_path / "link" / "a.jpg"),)


def test_check_files_passes_when_files_exist(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"")
    (tmp_path / "b c.jpg").write_bytes(b"")
    f = write(tmp_path / "m.csv", b'a.jpg,1\n"b c.jpg",2\n')
    assert len(read_manifest(f, check_files=True)) == 2


# ------------------------------------------------------------------------------------------
# Errors


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestFileNotFoundError, match=r"nope\.csv: manifest file not found"):
        read_manifest(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError):
        read_manifest(tmp_path / "nope.csv")


def test_error_hierarchy() -> None:
    assert issubclass(ManifestError, ExtsrcError)
    assert issubclass(ManifestError, ValueError)
    assert issubclass(ManifestFileNotFoundError, ManifestError)
    assert issubclass(ManifestFileNotFoundError, FileNotFoundError)


def test_missing_named_column(tmp_path: Path) -> None:
    f = write(tmp_path / "manifest.csv", b"path,y\na.jpg,1\n")
    msg = r"manifest\.csv: no column 'label'; columns are \['path', 'y'\]; pass label_cols='y'"
    with pytest.raises(ManifestError, match=msg):
        read_manifest(f, label_cols="label")


def test_missing_path_column(tmp_path: Path) -> None:
    f = write(tmp_path / "manifest.csv", b"file_name,label\na.jpg,1\n")
    with pytest.raises(ManifestError, match=r"no column 'path'.*pass path_col="):
        read_manifest(f, path_col="path")


def test_column_position_out_of_range(tmp_path: Path) -> None:
    f = write(tmp_path / "manifest.csv", b"a.jpg,1\n")
    with pytest.raises(ManifestError, match=r"label_cols=5 is out of range.*2 column"):
        read_manifest(f, label_cols=5)


# Manifests that must be refused, each with a message that names the file and line (where there
# is one) and says what was expected.
BAD_MANIFESTS = [
    pytest.param(
        "manifest.csv",
        b"path,label\na.jpg,1\nb.jpg\nc.jpg,2\n",
        r"manifest\.csv line 3: expected a path and at least one label, got 1 field\(s\)",
        id="missing_label_field",
    ),
    pytest.param(
        "list.txt",
        b"\n# files\na.jpg\nb.jpg\n",
        r"list\.txt line 3: expected a path and at least one",
        id="single_column_file",
    ),
    pytest.param(
        "manifest.csv",
        b"a.jpg,1\nb, c.jpg,2\n",
        r"line 2: expected 2 field\(s\) like line 1, got 3.*quote",
        id="too_many_fields_suggests_quoting",
    ),
    pytest.param(
        "manifest.csv",
        b"path,label\na.jpg,3\nb.jpg,4\nc.jpg,cat\n",
        r"manifest\.csv line 4: label 'cat' is not an integer; labels must be all integers >= 0 "
        r"or all class names \(got a mix: line 2 has integer 3\)",
        id="non_integer_label_mixed_with_integers",
    ),
    pytest.param(
        "manifest.csv",
        b"a.jpg,cat\nb.jpg,dog\nc.jpg,7\n",
        r"line 3: label '7' is an integer.*line 1 has class",
        id="integer_among_class_names",
    ),
    pytest.param(
        "train.txt",
        b"# header comment\n\na.jpg 1\n\n  # note\nb.jpg 2\nc.jpg -1\n",
        r"train\.txt line 7: negative label -1; labels must be integers >= 0 \(class indices\)",
        id="negative_label_after_blank_and_comment_lines",
    ),
    pytest.param(
        "manifest.csv",
        b"\xef\xbb\xbf# made by hand\r\npath,label\r\n\r\n# skip\r\na.jpg,1\r\n\r\nb.jpg,x1\r\n",
        r"manifest\.csv line 7: label 'x1' is not an integer",
        id="line_numbers_with_crlf_bom_header_and_comments",
    ),
    pytest.param(
        "manifest.csv",
        b"path,a,b\nx.jpg,1,2\ny.jpg,,3\n",
        r"line 3: empty label in column 'a'",
        id="empty_label",
    ),
    pytest.param(
        "manifest.csv",
        b'a.jpg,1\n"",2\n',
        r"manifest\.csv line 2: empty path",
        id="empty_path",
    ),
    pytest.param(
        "manifest.csv",
        f"a.jpg,1\nb.jpg,{2**63}\n".encode(),
        r"line 2: label 9223372036854775808 does not fit",
        id="label_overflowing_int64",
    ),
    pytest.param(
        "manifest.csv",
        b"path,a,b\nx.jpg,1,cat\ny.jpg,2,dog\n",
        r"line 2: .*only a single label column may hold class",
        id="class_names_in_several_label_columns",
    ),
    pytest.param(
        "manifest.csv",
        b"",
        r"manifest\.csv: empty manifest \(no data lines\); add lines like 'images/0001\.jpg,3'",
        id="empty_file",
    ),
    pytest.param(
        "train.txt",
        b"\xef\xbb\xbf# nothing yet\r\n\r\n   \r\n# still nothing\r\n",
        r"train\.txt: empty manifest \(only blank and '#'",
        id="only_comments",
    ),
    pytest.param(
        "manifest.csv",
        b"path,label\n",
        r"empty manifest \(only a header on line 1",
        id="only_header",
    ),
    pytest.param(
        "manifest.csv",
        b'a.jpg,1\n"b\nc.jpg",2\nd.jpg,3\n',
        r"line 2: a quoted field continues onto the next",
        id="quoted_newline_rejected",
    ),
    pytest.param(
        "manifest.csv",
        b'a.jpg,1\n\n"b.jpg,2\n',
        r"manifest\.csv line 3: .*quote",
        id="unclosed_quote",
    ),
    pytest.param(
        "manifest.csv",
        b"a.jpg,1\n\xff.jpg,2\n",
        r"manifest\.csv line 2: not valid UTF-8",
        id="not_utf8",
    ),
]


@pytest.mark.parametrize(("name", "data", "match"), BAD_MANIFESTS)
def test_bad_manifest_is_refused(tmp_path: Path, name: str, data: bytes, match: str) -> None:
    f = write(tmp_path / name, data)
    with pytest.raises(ManifestError, match=match):
        read_manifest(f)


@pytest.mark.parametrize(
    ("value", "fix"), [("1.5", ""), ("1.0", "; write 1"), ("2e3", "; write 2000")]
)
def test_float_label(tmp_path: Path, value: str, fix: str) -> None:
    f = write(tmp_path / "manifest.csv", f"a.jpg,1\nb.jpg,{value}\n".encode())
    msg = rf"manifest\.csv line 2: label '{re.escape(value)}' is not an integer; labels must be"
    with pytest.raises(ManifestError, match=msg) as info:
        read_manifest(f)
    assert "not decimals" in str(info.value)
    assert str(info.value).endswith("not decimals" + fix)


def test_missing_file_with_check_files(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"")
    f = write(tmp_path / "manifest.csv", b"path,label\na.jpg,1\n\n# gap\nx.jpg,2\n")
    missing = re.escape(str(tmp_path / "x.jpg"))
    root = re.escape(str(tmp_path))
    msg = rf"manifest\.csv line 5: file not found: {missing} \(resolved against root {root}; pass"
    with pytest.raises(ManifestFileNotFoundError, match=msg):
        read_manifest(f, check_files=True)
    with pytest.raises(FileNotFoundError):
        read_manifest(f, check_files=True)


def test_many_missing_files_reported_together(tmp_path: Path) -> None:
    body = "".join(f"img{i}.jpg,{i}\n" for i in range(8)).encode()
    f = write(tmp_path / "manifest.csv", body)
    with pytest.raises(ManifestFileNotFoundError) as info:
        read_manifest(f, check_files=True)
    text = str(info.value)
    assert text.startswith(f"{f} line 1: file not found: {tmp_path / 'img0.jpg'}")
    assert "8 of 8 files missing" in text
    assert "line 5: " in text and "line 6: " not in text
    assert "and 3 more" in text


def test_wrong_header_argument(tmp_path: Path) -> None:
    f = write(tmp_path / "manifest.csv", b"a.jpg,1\n")
    with pytest.raises(ManifestError, match=r"header must be"):
        read_manifest(f, header=3)
    with pytest.raises(ManifestError, match=r"header=False"):
        read_manifest(f, header=False, path_col="path")


# ------------------------------------------------------------------------------------------
# Manifest object


def test_fingerprint(tmp_path: Path) -> None:
    a = write(tmp_path / "a.csv", b"x.jpg,1\ny.jpg,2\n")
    b = write(tmp_path / "b.csv", b"# same samples, other layout\nx.jpg 1\n\ny.jpg 2\n")
    c = write(tmp_path / "c.csv", b"x.jpg,1\ny.jpg,3\n")
    fa = read_manifest(a).fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", fa)
    assert fa == read_manifest(a).fingerprint()
    assert fa == read_manifest(b).fingerprint()
    assert fa != read_manifest(c).fingerprint()
    assert fa != read_manifest(a, root=tmp_path / "other").fingerprint()


def test_labels_read_only(tmp_path: Path) -> None:
    m = read_manifest(write(tmp_path / "m.csv", b"a.jpg,1\n"))
    assert not m.labels.flags.writeable
    with pytest.raises(ValueError):
        m.labels[0] = 5


def test_frozen(tmp_path: Path) -> None:
    m = read_manifest(write(tmp_path / "m.csv", b"a.jpg,1\n"))
    with pytest.raises(AttributeError):
        m.paths = ()  # type: ignore[misc]


def test_equality_and_hash(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"a.jpg,1\nb.jpg,2\n")
    assert read_manifest(f) == read_manifest(f)
    assert hash(read_manifest(f)) == hash(read_manifest(f))


def test_from_lists_ints(tmp_path: Path) -> None:
    m = Manifest.from_lists(["a.jpg", tmp_path / "b.jpg"], [3, np.int64(70000)], root=tmp_path)
    assert m.paths == resolved(tmp_path, "a.jpg", "b.jpg")
    assert m.labels.tolist() == [3, 70000]
    assert m.lines == (1, 2)
    assert m.source == "<from_lists>"
    assert m.classes is None


def test_from_lists_class_names_and_default_root(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    m = Manifest.from_lists(["a.jpg", "b.jpg", "c.jpg"], ["dog", "cat", "dog"])
    assert m.paths == resolved(tmp_path, "a.jpg", "b.jpg", "c.jpg")
    assert m.classes == ["cat", "dog"]
    assert m.labels.tolist() == [1, 0, 1]


def test_from_lists_empty() -> None:
    m = Manifest.from_lists([], [], root="/r")
    assert len(m) == 0 and m.labels.dtype == np.int64


def test_from_lists_2d_labels(tmp_path: Path) -> None:
    m = Manifest.from_lists(["a", "b"], np.array([[1, 2], [3, 4]], dtype=np.uint8), root="/r")
    assert m.labels.dtype == np.int64 and m.labels.shape == (2, 2)


def test_from_lists_errors() -> None:
    with pytest.raises(ManifestError, match=r"<from_lists> item 2: negative label -1"):
        Manifest.from_lists(["a", "b"], [0, -1], root="/r")
    with pytest.raises(ManifestError, match=r"<from_lists> item 1: label '1\.5' is not an integer"):
        Manifest.from_lists(["a"], [1.5], root="/r")
    with pytest.raises(ManifestError, match=r"item 2: label 'cat' is not an integer.*item 1"):
        Manifest.from_lists(["a", "b", "c"], [1, "cat", 2], root="/r")
    with pytest.raises(ManifestError, match=r"one label .* per path"):
        Manifest.from_lists(["a", "b"], [1], root="/r")


def test_direct_construction_copies_and_validates() -> None:
    arr = np.array([1, 2])
    m = Manifest(paths=["/a", "/b"], labels=arr, classes=None, lines=[1, 2], source="x")
    assert arr.flags.writeable  # the caller's array is not frozen
    assert m.paths == ("/a", "/b") and m.lines == (1, 2)
    with pytest.raises(ManifestError, match="integer array"):
        Manifest(paths=("/a",), labels=np.array([1.0]), classes=None, lines=(1,), source="x")
    with pytest.raises(ManifestError, match="absolute"):
        Manifest(paths=("a",), labels=np.array([1]), classes=None, lines=(1,), source="x")
    with pytest.raises(ManifestError, match="out of range"):
        Manifest(paths=("/a",), labels=np.array([2]), classes=["x", "y"], lines=(1,), source="x")


# ------------------------------------------------------------------------------------------
# When is the first line a header? (one rule: read_manifest's docstring)


@pytest.mark.parametrize(
    ("data", "kwargs", "paths", "labels", "classes"),
    [
        # Case 1: a label that looks like a column name over a path that is clearly a file.
        (b"imgs/a.jpg,target\nimgs/b.jpg,dog\nimgs/c.jpg,cat\n", {},
         ["imgs/a.jpg", "imgs/b.jpg", "imgs/c.jpg"], [2, 1, 0], ["cat", "dog", "target"]),
        (b"imgs/a.jpg,label\nimgs/b.jpg,dog\nimgs/c.jpg,cat\n", {},
         ["imgs/a.jpg", "imgs/b.jpg", "imgs/c.jpg"], [2, 1, 0], ["cat", "dog", "label"]),
        (b"image 3\nb 1\nc 2\n", {}, ["image", "b", "c"], [3, 1, 2], None),
        (b"a.jpg,class\nb.jpg,dog\n", {}, ["a.jpg", "b.jpg"], [0, 1], ["class", "dog"]),
        # Headers still found: well-known names, a word over integers, a word over files.
        (b"path,label\na.jpg,1\n", {}, ["a.jpg"], [1], None),
        (b"image label\nimage 3\n", {}, ["image"], [3], None),
        (b"fname,y\na.jpg,3\nb.jpg,4\n", {}, ["a.jpg", "b.jpg"], [3, 4], None),
        (b"fname,species\na.jpg,cat\nb.jpg,dog\n", {}, ["a.jpg", "b.jpg"], [0, 1],
         ["cat", "dog"]),
        # Issue 15 item 6: the header trap, with the advice followed by name and by position.
        (b"fname,species,split\nimgs/a.jpg,cat,train\nimgs/b.jpg,dog,val\n",
         {"label_cols": "species"}, ["imgs/a.jpg", "imgs/b.jpg"], [0, 1], ["cat", "dog"]),
        (b"fname,species,split\nimgs/a.jpg,cat,train\nimgs/b.jpg,dog,val\n",
         {"label_cols": 1}, ["imgs/a.jpg", "imgs/b.jpg"], [0, 1], ["cat", "dog"]),
        (b"fname,species,split\nimgs/a.jpg,cat,train\nimgs/b.jpg,dog,val\n",
         {"label_cols": np.int64(1)}, ["imgs/a.jpg", "imgs/b.jpg"], [0, 1], ["cat", "dog"]),
        (b"split,fname,species\ntrain,imgs/a.jpg,cat\nval,imgs/b.jpg,dog\n",
         {"path_col": 1, "label_cols": [2]}, ["imgs/a.jpg", "imgs/b.jpg"], [0, 1],
         ["cat", "dog"]),
        # Paths without extensions: the rule cannot see the header, header=True says it.
        (b"fname,species\nimg001,cat\nimg002,dog\n", {"header": True},
         ["img001", "img002"], [0, 1], ["cat", "dog"]),
    ],
    ids=["case1_target", "case1_label", "case1_image_3", "file_with_class_named_class",
         "known_names", "known_names_ws", "word_over_ints", "word_over_files",
         "trap_by_name", "trap_by_position", "trap_by_numpy_position", "trap_path_col_int",
         "explicit_header"],
)
def test_first_line_header_rule(tmp_path, data, kwargs, paths, labels, classes):
    m = read_manifest(write(tmp_path / "m.csv", data), **kwargs)
    assert m.paths == resolved(tmp_path, *paths)
    assert m.labels.tolist() == labels
    assert m.classes == classes


def test_header_the_rule_cannot_see_gets_advice_that_works(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"img.path,label\na.jpg,1\nb.jpg,2\n")
    with pytest.raises(ManifestError, match=r"m\.csv line 1: label 'label' is not an integer.*"
                       r"pass header=True if line 1 holds column names"):
        read_manifest(f)
    m = read_manifest(f, header=True)
    assert m.labels.tolist() == [1, 2] and m.lines == (2, 3)


def test_header_trap_advice_leads_to_a_correct_result(tmp_path: Path) -> None:
    """Issue 15 item 6, built from the exact case: the error's advice, followed literally."""
    f = write(tmp_path / "pets.csv",
              b"fname,species,split\nimgs/a.jpg,cat,train\nimgs/b.jpg,dog,val\n"
              b"imgs/c.jpg,cat,train\n")
    with pytest.raises(ManifestError, match=r"pets\.csv line 2: .*label_cols='species'") as ei:
        read_manifest(f)
    advice = re.search(r"label_cols=('species'|\d)", str(ei.value))
    assert advice is not None
    for value in ("species", 1):
        m = read_manifest(f, label_cols=value)
        assert len(m) == 3 and m.lines == (2, 3, 4)
        assert m.paths == resolved(tmp_path, "imgs/a.jpg", "imgs/b.jpg", "imgs/c.jpg")
        assert m.classes == ["cat", "dog"] and m.labels.tolist() == [0, 1, 0]


# ------------------------------------------------------------------------------------------
# Missing values, through every way a manifest is made


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"a.jpg,1\nb.jpg,\nc.jpg,2\n", r"line 2: expected a path and at least one label"),
        (b"a.jpg,1,2\nb.jpg,,3\n", r"line 2: empty label in column 1"),
        (b"a.jpg,cat\nb.jpg,nan\nc.jpg,dog\n", r"line 2: missing label 'nan'"),
        (b"a.jpg,cat\nb.jpg,None\n", r"line 2: missing label 'None'"),
        (b"a.jpg,cat\nb.jpg,NA\n", r"line 2: missing label 'NA'"),
        (b"a.jpg,1\nb.jpg,NaN\n", r"line 2: missing label 'NaN'"),
        (b"a.jpg,cat\nb.jpg,<NA>\n", r"line 2: missing label '<NA>'"),
        (b"a.jpg,1\n,2\n", r"line 2: empty path"),
        (b'a.jpg,1\n"",2\n', r"line 2: empty path"),
    ],
)
def test_missing_values_in_files_refused_naming_the_line(tmp_path, data, match):
    with pytest.raises(ManifestError, match=match):
        read_manifest(write(tmp_path / "m.csv", data))


@pytest.mark.parametrize(
    ("paths", "labels", "match"),
    [
        (["a.jpg", "b.jpg"], [1, None], r"<from_lists> item 2: missing label \(None\)"),
        (["a.jpg", "b.jpg"], [1, float("nan")], r"item 2: missing label \(nan\)"),
        (["a.jpg", "b.jpg"], np.array([1.0, np.nan]), r"item 2: missing label"),
        (["a.jpg", "b.jpg"], ["cat", np.nan], r"item 2: missing label"),
        (["a.jpg", "b.jpg"], ["cat", "nan"], r"item 2: missing label 'nan'"),
        (["a.jpg", "b.jpg"], ["cat", ""], r"item 2: empty label"),
        (["a.jpg", "b.jpg"], [[1, 2], [3, None]], r"item 2: missing label"),
        (["a.jpg", None], [1, 2], r"item 2: missing path \(None\)"),
        (["a.jpg", float("nan")], [1, 2], r"item 2: missing path \(nan\)"),
        (["a.jpg", ""], [1, 2], r"item 2: empty path"),
        (["a.jpg", 3], [1, 2], r"item 2: path 3 has type int"),
    ],
)
def test_missing_values_in_lists_refused_naming_the_item(tmp_path, paths, labels, match):
    with pytest.raises(ManifestError, match=match):
        Manifest.from_lists(paths, labels, root=tmp_path)


def test_missing_values_from_a_pandas_frame(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"path": ["a.jpg", "b.jpg", None], "label": ["cat", pd.NA, "dog"]})
    with pytest.raises(ManifestError, match=r"item 2: missing label"):
        Manifest.from_lists(frame["path"][:2], frame["label"][:2], root=tmp_path)
    with pytest.raises(ManifestError, match=r"item 3: missing path \((None|nan)\)"):
        Manifest.from_lists(frame["path"], frame["label"].fillna("cow"), root=tmp_path)
    frame.to_csv(tmp_path / "m.csv", index=False)  # pandas writes missing values as ""
    with pytest.raises(ManifestError, match=r"m\.csv line 3: "):
        read_manifest(tmp_path / "m.csv")


# ------------------------------------------------------------------------------------------
# Paths the operating system cannot open as given


def _unopenable_cases():
    long_name = "x" * 300 + ".jpg"
    long_path = "/".join(["d" * 200] * 25) + ".jpg"
    return [
        ("nul", "a\x00b.jpg", r"holds a NUL byte"),
        ("long_name", long_name, r"too long .*a part of 304 bytes"),
        ("long_path", long_path, r"too long .*more than the \d[\d,]* a path may have"),
        ("unencodable", "a\ud800b.jpg", r"cannot represent"),
    ]


@pytest.mark.parametrize(("name", "bad", "match"), _unopenable_cases(),
                         ids=[c[0] for c in _unopenable_cases()])
@pytest.mark.parametrize("entry", ["read_manifest", "from_lists"])
def test_unopenable_paths_refused_naming_the_line(tmp_path, name, bad, match, entry):
    if entry == "read_manifest":
        if name == "unencodable":
            pytest.skip("a UTF-8 manifest cannot hold a lone surrogate")
        f = tmp_path / "m.csv"
        f.write_text(f"a.jpg,1\n{bad},2\n", encoding="utf-8")
        where = r"m\.csv line 2: "
        make = lambda: read_manifest(f)  # noqa: E731
    else:
        where = r"<from_lists> item 2: "
        make = lambda: Manifest.from_lists(["a.jpg", bad], [1, 2], root=tmp_path)  # noqa: E731
    with pytest.raises(ManifestError, match=where + ".*" + match) as ei:
        make()
    assert "\x00" not in str(ei.value)


# ------------------------------------------------------------------------------------------
# Arguments of read_manifest and Manifest.from_lists


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"path_col": 1.0}, TypeError, r"read_manifest: path_col must be a column name .*float"),
        ({"path_col": True}, TypeError, r"path_col must be .*bool"),
        ({"path_col": -1}, ValueError, r"path_col must be a 0-based position >= 0, got -1"),
        ({"path_col": 10**12}, ValueError, r"path_col=1000000000000 is out of range"),
        ({"label_cols": 1.5}, TypeError, r"label_cols must be .*float"),
        ({"label_cols": [1, None]}, TypeError, r"label_cols must be .*NoneType"),
        ({"label_cols": np.int64(7)}, ValueError, r"label_cols=7 is out of range"),
        ({"sep": ""}, ValueError, r"sep must be a non-empty separator"),
        ({"sep": 1}, TypeError, r"sep must be a str"),
        ({"header": 3}, ValueError, r"header must be"),
        ({"header": "yes"}, ValueError, r"header must be"),
        ({"check_files": "no"}, TypeError, r"check_files must be True or False"),
        ({"allow_outside_root": 1}, TypeError, r"allow_outside_root must be True or False"),
        ({"root": 5}, TypeError, r"read_manifest: root must be a folder"),
    ],
)
def test_read_manifest_arguments_refused_by_name(tmp_path, kwargs, exc, match):
    f = write(tmp_path / "m.csv", b"path,label\na.jpg,1\n")
    with pytest.raises(exc, match=match):
        read_manifest(f, **kwargs)


def test_read_manifest_accepts_numpy_integers(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", b"a.jpg,1,2\nb.jpg,3,4\n")
    m = read_manifest(f, path_col=np.int32(0), label_cols=[np.int64(2)], header=np.int8(0),
                      check_files=np.bool_(False))
    assert m.labels.tolist() == [4]  # header=0: the first line is the header
    with pytest.raises(TypeError, match=r"read_manifest: path must be the manifest file"):
        read_manifest(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (("a.jpg", [1]), TypeError, r"from_lists: paths must be a list .*wrap a single path"),
        ((["a.jpg"], "cat"), TypeError, r"from_lists: labels must be a list"),
        ((["a.jpg"], 3), TypeError, r"from_lists: labels must be a list"),
        ((["a.jpg", "b.jpg"], [1]), ManifestError, r"one label .* per path"),
        ((["a.jpg", "b.jpg"], [[1, 2], [3]]), ManifestError, r"rows of different lengths"),
        ((["a.jpg"], [True]), ManifestError, r"item 1: label True is a bool"),
        ((["a.jpg"], [1.5]), ManifestError, r"item 1: label '1\.5' is not an integer"),
    ],
)
def test_from_lists_arguments_refused_by_name(args, exc, match):
    with pytest.raises(exc, match=match):
        Manifest.from_lists(*args)


def test_from_lists_accepts_numpy_integers_and_paths(tmp_path: Path) -> None:
    m = Manifest.from_lists([tmp_path / "a.jpg", "b.jpg"], np.array([1, 2], dtype=np.uint8),
                            root=tmp_path)
    assert m.labels.tolist() == [1, 2] and m.paths == resolved(tmp_path, "a.jpg", "b.jpg")
    with pytest.raises(TypeError, match=r"from_lists: root must be a folder"):
        Manifest.from_lists(["a.jpg"], [1], root=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Names printed to a terminal are escaped

HOSTILE = "\x1b[2J\x1b[31mred\x07\u202eevil"  # clear screen, recolour, bell, bidi override


@pytest.mark.parametrize(
    "make",
    ["missing_files", "outside_root", "manifest_name", "label_error", "bad_path", "not_utf8"],
)
def test_messages_escape_control_characters(tmp_path, make):
    name = f"img{HOSTILE}.jpg"
    if make == "missing_files":
        f = tmp_path / "m.csv"
        f.write_text(f"{name},1\n", encoding="utf-8")
        call = lambda: read_manifest(f, check_files=True)  # noqa: E731
    elif make == "outside_root":
        f = tmp_path / "m.csv"
        f.write_text(f"../{name},1\n", encoding="utf-8")
        call = lambda: read_manifest(f, root=tmp_path).check_root()  # noqa: E731
    elif make == "manifest_name":
        f = tmp_path / f"m{HOSTILE}\r.csv"
        f.write_text("a.jpg,1\nb.jpg,-1\n")
        call = lambda: read_manifest(f)  # noqa: E731
    elif make == "label_error":
        f = tmp_path / "m.csv"
        f.write_text(f"a.jpg,1\nb.jpg,{HOSTILE}\nc.jpg,1\nd.jpg,2\n", encoding="utf-8")
        call = lambda: read_manifest(f)  # noqa: E731
    elif make == "bad_path":
        call = lambda: Manifest.from_lists([f"{HOSTILE}\r\x00"], [1])  # noqa: E731
    else:
        f = tmp_path / f"m{HOSTILE}.csv"
        f.write_bytes(b"a.jpg,1\n\xff.jpg,2\n")
        call = lambda: read_manifest(f)  # noqa: E731
    with pytest.raises(ExtsrcError) as ei:
        call()
    msg = str(ei.value)
    assert not any(c in msg for c in "\x1b\x07\u202e\r\x00"), msg
    assert "\\x1b" in msg


# ------------------------------------------------------------------------------------------
# Properties: no sample is lost to the header rule; escaped text cannot act on a terminal

_WORDS = st.sampled_from(["label", "labels", "class", "target", "path", "image", "img", "file",
                          "cat", "dog", "y", "species"])
_FILES = st.builds(
    lambda d, n, e: f"{d}/{n}.{e}" if d else f"{n}.{e}",
    st.sampled_from(["", "imgs", "a/b"]), st.sampled_from(["image", "label", "x1", "path"]),
    st.sampled_from(["jpg", "png", "JPEG"]),
)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_FILES, st.one_of(_WORDS, st.integers(0, 999))), min_size=1,
                     max_size=6),
       sep=st.sampled_from([",", "\t", " "]))
def test_no_line_naming_a_file_is_taken_for_a_header(tmp_path_factory, rows, sep):
    """Case 1, swept: whatever words the labels are, a first line whose path is a file is a
    sample. The manifest either keeps every line or is refused naming one; never fewer."""
    folder = tmp_path_factory.mktemp("m")
    f = folder / "m.txt"
    f.write_text("".join(f"{p}{sep}{lab}\n" for p, lab in rows))
    try:
        m = read_manifest(f)
    except ManifestError as e:
        assert re.search(r"m\.txt line \d+: ", str(e)), str(e)
        return
    assert len(m) == len(rows) and m.lines == tuple(range(1, len(rows) + 1))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_shown_text_is_printable_and_printable_text_unchanged(text):
    out = shown(text)
    assert out.isprintable()
    if text.isprintable():
        assert out == text
    out.encode("utf-8")  # no lone surrogate left to break a terminal's encoder


# -- URLs that no storage reads are refused (object storage: tests/test_storage.py) ----------
URL_ADVICE = r"no fsspec filesystem reads this protocol.*s3fs, gcsfuse"


@pytest.mark.parametrize(("cell", "scheme", "advice"), [
    ("hf+hub://org/set/a.jpg", "hf+hub", URL_ADVICE),
    ("nosuchproto://bucket/a.jpg", "nosuchproto", URL_ADVICE),
    ("az:/container/a.jpg", "az", r"write it as az://\.\.\. with two slashes"),
    ("S3:/bucket/a.jpg", "s3", r"write it as s3://\.\.\. with two slashes"),
])
def test_unreadable_url_in_a_manifest_row_is_refused_naming_the_line(
        tmp_path: Path, cell: str, scheme: str, advice: str) -> None:
    m = tmp_path / "m.csv"
    m.write_text(f"path,label\nlocal/a.jpg,0\n  {cell}  ,1\n")
    with pytest.raises(ManifestError, match=rf"m\.csv line 3: path {re.escape(cell)} is a URL "
                                            rf"\({re.escape(scheme)}://\).*{advice}") as ei:
        read_manifest(m)
    e = ei.value
    assert (e.line, e.path, e.reason) == (3, cell, "url")
    # The same list in code: the item is named.
    with pytest.raises(ManifestError, match=r"<from_lists> item 2: path .* is a URL"):
        Manifest.from_lists(["local/a.jpg", cell], [0, 1])


def test_file_url_is_refused_with_its_own_advice(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"item 1: path file:///data/a\.jpg is a URL "
                                            r"\(file://\).*drop the file:// prefix"):
        Manifest.from_lists(["file:///data/a.jpg"], [0])
    with pytest.raises(ManifestError, match=r"item 1: path s3:/bucket/a\.jpg is a URL"):
        Manifest.from_lists([Path("s3://bucket/a.jpg")], [0])


def test_unreadable_url_as_manifest_root_or_folder_is_refused(tmp_path: Path) -> None:
    m = tmp_path / "m.csv"
    m.write_text("a.jpg,0\n")
    with pytest.raises(ManifestError, match=rf"the manifest nosuch://bucket/m\.csv is a URL "
                                            rf"\(nosuch://\).*{URL_ADVICE}"):
        read_manifest("nosuch://bucket/m.csv")
    with pytest.raises(ManifestError, match=r"read_manifest: root nosuch://bucket/ is a URL"):
        read_manifest(m, root="nosuch://bucket/")
    with pytest.raises(ManifestError, match=r"from_lists: root nosuch://x\.org/d is a URL"):
        Manifest.from_lists(["a.jpg"], [0], root="nosuch://x.org/d")
    # Manifest.from_folder and read_folder read local folders; read_manifest("gs://b/train/")
    # reads a folder URL.
    with pytest.raises(ManifestError, match=r"from_folder: the folder gs://bucket/train is a URL "
                                            r"\(gs://\).*only local files are read here"):
        Manifest.from_folder("gs://bucket/train")
    with pytest.raises(ManifestError, match=r"from_folder: root s3://b is a URL"):
        read_folder(tmp_path, root="s3://b")


def test_loaders_refuse_an_unreadable_url_manifest_and_videos_at_urls() -> None:
    import extsrc

    with pytest.raises(ManifestError, match=r"the manifest nosuch://example\.com/m\.csv is a URL"):
        extsrc.Loader("nosuch://example.com/m.csv", batch_size=1, device="cpu")
    with pytest.raises(ManifestError, match=r"VideoLoader: the manifest s3://bucket/videos/ is a "
                                            r"URL .*only local files are read here"):
        extsrc.VideoLoader("s3://bucket/videos/", batch_size=1, sequence_length=2, device="cpu")
    m = Manifest.from_lists(["s3://bucket/a.mp4"], [0])
    with pytest.raises(ManifestError, match=r"VideoLoader: <from_lists> line 1: the video "
                                            r"s3://bucket/a\.mp4 is a URL"):
        extsrc.VideoLoader(m, batch_size=1, sequence_length=2, device="cpu")


def test_windows_drive_letters_and_colons_are_not_urls(tmp_path: Path) -> None:
    m = Manifest.from_lists([r"C:\data\a.jpg", "C:/data/b.jpg", "x:y/c.jpg", "d://e.jpg"],
                            [0, 1, 2, 3], root=tmp_path)
    assert len(m) == 4


# -- the split without pandas agrees with pandas' ----------------------------------------------
# Characters that separate, pad or only look like whitespace (a no-break space, a vertical tab,
# a form feed, a line separator are data to pandas), with a few ordinary ones.
_CELL_CHARS = st.sampled_from([*"ab1.#/,\t ", "\xa0", "\x0b", "\x0c", "\u2028", "é"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.text(_CELL_CHARS, min_size=1, max_size=12), min_size=1, max_size=8),
       sep=st.sampled_from([",", "\t", r"\s+"]))
def test_plain_split_gives_the_cells_pandas_gives(lines, sep):
    from extsrc.sources import table as mf

    texts = [t.strip() if sep == r"\s+" else t for t in lines]
    if not all(t.strip() for t in texts):
        return  # blank lines never reach the split
    data = list(enumerate(texts, start=1))
    width = mf._max_fields(texts, sep)
    plain = mf._split_plain(texts, sep, width)
    assert plain is not None  # no quote: the split without pandas takes every such text
    assert plain == mf._split_csv("m.csv", data, texts, sep, width)


def test_reading_a_plain_manifest_does_not_import_pandas(tmp_path: Path) -> None:
    """pandas is imported only for what needs its parser: quoted fields, other separators."""
    import subprocess
    import sys

    (tmp_path / "plain.csv").write_text("path,label\na.jpg,3\nb.jpg,0,\n")
    (tmp_path / "plain.txt").write_text("a.jpg 3\n  b.jpg\t0\n")
    (tmp_path / "quoted.csv").write_text('"a, b.jpg",3\n')
    script = (
        "import sys, extsrc\n"
        f"for name in ('plain.csv', 'plain.txt'):\n"
        f"    extsrc.read_manifest({str(tmp_path)!r} + '/' + name)\n"
        "print('pandas' in sys.modules)\n"
        f"m = extsrc.read_manifest({str(tmp_path)!r} + '/quoted.csv')\n"
        "print('pandas' in sys.modules, m.paths[0].endswith('a, b.jpg'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["False", "True", "True"]
