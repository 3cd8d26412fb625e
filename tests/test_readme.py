"""The README's Python code blocks run as written, in order, on a CPU-only machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_blocks() -> list[str]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_has_python_blocks():
    assert readme_blocks(), "README.md has no python code block"


@pytest.mark.slow
def test_readme_code_blocks_run_in_order(tmp_path):
    # One script, as a reader pastes the blocks one after the other into one session; a call
    # of the README that extsrc deprecates (a flat loader keyword) fails it.
    script = "\n\n".join(readme_blocks())
    (tmp_path / "readme_blocks.py").write_text(script)
    proc = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:__main__", "readme_blocks.py"],
        cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                          "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
