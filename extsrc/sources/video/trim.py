"""Clip windows: hand DALI's video decoder only the part of a file one clip needs.

DALI 2.4's ``fn.decoders.video`` builds no frame index for in-memory files, so it decodes every
frame from the first up to a clip's start: a clip late in a long file costs the whole file.
:func:`clip_window` instead cuts a new, smaller file in the same container from the original's
bytes: the samples from the last safe key frame at or before the clip's first frame up to the
last sample the clip needs, with their sample tables rebuilt. The decoder then starts there.

A cut is made only where it provably decodes to the same frames; anywhere else the original
bytes are returned, so a file this module does not understand costs time, never
correctness. A cut point is a sample that

* the container marks as a sync sample, and its bitstream says is a key frame;
* is an IDR picture for H.264 (NAL type 5) and HEVC (types 19 and 20): other intra pictures
  (open GOPs, CRA) may be followed by frames that reference frames before them;
* splits the presentation order exactly: every sample before it in decode order is presented
  before it, every later one after it (no leading pictures, as B-frames of an open GOP are).

The window ends at the last sample, in decode order, that a frame of the clip needs. Inside it,
samples no other frame references and the clip does not take are left out as well: H.264
pictures whose slices all have ``nal_ref_idc`` 0 (most B-frames), and every frame the clip does
not take of an all-intra codec (Motion JPEG). So a clip of 16 frames taken every 4 decodes its
key frame, the reference frames between, and its own 16 frames. The decoder is then handed the
window's own frame numbers of the clip's frames (DALI's ``frames`` argument).

Containers: MP4/MOV (ISO base media, not fragmented) with one video track, its first sample
description, no zero-size samples and an edit list that hides nothing; codecs: H.264, HEVC,
VP8, VP9 (key frames read from the bitstream, not only the sync table) and Motion JPEG. Files
starting with anything but a key frame, and H.264/HEVC without composition offsets whose
pictures may be reordered, are returned whole, as are other containers and codecs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from extsrc.sources.video.probe import VideoInfo, VideoProbeProblem, _boxes, _find

__all__ = ["ClipWindow", "clip_window"]

#: Codecs whose key frames this module can check in the bitstream (IDR pictures for H.264 and
#: HEVC, the key-frame flag of VP8 and VP9; every Motion JPEG frame is one). Others stay whole.
_CUTTABLE = frozenset({"h264", "hevc", "mjpeg", "vp8", "vp9"})
#: NAL unit types of parameter sets, as ``_nal_reader`` reports them (HEVC's offset by 100).
_PARAMETER_SETS = frozenset({7, 8, 132, 133, 134})


@dataclass(frozen=True)
class ClipWindow:
    """What to hand the decoder for one clip: ``data`` (the window's bytes, or the whole file's)
    and ``frames``, the clip's frames numbered as in ``data`` (``int32``); ``first``, the
    original number of the window's frame 0 (0 for the whole file)."""

    data: np.ndarray
    frames: np.ndarray
    first: int = 0


def clip_window(data: np.ndarray, info: VideoInfo, frames: np.ndarray | list[int]) -> ClipWindow:
    """The window of ``data`` (a video file's bytes, ``uint8``) that decodes the clip's
    ``frames`` (original frame numbers, presentation order, each below ``info.num_frames``)
    exactly as the whole file does; the whole file where no cut is both useful and safe."""
    wanted = np.asarray(frames, dtype=np.int64)
    whole = ClipWindow(data, wanted.astype(np.int32), 0)
    if len(wanted) == 0 or wanted.min() < 0 or wanted.max() >= info.num_frames:
        return whole
    if info.container == "mp4":
        cut = _mp4_window(memoryview(data).cast("B"), info.codec, wanted)
    else:
        cut = None
    if cut is None:
        return whole
    out, renumbered, first = cut
    return ClipWindow(np.frombuffer(out, dtype=np.uint8), renumbered.astype(np.int32), first)


# -- MP4 / MOV -------------------------------------------------------------------------------------
def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _full(mv: memoryview, s: int, e: int) -> tuple[int, memoryview]:
    """(version, payload after version and flags) of a full box's payload [s, e)."""
    return mv[s], mv[s + 4:e]


