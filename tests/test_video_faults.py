"""Videos whose headers and contents disagree, whose frame data is damaged, that hold no video
track or are no video at all: what ``validate()`` passes the loader reads faithfully, and the
rest is refused naming the manifest line and the path, in words about videos.

The files are written by OpenCV (frame ``i`` a flat grey of level ``i * STEP``) and then patched
byte by byte where the damage is described."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from test_video import STEP, check_clips, frame_numbers, loader, write_video

import extsrc
from extsrc.sources.video.clips import ClipSpec
from extsrc.sources.video.probe import VideoProbeProblem, _ebml, probe_video

pytest.importorskip("cv2")


def manifest_of(tmp_path: Path, *names: str) -> extsrc.Manifest:
    rows = "".join(f"{name},{k}\n" for k, name in enumerate(names))
    (tmp_path / "m.csv").write_text("path,label\n" + rows)
    return extsrc.read_manifest(tmp_path / "m.csv", root=tmp_path)


def uniform_clips(tmp_path: Path, name: str, length: int, stride: int) -> list[dict]:
    """The two ``clip="uniform"`` clips of ``length`` frames every ``stride`` of the video
    ``name`` in ``tmp_path``, one batch each."""
    with loader(manifest_of(tmp_path, name), batch_size=1, sequence_length=length,
                stride=stride, clip="uniform", clips_per_video=2) as ld:
        return list(ld)


def written_clips(tmp_path: Path, name: str, data: bytes, num_frames: int, spec: ClipSpec,
                  starts: list[int]) -> list[dict]:
    """``data`` written to ``tmp_path/name``, probed as ``num_frames`` frames, and its two
    ``clip="uniform"`` clips of ``spec`` (:func:`uniform_clips`), starting at ``starts``."""
    (tmp_path / name).write_bytes(data)
    assert probe_video(data).num_frames == num_frames
    batches = uniform_clips(tmp_path, name, spec.sequence_length, spec.stride)
    assert [b["start_frame"].item() for b in batches] == starts
    return batches


def assert_frames_among_held(batches: list[dict], spec: ClipSpec, held: list[int]) -> None:
    """Each clip's frames are those it names, counted among the frames the file holds (DALI
    numbers ``held`` 0, 1, ...)."""
    for b in batches:
        want = [held[f] for f in spec.frames(b["start_frame"].item())]
        assert frame_numbers(b["video"].numpy()[0]) == want


def avi_with_length(data: bytes, frames: int) -> bytes:
    """An AVI whose main header (``avih``) and video stream header (``strh``) claim ``frames``."""
    out = bytearray(data)
    struct.pack_into("<I", out, out.index(b"avih") + 8 + 16, frames)  # dwTotalFrames
    struct.pack_into("<I", out, out.index(b"strh") + 8 + 32, frames)  # dwLength
    return bytes(out)


def avi_frames(data: bytes) -> list[tuple[int, int]]:
    """(start, size) of each video frame's data in an AVI's movi list."""
    out = []
    j = data.index(b"movi") + 4
    while data[j:j + 4] == b"00dc":
        n = struct.unpack_from("<I", data, j + 4)[0]
        out.append((j + 8, n))
        j += 8 + n + (n & 1)
    return out


def matroska_frames(data: bytes) -> list[tuple[int, int]]:
    """(start, size) of each SimpleBlock's frame data in a Matroska file of one track (clusters
    of known size, one-byte track numbers)."""
    out = []
    (_, seg, seg_end), = [e for e in _ebml(data, 0, len(data)) if e[0] == 0x18538067]
    for eid, start, end in _ebml(data, seg, seg_end):
        if eid == 0x1F43B675:  # a cluster
            out += [(s + 4, e - s - 4) for k, s, e in _ebml(data, start, end) if k == 0xA3]
    return out


# -- headers that claim other frame counts than the file holds -----------------------------------
@pytest.mark.parametrize(("claimed", "readable"), [(100, 20), (10, 10)])
def test_avi_frame_count_is_what_the_file_holds_and_dali_decodes(
        tmp_path: Path, claimed: int, readable: int) -> None:
    # DALI takes the stream header's length as the frame count: past the 20 frames held it
    # returns black frames, past a shorter length the last frame repeated. Either way only the
    # frames both count are read faithfully.
    good = write_video(tmp_path / "good.avi", 20).read_bytes()
    (tmp_path / "lie.avi").write_bytes(avi_with_length(good, claimed))
    assert probe_video((tmp_path / "lie.avi").read_bytes()).num_frames == readable
    m = manifest_of(tmp_path, "lie.avi")
    assert extsrc.validate(m, progress=False, device="cpu").ok
    spec = ClipSpec(5, 1, "uniform", 3)
    starts = []
    with loader(m, batch_size=1, sequence_length=5, stride=1, clip="uniform",
                clips_per_video=3) as ld:
        for batch in ld:
            check_clips(batch, spec)  # the last clip ends on the last frame held
            assert batch["num_frames"].tolist() == [readable]
            starts += batch["start_frame"].tolist()
    assert starts[-1] == readable - 5


def test_avi_with_fewer_frame_chunks_than_its_index_and_headers_claim(tmp_path: Path) -> None:
    # A file cut inside its movi list and closed again: headers and idx1 list 20 frames, 12 are
    # held. Its chunks are counted, not its index.
    good = write_video(tmp_path / "good.avi", 20).read_bytes()
    frames = avi_frames(good)
    cut = frames[12][0] - 8  # where the 13th frame's chunk starts
    idx1 = good[good.index(b"idx1"):]
    data = bytearray(good[:cut] + idx1)
    movi = data.index(b"movi") - 8
    struct.pack_into("<I", data, movi + 4, cut - movi - 8)
    struct.pack_into("<I", data, 4, len(data) - 8)
    for b in written_clips(tmp_path, "cut.avi", bytes(data), 12, ClipSpec(4, 3), [0, 2]):
        check_clips(b, ClipSpec(4, 3))


def test_avi_dropped_frames_are_not_counted_as_dali_skips_them(tmp_path: Path) -> None:
    # An empty chunk marks a dropped frame. DALI decodes nothing for it and numbers the frames
    # after it as if it were not there, so frame 19 of 20 listed would come back as garbage.
    good = write_video(tmp_path / "good.avi", 20).read_bytes()
    frames = avi_frames(good)
    movi = good.index(b"movi") - 8
    body = b""
    for k, (start, n) in enumerate(frames):
        data = b"" if k == 10 else good[start:start + n]
        body += b"00dc" + struct.pack("<I", len(data)) + data + b"\0" * (len(data) & 1)
    out = bytearray(good[:movi + 12] + body)  # without idx1: DALI reads the chunks in order
    struct.pack_into("<I", out, movi + 4, 4 + len(body))
    struct.pack_into("<I", out, 4, len(out) - 8)
    batches = written_clips(tmp_path, "dropped.avi", bytes(out), 19, ClipSpec(5, 2), [0, 10])
    assert_frames_among_held(batches, ClipSpec(5, 2), held=[k for k in range(20) if k != 10])


def test_avi_frames_in_opendml_extensions_count_and_trailing_bytes_do_not(
        tmp_path: Path) -> None:
    # An OpenDML file holds its first frames in RIFF 'AVI ' and the rest in RIFF 'AVIX' parts;
    # bytes after the RIFF chunks (padding, junk) are no frames and no reason to refuse.
    whole = write_video(tmp_path / "whole.avi", 25).read_bytes()
    frames = avi_frames(whole)
    cut = frames[20][0] - 8  # the first RIFF keeps frames 0-19
    first = bytearray(whole[:cut])
    movi = first.index(b"movi") - 8
    struct.pack_into("<I", first, movi + 4, cut - movi - 8)
    struct.pack_into("<I", first, 4, len(first) - 8)
    rest = whole[cut:frames[24][0] + frames[24][1] + (frames[24][1] & 1)]
    lst = b"LIST" + struct.pack("<I", 4 + len(rest)) + b"movi" + rest
    data = bytes(first) + b"RIFF" + struct.pack("<I", 4 + len(lst)) + b"AVIX" + lst
    (tmp_path / "odml.avi").write_bytes(data + b"junk\xff\xff\xff\x7f")  # a chunk past the end
    assert probe_video(data).num_frames == 25
    batches = uniform_clips(tmp_path, "odml.avi", 5, 1)
    assert [b["start_frame"].item() for b in batches] == [0, 20]
    for b in batches:
        check_clips(b, ClipSpec(5, 1))


def test_a_file_the_decoder_finds_fewer_frames_in_than_its_container_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Should the container reader ever count more frames than DALI's decoder finds, a clip
    # asking for the frames past DALI's count must fail naming the file, not repeat the last
    # frame: the reader is made to count 5 frames too many here.
    import dataclasses

    from extsrc.sources.video import source as videosource
    from extsrc.validation import videos as videocheck

    write_video(tmp_path / "v.avi", 20)
    m = manifest_of(tmp_path, "v.avi")
    real = videosource.check_video

    def overcount(*args, **kw):  # type: ignore[no-untyped-def]
        info = real(*args, **kw)
        return dataclasses.replace(info, num_frames=info.num_frames + 5)

    monkeypatch.setattr(videosource, "check_video", overcount)
    monkeypatch.setattr(videocheck, "check_video", overcount)
    with pytest.raises(extsrc.BadVideoError, match=r"line 2: .*v\.avi: its container lists 25 "
                       r"frames but DALI's video decoder finds fewer \(DALI said: .*out-of-bounds"
                       r" frame index 20.*\) \[truncated\]") as e:
        for _ in loader(m, batch_size=1, sequence_length=5, stride=1, clip="uniform",
                        clips_per_video=2):
            pass
    assert (e.value.line, e.value.reason) == (2, "truncated")
    report = extsrc.validate(m, progress=False, device="cpu")
    assert [(p.line, p.reason) for p in report.problems] == [(2, "truncated")]
    assert "DALI's video decoder finds fewer" in report.problems[0].message


def test_matroska_frames_are_counted_by_block_not_by_duration(tmp_path: Path) -> None:
    good = bytearray(write_video(tmp_path / "good.mkv", 20).read_bytes())
    i = good.index(b"\x44\x89\x88")  # Info/Duration, an 8-byte float
    struct.pack_into(">d", good, i + 3, struct.unpack_from(">d", good, i + 3)[0] * 5)
    for b in written_clips(tmp_path, "long.mkv", bytes(good), 20, ClipSpec(5, 1), [0, 15]):
        check_clips(b, ClipSpec(5, 1))


def _resize(data: bytearray, element: int, size_at: int, delta: int) -> None:
    """Add ``delta`` to the size (an EBML variable-length integer from ``size_at`` up to
    ``element``'s payload) of an element, in place, keeping the integer's length."""
    n = element - size_at
    value = int.from_bytes(data[size_at:element], "big") & ((1 << (7 * n)) - 1)
    data[size_at:element] = ((value + delta) | (1 << (7 * n))).to_bytes(n, "big")


def test_matroska_blocks_without_frame_data_are_not_counted(tmp_path: Path) -> None:
    # DALI skips a block with no frame data and numbers the frames after it as if it were not
    # there: counted, the last frame of the file would lie past DALI's count.
    good = write_video(tmp_path / "good.mkv", 20).read_bytes()
    (_, seg, seg_end), = [e for e in _ebml(good, 0, len(good)) if e[0] == 0x18538067]
    (_, c0, c1), *_ = [e for e in _ebml(good, seg, seg_end) if e[0] == 0x1F43B675]
    blocks = [(s, e) for k, s, e in _ebml(good, c0, c1) if k == 0xA3]
    start, end = blocks[10]
    assert good[start] == 0x81  # track 1, then timecode and flags: frame data from start + 4
    out = bytearray(good[:start + 4] + good[end:])
    removed = end - start - 4
    size_at = next(start - n for n in range(1, 9)  # the block's size: n bytes after its ID
                   if out[start - n - 1] == 0xA3 and 9 - out[start - n].bit_length() == n)
    _resize(out, start, size_at, -removed)  # the block, the cluster, the segment shrink
    cluster_id = good.rindex(b"\x1f\x43\xb6\x75", 0, c0)
    _resize(out, c0, cluster_id + 4, -removed)
    _resize(out, seg, good.index(b"\x18\x53\x80\x67") + 4, -removed)
    batches = written_clips(tmp_path, "empty_block.mkv", bytes(out), 19, ClipSpec(5, 2), [0, 10])
    assert extsrc.validate(manifest_of(tmp_path, "empty_block.mkv"), progress=False,
                           device="cpu").ok
    assert_frames_among_held(batches, ClipSpec(5, 2), held=[k for k in range(20) if k != 10])


def test_mp4_whose_samples_lie_past_the_end_is_refused_naming_the_line(tmp_path: Path) -> None:
    data = bytearray(write_video(tmp_path / "v.mp4", 12, "mp4v").read_bytes())
    s = data.index(b"stco") + 4
    (n,) = struct.unpack_from(">I", data, s + 4)
    last = s + 8 + 4 * (n - 1)
    struct.pack_into(">I", data, last, struct.unpack_from(">I", data, last)[0] + len(data))
    (tmp_path / "cut.mp4").write_bytes(bytes(data))
    with pytest.raises(VideoProbeProblem, match=r"sample table lists 12 frames, but the data of "
                       r"\d+ of them lies past the end of the file") as e:
        probe_video(bytes(data))
    assert e.value.reason == "truncated"
    report = extsrc.validate(manifest_of(tmp_path, "v.mp4", "cut.mp4"), progress=False,
                             device="cpu", decode=False)
    assert [(p.line, p.reason) for p in report.problems] == [
        (2, "unsupported_codec"), (3, "truncated")]
    assert "copy the video again or re-encode it" in report.problems[1].message


# -- damaged frame data ----------------------------------------------------------------------------
def write_textured(path: Path, n: int, fourcc: str) -> Path:
    """A video whose frames are noise (so most of a frame's bytes are its entropy-coded data)
    beside a grey band of level ``i * STEP`` that numbers frame ``i``."""
    import cv2

    noise = np.random.default_rng(0).integers(0, 256, (48, 64, 3), np.uint8)
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 10, (64, 48))
    for i in range(n):
        frame = np.roll(noise, 3 * i, axis=1)
        frame[:, :16] = i * STEP
        vw.write(frame)
    vw.release()
    assert probe_video(path.read_bytes()).num_frames == n
    return path


def damage(data: bytes, frame: tuple[int, int], seed: int = 1) -> bytes:
    """``data`` with random bytes written over the middle of one frame's data (its second
    quarter to its third)."""
    start, n = frame
    k = max(1, n // 2)
    out = bytearray(data)
    out[start + n // 4:start + n // 4 + k] = np.random.default_rng(seed).integers(
        0, 256, k, np.uint8).tobytes()
    return bytes(out)


@pytest.mark.parametrize(("name", "fourcc", "frames_of", "said"), [
    # Motion JPEG: DALI decodes the damaged frame into wrong pixels; libjpeg-turbo finds it.
    ("v.avi", "MJPG", avi_frames, r"frame 10 of 20 \(bytes [\d,]+ to [\d,]+\): the JPEG's "
     r"compressed data is damaged \(libjpeg: Corrupt JPEG data: .+\); DALI's video decoder "
     r"turns it into wrong pixels"),
    ("v.mkv", "MJPG", matroska_frames,
     r"frame 10 of 20 .*libjpeg: Corrupt JPEG data.*wrong pixels"),
    # VP9: a damaged frame header, which DALI's decoder refuses (the whole frame is 23 bytes).
    ("v.webm", "VP90", matroska_frames, r"DALI's video decoder refuses its frame data \(DALI "
     r"said: .+\)"),
])
def test_a_damaged_frame_is_found_by_validate_and_skipped(
        tmp_path: Path, name: str, fourcc: str, frames_of, said: str  # type: ignore[no-untyped-def]
) -> None:
    if fourcc == "MJPG":
        good = write_textured(tmp_path / name, 20, fourcc).read_bytes()
    else:
        good = write_video(tmp_path / name, 20, fourcc).read_bytes()
    frames = frames_of(good)
    assert len(frames) == 20
    bad = f"bad{Path(name).suffix}"
    (tmp_path / bad).write_bytes(damage(good, frames[10]))
    m = manifest_of(tmp_path, name, bad, name)
    shallow = extsrc.validate(m, progress=False, device="cpu", decode=False)
    assert shallow.ok  # the container reads well: only decoding finds the damage
    report = extsrc.validate(m, progress=False, device="cpu")
    assert report.decode is True
    assert [(p.line, p.reason) for p in report.problems] == [(3, "corrupt")]
    assert re.search(rf"bad\.\w+: {said}; re-encode the video", str(report.problems[0]))
    with pytest.warns(UserWarning, match="skipping 1 of 3 videos"):
        ld = loader(m, bad_files=extsrc.BadFiles(on_error="skip"), batch_size=1, clip="center")
    with ld:
        seen = [(b["index"].item(), b["video"].numpy()[0]) for b in ld]
    assert [i for i, _ in seen] == [0, 2]
    for _, clip in seen:  # the clip's frames are those it names (the grey band numbers them)
        assert frame_numbers(clip[:, :, :16]) == [5, 7, 9, 11, 13]
    assert [(p.line, p.reason) for p in ld.skipped] == [(3, "corrupt")]


# -- no video track --------------------------------------------------------------------------------
def audio_only(data: bytes, suffix: str) -> bytes:
    """The file with its one video track relabelled as an audio track."""
    out = bytearray(data)
    if suffix == ".avi":
        out[out.index(b"strh") + 8:out.index(b"strh") + 12] = b"auds"
    elif suffix == ".mkv":
        codec = out.index(b"\x86\x87V_MJPEG")  # CodecID, 7 bytes
        out[codec + 2:codec + 9] = b"A_OPUS\x00"
        kind = out.index(b"\x83\x81\x01", out.index(b"\xae"))  # TrackType 1 (video)
        out[kind + 2] = 2
    else:
        out[out.index(b"hdlr") + 12:out.index(b"hdlr") + 16] = b"soun"
        out[out.index(b"mp4v"):out.index(b"mp4v") + 4] = b"mp4a"
    return bytes(out)


@pytest.mark.parametrize(("suffix", "fourcc", "found"), [
    (".avi", "MJPG", r"streams found: audio"),
    (".mkv", "MJPG", r"tracks found: audio \(A_OPUS\)"),
    (".mp4", "mp4v", r"tracks found: audio \(mp4a\)"),
])
def test_an_audio_only_file_is_reported_as_having_no_video_track(
        tmp_path: Path, suffix: str, fourcc: str, found: str) -> None:
    data = audio_only(write_video(tmp_path / f"v{suffix}", 8, fourcc).read_bytes(), suffix)
    (tmp_path / f"sound{suffix}").write_bytes(data)
    with pytest.raises(VideoProbeProblem, match=rf"^no video track: .*{found}$") as e:
        probe_video(data)
    assert e.value.reason == "no_video_track"
    m = manifest_of(tmp_path, f"sound{suffix}")
    with pytest.raises(extsrc.BadVideoError, match=rf"line 2: .*sound\{suffix}: no video track"
                       rf".*{found} \[no_video_track\]; list video files only") as err:
        next(iter(loader(m)))
    assert (err.value.line, err.value.reason) == (2, "no_video_track")


# -- messages about videos speak of videos ---------------------------------------------------------
def test_unreadable_video_files_are_described_as_videos(tmp_path: Path) -> None:
    write_video(tmp_path / "good.avi", 12)
    (tmp_path / "empty.avi").write_bytes(b"")
    (tmp_path / "folder.avi").mkdir()
    (tmp_path / "cut.avi").write_bytes((tmp_path / "good.avi").read_bytes()[:3000])
    m = manifest_of(tmp_path, "good.avi", "empty.avi", "folder.avi", "cut.avi")
    report = extsrc.validate(m, progress=False, device="cpu")
    assert [(p.line, p.reason) for p in report.problems] == [
        (3, "empty"), (4, "is_directory"), (5, "truncated")]
    for p in report.problems:
        assert "video" in p.message and "image" not in p.message, p.message
    assert "image" not in report.summary()
    for line, pattern in ((3, r"empty\.avi is empty \(0 bytes\); re-encode or re-export the "
                               r"video \(e\.g\. with ffmpeg\)"),
                          (4, r"folder\.avi: .*directory.*list video files, not folders")):
        one = extsrc.Manifest.from_lists([m.paths[0], m.paths[line - 2]], [0, 1])
        with pytest.raises(extsrc.SampleReadError, match=pattern) as e:
            for _ in loader(one, workers=extsrc.Workers(num_workers=1, num_threads=1)):
                pass
        assert "image" not in str(e.value) and "validate_videos" in str(e.value)


def test_videos_of_different_frame_sizes_are_explained_as_videos(tmp_path: Path) -> None:
    write_video(tmp_path / "a.avi", 12)
    write_video(tmp_path / "b.avi", 12, size=(32, 32))
    with pytest.raises(ValueError, match=r"videos of a batch have frames of different sizes.*"
                       r"resize=\(height, width\).*VideoLoader") as e:
        next(iter(loader(manifest_of(tmp_path, "a.avi", "b.avi"))))
    assert "image" not in str(e.value)
