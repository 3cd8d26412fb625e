"""The ``extsrc`` command, run as a subprocess: success and failure paths, exit codes, messages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest
from helpers import has_gpu
from PIL import Image

from extsrc.tools.sample_data import make_sample_dataset

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    ), "OMP_NUM_THREADS": "1"}
    env.pop("EXTSRC_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "extsrc.tools.cli", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout,
    )


def assert_one_line_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert p.returncode == code, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("extsrc: error: "), p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 16-image sample dataset; returns its folder (manifest.csv inside)."""
    root = tmp_path_factory.mktemp("cli")
    make_sample_dataset(root, n=16, size=(48, 64), fmt="png")
    return root


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    """The sample dataset with line 3's file deleted and line 5's file garbage."""
    root = tmp_path_factory.mktemp("bad")
    make_sample_dataset(root, n=16, size=(48, 64), fmt="png")
    images = sorted((root / "images").iterdir())
    images[1].unlink()
    images[3].write_text("not an image\n")
    return root / "manifest.csv"


def test_help_explains_every_command(tmp_path: Path):
    p = run("--help", cwd=tmp_path)
    assert p.returncode == 0
    for word in ("demo", "validate", "preview", "bench", "ops", "manifest", "exit status"):
        assert word in p.stdout
    for cmd in ("demo", "validate", "preview", "bench", "ops"):
        sub = run(cmd, "--help", cwd=tmp_path)
        assert sub.returncode == 0 and f"usage: extsrc {cmd}" in sub.stdout
    # No command: the help, and a usage error status.
    p = run(cwd=tmp_path)
    assert p.returncode == 2 and "commands" in p.stdout


