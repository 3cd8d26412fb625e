"""Files that are not what a manifest promises: FIFOs, devices, sockets, directories, huge or
sparse files, paths the OS cannot open. The loader's source and ``validate`` open every file
through one helper (:mod:`extsrc.sources.fileread`), so both must refuse the same files for the same
reasons, naming the line, before anything blocks or fills memory.

Waits are bounded: a read that would hang runs in a thread, and the test unblocks it (by opening
the FIFO's writing end) before failing, so nothing is left behind.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset

from extsrc import Loader, Workers
from extsrc.errors import SampleReadError
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, read_regular
from extsrc.sources.images import ShardedSource
from extsrc.sources.manifest import Manifest
from extsrc.sources.table import read_manifest
from extsrc.validation.validate import validate

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"


def run_bounded(fn: Callable[[], object], unblock: Callable[[], None] | None = None,
                limit: float = 20.0) -> object:
    """Run ``fn`` in a thread; return its result or re-raise its exception. If it is still
    running after ``limit`` seconds, call ``unblock`` (so the thread ends) and fail."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the test's thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        if unblock is not None:
            unblock()
        t.join(limit)
        pytest.fail(f"still blocked after {limit} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def open_writer(fifo: Path) -> Callable[[], None]:
    def unblock() -> None:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    return unblock


def make_special(folder: Path, kind: str) -> tuple[str, Callable[[], None] | None]:
    """A path of the given kind, and how to unblock a reader stuck on it."""
    if kind == "fifo":
        p = folder / "pipe.jpg"
        os.mkfifo(p)
        return str(p), open_writer(p)
    if kind == "dev_zero":
        return "/dev/zero", None
    if kind == "socket":
        p = folder / "sock.jpg"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(p))
        make_special.sockets.append(s)  # type: ignore[attr-defined]
        return str(p), None
    if kind == "directory":
        p = folder / "dir.jpg"
        p.mkdir()
        return str(p), None
    if kind == "sparse_4gib":
        p = folder / "sparse.jpg"
        with open(p, "wb") as f:
            f.write(JPEG_HEAD)
            f.truncate(4 * 1024**3)  # sparse: no disk space, but 4 GiB if read
        return str(p), None
    raise AssertionError(kind)


make_special.sockets = []  # type: ignore[attr-defined]

SPECIAL = {
    # kind: reason reported by every entry point
    "fifo": "not_a_file",
    "dev_zero": "not_a_file",
    "socket": "not_a_file",
    "directory": "is_directory",
    "sparse_4gib": "file_too_large",
}


def manifest_with(tmp_path: Path, path: str, n: int = 4) -> Path:
    """``n`` good images, then ``path`` on the last line (line n + 2: a header comes first)."""
    mpath = write_dataset(tmp_path, n, fmt="jpg")
    with open(mpath, "a") as f:
        f.write(f"{path},1\n")
    return mpath


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    for s in make_special.sockets:  # type: ignore[attr-defined]
        s.close()
    make_special.sockets.clear()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("entry", ["source", "validate", "validate_headers"])
def test_non_regular_and_huge_files_refused_before_reading(tmp_path, kind, entry):
    path, unblock = make_special(tmp_path, kind)
    mpath = manifest_with(tmp_path, path)
    m = read_manifest(mpath)
    line = len(m) + 1
    reason = SPECIAL[kind]
    if entry == "source":
        src = ShardedSource(m, batch_size=len(m), shuffle=False)
        with pytest.raises(SampleReadError) as ei:
            run_bounded(lambda: src.read(len(m) - 1), unblock)
        msg = str(ei.value)
        assert f"{mpath} line {line}: {path}: " in msg and f"[{reason}]" in msg
        assert ei.value.reason == reason
    else:
        report = run_bounded(lambda: validate(m, decode=entry == "validate", n_jobs=1,
                                              progress=False), unblock)
        assert [(p.line, p.reason) for p in report.problems] == [(line, reason)]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_fifo_does_not_hang_the_loader(tmp_path, workers):
    """Case 6: a FIFO under the default on_error='raise' hung the loader forever."""
    path, unblock = make_special(tmp_path, "fifo")
    mpath = manifest_with(tmp_path, path, n=3)

    def epoch():
        with Loader(mpath, batch_size=2, shuffle=False, resize=16, device="cpu",
                    workers=Workers(num_workers=workers, start_method="fork")) as loader:
            return list(loader)

    with pytest.raises(SampleReadError, match=r"line 5: .*pipe\.jpg: a named pipe \(FIFO\)"):
        run_bounded(epoch, unblock, limit=60)


