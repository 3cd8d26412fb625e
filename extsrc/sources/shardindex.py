"""Indexing one tar shard: its member table read (:mod:`extsrc.sources.tarindex`, or
:mod:`tarfile` for the formats that leaves to it), the members grouped into samples by key as
webdataset groups them, labels parsed, and every problem found named as a :class:`ShardProblem`;
an optional cache of member tables keyed by the shard's content."""

from __future__ import annotations

import os
import re
import stat
import warnings
from dataclasses import dataclass
from typing import Any

from extsrc._util.textsafe import shown
from extsrc.sources.fileread import FileReadProblem
from extsrc.sources.labels import _INT64_MAX, _INT_RE
from extsrc.sources.shardnames import is_remote_shard
from extsrc.sources.shardread import RemoteShard
from extsrc.sources.storage import Storage
from extsrc.sources.tarindex import Unsupported, read_members

__all__ = ["SHARD_REASONS", "IndexedShard", "ShardProblem", "index_shard"]

#: Reason codes of shard problems: what each means and how to fix it.
SHARD_REASONS: dict[str, tuple[str, str]] = {
    "missing_shard": ("the shard does not exist", "fix the shard pattern or list"),
    "unreadable_shard": ("the shard cannot be read (permissions, I/O error, not a file)",
                         "fix the shard's permissions or drop it from the list"),
    "bad_shard": ("the shard is not a readable tar archive (not a tar, or a damaged header)",
                  "re-create the shard with tar or webdataset's TarWriter"),
    "truncated_shard": ("the shard ends before its last member does (cut short)",
                        "copy or upload the shard again, or re-create it"),
    "no_image": ("the sample has no image member",
                 "add the image, or name its extension in image_extensions=[...]"),
    "two_images": ("the sample has more than one image member",
                   "keep one image per key, or name the one to use in image_extensions=[...]"),
    "no_label": ("the sample has no label member",
                 "add the label member, or pass label=None for samples without labels"),
    "bad_label": ("the label member does not hold a valid label",
                  "write a label integer >= 0 (or, in JSON, a class name)"),
    "duplicate_key": ("the same key appears twice in the shard",
                      "give every sample its own key (webdataset groups members by key)"),
    "not_a_file": ("the member is a link or a special file, not a regular file",
                   "store the file itself (tar --dereference --hard-dereference)"),
}

# webdataset's split of a member name into key and extension: the directory part and the file
# name up to its first dot, then the rest of the file name.
_KEY_RE = re.compile(r"((?:.*/|)[^.]+)[.]([^/]*)\Z", re.DOTALL)
_LABEL_MAX_BYTES = 1 << 20  # a cls/json member larger than this is not a label


@dataclass(frozen=True)
class ShardProblem:
    """What is wrong with a shard or one of its samples: the ``shard``, the ``member`` (``None``
    for the shard as a whole), a ``reason`` code of :data:`SHARD_REASONS` and a ``message`` that
    says what was found; ``fix`` says what to do."""

    shard: str
    member: str | None
    reason: str
    message: str

    @property
    def fix(self) -> str:
        return SHARD_REASONS[self.reason][1]

    @property
    def path(self) -> str:
        return self.shard if self.member is None else f"{self.shard}/{self.member}"

    def __str__(self) -> str:
        where = shown(self.shard) + ("" if self.member is None else
                                     f" member {shown(self.member)}")
        return f"{where}: {self.message} [{self.reason}]; {self.fix}"


@dataclass
class IndexedShard:
    """One shard's samples (key, image member, offset, size, label) and problems."""

    samples: list[tuple[str, str, int, int, int | str]]
    problems: list[ShardProblem]
    stamp: tuple[int, int] | None = None