def _u32s(buf: memoryview, count: int, width: int = 1, start: int = 4) -> np.ndarray:
    """``count`` big-endian records of ``width`` uint32 each, after a 4-byte entry count."""
    need = start + 4 * count * width
    if len(buf) < need:
        raise ValueError("sample table shorter than its entry count")
    return np.frombuffer(buf[start:need], dtype=">u4").reshape(count, width).astype(np.int64)


@dataclass(frozen=True)
class _Samples:
    sizes: np.ndarray    # bytes of each sample, decode order
    offsets: np.ndarray  # file offset of each sample
    deltas: np.ndarray   # decode-time delta of each sample
    dts: np.ndarray      # decode time of each sample
    ctts: np.ndarray | None  # composition offset of each sample (signed), or None
    ctts_version: int
    sync: np.ndarray | None  # bool per sample; None: every sample is a sync sample
    pts: np.ndarray      # presentation time of each sample
    rank: np.ndarray     # presentation index of each sample


def _mp4_window(mv: memoryview, codec: str, wanted: np.ndarray
                ) -> tuple[bytes, np.ndarray, int] | None:
    try:
        return _mp4_cut(mv, codec, wanted)
    except (ValueError, KeyError, struct.error, IndexError, OverflowError, MemoryError,
            VideoProbeProblem):
        return None  # tables this reader does not follow: the whole file decodes as before


def _mp4_cut(mv: memoryview, codec: str, wanted: np.ndarray
             ) -> tuple[bytes, np.ndarray, int] | None:
    if codec not in _CUTTABLE:
        return None
    found = [(kind, s, e) for kind, s, e in _boxes(mv, 0, len(mv))]
    kinds = [kind for kind, _s, _e in found]
    if kinds.count(b"moov") != 1 or b"moof" in kinds:
        return None  # fragments, or a second moov FFmpeg would not read
    top = {kind: (s, e) for kind, s, e in found}
    moov = top[b"moov"]
    if _find(mv, *moov, (b"mvex",))[0] >= 0:
        return None
    video = []
    for kind, s, e in _boxes(mv, *moov):
        if kind == b"trak":
            hs, he = _find(mv, s, e, (b"mdia", b"hdlr"))
            if hs >= 0 and he - hs >= 12 and bytes(mv[hs + 8:hs + 12]) == b"vide":
                video.append((s, e))
    if len(video) != 1:
        return None  # which of several tracks the decoder takes is its own choice
    trak = video[0]
    stbl = _find(mv, *trak, (b"mdia", b"minf", b"stbl"))
    if stbl[0] < 0 or not _self_contained(mv, trak):
        return None
    samples = _mp4_samples(mv, stbl)
    if samples is None or not _trivial_edits(mv, trak, moov, samples):
        return None
    n = len(samples.sizes)
    if int(wanted.max()) >= n:
        return None
    nal = _nal_reader(mv, stbl, codec)
    if nal is _never or not _starts_clean(mv, samples, codec, nal):
        return None
    k = _cut_point(mv, samples, codec, nal, int(wanted.min()))
    order = np.empty(n, dtype=np.int64)
    order[samples.rank] = np.arange(n)
    # Every reference precedes its user in decode order: k..end-1 holds all the clip needs.
    end = int(order[wanted].max()) + 1
    if int(samples.offsets[k:end].min()) < 0 or int(
            (samples.offsets[k:end] + samples.sizes[k:end]).max()) > len(mv):
        return None
    if samples.ctts is None and codec in ("h264", "hevc") and _reorders(
            mv, samples, codec, nal, k, end):
        return None  # B-frames without composition offsets: the decoder's order is not known
    keep = np.arange(k, end)
    taken = np.isin(samples.rank[keep], wanted)
    droppable = _droppable(mv, samples, codec, nal, keep)
    keep = keep[taken | ~droppable]
    if k == 0 and len(keep) == end:
        return None  # nothing to leave out
    shown = np.sort(samples.rank[keep])  # the window's frames, in presentation order
    renumbered = np.searchsorted(shown, wanted)
    return _mp4_write(mv, top.get(b"ftyp"), moov, trak, stbl, samples, keep), renumbered, k


