"""Old paths of the op runtime's modules (``extsrc.oppool``, ``extsrc.oppaths``...) still import,
with a warning, and give the new modules' objects."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from extsrc._moved import MOVED


def test_every_row_points_at_an_importable_module() -> None:
    for old, new in MOVED.items():
        assert old.startswith("extsrc.") and old != new
        assert importlib.import_module(new).__name__ == new


@pytest.mark.parametrize(("old", "name", "new"), [
    ("extsrc.oppool", "OpPool", "extsrc.ops_runtime.pool"),
    ("extsrc.oppaths", "choose_paths", "extsrc.ops_runtime.paths"),
    ("extsrc.oppaths", "BatchOpRunner", "extsrc.ops_runtime.runners"),
    ("extsrc.oppaths", "native_sample_scalars", "extsrc.ops_runtime.native"),
    ("extsrc.oppaths", "op_salt", "extsrc.ops_runtime.seeding"),
    ("extsrc.oppaths", "RAISED", "extsrc.errors"),
    ("extsrc.seeding", "sample_rng", "extsrc.ops_runtime.seeding"),
])
def test_old_name_warns_and_is_the_new_object(old: str, name: str, new: str) -> None:
    # A fresh interpreter: this one may have imported the old path already (no second warning).
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = getattr(importlib.import_module({old!r}), {name!r})\n"
        f"new = getattr(importlib.import_module({new!r}), {name!r})\n"
        "print(old is new, [str(x.message) for x in w if x.category is DeprecationWarning])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("True ["), out
    assert f"{old} moved to " in out, out


def test_an_op_worker_imports_no_pandas_torch_or_dali() -> None:
    code = ("import sys\nimport extsrc.ops_runtime.worker, extsrc.ops_runtime.hostresize\n"
            "print(sorted(m for m in ('pandas', 'torch', 'nvidia.dali') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
