"""Exception types shared across extsrc.

Every error extsrc raises on purpose derives from :class:`ExtsrcError`, so callers can catch
the whole family at once, while the more specific classes also derive from the matching
built-in (``ValueError``, ``FileNotFoundError``) so generic handlers keep working.
"""

from __future__ import annotations


class ExtsrcError(Exception):
    """Base class of every error raised deliberately by extsrc."""


class ManifestError(ExtsrcError, ValueError):
    """A manifest (labelled file list) is malformed.

    Messages name the manifest file and the 1-based line, what was expected, what was found,
    and how to fix it.
    """


class ManifestFileNotFoundError(ManifestError, FileNotFoundError):
    """The manifest itself, or a file it lists (with ``check_files=True``), does not exist."""


class SampleReadError(ExtsrcError, OSError):
    """A file listed in the manifest could not be read (missing, a directory, empty, unreadable).

    Messages name the manifest line and the file path.
    """


class OpError(ExtsrcError, RuntimeError):
    """A registered op raised while processing a sample; the message names the op and the line."""
