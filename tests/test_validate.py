"""The manifest doctor (extsrc.validate) and the per-file checks, on real generated files.

No DALI here: these run in well under a second each. The helpers that write bad files are shared
with test_reliability.py.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    BAD_FILES,
    children,
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
from extsrc.errors import ManifestError, PathOutsideRootError
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, check_bytes, check_file, sniff_format
from extsrc.sources.manifest import Manifest
from extsrc.sources.table import read_manifest
from extsrc.validation.report import ValidationReport
from extsrc.validation.validate import validate

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
    assert "not an image file (no known image signature; it looks like text)" in \
        msgs["not_an_image"]
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
    """The package never unpickles / joblib.loads / np.loads with pickles a file it is given.

    Two modules unpickle, and no file given to extsrc: extsrc/ops_runtime/worker.py reads the
    messages its parent process sends over a private socket pair (the ops to run, sample
    positions); extsrc/_dali/handoff.py reads, in a starting reader, the state its own loader
    wrote moments before into a private directory, only if its SHA-256 is the one that came
    through the spawn pipe (tests/test_handoff.py)."""
    pkg = Path(extsrc.__file__).parent
    allowed = {pkg / "ops_runtime" / "worker.py", pkg / "_dali" / "handoff.py"}
    banned = re.compile(r"pickle\.loads?\(|joblib\.load\(|\bload\(.*allow_pickle\s*=\s*True|"
                        r"torch\.load\(|dill\.|cloudpickle\.load|shelve\.open|yaml\.load\(")
    offenders = []
    for f in [*pkg.rglob("*.py"), *(pkg.parent / "augment_ops").rglob("*.py")]:
        if f in allowed:
            continue
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


# -- no worker processes left behind (case 9) -----------------------------------------------------

def test_validate_leaves_no_worker_processes(tmp_path):
    """Case 9: joblib's pool kept its workers alive ~300 s after validate returned."""
    mpath, _ = dataset_with_bad(tmp_path, ["zero_byte", "text_as_jpg"], n=24)
    assert children() == set()
    report = validate(mpath, n_jobs=2, chunk_size=4, progress=False)
    assert report.num_bad == 2
    assert children() == set()


def test_skip_policy_leaves_no_worker_processes(tmp_path):
    """Case 9 as reported: Loader(on_error="skip") runs validate; after close() nothing is left."""
    mpath, _ = dataset_with_bad(tmp_path, ["zero_byte"], n=12)
    with pytest.warns(UserWarning, match="skipping 1 of"):
        loader = extsrc.Loader(mpath, batch_size=4, resize=16, device="cpu",
                               workers=extsrc.Workers(num_workers=0),
                               bad_files=extsrc.BadFiles(on_error="skip",
                                                         validate_kwargs={"n_jobs": 2,
                                                                          "chunk_size": 2,
                                                                          "progress": False}))
    with loader:
        assert sum(len(b["index"]) for b in loader) >= 12
    assert children() == set()


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"decode": "yes"}, TypeError, r"validate: decode must be True or False"),
        ({"progress": 1}, TypeError, r"validate: progress must be True or False"),
        ({"n_jobs": 2.0}, TypeError, r"validate: n_jobs must be an int .*float"),
        ({"n_jobs": 0}, ValueError, r"validate: n_jobs must not be 0"),
        ({"n_jobs": 10**6}, ValueError, r"validate: n_jobs must be >= -\d+ and <= [\d,]+"),
        ({"n_jobs": -(10**6)}, ValueError, r"validate: n_jobs must be >= -\d+"),
        ({"max_pixels": 0}, ValueError, r"validate: max_pixels must be >= 1"),
        ({"max_pixels": 1e9}, TypeError, r"validate: max_pixels must be an int or None"),
        ({"chunk_size": 0}, ValueError, r"validate: chunk_size must be >= 1"),
        ({"chunk_size": True}, TypeError, r"validate: chunk_size must be an int or None"),
        ({"max_file_bytes": -5}, ValueError, r"max_file_bytes must be >= 1"),
    ],
)
def test_validate_arguments_refused_by_name(tmp_path, kwargs, exc, match):
    mpath = write_dataset(tmp_path, 2)
    with pytest.raises(exc, match=match):
        validate(mpath, **{"progress": False, **kwargs})


def test_report_method_arguments_refused_by_name(tmp_path):
    report = validate(write_dataset(tmp_path, 2), n_jobs=1, progress=False)
    with pytest.raises(ValueError, match=r"summary: max_problems must be >= 0, got -1"):
        report.summary(max_problems=-1)
    with pytest.raises(TypeError, match=r"summary: max_problems must be an int"):
        report.summary(max_problems=2.5)
    assert report.summary(max_problems=np.int64(3)).startswith("extsrc.validate: ")
    with pytest.raises(TypeError, match=r"write_clean: path must be a file path"):
        report.write_clean(3)


def test_validate_accepts_numpy_integers(tmp_path):
    mpath = write_dataset(tmp_path, 3)
    report = validate(mpath, n_jobs=np.int64(1), max_pixels=np.int32(10**6),
                      chunk_size=np.uint8(2), max_file_bytes=np.int64(10**6), progress=False,
                      decode=np.bool_(True))
    assert report.ok and report.max_pixels == 10**6
    with pytest.raises(TypeError, match=r"validate: manifest must be an extsrc.Manifest"):
        validate(3)  # type: ignore[arg-type]


