"""Which source files are libraries' (the standard library, numpy, installed packages) and which
are the user's own code.

The tracer treats them differently: the user's code is checked for state outside the op
(:mod:`augment_ops.state`) and refusals point at its lines; installed libraries are trusted not
to keep per-call state in what an op calls, and the standard library is never copied with traced
names (:mod:`augment_ops.trace.rebind`). A library taken for user code gets refusals that name
its internals (``im.palette = ...`` inside Pillow), so a package counts as installed wherever
pip put it:

* the interpreter's site-packages (``sysconfig``), the base installation's under a venv and the
  user's (``pip install --user``), from :mod:`site`;
* any folder on ``sys.path`` holding the ``*.dist-info`` of a distribution that lists the file's
  top-level package (``pip install --target DIR`` put on ``PYTHONPATH``, as clusters and
  containers do), unless that distribution is an editable install (``pip install -e``): an
  editable project is the user's own code.

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
    if f.startswith(_NUMPY_DIR) or f.startswith(_SITE_DIRS) or f.startswith(_STDLIB_DIRS):
        return True
    return _installed_under_path_entry(f)


def _installed_under_path_entry(f: str) -> bool:
    for entry in sys.path:
        root = os.path.abspath(entry or os.curdir) + os.sep
        if not f.startswith(root):
            continue
        top = f[len(root):].split(os.sep, 1)[0]
        top = top[:-3] if top.endswith(".py") else top
        if top in _installed_tops(root):
            return True
    return False


@functools.lru_cache(maxsize=256)
def _installed_tops(folder: str) -> frozenset[str]:
    """The top-level modules and packages that non-editable distributions installed in
    ``folder`` (their ``*.dist-info`` there) list. Read once a folder: what is installed does
    not change while ops are traced."""
    from importlib import metadata
    from pathlib import Path

    tops: set[str] = set()
    try:
        # Only *.dist-info, what pip writes for every install: an *.egg-info beside a project's
        # sources is a build's by-product and lists the project's own files (its tests too).
        infos = [n for n in os.listdir(folder) if n.endswith(".dist-info")]
    except OSError:
        return frozenset()
    for name in infos:
        dist = metadata.PathDistribution(Path(folder) / name)
        try:
            direct = dist.read_text("direct_url.json")
            if direct and json.loads(direct).get("dir_info", {}).get("editable"):
                continue
            listed = dist.read_text("top_level.txt")
            if listed:
                tops.update(line.strip() for line in listed.splitlines() if line.strip())
            for file in dist.files or ():
                first = file.parts[0] if file.parts else ""
                if first and not first.endswith((".dist-info", ".data")) and first != "..":
                    tops.add(first[:-3] if first.endswith(".py") else first)
        except (OSError, ValueError):
            continue
    return frozenset(tops)