def _trivial_edits(mv: memoryview, trak: tuple[int, int], moov: tuple[int, int],
                   samples: _Samples) -> bool:
    """True when the track's edit list (if any) hides no sample: empty edits (a delay), then
    one edit at rate 1 that starts at or before the first presentation time and lasts to the
    last. A cut file carries no edit list, so it must not need one."""
    s, e = _find(mv, *trak, (b"edts", b"elst"))
    if s < 0:
        return True
    version, body = _full(mv, s, e)
    (count,) = struct.unpack_from(">I", body, 0)
    fmt, step = (">QqHH", 20) if version == 1 else (">IiHH", 12)
    media = []
    for j in range(count):
        duration, media_time, rate, _frac = struct.unpack_from(fmt, body, 4 + j * step)
        if media_time != -1:  # -1: an empty edit, a delay before the track, hiding nothing
            media.append((duration, media_time, rate))
    if len(media) != 1:
        return False
    duration, media_time, rate = media[0]
    pts = samples.pts
    if rate != 1 or not 0 <= media_time <= int(pts.min()):
        return False
    if duration == 0:
        return True
    movie_scale, media_scale = _scales(mv, moov, trak)
    shown = duration * media_scale // movie_scale  # media time units, rounded down
    return media_time + shown > int(pts.max())  # FFmpeg drops frames at or past the end


def _scales(mv: memoryview, moov: tuple[int, int], trak: tuple[int, int]) -> tuple[int, int]:
    """(movie timescale, media timescale)."""
    out = []
    for s, _e in (_find(mv, *moov, (b"mvhd",)), _find(mv, *trak, (b"mdia", b"mdhd"))):
        out.append(struct.unpack_from(">I", mv, s + (20 if mv[s] == 1 else 12))[0] or 1)
    return out[0], out[1]


def _self_contained(mv: memoryview, trak: tuple[int, int]) -> bool:
    s, e = _find(mv, *trak, (b"mdia", b"minf", b"dinf", b"dref"))
    if s < 0:
        return True
    for kind, s2, _e2 in _boxes(mv, s + 8, e):
        if kind in (b"url ", b"urn ") and not (mv[s2 + 3] & 1):
            return False  # samples in another file
    return True


