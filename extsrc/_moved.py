"""Old module paths of modules that moved into subpackages, kept working for one release.

``import extsrc.manifest`` (or ``from extsrc.manifest import Manifest``) still works: it emits a
:class:`DeprecationWarning` naming the new path and gives back the new module object itself, so
``extsrc.manifest is extsrc.sources.manifest`` and monkeypatching either name patches the module
that the package runs. One import hook (:class:`MovedFinder`, installed by ``extsrc/__init__.py``)
serves every row of :data:`MOVED`, instead of one shim file per old path. A module that was
split maps to the module, or the package, that re-exports its public names.

``python -m extsrc.cli`` (any old path run with ``-m``) runs the new module's code as
``__main__``, after a :class:`FutureWarning` (shown by default: the reader is the person typing the
command) naming the new path.

The package itself and its tests import the new paths only; the old ones go in the next release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

__all__ = ["MOVED", "MovedFinder", "install", "moved_attribute"]

#: ``{old dotted name: new dotted name}``.
MOVED: dict[str, str] = {
    "extsrc.argcheck": "extsrc._util.argcheck",
    "extsrc.batchformat": "extsrc.graph.batchformat",
    "extsrc.cli": "extsrc.tools.cli",
    "extsrc.config": "extsrc.loading.config",
    "extsrc.device": "extsrc._util.device",
    "extsrc.distributed": "extsrc.loading.distributed",
    # validate.py imports Problem and ValidationReport from report.py, so old imports of all
    # three names from extsrc.doctor keep working.
    "extsrc.doctor": "extsrc.validation.validate",
    "extsrc.epoch": "extsrc.loading.epoch",
    "extsrc.extras": "extsrc._util.extras",
    "extsrc.failures": "extsrc.loading.failures",
    "extsrc.fileread": "extsrc.sources.fileread",
    "extsrc.folders": "extsrc.sources.folders",
    "extsrc.hostresize": "extsrc.ops_runtime.hostresize",
    "extsrc.imagecheck": "extsrc.sources.imagecheck",
    "extsrc.loader": "extsrc.loading.loader",
    "extsrc.mainguard": "extsrc._util.mainguard",
    # Read as old code uses it: Manifest and read_manifest (table.py re-exports Manifest).
    "extsrc.manifest": "extsrc.sources.table",
    "extsrc.oppaths": "extsrc.ops_runtime",
    "extsrc.oppickle": "extsrc.ops_runtime.oppickle",
    "extsrc.oppool": "extsrc.ops_runtime.pool",
    "extsrc.opworker": "extsrc.ops_runtime.worker",
    "extsrc.orphan": "extsrc._util.orphan",
    "extsrc.pipeline": "extsrc.graph.image",
    "extsrc.position": "extsrc.loading.position",
    "extsrc.presets": "extsrc.loading.presets",
    "extsrc.preview": "extsrc.tools.preview",
    "extsrc.sample_data": "extsrc.tools.sample_data",
    "extsrc.sample_videos": "extsrc.tools.sample_videos",
    "extsrc.seeding": "extsrc.ops_runtime.seeding",
    "extsrc.sharding": "extsrc.sources.sharding",
    "extsrc.slowstart": "extsrc._util.slowstart",
    "extsrc.source": "extsrc.sources.images",
    "extsrc.state": "extsrc.loading.state",
    "extsrc.textsafe": "extsrc._util.textsafe",
    "extsrc.video": "extsrc.loading.video",
    "extsrc.videocheck": "extsrc.validation.videos",
    "extsrc.videoclips": "extsrc.sources.video.clips",
    "extsrc.videopipeline": "extsrc.graph.video",
    "extsrc.videoprobe": "extsrc.sources.video.probe",
    "extsrc.videosource": "extsrc.sources.video.source",
    "extsrc.videotrim": "extsrc.sources.video.trim",
}


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points the warning at the line with the ``import``. Called from
    :meth:`MovedFinder.create_module`. :func:`warnings.warn` itself skips the import system's
    ``importlib._bootstrap`` frames, so only the others are counted, up to the first one that is
    neither :func:`importlib.import_module`, this module nor ``extsrc.__getattr__``."""
    level = 1
    frame = sys._getframe(2)  # the caller of create_module
    while frame is not None:
        filename = frame.f_code.co_filename
        if "importlib" in filename and "_bootstrap" in filename:
            frame = frame.f_back
            continue
        level += 1
        module = frame.f_globals.get("__name__")
        through = filename == __file__ or module == "importlib" or (
            module == "extsrc" and frame.f_code.co_name == "__getattr__")
        if not through:
            break
        frame = frame.f_back
    return level


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`MOVED` and loads each as its new module object."""

    def __init__(self) -> None:
        # The new module's own spec, put back after the import system has set the old one.
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        # The new file as origin: ``python -m <old name>`` sets ``__file__`` from it.
        new = importlib.util.find_spec(MOVED[fullname])
        return importlib.util.spec_from_loader(
            fullname, self, origin=new.origin if new is not None else None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}: import {new} instead ({spec.name} goes in the next "
            "release)",
            DeprecationWarning,
            stacklevel=_caller_stacklevel(),
        )
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module already ran under its new name; only the spec the import system wrote
        # over (the old name's) is given back, so the module still knows its real name.
        old = module.__spec__.name if module.__spec__ is not None else None
        if old in self._specs:
            module.__spec__ = self._specs.pop(old)


    def get_code(self, fullname: str) -> CodeType:
        """The new module's code, for ``python -m <old name>`` (:mod:`runpy` runs it as
        ``__main__``); the import system itself never calls this."""
        new = MOVED[fullname]
        warnings.warn(
            f"{fullname} moved to {new}: run `python -m {new}` instead ({fullname} goes in the "
            "next release)",
            FutureWarning,
            stacklevel=2,
        )
        spec = importlib.util.find_spec(new)
        code = None
        if spec is not None and isinstance(spec.loader, importlib.abc.InspectLoader):
            code = spec.loader.get_code(new)
        if code is None:
            raise ImportError(f"{fullname} moved to {new}, which has no code to run", name=new)
        return code


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once. It answers only the names in
    :data:`MOVED`, and ahead of the path finders: a stale copy of an old file (an editable
    install's source tree, a site-packages left over from an older version) must not be
    imported as a second, different module."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())


def moved_attribute(name: str) -> ModuleType | None:
    """``extsrc.<name>`` for an old submodule name (``extsrc.manifest`` without importing it
    first), through the same warning; ``None`` when ``name`` is not an old module."""
    if f"extsrc.{name}" not in MOVED:
        return None
    return importlib.import_module(f"extsrc.{name}")
