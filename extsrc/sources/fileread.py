"""Opening and reading one listed file safely: regular files only, bounded, inside the root.

Every byte extsrc reads from a file named in a manifest goes through :func:`open_regular` (or
:func:`read_regular`, which also reads it whole), used by
:class:`~extsrc.sources.images.ShardedSource`
and :func:`extsrc.sources.imagecheck.check_file` (and so :func:`extsrc.validate`) alike, so that the
loader and the doctor refuse the same files for the same reasons:

* the path must be one the operating system can open as given (no NUL byte, encodable in the
  file system's encoding, not too long);
* it must name a regular file. A FIFO would block ``open`` forever and ``/dev/zero`` never ends, so
  the file is opened with ``O_NONBLOCK`` (an open that cannot block) and checked with ``fstat``
  on the open descriptor before a single byte is read; directories, devices, FIFOs and sockets
  are refused;
* it must be at most ``max_bytes`` long (:data:`DEFAULT_MAX_FILE_BYTES`), checked from ``fstat``
  before reading, and no more than that is ever read, even if the file grows meanwhile;
* with a ``root_real``, the open descriptor must resolve inside that folder (symlinks followed,
  checked on the descriptor itself, so a swapped symlink cannot race the check).

A refusal is a :class:`FileReadProblem` carrying a reason code from
:data:`extsrc.sources.imagecheck.REASONS` and a message; callers add the manifest line.
"""

from __future__ import annotations

import errno
import io
import os
import stat

from extsrc._util.argcheck import check_int
from extsrc._util.textsafe import shown
from extsrc.errors import PathOutsideRootError, SampleReadError
from extsrc.sources.folders import file_kind
from extsrc.sources.where import reworded_fix

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "VIDEO_FILE_FIXES",
    "FileReadProblem",
    "check_max_file_bytes",
    "open_regular",
    "read_regular",
    "sample_read_error",
    "video_fix",
]

#: Largest file read by default: 256 MiB, far above any training image, far below what would
#: exhaust a worker's memory.
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
_CHUNK = 16 * 1024 * 1024
_PROBE = 64 * 1024

_O_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO or a tty must not block the open itself
    | getattr(os, "O_NOCTTY", 0)  # a terminal named in a manifest must not become ours
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


#: Reason codes of the refusals here, what they mean and how to fix them (merged into
#: :data:`extsrc.sources.imagecheck.REASONS`).
FILE_REASONS: dict[str, tuple[str, str]] = {
    "missing": ("the file does not exist",
                "fix the path (or the root= it resolves against) or drop the line"),
    "is_directory": ("the path is a directory, not a file", "list image files, not folders"),
    "not_a_file": ("the path names a FIFO, device or socket, not a regular file",
                   "list image files only, or drop the line"),
    "bad_path": ("the operating system cannot open the path as given (NUL byte, too long, "
                 "not encodable)", "fix the path in the manifest or drop the line"),
    "unreadable": ("the file cannot be read (permissions, I/O error)",
                   "fix the file's permissions or drop the line"),
    "file_too_large": ("the file is larger than max_file_bytes (read-size guard)",
                       "drop the line, or raise max_file_bytes if the file is genuine"),
    "empty": ("the file has 0 bytes", "re-export the image or drop the line"),
    "access_denied": ("the storage refused to read the object (permissions, credentials)",
                      "check the credentials in storage_options (or the environment) and the "
                      "bucket's policy, or drop the line"),
    "unreachable": ("the storage kept failing (errors, timeouts) through every retry",
                    "check the endpoint and the network, or raise the storage retries/timeout"),
    "outside_root": (
        "the path resolves outside the manifest's root folder",
        "move the file under the root, or pass allow_outside_root=True to read_manifest if "
        "this is intended",
    ),
}


#: The fixes of :data:`FILE_REASONS` that speak of images, as worded for a video file.
VIDEO_FILE_FIXES: dict[str, str] = {
    "empty": "re-encode or re-export the video (e.g. with ffmpeg) or drop the line",
    "is_directory": "list video files, not folders",
    "not_a_file": "list video files only, or drop the line",
}


def video_fix(reason: str, fix: str) -> str:
    """``fix`` (how to fix a file problem with code ``reason``) as worded for a video file."""
    return VIDEO_FILE_FIXES.get(reason, fix)