def _mp4_samples(mv: memoryview, stbl: tuple[int, int]) -> _Samples | None:
    boxes = {kind: (s, e) for kind, s, e in _boxes(mv, *stbl)}
    if not {b"stsd", b"stsz", b"stsc", b"stts"} <= boxes.keys():
        return None  # stz2 (compact sizes) is not read
    if b"stco" not in boxes and b"co64" not in boxes:
        return None
    _v, stsz = _full(mv, *boxes[b"stsz"])
    size, n = struct.unpack_from(">II", stsz, 0)
    if n == 0 or n > len(mv) or n * max(size, 1) > len(mv):
        return None  # more samples than bytes: not a table to trust
    sizes = (np.full(n, size, dtype=np.int64) if size else _u32s(stsz, n, start=8)[:, 0])
    if int(sizes.min()) == 0:
        return None  # a sample of no bytes gives no frame: frame numbers are not sample numbers

    _v, stsc = _full(mv, *boxes[b"stsc"])
    (count,) = struct.unpack_from(">I", stsc, 0)
    runs = _u32s(stsc, count, 3)
    if count == 0 or runs[0, 0] != 1 or np.any(runs[:, 2] != 1):
        return None  # the first sample description only: the cut file copies it as such
    if b"co64" in boxes:
        _v, co = _full(mv, *boxes[b"co64"])
        (chunks,) = struct.unpack_from(">I", co, 0)
        if len(co) < 4 + 8 * chunks:
            return None
        chunk_offsets = np.frombuffer(co[4:4 + 8 * chunks], dtype=">u8").astype(np.int64)
    else:
        _v, co = _full(mv, *boxes[b"stco"])
        (chunks,) = struct.unpack_from(">I", co, 0)
        chunk_offsets = _u32s(co, chunks)[:, 0]
    firsts = runs[:, 0] - 1
    if np.any(np.diff(firsts) <= 0) or firsts[-1] >= chunks:
        return None
    lengths = np.diff(np.append(firsts, chunks))
    per_chunk = np.repeat(runs[:, 1], lengths)
    chunk_end = np.cumsum(per_chunk)  # one past each chunk's last sample
    if len(chunk_end) == 0 or int(chunk_end[-1]) < n:
        return None
    chunk_of = np.searchsorted(chunk_end, np.arange(n), side="right")
    ends = np.cumsum(sizes)
    starts = ends - sizes
    chunk_first = np.minimum(chunk_end - per_chunk, n - 1)  # first sample of each chunk
    offsets = chunk_offsets[chunk_of] + starts - starts[chunk_first[chunk_of]]

    _v, stts = _full(mv, *boxes[b"stts"])
    (count,) = struct.unpack_from(">I", stts, 0)
    t = _u32s(stts, count, 2)
    if int(t[:, 0].sum()) != n:
        return None
    deltas = np.repeat(t[:, 1], t[:, 0])

    ctts = None
    ctts_version = 0
    if b"ctts" in boxes:
        ctts_version, body = _full(mv, *boxes[b"ctts"])
        (count,) = struct.unpack_from(">I", body, 0)
        c = _u32s(body, count, 2)
        if int(c[:, 0].sum()) != n:
            return None
        # FFmpeg reads both versions' offsets as signed; so does this.
        ctts = np.repeat(c[:, 1].astype(np.uint32).view(np.int32).astype(np.int64), c[:, 0])

    sync = None
    if b"stss" in boxes:
        _v, body = _full(mv, *boxes[b"stss"])
        (count,) = struct.unpack_from(">I", body, 0)
        numbers = _u32s(body, count)[:, 0] - 1
        sync = np.zeros(n, dtype=bool)
        sync[numbers[(numbers >= 0) & (numbers < n)]] = True

    dts = np.concatenate([[0], np.cumsum(deltas)[:-1]])
    pts = dts + (ctts if ctts is not None else 0)
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(pts, kind="stable")] = np.arange(n)
    return _Samples(sizes, offsets, deltas, dts, ctts, ctts_version, sync, pts, rank)


def _cut_point(mv: memoryview, samples: _Samples, codec: str, nal, first: int  # type: ignore[no-untyped-def]
               ) -> int:
    """The last safe cut point (decode position) whose frame is at or before ``first``; 0 for
    none. At a safe point k, decode positions 0..k-1 hold exactly frames 0..k-1 and position k
    holds frame k (so nothing before it is presented after it, and nothing after before)."""
    rank = samples.rank
    n = len(rank)
    head_max = np.maximum.accumulate(rank)
    safe = rank == np.arange(n)
    safe[1:] &= head_max[:-1] == np.arange(n - 1)
    if samples.sync is not None:
        safe &= samples.sync
    candidates = np.flatnonzero(safe[:first + 1])[::-1]
    for k in candidates[:16].tolist():  # a few tries: IDR pictures are rarely far apart
        if k == 0:
            return 0
        if _is_key(mv, samples, codec, nal, k) and _carries_sets(mv, samples, nal, k):
            return int(k)
    return 0


def _is_key(mv: memoryview, samples: _Samples, codec: str, nal, k: int) -> bool:  # type: ignore[no-untyped-def]
    """Whether sample ``k`` decodes without any earlier sample, read from its bitstream."""
    at, size = int(samples.offsets[k]), int(samples.sizes[k])
    if codec == "mjpeg":
        return True
    if codec in ("h264", "hevc"):
        return 5 in nal(mv, at, size)[0]
    head = bytes(mv[at:at + 2])
    if len(head) < 2:
        return False
    if codec == "vp8":
        return head[0] & 1 == 0  # the frame tag's inverse key-frame bit
    # VP9: frame_marker (2 bits, 0b10), profile (2 bits, a reserved zero bit after profile 3),
    # show_existing_frame, frame_type (0: key frame).
    bits = (head[0] << 8) | head[1]
    if bits >> 14 != 2:
        return False
    profile = ((bits >> 13) & 1) | (((bits >> 12) & 1) << 1)
    pos = 12 if profile < 3 else 11  # bits left after the profile (and the reserved bit)
    show_existing = (bits >> (pos - 1)) & 1
    frame_type = (bits >> (pos - 2)) & 1
    return show_existing == 0 and frame_type == 0


