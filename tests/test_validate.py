"""The manifest doctor (extsrc.validate) and the per-file checks, on real generated files.

No DALI here: these run in well under a second each. The helpers that write bad files are shared
with test_reliability.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    BAD_FILES,
    dataset_with_bad,
    encode,
    huge_png,
    noise,
    pattern_image,
    root_with_link_out,
    write_dataset,
)
from PIL import Image

import extsrc
from extsrc.doctor import ValidationReport, validate
from extsrc.errors import ManifestError, PathOutsideRootError
from extsrc.imagecheck import DEFAULT_MAX_PIXELS, check_bytes, check_file, sniff_format
from extsrc.manifest import Manifest, read_manifest

# -- validate -------------------------------------------------------------------------------------


@pytest.mark.parametrize("decode", [True, False], ids=["decode", "headers"])
def test_every_bad_kind_is_found_with_line_and_reason(tmp_path, decode):
    kinds = list(BAD_FILES)
    mpath, where = dataset_with_bad(tmp_path, kinds)
    m = read_manifest(mpath)
    report = validate(m, decode=decode, n_jobs=1, progress=False)
    by_index = {p.index: p for p in report.problems}
    for kind in kinds:
        _, _, reason, without_decode = BAD_FILES[kind]
        i = where[kind]
        if not decode and not without_decode:
            assert i not in by_index, kind  # only a decoder can see it
            continue
        p = by_index[i]
        assert p.reason == reason, (kind, p)
        assert p.line == m.lines[i] == i + 2  # header on line 1
        assert p.path == m.paths[i]
        text = str(p)
        assert f"{mpath} line {p.line}: {p.path}: " in text and f"[{reason}]" in text
    expected_bad = len(kinds) - (0 if decode else 1)
    assert report.num_bad == expected_bad
    assert len(report.ok_indices) == len(m) - expected_bad
    assert not report.ok and sum(report.counts.values()) == expected_bad
    assert report.rate > 0


def test_messages_say_what_and_how_to_fix(tmp_path):
    mpath, _ = dataset_with_bad(tmp_path, ["huge_png_50k", "text_as_jpg", "missing"])
    report = validate(mpath, n_jobs=1, progress=False)
    msgs = {p.reason: p.message for p in report.problems}
    assert re.search(r"declares 50000x50000 = 2,500,000,000 pixels, more than max_pixels="
                     r"178,956,970 .*raise max_pixels", msgs["too_large"])
    assert "starts with text 'this is not an i" in msgs["not_an_image"]
    assert "file not found" in msgs["missing"] and "drop the line" in msgs["missing"]
    summary = report.summary()
    assert "3 bad" in summary and "too_large: 1" in summary
    assert "clean_manifest()" in summary and "on_error='skip'" in summary
    assert str(report) == summary and "bad=3" in repr(report)


def test_clean_manifest_and_write_clean_round_trip(tmp_path):
    mpath, where = dataset_with_bad(tmp_path, ["zero_byte", "truncated_jpeg"], n=6)
    m = read_manifest(mpath)
    report = validate(m, n_jobs=1, progress=False)
    clean = report.clean_manifest()
    bad = set(where.values())
    keep = [i for i in range(len(m)) if i not in bad]
    assert list(report.ok_indices) == keep
    assert clean.paths == tuple(m.paths[i] for i in keep)
    assert clean.lines == tuple(m.lines[i] for i in keep)  # original lines kept
    assert clean.source == m.source
    np.testing.assert_array_equal(clean.labels, m.labels[keep])
    out = report.write_clean(tmp_path / "out" / "clean.csv")
    again = read_manifest(out)
    assert again.paths == clean.paths and np.array_equal(again.labels, clean.labels)
    assert validate(again, n_jobs=1, progress=False).ok


def test_write_clean_class_names_and_multi_labels(tmp_path):
    write_dataset(tmp_path, 4, fmt="png")
    names = ["cat", "dog", "cat", "eel"]
    (tmp_path / "images" / "00003.png").write_bytes(b"")  # the only "eel"
    m = Manifest.from_lists([tmp_path / "images" / f"{i:05d}.png" for i in range(4)], names)
    report = validate(m, n_jobs=1, progress=False)
    with pytest.warns(UserWarning, match="integer indices"):
        out = report.write_clean(tmp_path / "c1.csv")
    assert np.array_equal(read_manifest(out).labels, [0, 1, 0])
    (tmp_path / "images" / "00003.png").unlink()
    write_dataset(tmp_path, 4, fmt="png")
    report = validate(m, n_jobs=1, progress=False)
    back = read_manifest(report.write_clean(tmp_path / "c2.csv"))
    assert back.classes == ["cat", "dog", "eel"] and np.array_equal(back.labels, m.labels)
    multi = Manifest.from_lists(list(m.paths), [[1, 2], [3, 4], [5, 6], [7, 8]])
    back = read_manifest(validate(multi, n_jobs=1, progress=False).write_clean(tmp_path / "c3.csv"))
    assert np.array_equal(back.labels, multi.labels)


def test_all_bad_clean_manifest_raises(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"")
    m = Manifest.from_lists([tmp_path / "x.jpg"], [0])
    report = validate(m, n_jobs=1, progress=False)
    with pytest.raises(ManifestError, match="every one of the 1 samples is bad"):
        report.clean_manifest()


def test_parallel_chunks_match_serial(tmp_path, capsys):
    kinds = ["zero_byte", "text_as_jpg", "missing", "truncated_jpeg"]
    mpath, _ = dataset_with_bad(tmp_path, kinds, n=40)
    serial = validate(mpath, n_jobs=1, progress=False)
    parallel = validate(mpath, n_jobs=2, chunk_size=7, progress=True)
    assert parallel.problems == serial.problems
    assert np.array_equal(parallel.ok_indices, serial.ok_indices)
    assert "extsrc.validate" in capsys.readouterr().err  # the tqdm bar


def test_max_pixels_is_configurable(tmp_path):
    write_dataset(tmp_path, 3, size=(40, 40))
    m = read_manifest(tmp_path / "manifest.csv")
    assert validate(m, n_jobs=1, progress=False).ok
    small = validate(m, n_jobs=1, progress=False, max_pixels=1000)
    assert small.counts == {"too_large": 3}
    (tmp_path / "huge.png").write_bytes(huge_png())
    assert check_file(str(tmp_path / "huge.png"), max_pixels=None, decode=False) is None
    assert check_file(str(tmp_path / "huge.png"), decode=False).reason == "too_large"
    assert DEFAULT_MAX_PIXELS == 178_956_970


def test_good_formats_pass(tmp_path):
    img = pattern_image(3, 30, 40)
    files = {
        "rgb.jpg": encode(img, "JPEG"), "gray.jpg": encode(Image.fromarray(img).convert("L"),
                                                           "JPEG"),
        "cmyk.jpg": encode(Image.fromarray(img).convert("CMYK"), "JPEG"),
        "p.png": encode(Image.fromarray(img).convert("P"), "PNG"),
        "rgba.png": encode(Image.fromarray(img).convert("RGBA"), "PNG"),
        "16.png": encode(Image.fromarray(img[..., 0].astype(np.uint16) * 257), "PNG"),
        "trailing.jpg": encode(img, "JPEG") + b"\x00" * 100,
        "b.bmp": encode(img, "BMP"), "t.tiff": encode(img, "TIFF"), "w.webp": encode(img, "WEBP"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        assert check_bytes(data) is None, name
        assert check_file(str(tmp_path / name), decode=True) is None, name
    assert sniff_format(files["w.webp"]) == "webp" and sniff_format(b"GIF89a....") == "gif"


def test_large_file_header_window(tmp_path):
    """Files bigger than the head/tail windows are checked without reading them whole."""
    big = encode(noise(400, 400), "JPEG", quality=100)
    assert len(big) > 2 * 65536
    (tmp_path / "big.jpg").write_bytes(big)
    (tmp_path / "cut.jpg").write_bytes(big[: len(big) - 70_000])
    assert check_file(str(tmp_path / "big.jpg"), decode=False) is None
    assert check_file(str(tmp_path / "cut.jpg"), decode=False).reason == "truncated"


# -- paths outside the root -----------------------------------------------------------------------


def test_paths_outside_root_are_found(tmp_path):
    root, outside = root_with_link_out(tmp_path, 3)
    lines = ["images/00000.png,0", "../secret.png,1", f"{outside},2", "images/link.png,3",
             "images/00001.png,4"]
    mpath = tmp_path / "m.csv"
    mpath.write_text("\n".join(lines) + "\n")
    m = read_manifest(mpath, root=root)
    assert m.root == str(root)
    assert m.outside_root() == [1, 2]  # lexical: '..' and an absolute path elsewhere
    assert m.outside_root(follow_symlinks=True) == [1, 2, 3]
    with pytest.raises(PathOutsideRootError, match=r"m\.csv line 2: path .*secret\.png is "
                       r"outside the root .*allow_outside_root=True"):
        m.check_root()
    report = validate(m, n_jobs=1, progress=False)
    assert [(p.index, p.reason) for p in report.problems] == [
        (1, "outside_root"), (2, "outside_root"), (3, "outside_root")]
    assert "outside the root" in report.problems[2].message
    opted = read_manifest(mpath, root=root, allow_outside_root=True)
    assert opted.root is None and validate(opted, n_jobs=1, progress=False).ok
    opted.check_root()
    no_root = read_manifest(mpath)  # no root given: no limit
    assert no_root.root is None and no_root.outside_root() == []


def test_nothing_unpickles_user_files():
    """The package never unpickles / joblib.loads / np.loads with pickles a file it is given."""
    pkg = Path(extsrc.__file__).parent
    banned = re.compile(r"pickle\.loads?\(|joblib\.load\(|\bload\(.*allow_pickle\s*=\s*True|"
                        r"torch\.load\(|dill\.|cloudpickle\.load|shelve\.open|yaml\.load\(")
    offenders = []
    for f in [*pkg.rglob("*.py"), *(pkg.parent / "augment_ops").rglob("*.py")]:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if banned.search(line):
                offenders.append(f"{f}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_validate_accepts_a_path_and_reports_good(tmp_path):
    mpath = write_dataset(tmp_path, 5, fmt="mixed")
    report = validate(mpath, n_jobs=1, progress=False)
    assert isinstance(report, ValidationReport) and report.ok
    assert report.clean_manifest() == read_manifest(mpath)
    assert "5 ok, 0 bad" in report.summary()
    assert extsrc.validate is validate
    assert os.path.isabs(report.manifest.paths[0])
