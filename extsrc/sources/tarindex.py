"""A tar archive's member table read straight from its headers: names, data offsets and sizes.

:mod:`tarfile` reads the same table, but builds a ``TarInfo`` per member through several layers
of pure Python: with one pax header per member, as ``tarfile`` and webdataset's ``TarWriter``
write them for a fractional ``mtime``, that cost about 80 us a member (200 s for the 2.5M
members of ImageNet in shards). This reader parses only what an index needs, with ``struct``, and
keeps tarfile's rules for the formats it handles: POSIX ustar (with its name prefix), GNU
(``././@LongLink`` names), pax extended headers (``path`` and ``size``) and old v7 headers. A
header it does not handle (GNU sparse files, multi-volume archives, pax global headers that set a
path or size) raises :class:`Unsupported`, and the caller reads the archive with :mod:`tarfile`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BLOCK", "Member", "Scan", "Unsupported", "read_members"]

BLOCK = 512
_ZERO = bytes(BLOCK)
_REGULAR = (b"0", b"\0", b"7")
_OTHER_FILES = (b"1", b"2", b"3", b"4", b"6")  # hard and symbolic links, devices, FIFOs
_PAX_KEYS = ("path", "size")


class Unsupported(Exception):
    """A header this reader does not handle; :mod:`tarfile` reads the archive instead."""


@dataclass(frozen=True)
class Member:
    """One member: its name, where its data starts, its size, and whether it is a regular file
    (``False``: a link, a device or a FIFO; directories are not listed)."""

    name: str
    offset: int
    size: int
    regular: bool


@dataclass
class Scan:
    """What :func:`read_members` found: the members in order, the data of those ``want`` asked
    for, where the end-of-archive blocks start (``end``), and what stopped the reading early
    (``problem``: ``(kind, offset, member)`` with ``kind`` one of ``"not_tar"``,
    ``"damaged"``, ``"cut_member"``, ``"cut_header"``, ``"no_end"``; ``None`` when the archive
    ended with its zero blocks)."""

    members: list[Member]
    data: dict[str, bytes]
    end: int
    problem: tuple[str, int, Member | None] | None = None


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU's base-256 when its first bit is set."""
    if field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 9)) * 2 if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _checksum_ok(header: bytes) -> bool:
    try:
        stored = _number(header[148:156])
    except ValueError:
        return False
    unsigned = sum(header[:148]) + 256 + sum(header[156:])
    if stored == unsigned:
        return True
    signed = sum(b - 256 if b > 127 else b for b in header[:148] + header[156:]) + 256
    return stored == signed


def _name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header: ``"%d %s=%s\\n"``, the length counting itself."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos)
        if space < 0:
            raise Unsupported("a malformed pax record")
        length = int(data[pos:space])
        record = data[space + 1:pos + length - 1]  # without the trailing newline
        key, sep, value = record.partition(b"=")
        if length <= 0 or not sep:
            raise Unsupported("a malformed pax record")
        k = key.decode("utf-8", "surrogateescape")
        if k.startswith("GNU.sparse"):
            raise Unsupported("a GNU sparse file")
        out[k] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _member_name(header: bytes, long_name: str | None, pax: dict[str, str]) -> str:
    """A member's name: a pax ``path``, else a GNU long name before it, else the header's name
    (POSIX ustar: continued in the prefix field)."""
    if "path" in pax:
        return pax["path"]
    if long_name is not None:
        return long_name
    name = _name(header[0:100])
    if header[257:263] == b"ustar\0":
        prefix = _name(header[345:500])
        if prefix:
            name = f"{prefix}/{name}"
    return name


def read_members(f: Any, size: int, want: Callable[[str], bool] | None = None,
                 max_want: int = 1 << 20) -> Scan:
    """The member table of the open tar ``f`` (``size`` bytes), and the data of the regular
    members for which ``want(name)`` is true and that are at most ``max_want`` bytes.

    Raises :class:`Unsupported` for a format this reader leaves to :mod:`tarfile`, and ``OSError``
    when ``f`` cannot be read.
    """
    members: list[Member] = []
    data: dict[str, bytes] = {}
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}

    def stop(kind: str, at: int) -> Scan:
        return Scan(members, data, at, (kind, at, members[-1] if members else None))

    while True:
        if pos + BLOCK > size:
            if pos == size:
                return stop("no_end", pos)
            return stop("cut_header", pos)
        f.seek(pos)
        header = f.read(BLOCK)
        if len(header) < BLOCK:
            return stop("cut_header", pos)
        if header == _ZERO:
            if long_name is not None or pax:
                return stop("damaged", pos)
            return Scan(members, data, pos)
        if not _checksum_ok(header):
            return stop("not_tar" if pos == 0 else "damaged", pos)
        kind = header[156:157]
        try:
            length = _number(header[124:136])
        except ValueError:
            return stop("not_tar" if pos == 0 else "damaged", pos)
        start = pos + BLOCK
        following = start + -(-length // BLOCK) * BLOCK
        if kind in (b"x", b"L", b"K", b"g"):
            if start + length > size:
                return stop("cut_header", pos)
            extra = f.read(length)
            if len(extra) < length:
                return stop("cut_header", pos)
            if kind == b"x":
                pax.update(_pax(extra))
            elif kind == b"L":
                long_name = _name(extra)
            elif kind == b"g" and any(k in _pax(extra) for k in _PAX_KEYS):
                raise Unsupported("a pax global header that sets a path or size")
            pos = following
            continue
        if kind not in (*_REGULAR, *_OTHER_FILES, b"5"):
            raise Unsupported(f"a member of type {kind!r}")
        name = _member_name(header, long_name, pax)
        long_name = None
        if "size" in pax:
            try:
                length = int(pax["size"])
            except ValueError:
                return stop("damaged", pos)
            following = start + -(-length // BLOCK) * BLOCK
        pax = {}
        if kind == b"5" or (kind == b"\0" and name.endswith("/")):
            pos = following
            continue
        if kind in _OTHER_FILES:  # no data of their own in the archive
            members.append(Member(name, start, 0, regular=False))
            pos = start
            continue
        member = Member(name, start, length, regular=True)
        if start + length > size:
            members.append(member)
            return Scan(members[:-1], data, start, ("cut_member", start, member))
        members.append(member)
        if want is not None and length <= max_want and want(name):
            f.seek(start)
            data[name] = f.read(length)
        pos = following