def _carries_sets(mv: memoryview, samples: _Samples, nal, k: int) -> bool:  # type: ignore[no-untyped-def]
    """False when the first sample carries its own parameter sets (they may differ from the
    sample description's) and sample ``k`` does not repeat them."""
    if nal is None:
        return True
    first = set(nal(mv, int(samples.offsets[0]), int(samples.sizes[0]))[0]) & _PARAMETER_SETS
    if not first:
        return True
    return first <= set(nal(mv, int(samples.offsets[k]), int(samples.sizes[k]))[0])


def _starts_clean(mv: memoryview, samples: _Samples, codec: str, nal) -> bool:  # type: ignore[no-untyped-def]
    """Whether the file starts with a key frame presented first: otherwise the decoder may drop
    leading frames it cannot decode, and its frame numbers would not be the samples' ranks."""
    return int(samples.rank[0]) == 0 and _is_key(mv, samples, codec, nal, 0)


def _reorders(mv: memoryview, samples: _Samples, codec: str, nal, k: int, end: int) -> bool:  # type: ignore[no-untyped-def]
    """For a file without composition offsets: whether a picture of samples ``k..end-1`` may
    be presented out of decode order (an H.264 B slice; any HEVC file; a slice not read)."""
    if codec != "h264":
        return True
    for j in range(k, end):
        at = int(samples.offsets[j])
        types, _refs, starts = nal(mv, at, int(samples.sizes[j]))
        heads = [p for t, p in zip(types, starts, strict=True) if t in (1, 5)]
        if not heads:
            return True
        slice_type = _h264_slice_type(mv, heads[0] + 1, at + int(samples.sizes[j]))
        if slice_type is None or slice_type % 5 == 1:
            return True
    return False


def _h264_slice_type(mv: memoryview, i: int, end: int) -> int | None:
    """slice_type of the slice header at ``i`` (after the NAL header): the second ue(v), after
    first_mb_in_slice; None when it does not fit in the first 8 bytes."""
    raw = bytes(mv[i:min(i + 8, end)])
    if b"\x00\x00\x03" in raw:
        return None  # emulation prevention bytes: not read here
    bits = int.from_bytes(raw, "big")
    width = 8 * len(raw)
    pos = 0
    values = []
    for _ in range(2):
        zeros = 0
        while pos < width and not (bits >> (width - 1 - pos)) & 1:
            zeros += 1
            pos += 1
        if pos + zeros + 1 > width:
            return None
        value = (bits >> (width - pos - zeros - 1)) & ((1 << (zeros + 1)) - 1)
        values.append(value - 1)
        pos += zeros + 1
    return values[1]


def _droppable(mv: memoryview, samples: _Samples, codec: str, nal, keep: np.ndarray  # type: ignore[no-untyped-def]
               ) -> np.ndarray:
    """Which samples of ``keep`` no other frame references: all of an all-intra codec's; the
    H.264 pictures whose slices all have ``nal_ref_idc`` 0 and that carry no parameter sets."""
    if codec == "mjpeg":
        return np.ones(len(keep), dtype=bool)
    out = np.zeros(len(keep), dtype=bool)
    if codec != "h264":
        return out
    for j, s in enumerate(keep.tolist()):
        types, refs, _starts = nal(mv, int(samples.offsets[s]), int(samples.sizes[s]))
        slices = [r for t, r in zip(types, refs, strict=True) if t in (1, 5)]
        out[j] = bool(slices) and not any(slices) and not ({5, 7, 8} & set(types))
    return out


