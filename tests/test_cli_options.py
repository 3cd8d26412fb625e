"""``extsrc`` options, run as a subprocess: op parameters, the op listing, suggestions for
misspelt names, hints worded for the command line and ``validate --write-clean``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from extsrc.tools.sample_data import make_sample_dataset

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    ), "OMP_NUM_THREADS": "1"}
    env.pop("EXTSRC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "extsrc.tools.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def error_line(p: subprocess.CompletedProcess[str], code: int) -> str:
    assert p.returncode == code, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("extsrc: error: "), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cliopts")
    make_sample_dataset(root, n=8, size=(48, 64), fmt="png")
    return root / "manifest.csv"


def test_op_parameters_reach_the_ops(tmp_path: Path, data: Path):
    p = run("preview", str(data), "--ops", "center_crop:size=24,rot90:k=1", "--resize", "0",
            "--n", "2", "--workers", "0", "-o", "p.png", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # 48x64 images: a 24x24 centre crop, and a quarter turn that swaps height and width.
    assert "image 48x64x3 uint8, center_crop_0 24x24x3 uint8, rot90_0 64x48x3 uint8" in p.stdout


def test_batch_format_options(tmp_path: Path, data: Path):
    p = run("preview", str(data), "--ops", "hflip", "--resize", "32", "--layout", "NCHW",
            "--normalize", "imagenet", "--n", "2", "--workers", "0", "-o", "p.png", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "image 3x32x32 float32, hflip_0 3x32x32 float32" in p.stdout
    p = run("preview", str(data), "--resize", "16x24", "--resize-mode", "stretch", "--dtype",
            "float16", "--n", "2", "--workers", "0", "-o", "p.png", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "image 16x24x3 float16" in p.stdout


def test_op_parameter_errors_name_the_fix(tmp_path: Path, data: Path):
    line = error_line(run("preview", str(data), "--ops", "center_crop:sise=24", cwd=tmp_path), 2)
    assert "no parameter 'sise'; did you mean 'size'? its parameters: size" in line
    line = error_line(run("preview", str(data), "--ops", "center_crop:24", cwd=tmp_path), 2)
    assert "expected NAME:KEY=VALUE (e.g. center_crop:size=96), got '24'" in line
    line = error_line(run("preview", str(data), "--ops", "centre_crop", cwd=tmp_path), 2)
    assert "no op named 'centre_crop'; did you mean 'center_crop'?" in line
    line = error_line(run("preview", str(data), "--ops", "zzz", cwd=tmp_path), 2)
    assert "did you mean" not in line and "`extsrc ops` lists" in line


def test_ops_lists_parameters_and_defaults(tmp_path: Path):
    p = run("ops", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
    assert "PARAMETERS (defaults)" in rows["NAME"]
    assert " size=64 " in rows["center_crop"] and " k=1 " in rows["rot90"]
    assert " p=0.5 " in rows["random_hflip"]
    assert "--ops NAME:KEY=VALUE" in p.stdout


def test_param_values_are_typed():
    from extsrc.tools.cli import _param_value

    assert [_param_value(v) for v in ("96", "0.5", "true", "False", "none", "bilinear")] == [
        96, 0.5, True, False, None, "bilinear"]
    assert isinstance(_param_value("96"), int) and isinstance(_param_value("1e-3"), float)


def test_write_clean_always_writes_or_says_why(tmp_path: Path, data: Path):
    out = tmp_path / "clean.csv"
    p = run("validate", str(data), "--jobs", "1", "--write-clean", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"wrote all 8 samples (the manifest is clean) to {out}" in p.stdout
    assert len(out.read_text().splitlines()) == 1 + 8
    gone = tmp_path / "gone.csv"
    gone.write_text("path,label\nno1.png,a\nno2.png,b\n")
    p = run("validate", str(gone), "--jobs", "1", "--write-clean", str(tmp_path / "x.csv"),
            cwd=tmp_path)
    assert p.returncode == 1
    assert "--write-clean: nothing written: " in p.stdout and "every one of the 2" in p.stdout
    assert not (tmp_path / "x.csv").exists()


def test_hints_speak_the_command_line(tmp_path: Path, data: Path):
    bad_root = tmp_path / "bad"
    make_sample_dataset(bad_root, n=4, size=(16, 16), fmt="png")
    images = sorted((bad_root / "images").iterdir())
    images[1].write_text("not an image\n")
    manifest = str(bad_root / "manifest.csv")
    p = run("validate", manifest, "--jobs", "1", "--max-problems", "1", cwd=tmp_path)
    assert p.returncode == 1
    assert "--write-clean CSV" in p.stdout and "--skip-bad" in p.stdout
    assert "report." not in p.stdout and "pass on_error" not in p.stdout
    line = error_line(run("preview", manifest, "--workers", "0", "-o", "p.png", cwd=tmp_path),
                      1)
    assert "line 3" in line and "--skip-bad" in line and "`extsrc validate MANIFEST`" in line
    assert "on_error" not in line and "report." not in line
