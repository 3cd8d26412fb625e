"""augment_ops.libfiles: a package pip installed anywhere on sys.path (``pip install --target``
on PYTHONPATH included) is a library, whose internals the outside-state check does not refuse;
the same code without an installation record, or installed editable, is the user's own."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from augment_ops.libfiles import library_file, stdlib_file
from augment_ops.state import outside_state

# What Pillow's frombuffer does (``im = new(...); im.palette = ...``): an attribute written on an
# object the function got from a call. In the user's code the check cannot tell that the object
# is new, and refuses; in an installed library it is trusted.
LIBRARY = textwrap.dedent('''
    class Box:
        pass


    def _make():
        return Box()


    def helper(img):
        b = _make()
        b.note = 1
        return img
''')


def _install(folder: Path, name: str, record: bool, editable: bool = False) -> Path:
    pkg = folder / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(LIBRARY)
    if record:
        info = folder / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")
        if editable:
            (info / "direct_url.json").write_text(json.dumps(
                {"url": f"file://{folder}", "dir_info": {"editable": True}}))
    return pkg / "__init__.py"


@pytest.mark.parametrize(("record", "editable", "library"), [
    (True, False, True), (False, False, False), (True, True, False)])
def test_a_package_on_sys_path_is_a_library_when_pip_installed_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: bool, editable: bool,
        library: bool) -> None:
    name = f"extsrc_fakelib_{int(record)}{int(editable)}"
    target = tmp_path / "target"
    path = _install(target, name, record, editable)
    monkeypatch.syspath_prepend(str(target))
    module = importlib.import_module(name)
    try:
        assert library_file(str(path)) is library
        assert not stdlib_file(str(path))  # its functions are copied with the traced names

        def op(img):
            return module.helper(img)

        found = outside_state(op)
        if library:
            assert found is None
        else:
            assert found is not None and "note" in found[0], found
    finally:
        sys.modules.pop(name, None)


def test_the_projects_own_code_and_the_standard_library() -> None:
    import json as stdlib_module

    import numpy as np

    assert stdlib_file(stdlib_module.__file__) and library_file(stdlib_module.__file__)
    assert library_file(np.__file__) and not stdlib_file(np.__file__)
    assert not library_file(__file__)  # a test, the user's code here
    assert not library_file("<string>") and not library_file("<ipython-input-1-abc>")


def test_a_users_package_beside_a_vendored_one_of_its_namespace_stays_the_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the files a distribution's RECORD lists are its: ``pip install -t .`` of
    ``acme-utils`` into a project whose own code is ``acme/myaug`` leaves ``acme/myaug`` the
    user's."""
    (tmp_path / "acme" / "utils").mkdir(parents=True)
    (tmp_path / "acme" / "myaug").mkdir()
    vendored = tmp_path / "acme" / "utils" / "__init__.py"
    own = tmp_path / "acme" / "myaug" / "ops.py"
    vendored.write_text(LIBRARY)
    own.write_text(LIBRARY)
    info = tmp_path / "acme_utils-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-utils\nVersion: 1.0\n")
    (info / "RECORD").write_text("acme/utils/__init__.py,,\nacme_utils-1.0.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert library_file(str(vendored))
    assert not library_file(str(own))


def test_a_project_pip_installed_from_its_folder_stays_the_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In site-packages, a distribution installed from a local folder (``pip install .``:
    ``dir_info`` in ``direct_url.json``) is the user's project; one from an index (no
    ``direct_url.json``) or an archive is a library."""
    import augment_ops.libfiles as libfiles

    site_dir = tmp_path / "site-packages"
    kinds = {"myproject": {"url": "file:///home/me/myproject", "dir_info": {}},
             "fromwheel": {"url": "file:///wheels/x.whl", "archive_info": {}},
             "fromindex": None}
    paths = {}
    for name, direct in kinds.items():
        paths[name] = _install(site_dir, name, record=True)
        if direct is not None:
            (site_dir / f"{name}-1.0.dist-info" / "direct_url.json").write_text(
                json.dumps(direct))
    monkeypatch.setattr(libfiles, "_SITE_DIRS", (str(site_dir) + "/",))
    assert not library_file(str(paths["myproject"]))
    assert library_file(str(paths["fromwheel"])) and library_file(str(paths["fromindex"]))