def _nal_reader(mv: memoryview, stbl: tuple[int, int], codec: str):  # type: ignore[no-untyped-def]
    """For H.264 and HEVC, a function giving a sample's NAL unit types, ``nal_ref_idc`` values
    and NAL payload positions (HEVC: its IDR types reported as 5, H.264's; others as 100 +
    type); None for other codecs. A sample it cannot walk gives empty lists: neither an IDR
    nor droppable. ``_never`` (nothing is an IDR) when the sample description holds no
    parameter sets."""
    if codec not in ("h264", "hevc"):
        return None
    s, _e = _find(mv, *stbl, (b"stsd",))
    # stsd: full box header, entry count, then the sample entry: size, type, 78 bytes of
    # visual sample entry fields, then its boxes (avcC, hvcC, ...).
    entry = s + 8
    (entry_size,) = struct.unpack_from(">I", mv, entry)
    conf = {kind: (s2, e2) for kind, s2, e2 in _boxes(mv, entry + 86, entry + entry_size)}
    if codec == "h264":
        if b"avcC" not in conf or not _avcc_has_sets(mv, *conf[b"avcC"]):
            return _never
        length_size = (mv[conf[b"avcC"][0] + 4] & 3) + 1
        hevc = False
    else:
        if b"hvcC" not in conf or not _hvcc_has_sets(mv, *conf[b"hvcC"]):
            return _never
        length_size = (mv[conf[b"hvcC"][0] + 21] & 3) + 1
        hevc = True

    def units(buf: memoryview, offset: int, size: int) -> tuple[list[int], list[int], list[int]]:
        types: list[int] = []
        refs: list[int] = []
        starts: list[int] = []
        i, end = offset, offset + size
        while i + length_size < end:
            length = int.from_bytes(buf[i:i + length_size], "big")
            i += length_size
            if length == 0 or i + length > end:
                return [], [], []
            starts.append(i)
            head = buf[i]
            if hevc:
                t = (head >> 1) & 0x3F
                types.append(5 if t in (19, 20) else 100 + t)  # never an H.264 type
                refs.append(1)
            else:
                types.append(head & 0x1F)
                refs.append((head >> 5) & 3)
            i += length
        return types, refs, starts

    return units


def _never(buf: memoryview, offset: int, size: int) -> tuple[list[int], list[int], list[int]]:
    return [], [], []


def _avcc_has_sets(mv: memoryview, s: int, e: int) -> bool:
    """Whether an avcC record holds at least one SPS and one PPS."""
    if e - s < 7 or not mv[s + 5] & 0x1F:
        return False
    i = s + 6
    for _ in range(mv[s + 5] & 0x1F):
        if i + 2 > e:
            return False
        i += 2 + int.from_bytes(mv[i:i + 2], "big")
    return i < e and mv[i] > 0


def _hvcc_has_sets(mv: memoryview, s: int, e: int) -> bool:
    """Whether an hvcC record holds a VPS, an SPS and a PPS."""
    if e - s < 23:
        return False
    i, found = s + 23, set()
    for _ in range(mv[s + 22]):
        if i + 3 > e:
            return False
        kind, count = mv[i] & 0x3F, int.from_bytes(mv[i + 1:i + 3], "big")
        i += 3
        for _ in range(count):
            if i + 2 > e:
                return False
            i += 2 + int.from_bytes(mv[i:i + 2], "big")
        if count:
            found.add(kind)
    return {32, 33, 34} <= found


def _patch_duration(payload: bytes, at_v0: int, at_v1: int, value: int) -> bytes:
    b = bytearray(payload)
    if b[0] == 1:
        struct.pack_into(">Q", b, at_v1, value)
    else:
        struct.pack_into(">I", b, at_v0, min(value, 0xFFFFFFFF))
    return bytes(b)


def _runs(values: np.ndarray) -> np.ndarray:
    """(count, value) rows of the runs of equal values, as stts and ctts store them."""
    change = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], change])
    counts = np.diff(np.append(starts, len(values)))
    return np.stack([counts, values[starts]], axis=1)