class FileReadProblem(Exception):
    """Why a listed file was not read: ``reason`` (a code of
    :data:`extsrc.sources.imagecheck.REASONS`)
    and ``message`` (what is wrong, without the manifest line, which the caller adds)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @property
    def fix(self) -> str:
        """How to fix it, in a few words."""
        return FILE_REASONS[self.reason][1]


def sample_read_error(
    problem: FileReadProblem, where: str, path: str, hint: str = "", *,
    source: str | None = None, line: int | None = None, fix: str | None = None,
) -> SampleReadError | PathOutsideRootError:
    """The exception the loader raises for ``problem``: ``where`` (``manifest.csv line 7``),
    the path (escaped), what is wrong and how to fix it; ``outside_root`` gives a
    :class:`~extsrc.errors.PathOutsideRootError`, the rest a
    :class:`~extsrc.errors.SampleReadError`. Both carry ``reason``, ``path``, ``source`` and
    ``line``."""
    cls = PathOutsideRootError if problem.reason == "outside_root" else SampleReadError
    return cls(
        f"{where}: {shown(path)}: {problem.message} [{problem.reason}]; "
        f"{reworded_fix(problem.fix if fix is None else fix, source)}.{hint}",
        path=path, reason=problem.reason, source=source, line=line,
    )


def check_max_file_bytes(value: object, name: str = "max_file_bytes") -> int | None:
    """Validate a ``max_file_bytes`` argument: a positive int (numpy integers accepted) or
    ``None`` (no limit). Returns it as a plain int."""
    return check_int(value, name, minimum=1, allow_none=True,
                     what="the largest file read, in bytes; None: no limit")


def _real_path(fd: int, path: str) -> str:
    try:  # Linux: where the open descriptor really points, in one syscall, without races
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def inside(real: str, root_real: str) -> bool:
    """Whether the resolved path ``real`` lies inside the resolved folder ``root_real``."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def open_regular(
    path: str,
    *,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    root_real: str | None = None,
) -> tuple[io.FileIO, int]:
    """Open ``path`` for reading if it is a regular file of at most ``max_bytes`` bytes inside
    ``root_real``; return the open (unbuffered) file and its size. The caller closes it.

    Raises :class:`FileReadProblem` with reason ``missing``, ``is_directory``, ``not_a_file``,
    ``bad_path``, ``unreadable``, ``file_too_large`` or ``outside_root``.
    """
    try:
        fd = os.open(path, _O_FLAGS)
    except ValueError:  # Python refuses a NUL byte (or an unencodable name) before the OS
        raise FileReadProblem(
            "bad_path", "the path cannot be opened as given (it holds a NUL byte or characters "
            "the file system's encoding cannot represent)"
        ) from None
    except UnicodeEncodeError:
        raise FileReadProblem(
            "bad_path", "the path holds characters the file system's encoding cannot represent"
        ) from None
    except FileNotFoundError:
        raise FileReadProblem("missing", "file not found") from None
    except NotADirectoryError:
        raise FileReadProblem("missing", "file not found (a parent in the path is a file)") \
            from None
    except IsADirectoryError:
        raise FileReadProblem("is_directory", "is a directory, not a file") from None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise FileReadProblem("bad_path", "the path is too long for the file system") \
                from None
        if e.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, or a FIFO with no writer
            raise FileReadProblem(
                "not_a_file", "not a regular file (a socket or a special file)"
            ) from None
        raise FileReadProblem("unreadable", f"cannot open the file: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileReadProblem("is_directory", "is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise FileReadProblem(
                "not_a_file", f"{file_kind(st.st_mode)}, not a regular file"
            )
        if root_real is not None:
            real = _real_path(fd, path)
            if not inside(real, root_real):
                raise FileReadProblem(
                    "outside_root",
                    f"resolves to {shown(real)}, outside the root {shown(root_real)}",
                )
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileReadProblem(
                "file_too_large",
                f"the file is {st.st_size:,} bytes, more than max_file_bytes={max_bytes:,}",
            )
        # Regular files ignore O_NONBLOCK, so reads behave as usual.
        f = io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    return f, st.st_size


def read_regular(
    path: str,
    *,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    root_real: str | None = None,
) -> bytes:
    """The whole content of ``path`` after the checks of :func:`open_regular`.

    Reads at most ``max_bytes`` (+1 to notice a file that grew past the limit after ``fstat``).
    """
    f, size = open_regular(path, max_bytes=max_bytes, root_real=root_real)
    # One more byte than allowed, in bounded reads: a file that grew past the limit after the
    # fstat is noticed without reading it all. The first read asks for fstat's size + 1, so a
    # file that did not change is read in one call into a buffer of its own size (asking for
    # more would allocate, and then shrink, a buffer that large for every file).
    remaining = float("inf") if max_bytes is None else max_bytes + 1
    want = size + 1
    parts = []
    with f:
        try:
            while remaining > 0:
                part = f.read(int(min(remaining, want)))
                if not part:
                    break
                parts.append(part)
                remaining -= len(part)
                # A full read: the file may have grown, read on in large steps. A short one is
                # almost always the end: confirm it with a small read (a network file system
                # may return short reads before the end).
                want = _CHUNK if len(part) == want else _PROBE
        except OSError as e:
            raise FileReadProblem("unreadable", f"cannot read the file: {e.strerror or e}") \
                from None
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileReadProblem(
            "file_too_large",
            f"the file grew past max_file_bytes={max_bytes:,} while being read",
        )
    return data
