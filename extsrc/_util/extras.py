"""Optional dependencies ("extras"): what needs them, and the error that names the one to install.

``pip install extsrc`` installs what the loader needs. Some parts need more:

=====================  ======================  ================================================
extra                  installs                needed by
=====================  ======================  ================================================
``preview``            matplotlib              :func:`extsrc.render_batch`, ``extsrc preview``,
                                               ``extsrc demo``
``albumentations``     albumentations 2.0.8    :func:`augment_ops.from_albumentations` (the
                                               last MIT-licensed release; the adapter is
                                               checked against it)
``s3``, ``gcs``,       s3fs, gcsfs, or         manifests and samples at ``s3://``, ``gs://``,
``http``               aiohttp (with fsspec)   ``http(s)://`` URLs (:mod:`extsrc.sources.storage`)
=====================  ======================  ================================================
"""

from __future__ import annotations

import importlib
from types import ModuleType

from extsrc.errors import ExtsrcError

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: extra name -> the modules it provides.
EXTRAS: dict[str, tuple[str, ...]] = {
    "preview": ("matplotlib",),
    "albumentations": ("albumentations",),
    # Object storage (extsrc.sources.storage): fsspec and the filesystem of the protocol.
    "s3": ("fsspec", "s3fs"),
    "gcs": ("fsspec", "gcsfs"),
    "http": ("fsspec", "aiohttp"),
}


class MissingExtraError(ExtsrcError, ImportError):
    """An optional dependency is not installed; ``extra`` names what to install."""

    def __init__(self, module: str, extra: str, needed_by: str) -> None:
        super().__init__(
            f"{needed_by} needs {module}, which is not installed; install it with "
            f"pip install 'extsrc[{extra}]' (or pip install {module})"
        )
        self.module = module
        self.extra = extra
        self.needed_by = needed_by


def require(module: str, extra: str, needed_by: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, extra, needed_by) from None