def _table(kind: bytes, rows: np.ndarray, version: int = 0, signed: bool = False) -> bytes:
    rows = np.asarray(rows, dtype=np.int64)
    body = rows.astype(">i4" if signed else ">u4").tobytes()
    count = len(rows)
    return _box(kind, struct.pack(">BxxxI", version, count) + body)


def _mp4_write(mv: memoryview, ftyp: tuple[int, int] | None, moov: tuple[int, int],
               trak: tuple[int, int], stbl: tuple[int, int], samples: _Samples,
               keep: np.ndarray) -> bytes:
    """An MP4 holding the video track's samples ``keep`` (decode positions, ascending), one
    chunk, each at its original decode and presentation time (less the first's decode time)."""
    sizes, offsets = samples.sizes[keep], samples.offsets[keep]
    deltas = np.append(np.diff(samples.dts[keep]), samples.deltas[keep][-1])
    media_duration = int(deltas.sum())

    movie_scale, media_scale = _scales(mv, moov, trak)
    mvhd = bytes(mv[slice(*_find(mv, *moov, (b"mvhd",)))])
    movie_duration = media_duration * movie_scale // media_scale

    stbl_boxes = {kind: (s, e) for kind, s, e in _boxes(mv, *stbl)}
    parts = [_box(b"stsd", bytes(mv[slice(*stbl_boxes[b"stsd"])])),
             _table(b"stts", _runs(deltas))]
    if samples.ctts is not None:
        parts.append(_table(b"ctts", _runs(samples.ctts[keep]), samples.ctts_version,
                            signed=True))
    if samples.sync is not None:
        parts.append(_table(b"stss", (np.flatnonzero(samples.sync[keep]) + 1)[:, None]))
    parts.append(_box(b"stsz", struct.pack(">BxxxII", 0, 0, len(sizes))
                      + sizes.astype(">u4").tobytes()))
    parts.append(_table(b"stsc", np.array([[1, len(sizes), 1]])))
    chunk_at = len(parts)
    parts.append(b"")  # stco, once the moov's size is known

    def moov_bytes(chunk_offset: int) -> bytes:
        parts[chunk_at] = _table(b"stco", np.array([[chunk_offset]]))
        new_stbl = _box(b"stbl", b"".join(parts))
        minf = b""
        for kind, s, e in _boxes(mv, *_find(mv, *trak, (b"mdia", b"minf"))):
            if kind in (b"vmhd", b"dinf"):
                minf += _box(kind, bytes(mv[s:e]))
        minf += new_stbl
        mdia = b""
        for kind, s, e in _boxes(mv, *_find(mv, *trak, (b"mdia",))):
            if kind == b"mdhd":
                mdia += _box(kind, _patch_duration(bytes(mv[s:e]), 16, 24, media_duration))
            elif kind == b"hdlr":
                mdia += _box(kind, bytes(mv[s:e]))
        mdia += _box(b"minf", minf)
        tkhd_s, tkhd_e = _find(mv, *trak, (b"tkhd",))
        tkhd = _box(b"tkhd", _patch_duration(bytes(mv[tkhd_s:tkhd_e]), 20, 28, movie_duration))
        new_trak = _box(b"trak", tkhd + _box(b"mdia", mdia))
        return _box(b"moov", _box(b"mvhd", _patch_duration(mvhd, 16, 24, movie_duration))
                    + new_trak)

    head = _box(b"ftyp", bytes(mv[slice(*ftyp)])) if ftyp else _box(
        b"ftyp", b"isom\x00\x00\x02\x00isomiso2mp41")
    size = len(moov_bytes(0))
    payload_at = len(head) + size + 8
    moov_out = moov_bytes(payload_at)
    body = b"".join(bytes(mv[o:o + z]) for o, z in zip(offsets.tolist(), sizes.tolist(),
                                                         strict=True))
    if 8 + len(body) > 0xFFFFFFFF:
        raise ValueError("window too large for a 32-bit mdat")
    return head + moov_out + struct.pack(">I4s", 8 + len(body), b"mdat") + body
