"""Optional dependencies: without matplotlib or albumentations (made unimportable in a fresh
interpreter through ``sys.modules[name] = None``), the parts that need them say which extra to
install, and everything else still imports and runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_without(module: str, code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.modules[{module!r}] = None\n" + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    ), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", script, *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_render_batch_without_matplotlib_names_the_extra():
    p = run_without("matplotlib", """
        import torch
        import extsrc  # the package imports without matplotlib
        from extsrc._util.extras import MissingExtraError
        batch = {"image": torch.zeros(2, 8, 8, 3, dtype=torch.uint8), "label": torch.zeros(2)}
        try:
            extsrc.render_batch(batch)
        except MissingExtraError as e:
            assert isinstance(e, ImportError) and e.extra == "preview", e
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    assert ("extsrc.render_batch needs matplotlib, which is not installed; install it with "
            "pip install 'extsrc[preview]'") in p.stdout


def test_cli_demo_without_matplotlib_fails_first_in_one_line(tmp_path: Path):
    p = run_without("matplotlib", """
        from extsrc.tools.cli import main
        sys.exit(main(sys.argv[1:]))
    """, "demo", "--out", str(tmp_path / "demo"))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.strip() == (
        "extsrc: error: extsrc demo needs matplotlib, which is not installed; install it with "
        "pip install 'extsrc[preview]' (or pip install matplotlib)")
    assert not (tmp_path / "demo").exists()  # refused before making the dataset


def test_from_albumentations_without_albumentations_names_the_extra():
    p = run_without("albumentations", """
        import augment_ops
        from extsrc import Loader  # the loader and the builtin ops need no albumentations
        try:
            augment_ops.from_albumentations(lambda image: image, name="x")
        except ImportError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    assert "pip install 'extsrc[albumentations]'" in p.stdout


def test_extras_are_declared_and_dali_is_bounded():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = meta["dependencies"]
    assert not any(d.startswith(("matplotlib", "albumentations")) for d in deps)
    assert "nvidia-dali-cuda120>=2.4,<2.5" in deps
    extras = meta["optional-dependencies"]
    assert extras["preview"] == ["matplotlib>=3.7"]
    assert extras["albumentations"] == ["albumentations==2.0.8"]
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert '".[preview]"' in setup and '".[test,preview,albumentations]"' in setup