def _open_shard(shard: str, storage: Storage | None,
                ) -> tuple[Any, int, tuple[int, int] | None]:
    """The shard opened for reading, its size and (local shards) its ``(size, mtime_ns)``; a
    :class:`ShardProblem` if it cannot be opened."""
    if is_remote_shard(shard):
        try:
            f = RemoteShard(storage or Storage(), shard)
        except FileReadProblem as e:
            raise _Stop(_remote_problem(shard, e)) from None
        return f, f.size, None
    try:
        f = open(shard, "rb")  # the caller closes it
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            f.close()
            raise IsADirectoryError(shard)
        return f, st.st_size, (st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        raise _Stop(ShardProblem(shard, None, "missing_shard", "the shard does not exist")) \
            from None
    except (OSError, ValueError) as e:
        raise _Stop(ShardProblem(shard, None, "unreadable_shard",
                                 f"the shard cannot be read: {type(e).__name__}: {e}")) from None


def _remote_problem(shard: str, e: FileReadProblem) -> ShardProblem:
    """What a failed read of a shard behind a URL means for the shard."""
    if e.reason == "missing":
        return ShardProblem(shard, None, "missing_shard", "the shard does not exist")
    return ShardProblem(shard, None, "unreadable_shard",
                        f"the shard cannot be read ({e.reason}): {e.message}")


class _Stop(Exception):
    def __init__(self, problem: ShardProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _scan(f: Any, size: int, shard: str, label: str | None,
          ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]]:
    """The members of an open shard as ``(name, data offset, size)`` (offset -1: not a regular
    file), the data of the label members, and what is wrong with the archive itself.

    :func:`extsrc.sources.tarindex.read_members` reads the headers; an archive in a format it
    leaves to :mod:`tarfile` is read by :func:`_scan_tarfile`, with the same results."""
    if size == 0:
        return [], {}, [ShardProblem(shard, None, "bad_shard", "the shard is empty (0 bytes)")]

    def want(name: str) -> bool:
        m = _KEY_RE.match(name)
        return m is not None and m.group(2).lower() == label

    try:
        scan = read_members(f, size, None if label is None else want, _LABEL_MAX_BYTES)
    except Unsupported:
        f.seek(0)
        return _scan_tarfile(f, size, shard, label)
    members = [(m.name, m.offset if m.regular else -1, m.size) for m in scan.members]
    if scan.problem is None:
        problem = _check_end(f, scan.end, size, shard, members)
        return members, scan.data, [] if problem is None else [problem]
    kind, at, member = scan.problem
    last = None if member is None else member.name
    if kind == "not_tar":
        problem = ShardProblem(shard, None, "bad_shard",
                               "the shard is not a tar archive (its first header's checksum is "
                               "wrong)")
    elif kind == "damaged":
        problem = ShardProblem(
            shard, last, "bad_shard",
            f"the tar header at byte {at:,} is damaged (its checksum or size is wrong): the "
            f"{size - at:,} bytes after this member cannot be read")
    elif kind == "cut_member":
        assert member is not None
        problem = ShardProblem(
            shard, last, "truncated_shard",
            f"the shard ends {member.offset + member.size - size:,} bytes before this member's "
            f"data does ({size:,} bytes, the member's {member.size:,} start at byte "
            f"{member.offset:,})")
    elif kind == "cut_header":
        problem = ShardProblem(
            shard, last, "truncated_shard",
            f"the shard ends inside a tar header (byte {at:,}): it was cut short after this "
            "member, and the members after it are lost")
    else:  # no_end
        problem = ShardProblem(
            shard, last, "truncated_shard",
            "the shard ends without tar's end-of-archive blocks: it was cut short after this "
            "member, and the members after it are lost")
    return members, scan.data, [problem]


def _scan_tarfile(f: Any, size: int, shard: str, label: str | None,
                  ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]]:
    """:func:`_scan` through :mod:`tarfile`, for the formats ``read_members`` leaves to it."""
    import tarfile  # only here: read_manifest imports this module for every manifest

    members: list[tuple[str, int, int]] = []
    label_data: dict[str, bytes] = {}
    problems: list[ShardProblem] = []
    try:
        tf = tarfile.open(fileobj=f, mode="r:")
    except (tarfile.TarError, EOFError) as e:
        what = "empty (0 bytes)" if size == 0 else f"not a tar archive ({e})"
        return members, label_data, [ShardProblem(shard, None, "bad_shard", f"the shard is {what}")]
    cut = False
    while True:
        try:
            ti = tf.next()
        except (tarfile.TarError, EOFError, OSError) as e:
            last = members[-1][0] if members else None
            problems.append(ShardProblem(
                shard, last, "bad_shard",
                f"the tar header at byte {tf.offset:,} cannot be read ({e}): the members from "
                "there on are lost" + ("" if last is None else " (this is the last one read)")))
            cut = True
            break
        if ti is None:
            break
        if ti.isdir():
            continue
        if not ti.isreg():
            members.append((ti.name, -1, 0))
            continue
        if ti.offset_data + ti.size > size:
            problems.append(ShardProblem(
                shard, ti.name, "truncated_shard",
                f"the shard ends {ti.offset_data + ti.size - size:,} bytes before this member's "
                f"data does ({size:,} bytes, the member's {ti.size:,} start at byte "
                f"{ti.offset_data:,})"))
            cut = True
            break
        members.append((ti.name, ti.offset_data, ti.size))
        if label is not None and ti.size <= _LABEL_MAX_BYTES:
            m = _KEY_RE.match(ti.name)
            if m is not None and m.group(2).lower() == label:
                f.seek(ti.offset_data)
                label_data[ti.name] = f.read(ti.size)
    if not cut:
        problem = _check_end(f, tf.offset, size, shard, members)
        if problem is not None:
            problems.append(problem)
    return members, label_data, problems


