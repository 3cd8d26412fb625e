"""What a video file holds, read from its container headers: codec, frame count, frame size.

:func:`probe_video` walks the container's structure without decoding a frame, in pure Python
(no FFmpeg, OpenCV or PyAV), so that :class:`~extsrc.sources.video.source.VideoSource` can choose
every clip's first frame in DALI's worker processes from the bytes it already read, and
:func:`extsrc.validation.videos.check_video` can refuse a file before DALI sees it. Three container
families are read:

* AVI (RIFF): the video stream's ``strf`` compression tag, and its frames counted chunk by
  chunk in the ``movi`` lists (OpenDML ``AVIX`` extensions included; empty chunks, dropped
  frames, are skipped as DALI skips them). The count used is the smaller of that and the
  ``strh`` length: DALI takes the header's length as the frame count, so frames past the
  chunks the file holds would come back black or as other frames, and frames past the
  header's length come back as the last one repeated;
* Matroska and WebM (EBML): the video track's ``CodecID``, and its frames counted block by block
  in the clusters (block payloads are skipped, not read; blocks without frame data are not
  counted, as DALI skips them; the ``Duration`` is not used);
* MP4 and MOV (ISO base media): the video track's ``stsd`` sample entry and ``stsz`` sample
  count (fragmented files: the ``trun`` sample counts of its ``moof`` boxes); every sample's
  data must lie inside the file (``stsc`` and ``stco``/``co64``).

A file whose structure declares more bytes than it has (a copy cut short), or whose sample
table points past its end, is ``truncated``; DALI's decoder would otherwise return fewer
frames, or fail on the first missing one.
A problem is a :class:`VideoProbeProblem` carrying a reason code of :data:`VIDEO_REASONS`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CODEC_NAMES",
    "CPU_CODECS",
    "GPU_CODECS",
    "VIDEO_EXTENSIONS",
    "VIDEO_REASONS",
    "VideoInfo",
    "VideoProbeProblem",
    "probe_video",
    "video_frames",
]

#: Codecs DALI 2.4's ``fn.decoders.video`` decodes on the CPU (libavcodec).
CPU_CODECS: frozenset[str] = frozenset({"vp8", "vp9", "mjpeg"})
#: Codecs it decodes with ``device="mixed"`` (NVDEC), a GPU being present.
GPU_CODECS: frozenset[str] = frozenset({"vp8", "vp9", "mjpeg", "h264", "hevc", "av1", "mpeg4"})
#: Human names of the codec codes, for messages.
CODEC_NAMES: dict[str, str] = {
    "vp8": "VP8", "vp9": "VP9", "mjpeg": "Motion JPEG", "h264": "H.264/AVC",
    "hevc": "H.265/HEVC", "av1": "AV1", "mpeg4": "MPEG-4 Part 2",
}
#: File name extensions of the containers :func:`probe_video` reads (folder datasets).
VIDEO_EXTENSIONS: tuple[str, ...] = (".avi", ".mkv", ".webm", ".mp4", ".m4v", ".mov")

#: Reason codes of a :class:`VideoProbeProblem`: what it means, how to fix it.
VIDEO_REASONS: dict[str, tuple[str, str]] = {
    "not_video": ("the file is not a video container extsrc reads (AVI, Matroska/WebM, MP4/MOV)",
                  "list video files only, or re-mux it, e.g. ffmpeg -i IN -c copy OUT.mkv"),
    "truncated": ("the container declares more data than the file holds (cut short)",
                  "copy the video again or re-encode it (e.g. ffmpeg -i IN -c:v libvpx-vp9 "
                  "OUT.webm), or drop the line"),
    "no_video_track": ("the container holds no video track",
                       "list video files only, or drop the line (an audio-only file?)"),
    "no_frames": ("the video track holds no frames",
                  "re-encode the video (e.g. ffmpeg -i IN -c:v libvpx-vp9 OUT.webm) or drop "
                  "the line"),
    "unsupported_codec": (
        "DALI cannot decode this codec on the loader's device",
        "re-encode it, e.g. ffmpeg -i IN -c:v libvpx-vp9 OUT.webm (VP9 decodes on the CPU and "
        "the GPU), or load on a GPU (H.264, HEVC, AV1, MPEG-4)",
    ),
    "corrupt": ("DALI's video decoder refuses the file's frame data",
                "re-encode the video from its source (ffmpeg -i IN -c:v libvpx-vp9 OUT.webm) "
                "or drop the line"),
    "too_small_for_gpu": ("the frames are smaller than the GPU's video decoder (NVDEC) takes",
                          "load these videos with device='cpu' (VP8, VP9, Motion JPEG), "
                          "re-encode them larger, or drop the lines"),
    "too_short": ("the video has fewer frames than one clip spans",
                  "use a shorter sequence_length or stride, pass short_videos='pad', or drop "
                  "the line"),
}


class VideoProbeProblem(Exception):
    """Why a file cannot be read as a video: ``reason`` (a code of :data:`VIDEO_REASONS`) and
    ``message`` (what is wrong; the caller adds the manifest line and the path)."""

    def __init__(self, reason: str, message: str, codec: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: The video's codec, when the problem is about it (``unsupported_codec``).
        self.codec = codec

    @property
    def fix(self) -> str:
        return VIDEO_REASONS[self.reason][1]


@dataclass(frozen=True)
class VideoInfo:
    """One video file's container (``"avi"``, ``"matroska"``, ``"mp4"``), the codec of its
    first video track (a key of :data:`CODEC_NAMES`, else the container's own tag as found),
    its frame count and frame size in pixels (0 where the container does not say)."""

    container: str
    codec: str
    num_frames: int
    width: int = 0
    height: int = 0

    @property
    def codec_name(self) -> str:
        return CODEC_NAMES.get(self.codec, repr(self.codec))


def probe_video(data: bytes | memoryview) -> VideoInfo:
    """The :class:`VideoInfo` of a whole video file's bytes; :class:`VideoProbeProblem` when
    it is not a video extsrc reads, is truncated, has no video track or no frames."""
    return _probe(data, None)


def video_frames(data: bytes | memoryview) -> list[tuple[int, int]] | None:
    """``(offset, size)`` of the data of each frame of the video track, in the order the file
    stores them, for AVI and Matroska/WebM files; ``None`` for MP4/MOV and for Matroska blocks
    that hold several frames (lacing). :class:`VideoProbeProblem` as :func:`probe_video`."""
    ranges: list[tuple[int, int]] = []
    info = _probe(data, ranges)
    if info.container == "mp4" or len(ranges) < info.num_frames:
        return None
    return ranges[:info.num_frames]  # an AVI's frames past its header's length are not read


def _probe(data: bytes | memoryview, ranges: list[tuple[int, int]] | None) -> VideoInfo:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    head = bytes(mv[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        info = _probe_avi(mv, ranges)
    elif head[:4] == b"\x1a\x45\xdf\xa3":
        info = _probe_matroska(mv, ranges)
    elif head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot"):
        info = _probe_mp4(mv)
    else:
        raise VideoProbeProblem(
            "not_video",
            f"not a video container extsrc reads (AVI, Matroska/WebM, MP4/MOV); the file starts "
            f"with {head[:8]!r}",
        )
    if info.num_frames <= 0:
        raise VideoProbeProblem("no_frames", f"its {info.container} video track holds no frames")
    return info


def _truncated(what: str, end: int, size: int) -> VideoProbeProblem:
    return VideoProbeProblem(
        "truncated",
        f"truncated: its {what} declares {end:,} bytes but the file has {size:,}",
    )


# -- AVI -------------------------------------------------------------------------------------------
_AVI_CODECS = {
    b"MJPG": "mjpeg", b"mjpg": "mjpeg", b"AVRN": "mjpeg", b"LJPG": "mjpeg",
    b"H264": "h264", b"h264": "h264", b"X264": "h264", b"x264": "h264", b"avc1": "h264",
    b"AVC1": "h264", b"HEVC": "hevc", b"H265": "hevc", b"hev1": "hevc", b"hvc1": "hevc",
    b"VP80": "vp8", b"VP90": "vp9", b"AV01": "av1", b"av01": "av1",
    b"XVID": "mpeg4", b"xvid": "mpeg4", b"DIVX": "mpeg4", b"divx": "mpeg4", b"DX50": "mpeg4",
    b"FMP4": "mpeg4", b"fmp4": "mpeg4", b"mp4v": "mpeg4", b"MP4V": "mpeg4",
}


def _avi_chunks(mv: bytes | memoryview, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """(fourcc, payload start, payload end, list type or None) of the chunks in [lo, hi)."""
    i = lo
    while i + 8 <= hi:
        fourcc = bytes(mv[i:i + 4])
        (size,) = struct.unpack_from("<I", mv, i + 4)
        start, end = i + 8, i + 8 + size
        if end > len(mv):
            raise _truncated(f"AVI chunk {fourcc!r}", end, len(mv))
        kind = bytes(mv[start:start + 4]) if fourcc in (b"LIST", b"RIFF") else None
        yield fourcc, start, end, kind
        i = end + (size & 1)  # chunks are padded to an even size


def _probe_avi(mv: bytes | memoryview, ranges: list[tuple[int, int]] | None) -> VideoInfo:
    (riff_size,) = struct.unpack_from("<I", mv, 4)
    if 8 + riff_size > len(mv):
        raise _truncated("RIFF header", 8 + riff_size, len(mv))
    width = height = 0
    streams: list[tuple[bytes, bytes, int, tuple[int, int]]] = []  # kind, tag, length, size
    movi: list[tuple[int, int]] = []
    for fourcc, start, end, kind in _avi_chunks(mv, 12, 8 + riff_size):
        if fourcc == b"LIST" and kind == b"movi":
            movi.append((start + 4, end))
        if fourcc != b"LIST" or kind != b"hdrl" or streams:
            continue
        for f2, s2, e2, k2 in _avi_chunks(mv, start + 4, end):
            if f2 == b"avih" and e2 - s2 >= 40:
                width, height = struct.unpack_from("<II", mv, s2 + 32)
            if f2 != b"LIST" or k2 != b"strl":
                continue
            kind3, tag, length, size = b"", b"", 0, (width, height)
            for f3, s3, e3, _ in _avi_chunks(mv, s2 + 4, e2):
                if f3 == b"strh" and e3 - s3 >= 36:
                    kind3 = bytes(mv[s3:s3 + 4])
                    tag = tag or bytes(mv[s3 + 4:s3 + 8])  # the handler, unless strf says
                    (length,) = struct.unpack_from("<I", mv, s3 + 32)
                elif f3 == b"strf" and e3 - s3 >= 20:
                    tag = bytes(mv[s3 + 16:s3 + 20])  # BITMAPINFOHEADER.biCompression
                    w, h = struct.unpack_from("<ii", mv, s3 + 4)
                    size = (abs(w), abs(h))
            streams.append((kind3, tag, length, size))
    # OpenDML files continue in further RIFF 'AVIX' chunks, each with a movi list of its own;
    # other bytes after the first RIFF chunk (padding, junk) are not part of the file's data.
    i = 8 + riff_size + (riff_size & 1)
    while i + 12 <= len(mv) and (bytes(mv[i:i + 4]), bytes(mv[i + 8:i + 12])) == (b"RIFF",
                                                                                   b"AVIX"):
        ((_, start, end, _),) = list(_avi_chunks(mv, i, i + 8))
        for f2, s2, e2, k2 in _avi_chunks(mv, start + 4, end):
            if f2 == b"LIST" and k2 == b"movi":
                movi.append((s2 + 4, e2))
        i = end + ((end - start) & 1)
    for number, (kind3, tag, length, size) in enumerate(streams):
        if kind3 != b"vids":
            continue
        codec = _AVI_CODECS.get(tag) or tag.decode("latin-1").strip("\x00 ") or "?"
        ids = (b"%02ddc" % number, b"%02ddb" % number)
        held = sum(_avi_frames(mv, lo, hi, ids, ranges) for lo, hi in movi)
        # DALI decodes the header's length of frames: past the chunks held it returns black
        # or repeated frames, past the length the last frame; only both are read faithfully.
        frames = min(held, length) if length > 0 else held
        return VideoInfo("avi", codec, frames, int(size[0]), int(size[1]))
    found = ", ".join(_AVI_KINDS.get(k, repr(k)) for k, *_ in streams) or "none"
    raise VideoProbeProblem(
        "no_video_track", f"no video track: its AVI headers list no video stream ('vids'); "
        f"streams found: {found}")


_AVI_KINDS = {b"auds": "audio", b"txts": "text", b"mids": "MIDI", b"vids": "video"}


def _avi_frames(mv: bytes | memoryview, lo: int, hi: int, ids: tuple[bytes, ...],
                ranges: list[tuple[int, int]] | None) -> int:
    """Chunks with one of ``ids`` (a stream's data chunks) and data in a movi list [lo, hi),
    and in the ``rec `` lists it holds; their (offset, size) appended to ``ranges`` unless it
    is None. An empty chunk (a dropped frame, which players show as the previous one) is no
    frame to DALI: it numbers the frames after it as if it were not there."""
    count = 0
    for fourcc, start, end, kind in _avi_chunks(mv, lo, hi):
        if fourcc in ids and end > start:
            count += 1
            if ranges is not None:
                ranges.append((start, end - start))
        elif fourcc == b"LIST" and kind == b"rec ":
            count += _avi_frames(mv, start + 4, end, ids, ranges)
    return count


# -- Matroska / WebM ---------------------------------------------------------------------------
_SEGMENT, _CLUSTER, _TRACKS, _TRACK_ENTRY = 0x18538067, 0x1F43B675, 0x1654AE6B, 0xAE
_TRACK_NUMBER, _TRACK_TYPE, _CODEC_ID, _CODEC_PRIVATE = 0xD7, 0x83, 0x86, 0x63A2
_VIDEO, _PIXEL_W, _PIXEL_H = 0xE0, 0xB0, 0xBA
_SIMPLE_BLOCK, _BLOCK_GROUP, _BLOCK = 0xA3, 0xA0, 0xA1
#: Elements that may follow a cluster of unknown size at the segment level: they end it.
_SEGMENT_CHILDREN = {0x114D9B74, 0x1549A966, _TRACKS, _CLUSTER, 0x1C53BB6B, 0x1941A469,
                     0x1043A770, 0x1254C367}
_MKV_CODECS = {
    "V_VP8": "vp8", "V_VP9": "vp9", "V_MJPEG": "mjpeg", "V_AV1": "av1",
    "V_MPEG4/ISO/AVC": "h264", "V_MPEGH/ISO/HEVC": "hevc", "V_MPEG4/ISO/SP": "mpeg4",
    "V_MPEG4/ISO/ASP": "mpeg4", "V_MPEG4/ISO/AP": "mpeg4",
}
_UNKNOWN = -1


def _vint(mv: bytes | memoryview, i: int, end: int, keep_marker: bool) -> tuple[int, int]:
    """An EBML variable-length integer at ``i``: (value, next position); ``_UNKNOWN`` for a
    size of all ones (an element of unknown size)."""
    if i >= end:
        raise _truncated("Matroska element header", i + 1, end)
    first = mv[i]
    if first == 0:
        raise VideoProbeProblem("not_video", f"invalid Matroska element header at byte {i:,}")
    n = 8 - first.bit_length() + 1
    if i + n > end:
        raise _truncated("Matroska element header", i + n, end)
    value = first if keep_marker else first & ((1 << (8 - n)) - 1)
    for k in range(1, n):
        value = (value << 8) | mv[i + k]
    if not keep_marker and value == (1 << (7 * n)) - 1:
        value = _UNKNOWN
    return value, i + n


def _ebml(mv: bytes | memoryview, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """(id, payload start, payload end or _UNKNOWN) of the elements in [lo, hi)."""
    i = lo
    while i < hi:
        eid, j = _vint(mv, i, hi, keep_marker=True)
        size, start = _vint(mv, j, hi, keep_marker=False)
        end = _UNKNOWN if size == _UNKNOWN else start + size
        if end != _UNKNOWN and end > len(mv):
            raise _truncated(f"Matroska element 0x{eid:X}", end, len(mv))
        yield eid, start, end
        if end == _UNKNOWN:
            return  # the caller walks an element of unknown size itself
        i = end


def _uint(mv: bytes | memoryview, lo: int, hi: int) -> int:
    return int.from_bytes(bytes(mv[lo:hi]), "big")


def _probe_matroska(mv: bytes | memoryview, ranges: list[tuple[int, int]] | None
                    ) -> VideoInfo:
    n = len(mv)
    seg = None
    for eid, start, end in _ebml(mv, 0, n):
        if eid == _SEGMENT:
            seg = (start, n if end == _UNKNOWN else end)
            break
    if seg is None:
        raise VideoProbeProblem("not_video", "an EBML file without a Matroska Segment")
    track: dict[str, object] | None = None
    others: list[str] | None = None  # the tracks that are not video, once the list is read
    frames = 0
    i, seg_end = seg
    while i < seg_end:
        eid, j = _vint(mv, i, seg_end, keep_marker=True)
        size, start = _vint(mv, j, seg_end, keep_marker=False)
        end = seg_end if size == _UNKNOWN else start + size
        if end > n:
            raise _truncated(f"Matroska element 0x{eid:X}", end, n)
        if eid == _TRACKS and track is None:
            track, seen = _video_track(mv, start, end)
            others = (others or []) + seen
        elif eid == _CLUSTER:
            if track is None and others is None:
                raise VideoProbeProblem("no_video_track",
                                        "a Matroska cluster comes before the track list")
            if track is not None:
                count, end = _count_blocks(mv, start, end, int(track["number"]),  # type: ignore[call-overload]
                                           unknown=size == _UNKNOWN, ranges=ranges)
                frames += count
            elif size == _UNKNOWN:  # no video to count: find where the cluster ends
                end = _count_blocks(mv, start, end, -1, unknown=True)[1]
        i = end
    if track is None:
        raise VideoProbeProblem(
            "no_video_track", "no video track: its Matroska tracks list no video track; "
            f"tracks found: {', '.join(others or []) or 'none'}")
    codec_id = str(track.get("codec_id", ""))
    codec = _MKV_CODECS.get(codec_id, codec_id or "?")
    if codec_id == "V_MS/VFW/FOURCC":
        tag = bytes(track.get("private", b""))[16:20]  # type: ignore[call-overload]
        codec = _AVI_CODECS.get(tag) or tag.decode("latin-1").strip("\x00 ") or "?"
    w, h = track.get("width", 0), track.get("height", 0)
    return VideoInfo("matroska", codec, frames, int(w), int(h))  # type: ignore[call-overload]


#: Matroska TrackType values, for messages.
_MKV_TYPES = {1: "video", 2: "audio", 3: "complex", 0x10: "logo", 0x11: "subtitle",
              0x12: "buttons", 0x20: "control", 0x21: "metadata"}


def _video_track(
    mv: bytes | memoryview, lo: int, hi: int
) -> tuple[dict[str, object] | None, list[str]]:
    """The first video track entry of a Tracks element [lo, hi) (None if it lists none), and
    the tracks before it, described as ``"audio (A_OPUS)"``."""
    seen: list[str] = []
    for eid, start, end in _ebml(mv, lo, hi):
        if eid != _TRACK_ENTRY or end == _UNKNOWN:
            continue
        entry: dict[str, object] = {}
        for e2, s2, x2 in _ebml(mv, start, end):
            if x2 == _UNKNOWN:
                break
            if e2 == _TRACK_NUMBER:
                entry["number"] = _uint(mv, s2, x2)
            elif e2 == _TRACK_TYPE:
                entry["type"] = _uint(mv, s2, x2)
            elif e2 == _CODEC_ID:
                entry["codec_id"] = bytes(mv[s2:x2]).rstrip(b"\x00").decode("ascii", "replace")
            elif e2 == _CODEC_PRIVATE:
                entry["private"] = bytes(mv[s2:x2])
            elif e2 == _VIDEO:
                for e3, s3, x3 in _ebml(mv, s2, x2):
                    if e3 == _PIXEL_W and x3 != _UNKNOWN:
                        entry["width"] = _uint(mv, s3, x3)
                    elif e3 == _PIXEL_H and x3 != _UNKNOWN:
                        entry["height"] = _uint(mv, s3, x3)
        if entry.get("type") == 1 and "number" in entry:
            return entry, seen
        kind = entry.get("type")
        seen.append(f"{_MKV_TYPES.get(kind, f'type {kind}')} "  # type: ignore[arg-type]
                    f"({entry.get('codec_id', '?')})")
    return None, seen


def _block_frames(mv: bytes | memoryview, lo: int, hi: int, track: int,
                  ranges: list[tuple[int, int]] | None = None) -> int:
    """Frames a (Simple)Block at [lo, hi) holds for ``track``: 0 for another track; the
    (offset, size) of an unlaced block's frame appended to ``ranges`` unless it is None."""
    number, i = _vint(mv, lo, hi, keep_marker=False)
    if number != track:
        return 0
    if i + 3 > hi:
        raise _truncated("Matroska block header", i + 3, hi)
    flags = mv[i + 2]
    laced = flags & 0x06
    if not laced:
        if hi == i + 3:
            return 0  # no frame data: DALI numbers the frames after it as if it were not there
        if ranges is not None:
            ranges.append((i + 3, hi - i - 3))
        return 1
    if i + 4 > hi:
        raise _truncated("Matroska block lacing header", i + 4, hi)
    return int(mv[i + 3]) + 1


def _count_blocks(
    mv: bytes | memoryview, lo: int, hi: int, track: int, *, unknown: bool,
    ranges: list[tuple[int, int]] | None = None,
) -> tuple[int, int]:
    """Frames of ``track`` in a cluster [lo, hi), and where the cluster ends (a cluster of
    unknown size ends at the next segment-level element)."""
    count = 0
    i = lo
    while i < hi:
        eid, j = _vint(mv, i, hi, keep_marker=True)
        if unknown and eid in _SEGMENT_CHILDREN:
            return count, i
        size, start = _vint(mv, j, hi, keep_marker=False)
        if size == _UNKNOWN:
            raise VideoProbeProblem("not_video", "a Matroska block of unknown size")
        end = start + size
        if end > len(mv):
            raise _truncated("Matroska block", end, len(mv))
        if eid == _SIMPLE_BLOCK:
            count += _block_frames(mv, start, end, track, ranges)
        elif eid == _BLOCK_GROUP:
            for e2, s2, x2 in _ebml(mv, start, end):
                if e2 == _BLOCK and x2 != _UNKNOWN:
                    count += _block_frames(mv, s2, x2, track, ranges)
        i = end
    return count, hi


# -- MP4 / MOV -------------------------------------------------------------------------------------
_MP4_CODECS = {
    b"avc1": "h264", b"avc3": "h264", b"hvc1": "hevc", b"hev1": "hevc", b"av01": "av1",
    b"vp08": "vp8", b"vp09": "vp9", b"mp4v": "mpeg4", b"mjpa": "mjpeg", b"mjpb": "mjpeg",
    b"jpeg": "mjpeg", b"AVdn": "?", b"dvh1": "hevc", b"dvhe": "hevc",
}


def _boxes(mv: bytes | memoryview, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """(type, payload start, payload end) of the ISO boxes in [lo, hi)."""
    i = lo
    while i + 8 <= hi:
        size, kind = struct.unpack_from(">I4s", mv, i)
        start = i + 8
        if size == 1:
            if i + 16 > len(mv):
                raise _truncated("MP4 box header", i + 16, len(mv))
            (size,) = struct.unpack_from(">Q", mv, i + 8)
            start = i + 16
        elif size == 0:
            size = hi - i
        end = i + size
        if size < start - i:
            raise VideoProbeProblem("not_video", f"an MP4 box {kind!r} of invalid size {size}")
        if end > len(mv):
            raise _truncated(f"MP4 box {kind!r}", end, len(mv))
        yield kind, start, end
        i = end


def _probe_mp4(mv: bytes | memoryview) -> VideoInfo:
    moov = None
    moofs = []
    for kind, start, end in _boxes(mv, 0, len(mv)):
        if kind == b"moov":
            moov = (start, end)
        elif kind == b"moof":
            moofs.append((start, end))
    if moov is None:
        raise VideoProbeProblem(
            "truncated", "its MP4 structure has no 'moov' box (a recording that was never "
            "finalised, or a copy cut short)"
        )
    others: list[str] = []
    for kind, start, end in _boxes(mv, *moov):
        if kind != b"trak":
            continue
        track = _mp4_track(mv, start, end)
        if track is None:
            others.append(_mp4_track_kind(mv, start, end))
            continue
        track_id, codec, count, w, h = track
        if moofs:  # fragmented: the samples are listed in the fragments' runs
            count += sum(_fragment_samples(mv, lo, hi, track_id) for lo, hi in moofs)
        else:
            _check_sample_data(mv, start, end, count)
        return VideoInfo("mp4", codec, count, w, h)
    raise VideoProbeProblem(
        "no_video_track", "no video track: its MP4 tracks hold no video ('vide') track; "
        f"tracks found: {', '.join(others) or 'none'}")


_MP4_HANDLERS = {b"soun": "audio", b"vide": "video", b"hint": "hint", b"text": "text",
                 b"sbtl": "subtitle", b"subt": "subtitle", b"meta": "metadata", b"tmcd": "timecode"}


def _mp4_track_kind(mv: bytes | memoryview, lo: int, hi: int) -> str:
    """A ``trak`` that is not video, described as ``"audio (mp4a)"``, for messages."""
    s, e = _find(mv, lo, hi, (b"mdia", b"hdlr"))
    handler = bytes(mv[s + 8:s + 12]) if s >= 0 and e - s >= 12 else b"?"
    ss, se = _find(mv, lo, hi, (b"mdia", b"minf", b"stbl", b"stsd"))
    tag = bytes(mv[ss + 12:ss + 16]).decode("latin-1") if ss >= 0 and se - ss >= 16 else "?"
    return f"{_MP4_HANDLERS.get(handler, repr(handler))} ({tag.strip()})"


def _check_sample_data(mv: bytes | memoryview, lo: int, hi: int, count: int) -> None:
    """Refuse a video ``trak`` [lo, hi) whose sample table places sample data past the end of
    the file (the ``mdat`` of a copy cut short, when its box size does not say so): DALI would
    fail or return fewer frames there. Tables this does not read (``stz2``) are not checked."""
    stbl = _find(mv, lo, hi, (b"mdia", b"minf", b"stbl"))
    if stbl[0] < 0 or count <= 0:
        return
    boxes = {kind: (s, e) for kind, s, e in _boxes(mv, *stbl)}
    co = boxes.get(b"co64") or boxes.get(b"stco")
    if b"stsz" not in boxes or b"stsc" not in boxes or co is None:
        return
    wide = b"co64" in boxes
    zs, ze = boxes[b"stsz"]
    if ze - zs < 12:
        return
    size, n = struct.unpack_from(">II", mv, zs + 4)
    if n != count or (size == 0 and ze - zs < 12 + 4 * n):
        return
    sizes = (np.full(n, size, dtype=np.int64) if size else
             np.frombuffer(mv, ">u4", n, zs + 12).astype(np.int64))
    cs, ce = boxes[b"stsc"]
    (runs_n,) = struct.unpack_from(">I", mv, cs + 4) if ce - cs >= 8 else (0,)
    (chunks,) = struct.unpack_from(">I", mv, co[0] + 4) if co[1] - co[0] >= 8 else (0,)
    if (runs_n == 0 or chunks == 0 or ce - cs < 8 + 12 * runs_n
            or co[1] - co[0] < 8 + (8 if wide else 4) * chunks):
        return
    runs = np.frombuffer(mv, ">u4", 3 * runs_n, cs + 8).reshape(runs_n, 3).astype(np.int64)
    offsets = np.frombuffer(mv, ">u8" if wide else ">u4", chunks, co[0] + 8).astype(np.int64)
    firsts = runs[:, 0] - 1
    if firsts[0] != 0 or np.any(np.diff(firsts) <= 0) or firsts[-1] >= chunks:
        return
    per_chunk = np.repeat(runs[:, 1], np.diff(np.append(firsts, chunks)))
    chunk_end = np.cumsum(per_chunk)  # one past each chunk's last sample
    if int(chunk_end[-1]) < n:
        return
    chunk_of = np.searchsorted(chunk_end, np.arange(n), side="right")
    ends = np.cumsum(sizes)
    within = ends - (ends - sizes)[(chunk_end - per_chunk)[chunk_of]]  # end within its chunk
    sample_end = offsets[chunk_of] + within
    past = int(np.count_nonzero(sample_end > len(mv)))
    if past:
        raise VideoProbeProblem(
            "truncated",
            f"truncated: its sample table lists {n:,} frames, but the data of {past:,} of them "
            f"lies past the end of the file ({int(sample_end.max()):,} bytes needed, the file "
            f"has {len(mv):,})",
        )


def _find(mv: bytes | memoryview, lo: int, hi: int, path: tuple[bytes, ...]) -> tuple[int, int]:
    for kind, start, end in _boxes(mv, lo, hi):
        if kind == path[0]:
            return (start, end) if len(path) == 1 else _find(mv, start, end, path[1:])
    return (-1, -1)


def _mp4_track(
    mv: bytes | memoryview, lo: int, hi: int
) -> tuple[int, str, int, int, int] | None:
    """(track id, codec, sample count, width, height) of a video ``trak``; None otherwise."""
    s, e = _find(mv, lo, hi, (b"mdia", b"hdlr"))
    if s < 0 or e - s < 12 or bytes(mv[s + 8:s + 12]) != b"vide":
        return None
    ts, _ = _find(mv, lo, hi, (b"tkhd",))
    track_id = 0
    if ts >= 0:
        version = mv[ts]
        (track_id,) = struct.unpack_from(">I", mv, ts + (20 if version == 1 else 12))
    ss, se = _find(mv, lo, hi, (b"mdia", b"minf", b"stbl", b"stsd"))
    codec, w, h = "?", 0, 0
    if ss >= 0 and se - ss >= 16 + 36:
        entry = ss + 8
        tag = bytes(mv[entry + 4:entry + 8])
        codec = _MP4_CODECS.get(tag) or tag.decode("latin-1").strip("\x00 ")
        w, h = struct.unpack_from(">HH", mv, entry + 32)
    count = 0
    zs, ze = _find(mv, lo, hi, (b"mdia", b"minf", b"stbl", b"stsz"))
    if zs >= 0 and ze - zs >= 12:
        (count,) = struct.unpack_from(">I", mv, zs + 8)
    else:
        zs, ze = _find(mv, lo, hi, (b"mdia", b"minf", b"stbl", b"stz2"))
        if zs >= 0 and ze - zs >= 12:
            (count,) = struct.unpack_from(">I", mv, zs + 8)
    return track_id, codec, count, w, h


def _fragment_samples(mv: bytes | memoryview, lo: int, hi: int, track_id: int) -> int:
    count = 0
    for kind, start, end in _boxes(mv, lo, hi):
        if kind != b"traf":
            continue
        ts, _ = _find(mv, start, end, (b"tfhd",))
        if ts < 0 or struct.unpack_from(">I", mv, ts + 4)[0] != track_id:
            continue
        for k2, s2, _e2 in _boxes(mv, start, end):
            if k2 == b"trun":
                count += struct.unpack_from(">I", mv, s2 + 4)[0]
    return count
