"""A folder dataset refuses image-named entries that are not regular files (a FIFO would block
the reader forever, a device never ends), naming them, instead of listing them as samples."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
from helpers import pattern_image
from PIL import Image

from extsrc import Manifest, read_manifest
from extsrc.errors import ManifestError


def _images(root: Path) -> None:
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for j in range(2):
            Image.fromarray(pattern_image(j, 9, 11)).save(root / cls / f"{j}.png")


def _special(path: Path, kind: str, keep: list[socket.socket]) -> str:
    """Make ``path`` a special file of ``kind``; the words the refusal uses for it."""
    if kind == "fifo":
        os.mkfifo(path)
        return "a named pipe (FIFO)"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        keep.append(s)
        return "a socket"
    if kind == "link_to_fifo":  # symlinks are followed, so is this check
        os.mkfifo(path.parent / ".hidden_pipe")
        path.symlink_to(path.parent / ".hidden_pipe")
        return "a named pipe (FIFO)"
    if kind == "link_to_device":
        path.symlink_to("/dev/zero")
        return "a character device"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "socket", "link_to_fifo", "link_to_device"])
def test_a_special_file_with_an_image_name_is_refused_naming_it(tmp_path, kind):
    _images(tmp_path / "train")
    keep: list[socket.socket] = []
    try:
        what = _special(tmp_path / "train" / "dog" / "pipe.png", kind, keep)
        for read in (lambda: Manifest.from_folder(tmp_path / "train"),
                     lambda: read_manifest(tmp_path / "train")):
            pattern = (r"folder entry .*train/dog/pipe\.png is " + re.escape(what)
                       + r", not a regular file, but has an image extension: reading it could "
                       r"block forever")
            with pytest.raises(ManifestError, match=pattern):
                read()
    finally:
        for s in keep:
            s.close()


def test_a_special_file_without_an_image_name_is_skipped_like_other_files(tmp_path):
    _images(tmp_path / "train")
    os.mkfifo(tmp_path / "train" / "cat" / "notes.fifo")
    m = Manifest.from_folder(tmp_path / "train")
    assert [os.path.relpath(p, tmp_path / "train") for p in m.paths] == [
        "cat/0.png", "cat/1.png", "dog/0.png", "dog/1.png"]


def test_a_dangling_link_stays_listed_for_the_reader_to_name(tmp_path):
    _images(tmp_path / "train")
    (tmp_path / "train" / "cat" / "2.png").symlink_to(tmp_path / "gone.png")
    m = Manifest.from_folder(tmp_path / "train")
    assert str(tmp_path / "train" / "cat" / "2.png") in m.paths


def test_check_files_names_a_listed_fifo_as_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "m.csv").write_text("path,label\npipe.png,0\n")
    with pytest.raises(ManifestError, match=r"m\.csv line 2: not a regular file \(a folder, FIFO, "
                                            r"socket or device\): .*pipe\.png"):
        read_manifest(tmp_path / "m.csv", check_files=True)
