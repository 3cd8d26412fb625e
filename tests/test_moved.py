"""Old module paths (``extsrc.imagecheck``...) still import, warn once, and are the new module."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import extsrc
from extsrc._moved import MOVED

OLD, NEW = "extsrc.imagecheck", "extsrc.sources.imagecheck"


def _forget(monkeypatch: pytest.MonkeyPatch, old: str) -> None:
    """Make ``old`` look never imported in this process (restored after the test)."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    parent, _, child = old.rpartition(".")
    if child in vars(sys.modules[parent]):  # not hasattr: extsrc.__getattr__ would import it
        monkeypatch.delattr(sys.modules[parent], child)


def test_every_row_points_at_an_importable_module() -> None:
    for old, new in MOVED.items():
        assert old.startswith("extsrc.") and old != new
        assert importlib.import_module(new).__name__ == new


def test_old_path_warns_once_and_is_the_new_module(monkeypatch: pytest.MonkeyPatch) -> None:
    _forget(monkeypatch, OLD)
    new = importlib.import_module(NEW)
    with pytest.warns(DeprecationWarning, match=rf"{OLD} moved to {NEW}") as record:
        old = importlib.import_module(OLD)
    assert old is new
    assert sum(issubclass(w.category, DeprecationWarning) for w in record) == 1
    # The module keeps its real name and spec.
    assert old.__name__ == NEW and old.__spec__.name == NEW
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(OLD) is new  # second import: no warning
    # Monkeypatching one name patches the other.
    monkeypatch.setattr(old, "DEFAULT_MAX_PIXELS", 99)
    assert new.DEFAULT_MAX_PIXELS == 99


def test_from_old_import_name_and_attribute_access(monkeypatch: pytest.MonkeyPatch) -> None:
    _forget(monkeypatch, OLD)
    with pytest.warns(DeprecationWarning, match=NEW):
        from extsrc.imagecheck import check_file  # noqa: F401
    _forget(monkeypatch, OLD)
    with pytest.warns(DeprecationWarning, match=NEW) as record:
        assert extsrc.imagecheck is importlib.import_module(NEW)
    assert record[0].filename == __file__


def test_warning_points_at_the_importing_line() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import extsrc.imagecheck\n"
        "print([(x.filename, x.lineno) for x in w if x.category is DeprecationWarning])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[('<string>', 5)]"


def test_unknown_module_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"extsrc\.no_such_module"):
        importlib.import_module("extsrc.no_such_module")
    with pytest.raises(AttributeError, match="no_such_module"):
        _ = extsrc.no_such_module


def test_old_path_runs_with_dash_m(tmp_path) -> None:
    """``python -m extsrc.cli`` runs the command line, its exit status included, after a warning
    a user sees by default naming the new path."""
    run = subprocess.run([sys.executable, "-m", "extsrc.cli", "--version"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("extsrc ")
    assert "FutureWarning: extsrc.cli moved to extsrc.tools.cli" in run.stderr
    assert "python -m extsrc.tools.cli" in run.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "extsrc.cli", "validate", str(tmp_path / "none.csv")],
        capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode == 2 and "none.csv" in missing.stderr