def _check_end(f: Any, end: int, size: int, shard: str,
               members: list[tuple[str, int, int]]) -> ShardProblem | None:
    """A tar ends with zero blocks. None at all means it was cut at a member boundary; anything
    but zeros after them is a damaged header, where tarfile stops reading without a word."""
    last = members[-1][0] if members else None
    if end >= size:
        return ShardProblem(
            shard, last, "truncated_shard",
            "the shard ends without tar's end-of-archive blocks: it was cut short after this "
            "member, and the members after it are lost")
    f.seek(end)
    pos = end
    while pos < size:
        chunk = f.read(min(1 << 20, size - pos))
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            at = pos + next(i for i, b in enumerate(chunk) if b)
            return ShardProblem(
                shard, last, "bad_shard",
                f"the tar header at byte {end:,} is damaged (tar reading stops there, and "
                f"byte {at:,} after it is not zero): the {size - end:,} bytes after this member "
                "cannot be read")
        pos += len(chunk)
    return None


def _parse_label(data: bytes, ext: str, field: str | None) -> int | str:
    """The label a member holds; ValueError with what is wrong."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    if ext == "json":
        import json

        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ValueError(f"it is not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"it holds a JSON {type(obj).__name__}, not an object")
        if field not in obj:
            keys = ", ".join(repr(k) for k in list(obj)[:8])
            raise ValueError(f"it has no field {field!r} (fields: {keys or 'none'}); "
                             "name the label's field in label_field=")
        value = obj[field]
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"its field {field!r} is {shown(repr(value)[:40])}, not an integer "
                             "label or a class name")
    else:
        if not _INT_RE.match(text):
            raise ValueError(f"it holds {shown(repr(text[:40]))}, not an integer")
        value = int(text)
    if not 0 <= value <= _INT64_MAX:
        raise ValueError(f"its label {value} is not an integer >= 0 that fits in int64")
    return value


_CACHE_VERSION = "extsrc-shard-index-v1"


def _identity(shard: str, f: Any, size: int, stamp: tuple[int, int] | None) -> list | None:
    """What tells this shard's content apart from any later one: the local file's size and
    modification time, or the object's size and ETag (or modification time); ``None`` when
    the storage says neither, and the index is then never cached."""
    if stamp is not None:
        return [shard, size, stamp[1]]
    details = getattr(f, "details", None) or {}
    for key in ("ETag", "etag", "LastModified", "mtime", "last_modified", "updated"):
        if details.get(key) is not None:
            return [shard, size, key, str(details[key])]
    return None


def _cache_file(cache: str, identity: list, label: str | None) -> str:
    import hashlib
    import json

    key = json.dumps([_CACHE_VERSION, identity, label]).encode("utf-8", "surrogateescape")
    return os.path.join(cache, hashlib.sha256(key).hexdigest() + ".json")


def _cache_load(path: str, shard: str,
                ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]] | None:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        members = [(str(n), int(o), int(z)) for n, o, z in doc["members"]]
        data = {str(n): bytes.fromhex(h) for n, h in doc["labels"].items()}
        problems = [ShardProblem(shard, m, str(r), str(t)) for m, r, t in doc["problems"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: index the shard again
    return members, data, problems


def _cache_store(path: str, members: list[tuple[str, int, int]], data: dict[str, bytes],
                 problems: list[ShardProblem]) -> None:
    import json
    import tempfile

    doc = {"members": members, "labels": {n: d.hex() for n, d in data.items()},
           "problems": [[p.member, p.reason, p.message] for p in problems]}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            json.dump(doc, f)
        os.replace(tmp, path)  # whole or not at all: readers never see half an index
    except OSError as e:
        warnings.warn(f"read_shards: the index cache {shown(path)} cannot be written ({e}); "
                      "the shards are indexed again next time", stacklevel=4)


def index_shard(shard: str, *, label: str | None, label_field: str | None,
                image_extensions: frozenset[str], storage: Storage | None,
                index_cache: str | None = None) -> IndexedShard:
    """Read one shard's headers (and label members) into its samples and problems; with
    ``index_cache``, reuse (or keep) what an earlier read of the same content found."""
    try:
        f, size, stamp = _open_shard(shard, storage)
        with f:
            members, label_data, problems = _members(f, size, stamp, shard, label, index_cache)
    except _Stop as stop:
        return IndexedShard([], [stop.problem])
    samples = []
    for key, group in _group(shard, members, problems).items():
        sample = _sample(shard, key, group, image_extensions, label, label_field, label_data,
                         problems)
        if sample is not None:
            samples.append(sample)
    return IndexedShard(samples, problems, stamp)


def _members(f: Any, size: int, stamp: tuple[int, int] | None, shard: str, label: str | None,
             index_cache: str | None,
             ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]]:
    """:func:`_scan`'s member table, label data and problems, from the index cache when it
    holds this content (else read, and kept there)."""
    identity = None if index_cache is None else _identity(shard, f, size, stamp)
    cache = None if identity is None else _cache_file(index_cache, identity, label)
    found = None if cache is None else _cache_load(cache, shard)
    if found is not None:
        return found
    try:
        found = _scan(f, size, shard, label)
    except FileReadProblem as e:  # a URL shard: its retries ran out, or it went away
        raise _Stop(_remote_problem(shard, e)) from None
    except OSError as e:
        raise _Stop(ShardProblem(shard, None, "unreadable_shard",
                                 f"reading the shard failed: {e}")) from None
    if cache is not None:
        _cache_store(cache, *found)
    return found


def _group(shard: str, members: list[tuple[str, int, int]], problems: list[ShardProblem],
           ) -> dict[str, dict[str, tuple[str, int, int]]]:
    """The members by key and extension, webdataset's rule; a key met again after other keys,
    or with an extension it has already, is left out (a ``duplicate_key`` problem)."""
    groups: dict[str, dict[str, tuple[str, int, int]]] = {}
    bad: set[str] = set()
    last_key = None
    for name, offset, length in members:
        m = _KEY_RE.match(name)
        if m is None:
            continue  # no extension: part of no sample (webdataset passes over it too)
        key, ext = m.group(1), m.group(2).lower()
        group = groups.get(key)
        if group is not None and (key != last_key or ext in group):
            if key not in bad:
                first = next(iter(group.values()))[0]
                problems.append(ShardProblem(
                    shard, name, "duplicate_key",
                    f"the key {shown(key)} appears twice (also member {shown(first)}); the "
                    "sample is left out rather than read twice or half"))
                bad.add(key)
        else:
            groups.setdefault(key, {})[ext] = (name, offset, length)
        last_key = key
    return {k: g for k, g in groups.items() if k not in bad}


def _sample(shard: str, key: str, group: dict[str, tuple[str, int, int]],
            image_extensions: frozenset[str], label: str | None, label_field: str | None,
            label_data: dict[str, bytes], problems: list[ShardProblem],
            ) -> tuple[str, str, int, int, int | str] | None:
    """The sample ``(key, image member, offset, size, label)`` of one key's members, or
    ``None`` with its problem appended to ``problems``."""
    images = [e for e in group if e in image_extensions]
    some = next(iter(group.values()))[0]
    if not images:
        found = ", ".join(sorted(group))
        problems.append(ShardProblem(
            shard, some, "no_image",
            f"the sample {shown(key)} has no image member (members: {shown(found)}; image "
            f"extensions: {', '.join(sorted(image_extensions))})"))
        return None
    if len(images) > 1:
        problems.append(ShardProblem(
            shard, group[images[1]][0], "two_images",
            f"the sample {shown(key)} has {len(images)} image members "
            f"({', '.join(group[e][0] for e in images)})"))
        return None
    name, offset, length = group[images[0]]
    if offset < 0:
        problems.append(ShardProblem(shard, name, "not_a_file",
                                     "the image member is a link or a special file"))
        return None
    value: int | str = 0
    if label is not None:
        member = group.get(label)
        if member is None:
            problems.append(ShardProblem(
                shard, name, "no_label",
                f"the sample {shown(key)} has no .{label} member (members: "
                f"{', '.join(sorted(group))})"))
            return None
        data = label_data.get(member[0])
        try:
            if data is None:
                raise ValueError("it is a link, a special file or larger than 1 MiB")
            value = _parse_label(data, label, label_field)
        except ValueError as e:
            problems.append(ShardProblem(shard, member[0], "bad_label",
                                         f"the label member is bad: {e}"))
            return None
    return (key, name, offset, length, value)