def test_size_limit_is_configurable_and_checked_before_reading(tmp_path):
    """Case 8: the limit comes from fstat, so a file above it is never read."""
    mpath = write_dataset(tmp_path, 3, fmt="png")
    m = read_manifest(mpath)
    size = os.path.getsize(m.paths[1])
    src = ShardedSource(m, batch_size=1, shuffle=False, max_file_bytes=size - 1)
    with pytest.raises(SampleReadError, match=rf"line 3: .*00001\.png: the file is {size:,} "
                       rf"bytes, more than max_file_bytes={size - 1:,} \[file_too_large\]"):
        src.read(1)
    assert ShardedSource(m, batch_size=1, max_file_bytes=size).read(1).size == size
    report = validate(m, n_jobs=1, progress=False, max_file_bytes=size - 1)
    assert 3 in [p.line for p in report.problems]
    assert all(p.reason == "file_too_large" for p in report.problems)
    assert validate(m, n_jobs=1, progress=False, max_file_bytes=None).ok
    assert DEFAULT_MAX_FILE_BYTES == 256 * 1024 * 1024


def test_file_growing_past_the_limit_is_not_read_whole(tmp_path):
    """The bound also holds while reading: never more than max_bytes + 1 bytes."""
    p = tmp_path / "grow.bin"
    p.write_bytes(b"x" * 100)
    assert read_regular(str(p), max_bytes=100) == b"x" * 100
    with pytest.raises(Exception, match=r"more than max_file_bytes=99"):
        read_regular(str(p), max_bytes=99)


@pytest.mark.parametrize("value", [0, -1, 1.5, "1", True])
def test_max_file_bytes_argument_refused(tmp_path, value):
    m = read_manifest(write_dataset(tmp_path, 2))
    with pytest.raises((TypeError, ValueError), match="max_file_bytes"):
        ShardedSource(m, batch_size=1, max_file_bytes=value)
    with pytest.raises((TypeError, ValueError), match="max_file_bytes"):
        validate(m, n_jobs=1, progress=False, max_file_bytes=value)


# -- paths the OS cannot open, and names with control characters, at the source and validate --


HOSTILE = "x\x1b[2J\x1b[31m\u202e"


@pytest.mark.parametrize(
    ("name", "path", "reason"),
    [
        ("nul", "/tmp/a\x00b.jpg", "bad_path"),
        ("too_long", "/tmp/" + "x" * 5000 + ".jpg", "bad_path"),
        ("unencodable", "/tmp/a\ud800b.jpg", "bad_path"),
        ("control_characters", f"/nonexistent/{HOSTILE}.jpg", "missing"),
    ],
)
def test_paths_reaching_the_readers_are_refused_with_escaped_names(name, path, reason):
    """A Manifest built directly skips read_manifest's path checks: the readers must still
    refuse these with the line and reason, never a bare ValueError, and print names escaped."""
    m = Manifest(paths=(path,), labels=np.array([0]), classes=None, lines=(7,), source="m.csv")
    with pytest.raises(SampleReadError) as ei:
        ShardedSource(m, batch_size=1, shuffle=False).read(0)
    assert ei.value.reason == reason and str(ei.value).startswith("m.csv line 7: ")
    report = validate(m, n_jobs=1, progress=False)
    assert [(p.line, p.reason) for p in report.problems] == [(7, reason)]
    for text in (str(ei.value), report.summary()):
        assert not any(c in text for c in "\x00\x1b\u202e\ud800"), text