# -- what messages show ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "guess"),
    [
        (b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
         "it looks like text"),
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n",
         "it looks like text"),
        (b"<!DOCTYPE html><html><title>403 Forbidden</title>", "HTML or XML"),
        (b"%PDF-1.7\n%secret", "a PDF document"),
        (b"PK\x03\x04secret-name.txt", "a ZIP archive"),
        (bytes(range(7, 200)), "unrecognised binary data"),
    ],
)
def test_messages_name_a_format_guess_never_file_content(tmp_path, content, guess):
    """Case 12 (no echo): a message must not print a file's first bytes."""
    f = tmp_path / "x.jpg"
    f.write_bytes(content)
    m = Manifest.from_lists([f], [0])
    report = validate(m, n_jobs=1, progress=False)
    (problem,) = report.problems
    assert problem.reason == "not_an_image" and guess in problem.message
    text = str(report)
    for word in (b"/bin/bash", b"OPENSSH", b"Forbidden", b"secret", b"daemon", bytes(range(7, 15))):
        if word in content:
            assert word.decode("latin-1") not in text
    assert "07 08 09" not in text


def test_report_escapes_control_characters_in_names(tmp_path):
    name = "x\x1b[2J\x1b[31m\u202e.jpg"
    (tmp_path / name).write_bytes(b"not an image")
    m = Manifest.from_lists([tmp_path / name], [0])
    text = validate(m, n_jobs=1, progress=False).summary()
    assert "\x1b" not in text and "\u202e" not in text
    assert "x\\x1b[2J\\x1b[31m\\u202e.jpg" in text


# -- damaged JPEG data that decoders turn into noise (case 4) -------------------------------------


def _scan_bounds(data: bytes) -> tuple[int, int]:
    """(first byte of the entropy-coded data after the first SOS header, offset of EOI)."""
    i = 2
    while data[i + 1] != 0xDA:
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return i + 2 + int.from_bytes(data[i + 2:i + 4], "big"), data.rfind(b"\xff\xd9")


def damaged_jpeg(how: str, seed: int = 0, progressive: bool = False) -> bytes:
    """A real JPEG whose entropy-coded data is replaced: every marker, the size and EOI stay
    intact, so only a decoder can tell. Random bytes avoid 0xFF (which would form markers):
    the data looks like a valid stream, as a disk or transfer error would leave it."""
    data = bytearray(encode(pattern_image(seed, 101, 99), "JPEG", quality=90,
                            progressive=progressive))
    start, end = _scan_bounds(bytes(data))
    if how == "zeroed":
        data[start:end] = bytes(end - start)
    elif how == "random":
        rng = np.random.default_rng(seed)
        data[start:end] = rng.integers(0, 255, end - start, dtype=np.uint8).tobytes()
    elif how == "zeroed_half":
        mid = (start + end) // 2
        data[mid:end] = bytes(end - mid)
    return bytes(data)


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
@pytest.mark.parametrize("how", ["zeroed", "random", "zeroed_half"])
def test_damaged_entropy_coded_jpeg_is_found_by_decode(tmp_path, how, progressive):
    """Case 4: Pillow (and DALI) decode these without an error; libjpeg warns and validate
    reports them, with libjpeg's words."""
    bad = damaged_jpeg(how, progressive=progressive)
    Image.open(io.BytesIO(bad)).load()  # the premise: Pillow returns an image, no error
    assert check_bytes(bad) is None  # and the header checks pass
    paths = []
    for k in range(3):
        p = tmp_path / f"{k}.jpg"
        p.write_bytes(bad if k == 1 else encode(pattern_image(k, 101, 99), "JPEG", quality=90,
                                                 progressive=progressive))
        paths.append(p)
    m = Manifest.from_lists(paths, [0, 1, 2])
    report = validate(m, n_jobs=1, progress=False)
    assert [(p.line, p.reason) for p in report.problems] == [(2, "corrupt")]
    assert re.search(r"compressed data is damaged \(libjpeg: Corrupt JPEG data: ",
                     report.problems[0].message)
    assert validate(m, n_jobs=1, progress=False, decode=False).ok  # only a decoder sees it


def test_strict_decode_accepts_every_good_jpeg_kind(tmp_path):
    """No false alarms: grey, CMYK, 4:4:4, progressive, restart markers, bytes after EOI."""
    img = pattern_image(3, 37, 53)
    kinds = {
        "gray": encode(img[..., 0], "JPEG"),
        "cmyk": encode(Image.fromarray(img).convert("CMYK"), "JPEG"),
        "444": encode(img, "JPEG", subsampling=0, quality=95),
        "progressive": encode(img, "JPEG", progressive=True),
        "restart": encode(img, "JPEG", restart_marker_blocks=1),
        "trailing": encode(img, "JPEG") + b"\x00trailing bytes after EOI",
        "exif": encode(img, "JPEG", exif=Image.Exif()),
    }
    for name, data in kinds.items():
        (tmp_path / f"{name}.jpg").write_bytes(data)
    m = Manifest.from_lists([tmp_path / f"{n}.jpg" for n in kinds], list(range(len(kinds))))
    report = validate(m, n_jobs=1, progress=False)
    assert report.ok, report.summary()
