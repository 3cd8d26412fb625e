"""Everything that depends on DALI's internals or on the wording of DALI's errors, in one place.

The rest of extsrc uses DALI's public API only (``Pipeline``, ``fn``, ``DALIGenericIterator``).
Two jobs need more, and live here so that a DALI upgrade touches one small package:

* :mod:`extsrc._dali.workers`: the dead-worker watchdog reads the private worker pool of a
  pipeline (``Pipeline._py_pool``, its ``multiprocessing`` processes and the semaphores of its
  shared queues) and stops a pipeline now (``Pipeline._shutdown``);
* :mod:`extsrc._dali.messages`: DALI reports a failure in a worker process or in a
  ``python_function`` as text; it is read back into fields here, once.

:func:`check_version` refuses a DALI whose internals this package was not checked against,
with the version found and the versions known, instead of letting the watchdog fail silently.
"""

from __future__ import annotations

from extsrc.errors import DaliVersionError

__all__ = ["KNOWN_VERSIONS", "check_version", "cuda_driver_initialized", "dali_version"]

#: DALI releases (major.minor) whose private worker-pool layout and error wording this package
#: was checked against.
KNOWN_VERSIONS: tuple[str, ...] = ("2.4",)


def dali_version() -> str:
    """The installed DALI's version string."""
    import nvidia.dali

    return str(nvidia.dali.__version__)


def check_version(version: str | None = None) -> None:
    """Raise :class:`~extsrc.errors.DaliVersionError` unless ``version`` (default: the installed
    DALI) is one of :data:`KNOWN_VERSIONS`."""
    found = dali_version() if version is None else version
    if ".".join(found.split(".")[:2]) not in KNOWN_VERSIONS:
        raise DaliVersionError(found=found, known=KNOWN_VERSIONS)


def cuda_driver_initialized() -> bool:
    """Whether CUDA is up in this process: DALI then refuses to fork its reader processes."""
    try:
        from nvidia.dali import backend
    except ImportError:
        return False
    return bool(backend.IsDriverInitialized())
