"""Which source files are libraries' (the standard library, numpy, installed packages) and which
are the user's own code.

The tracer treats them differently: the user's code is checked for state outside the op
(:mod:`augment_ops.state`) and refusals point at its lines; installed libraries are trusted not
to keep per-call state in what an op calls, and the standard library is never copied with traced
names (:mod:`augment_ops.trace.rebind`). A library taken for user code gets refusals that name
its internals (``im.palette = ...`` inside Pillow), so a package counts as installed wherever
pip put it:

* the interpreter's site-packages (``sysconfig``, :func:`site.getsitepackages`: a venv's own)
  and the user's (``pip install --user``), but for a project pip installed there from a local
  folder (``pip install .``: ``dir_info`` in its ``direct_url.json``), which is the user's;
* a file that the ``RECORD`` of a distribution installed in a folder on ``sys.path`` lists
  (``pip install --target DIR`` put on ``PYTHONPATH``, as clusters and containers do), unless
  that distribution is an editable install (``pip install -e``): an editable project is the
  user's own code.

A notebook cell, ``exec``'s ``<string>`` and a script or package that no distribution lists are
the user's.
"""

from __future__ import annotations

import functools
import json
import os
import site
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["library_file", "stdlib_file"]

_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


def _dirs(*paths: str | None) -> tuple[str, ...]:
    return tuple({os.path.abspath(p) + os.sep for p in paths if p})


_STDLIB_DIRS = _dirs(*(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")))


def _site_dirs() -> tuple[str, ...]:
    paths = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    try:
        paths += site.getsitepackages()
    except AttributeError:  # an embedded interpreter's site module may lack it
        pass
    try:
        paths.append(site.getusersitepackages())
    except AttributeError:
        pass
    return _dirs(*paths)


_SITE_DIRS = _site_dirs()


def stdlib_file(filename: str) -> bool:
    """Whether ``filename`` is the standard library's (frozen modules included), not a package
    installed into the interpreter's own ``site-packages``."""
    if filename.startswith("<frozen"):
        return True
    f = os.path.abspath(filename)
    parts = f.split(os.sep)
    return f.startswith(_STDLIB_DIRS) and "site-packages" not in parts \
        and "dist-packages" not in parts


def library_file(filename: str) -> bool:
    """Whether ``filename`` is the standard library's, numpy's or an installed package's (see
    the module docstring); ``False`` for the user's own code."""
    if stdlib_file(filename):
        return True
    if filename.startswith("<"):
        return False
    f = os.path.abspath(filename)
    if f.startswith(_NUMPY_DIR):
        return True
    if f.startswith(_SITE_DIRS):
        return f not in _installed_from_folders(_SITE_DIRS)
    if f.startswith(_STDLIB_DIRS):
        return True
    return _installed_under_path_entry(f)


@functools.lru_cache(maxsize=8)
def _installed_from_folders(sites: tuple[str, ...]) -> frozenset[str]:
    """The files in ``sites`` of the distributions pip installed from a local folder (their
    ``direct_url.json`` has ``dir_info``: ``pip install .`` of a project): the user's own code,
    though it lies in site-packages."""
    return frozenset().union(*(_recorded_files(
        site_dir, lambda direct: direct is not None and "dir_info" in direct)
        for site_dir in sites))


def _installed_under_path_entry(f: str) -> bool:
    roots = (os.path.abspath(entry or os.curdir) + os.sep for entry in list(sys.path))
    return any(f.startswith(root) and f in _installed_files(root) for root in roots)


@functools.lru_cache(maxsize=256)
def _installed_files(folder: str) -> frozenset[str]:
    """The files (absolute paths) that the ``RECORD`` of a non-editable distribution installed
    in ``folder`` lists: exactly what pip put there, so a user's package beside a vendored one
    of the same namespace stays the user's. Read once a folder: what is installed does not
    change while ops are traced."""
    return frozenset(_recorded_files(folder, lambda direct: not (direct or {}).get(
        "dir_info", {}).get("editable")))


def _recorded_files(folder: str, wanted: Callable[[dict[str, Any] | None], bool]) -> set[str]:
    """The Python files (absolute paths) that the ``RECORD`` of each ``*.dist-info`` in
    ``folder`` lists, for the distributions whose ``direct_url.json`` (``None`` without one)
    ``wanted`` accepts. Only those distributions' ``RECORD`` is read. Only *.dist-info, what pip
    writes for every install: an *.egg-info beside a project's sources is a build's by-product
    and lists the project's own files (its tests too)."""
    from importlib import metadata
    from pathlib import Path

    files: set[str] = set()
    try:
        infos = [n for n in os.listdir(folder) if n.endswith(".dist-info")]
    except OSError:
        return files
    for name in infos:
        try:
            try:
                with open(os.path.join(folder, name, "direct_url.json")) as fh:
                    direct = json.load(fh)
            except FileNotFoundError:
                direct = None
            if not wanted(direct if isinstance(direct, dict) else None):
                continue
            dist = metadata.PathDistribution(Path(folder) / name)
            files.update(os.path.abspath(os.path.join(folder, str(file)))
                         for file in dist.files or () if str(file).endswith(".py"))
        except (OSError, ValueError, AttributeError):
            continue
    return files
