"""Writing outputs never destroys inputs: ``ValidationReport.write_clean`` keeps relative paths
relative and refuses the manifest it cleans, and the command line refuses ``--write-clean``,
``preview -o`` and ``demo --out`` naming an input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import dataset_with_bad, write_dataset

from extsrc import Manifest, read_manifest
from extsrc.errors import OutputOverwritesInputError
from extsrc.validation.validate import validate

REPO = Path(__file__).resolve().parents[1]


def _good(mpath: Path, where: dict[str, int]) -> tuple[tuple[str, ...], np.ndarray]:
    m = read_manifest(mpath)
    keep = [i for i in range(len(m)) if i not in set(where.values())]
    return tuple(m.paths[i] for i in keep), m.labels[keep]


def _rows(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:]


@pytest.mark.parametrize("where_out", ["beside", "sub/dir", "elsewhere"])
def test_write_clean_keeps_relative_paths_and_reads_back_the_good_samples(tmp_path, where_out):
    data = tmp_path / "data"
    mpath, where = dataset_with_bad(data, ["zero_byte", "truncated_jpeg", "text_as_jpg"], n=6)
    paths, labels = _good(mpath, where)
    out = {"beside": data / "clean.csv", "sub/dir": data / "sub" / "dir" / "clean.csv",
           "elsewhere": tmp_path / "other" / "clean.csv"}[where_out]
    written = validate(mpath, n_jobs=1, progress=False).write_clean(out)
    assert written == out
    rows = _rows(out)
    assert len(rows) == len(paths)
    assert not any(r.startswith("/") for r in rows)  # relative, as the input had them
    if where_out == "beside":
        assert rows[0] == "images/00000.png,0"  # spelled as in the input
    back = read_manifest(out)
    assert back.paths == paths and np.array_equal(back.labels, labels)
    assert [p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_write_clean_keeps_absolute_paths_outside_the_manifests_folder(tmp_path):
    write_dataset(tmp_path / "elsewhere", 2, fmt="png")
    outside = tmp_path / "elsewhere" / "images" / "00001.png"
    data = tmp_path / "data"
    write_dataset(data, 2, fmt="png")
    # a relative path, an absolute one outside the folder, and a name that starts with '#'
    (data / "#3.png").write_bytes((data / "images" / "00000.png").read_bytes())
    mpath = data / "m.csv"
    mpath.write_text(f"path,label\nimages/00000.png,0\n{outside},1\n./#3.png,2\n")
    out = tmp_path / "out" / "clean.csv"
    validate(mpath, n_jobs=1, progress=False).write_clean(out)
    assert _rows(out) == ["../data/images/00000.png,0", f"{outside},1",
                          "../data/#3.png,2"]
    beside = validate(mpath, n_jobs=1, progress=False).write_clean(data / "c.csv")
    assert _rows(beside)[2] == "./#3.png,2"  # not a '#' comment line
    for f in (out, beside):
        back = read_manifest(f)
        assert back.paths == read_manifest(mpath).paths
        assert np.array_equal(back.labels, [0, 1, 2])


def test_write_clean_of_a_folder_dataset_is_relative_to_the_new_file(tmp_path):
    for cls in ("cat", "dog"):
        write_dataset(tmp_path / "train" / cls, 2, fmt="png")
        (tmp_path / "train" / cls / "manifest.csv").unlink()
    (tmp_path / "train" / "dog" / "images" / "00001.png").write_bytes(b"")
    m = Manifest.from_folder(tmp_path / "train")
    out = tmp_path / "lists" / "clean.csv"
    validate(m, n_jobs=1, progress=False).write_clean(out)
    assert _rows(out)[0] == "../train/cat/images/00000.png,cat"
    back = read_manifest(out)
    assert back.paths == m.paths[:3] and back.classes == ["cat", "dog"]
    assert np.array_equal(back.labels, [0, 0, 1])


def test_write_clean_refuses_the_manifest_it_cleans_however_spelled(tmp_path, monkeypatch):
    mpath, _ = dataset_with_bad(tmp_path, ["zero_byte"], n=4)
    before = mpath.read_bytes()
    report = validate(mpath, n_jobs=1, progress=False)
    (tmp_path / "link.csv").symlink_to(mpath)
    os.link(mpath, tmp_path / "hard.csv")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for spelling in (mpath, "../with_bad.csv", tmp_path / "sub" / ".." / "with_bad.csv",
                     tmp_path / "link.csv", tmp_path / "hard.csv"):
        with pytest.raises(OutputOverwritesInputError,
                           match=r"is the manifest being cleaned .*with_bad\.csv.*choose another "
                                 r"file name, such as with_bad\.clean\.csv") as info:
            report.write_clean(spelling)
        assert isinstance(info.value, ValueError) and info.value.source == str(mpath)
    assert mpath.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bad", "hard.csv", "images", "link.csv", "manifest.csv", "sub", "with_bad.csv"]


# -- the command line ------------------------------------------------------------------------------


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]), "OMP_NUM_THREADS": "1"}
    env.pop("EXTSRC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "extsrc.tools.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _one_line(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("extsrc: error: "), p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_cli_refuses_to_write_over_an_input(tmp_path):
    mpath, _ = dataset_with_bad(tmp_path, ["zero_byte"], n=4)
    before = mpath.read_bytes()
    (tmp_path / "link.csv").symlink_to(mpath)
    (tmp_path / "sub").mkdir()
    for out in ("with_bad.csv", "link.csv", "sub/../with_bad.csv", str(mpath)):
        p = run("validate", "with_bad.csv", "--jobs", "1", "--write-clean", out, cwd=tmp_path)
        _one_line(p, f"--write-clean {out} is the input manifest with_bad.csv",
                  "choose another file")
    p = run("preview", "with_bad.csv", "-o", "link.csv", cwd=tmp_path)
    _one_line(p, "-o link.csv is the input manifest")
    image = tmp_path / "images" / "00000.png"
    image_bytes = image.read_bytes()
    p = run("preview", "manifest.csv", "-o", "images/00000.png", "--workers", "0",
            cwd=tmp_path)
    _one_line(p, "-o images/00000.png is a file the manifest lists")
    assert mpath.read_bytes() == before and image.read_bytes() == image_bytes
    # A folder holding someone else's files is not the demo's to write into.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "preview.png").write_bytes(b"precious")
    p = run("demo", "--out", "mine", "--n", "4", "--epochs", "1", cwd=tmp_path)
    _one_line(p, "--out mine: the folder holds files extsrc demo did not write")
    assert (mine / "preview.png").read_bytes() == b"precious"
    assert sorted(os.listdir(mine)) == ["preview.png"]
