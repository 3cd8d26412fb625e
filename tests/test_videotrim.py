"""Clip windows (extsrc.sources.video.trim): a cut file decodes to exactly the frames of the whole
file.

Videos are written by OpenCV (VP9 and Motion JPEG in MP4/MOV, which DALI decodes on the CPU)
with every frame's number in its grey level, and, where PyAV is installed, by x264 with
B-frames, B-pyramids and open GOPs (decoded by PyAV: FFmpeg, as DALI's demuxer).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

import extsrc
from extsrc.sources.video.clips import ClipSpec
from extsrc.sources.video.probe import probe_video
from extsrc.sources.video.trim import clip_window

cv2 = pytest.importorskip("cv2")

from test_video import STEP, write_video  # noqa: E402  (the frame-numbered writer)

W, H = 64, 48
N = 40


def write(path: Path, fourcc: str, n: int = N) -> Path:
    return write_video(path, n, fourcc, size=(W, H))


def numbers(clip: np.ndarray) -> list[int]:
    return [round(float(f.mean()) / STEP) for f in clip]


def dali_clip(data: np.ndarray, frames: list[int] | np.ndarray) -> np.ndarray:
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        enc = fn.external_source(name="enc")
        pipe.set_outputs(fn.decoders.video(enc, frames=[int(f) for f in frames],
                                           pad_mode="edge"))
    pipe.build()
    pipe.feed_input("enc", [data])
    (out,) = pipe.run()
    return np.array(out[0])


@pytest.fixture(scope="module")
def vp9(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("trim") / "vp9.mp4", "VP90")


@pytest.mark.parametrize("first", [0, 5, 11, 12, 13, 25, 30, 39])
def test_window_decodes_the_frames_of_the_whole_file(vp9: Path, first: int) -> None:
    data = np.fromfile(vp9, np.uint8)
    info = probe_video(data)
    wanted = [min(first + k * 2, N - 1) for k in range(3)]
    window = clip_window(data, info, wanted)
    whole = dali_clip(data, wanted)
    cut = dali_clip(window.data, window.frames)
    assert numbers(whole) == wanted
    np.testing.assert_array_equal(cut, whole)
    # OpenCV's FFmpeg puts a VP9 key frame every 12 frames: a clip after the first is cut there.
    assert window.first == (first // 12) * 12
    if window.first:
        assert window.data.nbytes < data.nbytes
        assert window.frames.tolist() == [f - window.first for f in wanted]


def test_all_intra_files_are_cut_at_the_clip_itself(tmp_path: Path) -> None:
    data = np.fromfile(write(tmp_path / "mjpeg.mov", "MJPG"), np.uint8)
    info = probe_video(data)
    window = clip_window(data, info, [17, 19, 21, 23, 23])
    assert window.first == 17
    assert probe_video(window.data).num_frames == 4  # frames 17, 19, 21 and 23 only
    assert window.frames.tolist() == [0, 1, 2, 3, 3]
    assert numbers(dali_clip(window.data, window.frames)) == [17, 19, 21, 23, 23]
    # The first clip of a file too: only its frames.
    window = clip_window(data, info, [0, 5, 10])
    assert probe_video(window.data).num_frames == 3
    assert numbers(dali_clip(window.data, window.frames)) == [0, 5, 10]


def test_loader_gives_the_same_batches_with_and_without_windows(vp9: Path) -> None:
    m = extsrc.Manifest.from_lists([str(vp9)] * 3, [0, 1, 2])
    kw = {"batch_size": 4, "sequence_length": 4, "stride": 3, "device": "cpu", "clip": "random",
          "clips_per_video": 4, "workers": extsrc.Workers(num_workers=0, num_threads=1),
          "shuffle": True, "seed": 3}
    spec = ClipSpec(sequence_length=4, stride=3, clip="random", clips_per_video=4)
    got = {}
    for windows in (True, False):
        with extsrc.VideoLoader(m, windows=windows, **kw) as loader:
            got[windows] = [(b["video"].numpy(), b["start_frame"].numpy(), b["label"].numpy())
                            for b in loader]
    starts = np.concatenate([s for _, s, _ in got[True]])
    assert (starts >= 12).sum() >= 3  # clips the windows cut
    for (v1, s1, y1), (v0, s0, y0) in zip(got[True], got[False], strict=True):
        np.testing.assert_array_equal(v1, v0)
        np.testing.assert_array_equal(s1, s0)
        np.testing.assert_array_equal(y1, y0)
        for clip, start in zip(v1, s1.tolist(), strict=True):
            assert numbers(clip) == spec.frames(start)


def test_windows_must_be_a_bool(vp9: Path) -> None:
    with pytest.raises(TypeError, match="windows must be True or False"):
        extsrc.VideoLoader(str(vp9.parent), batch_size=1, sequence_length=2, windows="yes",
                           device="cpu")


# -- what is left whole ---------------------------------------------------------------------------
def _patched(data: np.ndarray, box: bytes, at: int, value: bytes) -> np.ndarray:
    raw = bytearray(data.tobytes())
    i = raw.index(box) + 4  # the box's payload
    raw[i + at:i + at + len(value)] = value
    return np.frombuffer(bytes(raw), np.uint8)


def test_an_edit_list_that_hides_frames_leaves_the_file_whole(vp9: Path) -> None:
    data = np.fromfile(vp9, np.uint8)
    info = probe_video(data)
    if b"elst" not in data.tobytes():
        pytest.skip("this OpenCV build writes no edit list")
    # elst v0: version+flags, count, then (duration, media_time, rate): start one frame late.
    edited = _patched(data, b"elst", 12, struct.pack(">i", 1024))
    assert clip_window(edited, info, [30, 35]).data is edited


def test_samples_past_the_end_leave_the_file_whole(vp9: Path) -> None:
    data = np.fromfile(vp9, np.uint8)
    info = probe_video(data)
    stco = data.tobytes().index(b"stco") + 4
    (count,) = struct.unpack_from(">I", data.tobytes(), stco + 4)
    last = stco + 8 + 4 * (count - 1)
    moved = _patched(data, b"stco", 8 + 4 * (count - 1), struct.pack(">I", len(data) - 4))
    assert moved[last:last + 4].tobytes() == struct.pack(">I", len(data) - 4)
    assert clip_window(moved, info, [30, 35]).data is moved


def test_other_containers_and_first_clips_are_left_whole(tmp_path: Path, vp9: Path) -> None:
    avi = np.fromfile(write(tmp_path / "v.avi", "MJPG"), np.uint8)
    assert clip_window(avi, probe_video(avi), [20, 25]).data is avi
    data = np.fromfile(vp9, np.uint8)
    assert clip_window(data, probe_video(data), [0, 5]).data is data  # VP9 drops nothing
    assert clip_window(data, probe_video(data), [30, N]).data is data  # past the end


def test_damaged_tables_never_raise(vp9: Path) -> None:
    data = np.fromfile(vp9, np.uint8)
    info = probe_video(data)
    raw = data.tobytes()
    moov = raw.index(b"moov") - 4
    rng = np.random.default_rng(0)
    for _ in range(1000):
        b = bytearray(raw)
        for i in rng.integers(moov, moov + 800, size=3).tolist():
            b[i] = int(rng.integers(0, 256))
        window = clip_window(np.frombuffer(bytes(b), np.uint8), info, [30, 35])
        assert 0 <= window.first <= 30 and window.frames.shape == (2,)


# -- x264: B-frames, pyramids, open GOPs ---------------------------------------------------------
def _x264(path: Path, params: str, n: int = 90) -> np.ndarray:
    av = pytest.importorskip("av")
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (64 + n, 96 + n, 3), dtype=np.uint8)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt, s.gop_size = 96, 64, "yuv420p", 12
        s.options = {"preset": "veryfast", "x264-params": params}
        for i in range(n):
            img = np.ascontiguousarray(base[i:i + 64, i:i + 96])
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return np.fromfile(path, np.uint8)


def _av_frames(data: np.ndarray) -> list[np.ndarray]:
    import av

    with av.open(io.BytesIO(data.tobytes())) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


@pytest.mark.parametrize(("params", "cuts"), [
    ("bframes=3", True), ("bframes=3:b-pyramid=normal", True), ("bframes=0", True),
    ("bframes=3:open-gop=1", False),  # its key frames after the first are not IDR
])
def test_x264_windows_decode_like_the_whole_file(tmp_path: Path, params: str, cuts: bool) -> None:
    data = _x264(tmp_path / "x.mp4", params)
    info = probe_video(data)
    whole = _av_frames(data)
    firsts, dropped = [], 0
    for first in range(0, 75, 3):
        for stride in (1, 4):
            wanted = [first + k * stride for k in range(16) if first + k * stride < len(whole)]
            window = clip_window(data, info, wanted)
            got = _av_frames(window.data)
            firsts.append(window.first)
            for f, w in zip(wanted, window.frames.tolist(), strict=True):
                np.testing.assert_array_equal(got[w], whole[f])
            # Frames of the window up to the clip's last, against the frames that span holds.
            dropped += (wanted[-1] - window.first) - int(window.frames[-1])
    assert any(firsts) == cuts
    if "bframes=3" in params:
        assert dropped > 0  # non-reference B-frames the clips do not take


@pytest.mark.gpu
@pytest.mark.parametrize("params", ["bframes=3:b-pyramid=normal", "bframes=0"])
def test_gpu_windows_decode_like_the_whole_file(tmp_path: Path, params: str) -> None:
    av = pytest.importorskip("av")
    n = 96
    paths = []
    for k in range(3):
        path = tmp_path / f"{k}.mp4"
        with av.open(str(path), "w") as c:
            s = c.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt, s.gop_size = 128, 128, "yuv420p", 12
            s.options = {"x264-params": params}
            for i in range(n):
                img = np.full((128, 128, 3), (i * 2 + k) % 256, np.uint8)
                for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    c.mux(p)
            for p in s.encode():
                c.mux(p)
        paths.append(str(path))
    m = extsrc.Manifest.from_lists(paths, [0, 1, 2])
    kw = {"batch_size": 4, "sequence_length": 6, "stride": 3, "device": "cuda", "clip": "random",
          "clips_per_video": 8, "workers": extsrc.Workers(num_workers=1), "shuffle": True,
          "seed": 5}
    got = {}
    for windows in (True, False):
        with extsrc.VideoLoader(m, windows=windows, **kw) as loader:
            got[windows] = [(b["video"].cpu().numpy(), b["start_frame"].numpy(),
                             b["label"].cpu().numpy()) for b in loader]
    assert len(got[True]) == 6
    for (v1, s1, y1), (v0, s0, y0) in zip(got[True], got[False], strict=True):
        np.testing.assert_array_equal(s1, s0)
        np.testing.assert_array_equal(y1, y0)
        np.testing.assert_array_equal(v1, v0)
        for clip, start, label in zip(v1, s1.tolist(), y1.tolist(), strict=True):
            want = [((start + f * 3) * 2 + label) % 256 for f in range(6)]
            assert [round(float(f.mean())) for f in clip] == pytest.approx(want, abs=1)


def _renamed(data: np.ndarray, box: bytes, to: bytes = b"free") -> np.ndarray:
    raw = data.tobytes()
    assert raw.count(box) == 1
    return np.frombuffer(raw.replace(box, to), np.uint8)


def test_tables_that_change_frame_numbers_leave_the_file_whole(vp9: Path) -> None:
    data = np.fromfile(vp9, np.uint8)
    info = probe_video(data)
    raw = data.tobytes()
    assert clip_window(data, info, [30, 35]).first == 24  # cut, as a reference
    # A second moov (FFmpeg reads the first), appended after the file.
    s = raw.index(b"moov") - 4
    (size,) = struct.unpack_from(">I", raw, s)
    twice = np.frombuffer(raw + raw[s:s + size], np.uint8)
    assert clip_window(twice, info, [30, 35]).data is twice
    # Samples of the second sample description.
    stsc = raw.index(b"stsc") + 4
    other = _patched(data, b"stsc", 16, struct.pack(">I", 2))
    assert other[stsc + 16:stsc + 20].tobytes() == struct.pack(">I", 2)
    assert clip_window(other, info, [30, 35]).data is other
    if b"elst" in raw:  # an edit list ending before the last frame hides it
        short = _patched(data, b"elst", 8, struct.pack(">I", 1))
        assert clip_window(short, info, [30, 35]).data is short


def test_key_frames_are_read_from_the_bitstream_without_a_sync_table(vp9: Path) -> None:
    data = _renamed(np.fromfile(vp9, np.uint8), b"stss")
    info = probe_video(data)
    for first in (13, 30, 37):
        wanted = [first, min(first + 2, N - 1)]
        window = clip_window(data, info, wanted)
        assert window.first == (first // 12) * 12  # VP9 key frames, not every sample
        np.testing.assert_array_equal(dali_clip(window.data, window.frames),
                                      dali_clip(data, wanted))


def test_x264_b_frames_without_composition_offsets_are_left_whole(tmp_path: Path) -> None:
    data = _renamed(_x264(tmp_path / "x.mp4", "bframes=3"), b"ctts")
    info = probe_video(data)
    assert clip_window(data, info, [40, 44, 48]).data is data
    flat = _renamed(_x264(tmp_path / "p.mp4", "bframes=0"), b"stss")  # no ctts written
    whole = _av_frames(flat)
    window = clip_window(flat, probe_video(flat), [40, 44, 48])
    assert window.first == 36
    got = _av_frames(window.data)
    for f, w in zip([40, 44, 48], window.frames.tolist(), strict=True):
        np.testing.assert_array_equal(got[w], whole[f])
