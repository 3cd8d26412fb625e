"""Pickle ops by value for the op worker processes, keeping their source file and line numbers.

An op defined in a notebook cell or a script's ``__main__`` cannot be imported by a worker, so
it travels by value (cloudpickle). How a pickler writes a function's code object is its own
choice: cloudpickle 3.1.3 replaces every code object's file name with ``"<dynamic-code>"`` (to
make its output independent of where the function was defined). An op's exception would then
show ``File "<dynamic-code>", line 8`` instead of the user's file and source line, which the
loader promises to show.

:func:`dumps` therefore writes code objects itself, with :mod:`marshal`, which keeps every
field (file name, first line, line table, nested code) exactly; the workers are started from
the same interpreter, so they read the same marshal format. Where a code object's file is not
on disk (a notebook cell, whose source IPython keeps in :mod:`linecache`), its source lines
travel with it and are put into the worker's ``linecache``, so tracebacks there show them too.
Everything else is left to cloudpickle.
"""

from __future__ import annotations

import io
import linecache
import marshal
import os
import types
from typing import Any

__all__ = ["dumps", "load_code"]


def load_code(data: bytes, filename: str, lines: list[str] | None) -> types.CodeType:
    """A code object written by :func:`dumps`; ``lines``: the source of a file that is not on
    disk, registered in this process's ``linecache`` under ``filename``."""
    if lines is not None and filename not in linecache.cache:
        # The same tuple form IPython uses for cells: (size, mtime None: never checked, lines, name)
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    return marshal.loads(data)


def _source_lines(filename: str) -> list[str] | None:
    """The source of ``filename`` when only this process's ``linecache`` has it."""
    if os.path.exists(filename):
        return None  # the worker reads it from disk like any traceback does
    entry = linecache.cache.get(filename)
    if entry is None or len(entry) < 3 or not entry[2]:
        return None
    return list(entry[2])


def dumps(obj: Any) -> bytes:
    """``obj`` pickled by value where needed, code objects with their file names and lines."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, o: Any) -> Any:
            if isinstance(o, types.CodeType):
                name = o.co_filename
                return load_code, (marshal.dumps(o), name, _source_lines(name))
            return super().reducer_override(o)

    buf = io.BytesIO()
    Pickler(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buf.getvalue()