def test_ops_lists_registry_with_user_ops(tmp_path: Path):
    (tmp_path / "my_ops.py").write_text(
        "import augment_ops\n\n"
        "@augment_ops.augment_op(num_outputs=2)\n"
        "def halves(img):\n"
        '    """Left and right halves."""\n'
        "    w = img.shape[1] // 2\n"
        "    return img[:, :w], img[:, w:]\n\n"
        "@augment_ops.augment_op\n"
        "def pixel_loop(img):\n"
        "    while img.mean() > 100:\n"
        "        img = img // 2\n"
        "    return img\n"
    )
    p = run("ops", "--import", "my_ops.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines() if line.strip()}
    # Without a GPU, ops with several outputs run on the numpy path (see extsrc.ops_runtime.paths).
    several = "native" if has_gpu() else "numpy"
    assert rows["grid2x2"][1:5] == ["4", "no", "numpy,native,gpu", several]
    assert rows["random_crop"][2] == "yes"
    assert rows["halves"][1:5] == ["2", "no", "numpy,native", several]
    assert "Left and right" in p.stdout
    assert rows["pixel_loop"][1:5] == ["1", "no", "numpy", "numpy"]
    assert re.search(r"pixel_loop: numpy: Python control flow \(if/while/and/or\) on pixel "
                     r"values .* at \S*my_ops.py:\d+: while img.mean\(\) > 100:",
                     p.stdout), p.stdout
    p = run("ops", "--import", "nope.py", cwd=tmp_path)
    assert_one_line_error(p, 2, "nope.py")


def test_validate_good_bad_and_missing(tmp_path: Path, data: Path, bad: Path):
    p = run("validate", str(data / "manifest.csv"), "--jobs", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "16 ok, 0 bad" in p.stdout
    clean = tmp_path / "clean.csv"
    p = run("validate", str(bad), "--jobs", "1", "--write-clean", str(clean), cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "line 3:" in p.stdout and "[missing]" in p.stdout
    assert "line 5:" in p.stdout and "[not_an_image]" in p.stdout
    assert len(clean.read_text().splitlines()) == 1 + 14
    p = run("validate", "no_such.csv", cwd=tmp_path)
    assert_one_line_error(p, 2, "no_such.csv")


def test_urls_are_refused_in_one_line(tmp_path: Path, data: Path):
    p = run("validate", "nosuch://bucket/manifest.csv", cwd=tmp_path)
    assert_one_line_error(p, 2, "nosuch://bucket/manifest.csv is a URL (nosuch://)",
                          "s3fs, gcsfuse")
    p = run("validate", str(data / "manifest.csv"), "--root", "nosuch://bucket/", cwd=tmp_path)
    assert_one_line_error(p, 2, "--root nosuch://bucket/ is a URL (nosuch://)")


def test_preview_writes_png(tmp_path: Path, data: Path):
    out = tmp_path / "out" / "preview.png"
    p = run("preview", str(data / "manifest.csv"), "--ops", "grid2x2", "-o", str(out),
            "--n", "4", "--workers", "0", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "4 samples x 5 image outputs" in p.stdout
    with Image.open(out) as im:
        assert im.format == "PNG" and im.width > 300


def test_preview_failures_are_one_line(tmp_path: Path, data: Path, bad: Path):
    m = str(data / "manifest.csv")
    assert_one_line_error(run("preview", m, "--ops", "no_such_op", cwd=tmp_path), 2,
                          "no op named 'no_such_op'")
    # A bad file met by the loader's worker process: reported with its manifest line, and exit 1
    # (a problem found in well-formed input, as `validate` reports it), not 2 (bad input).
    assert_one_line_error(run("preview", str(bad), "-o", "x.png", "--workers", "1",
                              cwd=tmp_path), 1, "line 3")
    p = run("preview", m, "--resize", "abc", cwd=tmp_path)  # argparse: usage + reason
    assert p.returncode == 2 and "--resize" in p.stderr and "Traceback" not in p.stderr
    # --skip-bad leaves the bad files out instead.
    p = run("preview", str(bad), "-o", "x.png", "--skip-bad", "--workers", "0", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "skipped 2 bad file(s)" in p.stdout


def test_bench_reports_images_per_second(tmp_path: Path, data: Path):
    p = run("bench", str(data / "manifest.csv"), "--ops", "grid2x2,hflip", "--batch-size", "4",
            "--epochs", "2", "--max-batches", "5", "--workers", "0", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # Without a GPU, an op with several outputs runs on the numpy path (see
    # extsrc.ops_runtime.paths).
    want = "'grid2x2': 'native'" if has_gpu() else "'grid2x2': 'numpy'"
    assert "images/s" in p.stdout and want in p.stdout
    assert "16 images in 4 batches" in p.stdout  # 5 batches, the first one is the warm-up


@pytest.mark.skipif(has_gpu(), reason="checks the message on a machine without a GPU")
def test_bench_on_missing_gpu_is_bad_input(tmp_path: Path, data: Path):
    p = run("bench", str(data / "manifest.csv"), "--device", "cuda", cwd=tmp_path)
    assert_one_line_error(p, 2, "no CUDA GPU is visible")


def test_demo_leaves_a_preview(tmp_path: Path):
    p = run("demo", "--out", "demo", "--n", "16", "--epochs", "1", "--workers", "0",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for needle in ("images/s", "op paths: grid2x2=", "device cpu" if not has_gpu() else "cuda"):
        assert needle in p.stdout
    with Image.open(tmp_path / "demo" / "preview.png") as im:
        assert im.format == "PNG"
    assert (tmp_path / "demo" / "data" / "manifest.csv").is_file()


def test_console_script_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert 'extsrc = "extsrc.tools.cli:main"' in text
    try:
        eps = metadata.entry_points(group="console_scripts")
    except Exception:  # pragma: no cover
        pytest.skip("no package metadata")
    ours = [e for e in eps if e.name == "extsrc"]
    if not ours:
        pytest.skip("extsrc is not installed (pip install -e .); the entry point is not on PATH")
    # An installation made before the command line moved declares extsrc.tools.cli:main, which
    # resolves through the old-path table (extsrc._moved) to the same function.
    from extsrc.tools.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ours[0].load() is main


# -- --root: confining a manifest (issue 13, case 12) ----------------------------------------------


@pytest.fixture()
def escaping(tmp_path: Path) -> tuple[Path, Path]:
    """A dataset under ``tmp/root`` whose manifest also lists ``../secret.txt`` (line 4) and the
    same file by its absolute path (line 6): a text file with the first line of a passwd file.
    Returns (root, manifest)."""
    root = tmp_path / "root"
    make_sample_dataset(root, n=6, size=(48, 64), fmt="png")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    manifest = root / "manifest.csv"
    lines = manifest.read_text().splitlines()
    label = lines[1].split(",")[1]
    lines.insert(3, f"../secret.txt,{label}")
    lines.insert(5, f"{secret},{label}")
    manifest.write_text("\n".join(lines) + "\n")
    return root, manifest


def test_validate_root_refuses_paths_leading_out(tmp_path: Path, escaping):
    root, manifest = escaping
    p = run("validate", str(manifest), "--jobs", "1", cwd=tmp_path)  # no --root: followed
    assert p.returncode == 1 and "not_an_image" in p.stdout, p.stdout
    p = run("validate", str(manifest), "--jobs", "1", "--root", str(root), cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "line 4: " in p.stdout and "line 6: " in p.stdout, p.stdout
    assert p.stdout.count("[outside_root]") == 2 and "not_an_image" not in p.stdout, p.stdout
    assert "root:x" not in p.stdout + p.stderr


@pytest.mark.parametrize("command", ["preview", "bench"])
def test_loader_commands_root_refuses_paths_leading_out(tmp_path: Path, escaping, command):
    root, manifest = escaping
    extra = ["-o", str(tmp_path / "p.png")] if command == "preview" else ["--max-batches", "1"]
    p = run(command, str(manifest), "--root", str(root), "--workers", "0", *extra, cwd=tmp_path)
    assert_one_line_error(p, 2, "line 4: path ", "secret.txt", "outside the root")
    assert "root:x" not in p.stdout + p.stderr
    assert not (tmp_path / "p.png").exists()


def test_root_inside_runs_and_missing_root_is_bad_input(tmp_path: Path, data: Path):
    p = run("preview", str(data / "manifest.csv"), "--root", str(data), "--workers", "0",
            "-o", str(tmp_path / "p.png"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "p.png").exists()
    p = run("validate", str(data / "manifest.csv"), "--root", str(tmp_path / "nowhere"),
            cwd=tmp_path)
    assert_one_line_error(p, 2, "--root ", "nowhere: not a folder")
