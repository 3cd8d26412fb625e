"""The wheel ships every folder of Python code under extsrc/ and augment_ops/."""

from __future__ import annotations

from pathlib import Path

import tomllib
from setuptools import find_packages

REPO = Path(__file__).resolve().parent.parent


def test_every_folder_of_modules_is_a_package_the_build_finds() -> None:
    # pyproject.toml lists packages by pattern; a folder of modules without an __init__.py
    # would not match and would be left out of the wheel silently.
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    found = set(find_packages(where=REPO, include=find["include"]))
    folders = {
        ".".join(p.parent.relative_to(REPO).parts)
        for top in ("extsrc", "augment_ops")
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert folders == found
    assert {"extsrc._dali", "extsrc._util", "extsrc.sources", "extsrc.sources.video",
            "extsrc.validation"} <= found
