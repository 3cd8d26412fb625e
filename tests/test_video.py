"""VideoLoader, the clip policy and the container reader, on small videos written by OpenCV whose
frames carry their own number: frame ``i`` is a flat grey of level ``i * STEP``, which survives
MJPEG and VP8/VP9 compression within a level or two."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import augment_ops
import extsrc
from extsrc.sources.video.clips import ClipSpec, ShortVideoError, clip_start
from extsrc.sources.video.probe import VideoProbeProblem, probe_video

cv2 = pytest.importorskip("cv2")

STEP = 6  # grey levels per frame: 40 frames stay below 255
W, H = 64, 48
#: Frame counts of the videos of the manifest (labels are their positions).
LENGTHS = (30, 21, 40, 25, 33)


def write_video(path: Path, n: int, fourcc: str = "MJPG", size: tuple[int, int] = (W, H)) -> Path:
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 10, size)
    if not vw.isOpened():
        pytest.skip(f"this OpenCV build writes no {fourcc} into {path.suffix}")
    for i in range(n):
        vw.write(np.full((size[1], size[0], 3), i * STEP, np.uint8))
    vw.release()
    # Some builds open the writer and then write nothing (an FFmpeg without the codec's tag).
    try:
        written = extsrc.probe_video(path.read_bytes()).num_frames
    except Exception as e:
        pytest.skip(f"this OpenCV build wrote no readable {fourcc} into {path.suffix}: {e}")
    if written != n:
        pytest.skip(f"this OpenCV build wrote {written} of {n} {fourcc} frames")
    return path


def frame_numbers(clip: np.ndarray) -> list[int]:
    """The frame number each frame of an (F, H, W, C) clip carries."""
    return [round(float(f.mean()) / STEP) for f in clip]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("videos")
    rows = [f"{write_video(root / f'v{k}.avi', n)},{k}" for k, n in enumerate(LENGTHS)]
    (root / "train.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return root


def loader(manifest: object, **kw: object) -> extsrc.VideoLoader:
    kw = {"batch_size": 2, "sequence_length": 5, "stride": 2, "device": "cpu",
          "workers": extsrc.Workers(num_workers=0, num_threads=1), "shuffle": False, **kw}
    return extsrc.VideoLoader(manifest, **kw)  # type: ignore[arg-type]


def check_clips(batch: dict, spec: ClipSpec) -> None:
    """Every clip holds exactly the frames its start, stride and length name."""
    for clip, start, n in zip(batch["video"].numpy(), batch["start_frame"].tolist(),
                              batch["num_frames"].tolist(), strict=True):
        want = [min(f, n - 1) for f in spec.frames(start)]  # past the end: the last, repeated
        assert frame_numbers(clip) == want


# -- the container reader ------------------------------------------------------------------------
@pytest.mark.parametrize(("suffix", "fourcc", "codec"), [
    (".avi", "MJPG", "mjpeg"), (".mkv", "MJPG", "mjpeg"), (".webm", "VP80", "vp8"),
    (".webm", "VP90", "vp9"), (".mp4", "mp4v", "mpeg4"),
])
def test_probe_reads_codec_frames_and_size(tmp_path: Path, suffix: str, fourcc: str,
                                           codec: str) -> None:
    path = write_video(tmp_path / f"v{suffix}", 17, fourcc, size=(66, 38))
    info = probe_video(path.read_bytes())
    assert (info.codec, info.num_frames, info.width, info.height) == (codec, 17, 66, 38)


@pytest.mark.parametrize("suffix,fourcc", [(".avi", "MJPG"), (".webm", "VP90"), (".mp4", "mp4v")])
def test_probe_refuses_a_file_cut_short(tmp_path: Path, suffix: str, fourcc: str) -> None:
    data = write_video(tmp_path / f"v{suffix}", 17, fourcc).read_bytes()
    with pytest.raises(VideoProbeProblem, match="truncated") as e:
        probe_video(data[: len(data) // 2])
    assert e.value.reason == "truncated"


def test_probe_refuses_a_non_video() -> None:
    with pytest.raises(VideoProbeProblem, match=r"not a video container.*b'\\x89PNG") as e:
        probe_video(b"\x89PNG\r\n\x1a\n" + bytes(100))
    assert e.value.reason == "not_video"


# -- the clip policy -------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 500), length=st.integers(1, 40), stride=st.integers(1, 8),
       k=st.integers(1, 5), policy=st.sampled_from(["random", "uniform"]),
       epoch=st.integers(0, 10), index=st.integers(0, 10**6))
def test_clip_starts_fit_the_video(n, length, stride, k, policy, epoch, index) -> None:
    spec = ClipSpec(length, stride, policy, k, short_videos="pad")
    for clip in range(k):
        s = clip_start(spec, n, seed=3, epoch=epoch, index=index, clip=clip)
        assert s == clip_start(spec, n, seed=3, epoch=epoch, index=index, clip=clip)
        assert 0 <= s <= max(0, n - spec.span)


def test_uniform_clips_span_the_video_and_center_is_the_middle() -> None:
    spec = ClipSpec(5, 2, "uniform", 3)  # span 9
    assert [clip_start(spec, 30, seed=0, epoch=0, index=0, clip=c) for c in range(3)] == [0, 10,
                                                                                           21]
    assert clip_start(ClipSpec(5, 2, "center"), 30, seed=0, epoch=0, index=0, clip=0) == 10


def test_random_starts_change_with_the_epoch_and_the_seed() -> None:
    spec = ClipSpec(4, 1, "random")
    starts = {(s, e): [clip_start(spec, 1000, seed=s, epoch=e, index=i, clip=0) for i in range(8)]
              for s in (0, 1) for e in (0, 1)}
    assert len({tuple(v) for v in starts.values()}) == 4


def test_short_video_is_refused_or_padded() -> None:
    with pytest.raises(ShortVideoError, match="has 5 frames, fewer than the 9"):
        clip_start(ClipSpec(5, 2), 5, seed=0, epoch=0, index=0, clip=0)
    assert clip_start(ClipSpec(5, 2, short_videos="pad"), 5, seed=0, epoch=0, index=0,
                      clip=0) == 0


def test_clip_spec_is_checked_at_construction(videos: Path) -> None:
    with pytest.raises(ValueError, match="clip='center' gives one clip per video"):
        ClipSpec(4, clip="center", clips_per_video=2)
    with pytest.raises(ValueError, match="clip must be one of"):
        loader(videos / "train.csv", clip="middle")
    with pytest.raises(ValueError, match="sequence_length"):
        loader(videos / "train.csv", sequence_length=0)
    with pytest.raises(ValueError, match="layout must be one of"):
        loader(videos / "train.csv", layout="NHWC")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("__clip", r"\['__clip'\] are reserved for the loader's internal pipeline outputs "
                   r"\['__info', '__clip'\]"),
        ("__info", r"\['__info'\] are reserved for the loader's internal"),
        ("start_frame", r"\['start_frame'\] are reserved for per-sample metadata .*"
                        r"'num_frames'\]"),
        ("num_frames", r"\['num_frames'\] are reserved for per-sample metadata"),
        ("index", r"\['index'\] are reserved for per-sample metadata"),
        ("label", r"\('label', 'label'\) \(\['label'\] more than once\)"),
    ],
)
def test_output_map_names_the_video_loader_uses_are_refused(videos: Path, name: str,
                                                            match: str) -> None:
    # Without the check DALI fails at the first batch with "output_map names should be distinct".
    with pytest.raises(ValueError, match=match):
        loader(videos / "train.csv", output_map=[name, "label"])


# -- the loader ------------------------------------------------------------------------------------
def test_clips_hold_exactly_the_requested_frames(videos: Path) -> None:
    spec = ClipSpec(5, 2, "uniform", 3)
    seen = []
    with loader(videos / "train.csv", clip="uniform", clips_per_video=3) as ld:
        for batch in ld:
            assert batch["video"].shape[1:] == (5, H, W, 3)
            assert batch["video"].dtype.is_floating_point is False
            check_clips(batch, spec)
            assert batch["label"].tolist() == batch["index"].tolist()  # label k is video k
            assert batch["num_frames"].tolist() == [LENGTHS[i] for i in batch["index"]]
            seen += zip(batch["index"].tolist(), batch["start_frame"].tolist(), strict=True)
    want = [(i, clip_start(spec, n, seed=0, epoch=0, index=i, clip=c))
            for i, n in enumerate(LENGTHS) for c in range(3)]
    assert seen == want  # unshuffled: video by video, clip by clip


def test_random_clips_differ_between_epochs_and_repeat_with_the_seed(videos: Path) -> None:
    def starts(seed: int) -> list[list[int]]:
        out = []
        with loader(videos / "train.csv", seed=seed) as ld:
            for _ in range(2):
                epoch = []
                for batch in ld:
                    check_clips(batch, ClipSpec(5, 2))
                    epoch += batch["start_frame"].tolist()
                out.append(epoch)
        return out

    a = starts(7)
    assert a[0] != a[1]
    assert a == starts(7)


@pytest.mark.parametrize("run_length", [1, 2])
def test_every_clip_once_per_epoch_across_two_shards(videos: Path, run_length: int) -> None:
    """Also with the shuffle moving runs of two neighbouring clips."""
    for epoch in range(2):
        counts: Counter = Counter()
        for shard in range(2):
            ld = loader(videos / "train.csv",
                        sampling=extsrc.Sampling(shard_id=shard, num_shards=2,
                                                 run_length=run_length), shuffle=True,
                        clip="uniform", clips_per_video=2, workers=extsrc.Workers(num_workers=1),
                        seed=5)
            ld.set_epoch(epoch)
            n = 0
            for batch in ld:
                n += 1
                for i, s, pad in zip(batch["index"].tolist(), batch["start_frame"].tolist(),
                                     batch["is_pad"].tolist(), strict=True):
                    counts[(i, s)] += not pad
            assert n == len(ld)
            ld.close()
        want = {(i, clip_start(ClipSpec(5, 2, "uniform", 2), n, seed=5, epoch=epoch, index=i,
                               clip=c)) for i, n in enumerate(LENGTHS) for c in range(2)}
        assert counts == Counter(dict.fromkeys(want, 1))


def test_resume_gives_the_batches_still_due(videos: Path) -> None:
    kw = {"shuffle": True, "seed": 3, "batch_size": 2}
    with loader(videos / "train.csv", **kw) as ld:
        full = [(b["index"].tolist(), b["start_frame"].tolist()) for b in ld]
    with loader(videos / "train.csv", **kw) as ld:
        it = iter(ld)
        next(it)
        state = ld.state_dict()
    assert state["config"]["video"]["sequence_length"] == 5
    with loader(videos / "train.csv", **kw) as ld:
        ld.load_state_dict(state)
        rest = [(b["index"].tolist(), b["start_frame"].tolist()) for b in ld]
    assert rest == full[1:]
    with loader(videos / "train.csv", **{**kw, "stride": 1}) as ld, pytest.raises(
            extsrc.StateMismatchError, match="video"):
        ld.load_state_dict(state)


@augment_ops.augment_op(name="t_video_shift", replace=True)
def _shift(img, rng):
    return np.clip(img.astype(np.int16) + int(rng.integers(10, 60)), 0, 255).astype(np.uint8)


def test_random_op_draws_once_per_clip(videos: Path) -> None:
    with loader(videos / "train.csv", ops=["t_video_shift"], batch_size=5) as ld:
        batch = next(iter(ld))
    clips = batch["video"].numpy().astype(int)
    shifted = batch["t_video_shift_0"].numpy().astype(int)
    shifts = (shifted - clips).reshape(5, 5, -1).mean(-1).round()
    assert (shifts == shifts[:, :1]).all()  # the same shift on every frame of a clip
    assert len(set(shifts[:, 0].tolist())) > 1  # and another one for another clip
    assert ld.op_paths == {"t_video_shift": "numpy"}


def test_resize_layout_and_dtype(videos: Path) -> None:
    with loader(videos / "train.csv", resize=(24, 20),
                layout="NCFHW", format=extsrc.BatchFormat(dtype="float32", normalize="scale"),
                output_map=["clip", "y"]) as ld:
        batch = next(iter(ld))
    assert tuple(batch["clip"].shape) == (2, 3, 5, 24, 20)
    assert batch["y"].tolist() == [0, 1]
    levels = batch["clip"].numpy().mean(axis=(1, 3, 4)) * 255 / STEP
    assert np.round(levels).astype(int).tolist() == [
        list(range(s, s + 9, 2)) for s in batch["start_frame"].tolist()]


def test_short_videos_refused_naming_the_line_or_padded(tmp_path: Path) -> None:
    write_video(tmp_path / "long.avi", 30)
    write_video(tmp_path / "short.avi", 5)
    (tmp_path / "m.csv").write_text("path,label\nlong.avi,0\nshort.avi,1\n")
    manifest = extsrc.read_manifest(tmp_path / "m.csv", root=tmp_path)
    with pytest.raises(extsrc.BadVideoError, match=r"line 3.*short\.avi.*has 5 frames.*spans 9"
                       r".*short_videos='pad'") as e:
        for _ in loader(manifest):
            pass
    assert (e.value.line, e.value.reason) == (3, "too_short")
    with loader(manifest, short_videos="pad", clip="center") as ld:
        batch = next(iter(ld))
    assert frame_numbers(batch["video"].numpy()[1]) == [0, 2, 4, 4, 4]
    assert batch["num_frames"].tolist() == [30, 5]


@pytest.fixture
def bad_manifest(tmp_path: Path) -> Path:
    good = write_video(tmp_path / "good.avi", 30).read_bytes()
    (tmp_path / "cut.avi").write_bytes(good[: len(good) // 2])
    (tmp_path / "notes.avi").write_text("not a video at all\n")
    write_video(tmp_path / "mpeg4.mp4", 30, "mp4v")
    (tmp_path / "good2.avi").write_bytes(good)
    (tmp_path / "m.csv").write_text(
        "path,label\ngood.avi,0\ncut.avi,1\nnotes.avi,2\nmpeg4.mp4,3\ngood2.avi,4\n")
    return tmp_path / "m.csv"


@pytest.mark.parametrize(("line", "reason", "pattern"), [
    (3, "truncated", r"cut\.avi: truncated: its RIFF header declares"),
    (4, "not_video", r"notes\.avi: not a video container"),
    (5, "unsupported_codec", r"mpeg4\.mp4: its codec is MPEG-4 Part 2 .*not decode on the CPU"),
])
@pytest.mark.parametrize("workers", [0, 1])
def test_bad_video_named_by_line_path_and_reason(bad_manifest: Path, line: int, reason: str,
                                                 pattern: str, workers: int) -> None:
    manifest = extsrc.read_manifest(bad_manifest, root=bad_manifest.parent)
    keep = [0, line - 2]  # the good video and the bad one
    sub = extsrc.Manifest.from_lists([manifest.paths[i] for i in keep],
                                     [int(manifest.labels[i]) for i in keep])
    with pytest.raises(extsrc.BadVideoError, match=pattern) as e:
        for _ in loader(sub, workers=extsrc.Workers(num_workers=workers, num_threads=1)):
            pass
    assert (e.value.line, e.value.reason) == (2, reason)  # from_lists numbers samples from 1
    assert e.value.path.endswith(Path(manifest.paths[line - 2]).name)
    if reason == "unsupported_codec":
        assert e.value.codec == "mpeg4"


def test_bad_videos_skipped_or_reported_up_front(bad_manifest: Path) -> None:
    manifest = extsrc.read_manifest(bad_manifest, root=bad_manifest.parent)
    report = extsrc.validate_videos(manifest)
    assert [(p.line, p.reason) for p in report.problems] == [
        (3, "truncated"), (4, "not_video"), (5, "unsupported_codec")]
    with pytest.warns(UserWarning, match="skipping 3 of 5 videos") as caught:
        ld = loader(manifest, bad_files=extsrc.BadFiles(on_error="skip"))
    assert caught[0].filename == __file__  # the caller's line, not the loader's
    with ld:
        assert sorted(i for b in ld for i in b["index"].tolist()) == [0, 4]
    assert len(ld.skipped) == 3


def test_flat_keyword_warning_points_at_the_callers_line(videos: Path) -> None:
    with pytest.warns(DeprecationWarning, match=r"VideoLoader: flat keyword arguments "
                                                r"\['num_workers'\].*workers=Workers") as caught:
        ld = extsrc.VideoLoader(videos / "train.csv", batch_size=2, sequence_length=5,
                                device="cpu", num_workers=0)
    assert caught[0].filename == __file__
    assert ld.config.workers.num_workers == 0 and ld.config.workers.decoder == "cpu"
    ld.close()


def test_folder_of_class_folders(tmp_path: Path) -> None:
    for cls, n in (("cat", 12), ("dog", 14)):
        (tmp_path / cls).mkdir()
        write_video(tmp_path / cls / f"{cls}.avi", n)
    with loader(tmp_path, clip="center", batch_size=2) as ld:
        batch = next(iter(ld))
    assert list(ld.manifest.classes) == ["cat", "dog"]
    assert batch["label"].tolist() == [0, 1]
    assert batch["start_frame"].tolist() == [1, 2]


def test_vp9_webm_clips(tmp_path: Path) -> None:
    write_video(tmp_path / "a.webm", 30, "VP90")
    m = extsrc.Manifest.from_lists([str(tmp_path / "a.webm")], [0])
    with loader(m, batch_size=1, clip="uniform", clips_per_video=2) as ld:
        for batch in ld:
            check_clips(batch, ClipSpec(5, 2))


def test_sample_videos_written_without_opencv_decode_frame_by_frame(tmp_path: Path) -> None:
    root = extsrc.make_sample_videos(tmp_path, 2, frames=20)
    info = probe_video((root / "right" / "000.avi").read_bytes())
    assert (info.codec, info.num_frames, info.width, info.height) == ("mjpeg", 20, 96, 64)
    with loader(root, batch_size=2, sequence_length=4, stride=5, clip="uniform") as ld:
        batch = next(iter(ld))
    assert ld.manifest.classes is not None and list(ld.manifest.classes) == ["down", "right"]
    green = batch["video"].numpy()[..., 1].mean(axis=(2, 3))  # background level 4 * frame
    assert batch["start_frame"].tolist() == [2, 2]  # one uniform clip: the centre one
    assert np.round(green / 4).astype(int).tolist() == [[2, 7, 12, 17]] * 2


@augment_ops.augment_op(name="t_clip_reverse_tail", ndim=4, replace=True)
def _reverse_tail(clip, rng):
    """A clip op: the clip backwards from a random frame on (kept length)."""
    k = int(rng.integers(1, len(clip)))
    return np.concatenate([clip[:k], clip[k:][::-1]])


def test_clip_ops_get_the_whole_clip_and_image_loaders_refuse_them(videos: Path) -> None:
    with loader(videos / "train.csv", transforms=["t_clip_reverse_tail"], resize=16,
                batch_size=5) as ld:
        batch = next(iter(ld))
    assert tuple(batch["video"].shape) == (5, 5, 16, 16, 3)
    for clip, start in zip(batch["video"].numpy(), batch["start_frame"].tolist(), strict=True):
        frames = [start + 2 * f for f in range(5)]
        got = frame_numbers(clip)
        k = next(i for i in range(1, 5) if got[i:] == frames[i:][::-1])
        assert got[:k] == frames[:k]
    assert augment_ops.available_paths(augment_ops.get("t_clip_reverse_tail")) == ("numpy",)
    with pytest.raises(ValueError, match=r"op 't_clip_reverse_tail' works on whole video clips"):
        extsrc.Loader(videos / "train.csv", batch_size=2, ops=["t_clip_reverse_tail"],
                      device="cpu")


def test_validate_checks_videos_as_videos(bad_manifest: Path, videos: Path) -> None:
    report = extsrc.validate(bad_manifest, progress=False, device="cpu")  # auto: all videos
    assert report.media == "video"
    assert [(p.line, p.reason) for p in report.problems] == [
        (3, "truncated"), (4, "not_video"), (5, "unsupported_codec")]
    assert "cut short" in report.summary()
    too_short = extsrc.validate(videos / "train.csv", progress=False, device="cpu",
                                clips=ClipSpec(12, 2))  # span 23: videos of 21 frames fail
    assert [(p.line, p.reason) for p in too_short.problems] == [(3, "too_short")]


def test_validate_command_line_on_videos(bad_manifest: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        [sys.executable, "-m", "extsrc", "validate", str(bad_manifest), "--device", "cpu",
         "--sequence-length", "4", "--write-clean", str(bad_manifest.parent / "clean.csv")],
        capture_output=True, text=True, timeout=120, cwd=bad_manifest.parent,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert p.returncode == 1, p.stderr
    assert re.search(r"line 5: .*mpeg4\.mp4: its codec is MPEG-4 Part 2", p.stdout)
    assert "VideoLoader(bad_files=BadFiles(on_error='skip'))" in p.stdout
    clean = extsrc.read_manifest(bad_manifest.parent / "clean.csv")
    assert [Path(x).name for x in clean.paths] == ["good.avi", "good2.avi"]


def write_h264(path: Path, n: int) -> Path:
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt, s.gop_size = W, H, "yuv420p", 8
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(np.full((H, W, 3), i * STEP, np.uint8), "rgb24")
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["vp9", "h264"])
def test_gpu_decodes_exactly_the_requested_frames(tmp_path: Path, kind: str) -> None:
    # NVDEC takes VP9 from 128x128 up (H.264 from 48x16): see the next test for smaller ones
    paths = [write_video(tmp_path / f"{k}.webm", n, "VP90", size=(128, 128)) if kind == "vp9"
             else write_h264(tmp_path / f"{k}.mp4", n) for k, n in enumerate((30, 40, 33))]
    m = extsrc.Manifest.from_lists([str(p) for p in paths], [0, 1, 2])
    with loader(m, device="cuda", clip="uniform", clips_per_video=2,
                workers=extsrc.Workers(num_workers=1),
                batch_size=3) as ld:
        n = 0
        for batch in ld:
            assert batch["video"].is_cuda and batch["label"].is_cuda
            assert batch["start_frame"].is_pinned()
            check_clips({**batch, "video": batch["video"].cpu()}, ClipSpec(5, 2))
            n += len(batch["label"])
    assert n == 6


@pytest.mark.gpu
def test_gpu_names_a_video_too_small_for_its_decoder(tmp_path: Path) -> None:
    paths = [write_video(tmp_path / "big.webm", 12, "VP90", size=(128, 128)),
             write_video(tmp_path / "small.webm", 12, "VP90", size=(64, 48))]
    m = extsrc.Manifest.from_lists([str(p) for p in paths], [0, 1])
    workers = extsrc.Workers(num_workers=1, num_threads=1)
    with loader(m, device="cuda", workers=workers) as ld, pytest.raises(
            extsrc.BadVideoError) as e:
        next(iter(ld))
    assert (e.value.line, e.value.reason) == (2, "too_small_for_gpu")
    assert "64x48" in str(e.value) and "device='cpu'" in str(e.value)


def test_the_videos_too_small_for_the_gpu_decoder_are_found_by_their_container(
        tmp_path: Path) -> None:
    from extsrc.sources.video.source import find_too_small

    paths = [write_video(tmp_path / f"{k}.avi", 12, size=size)
             for k, size in enumerate([(64, 48), (160, 128), (40, 200)])]
    m = extsrc.Manifest.from_lists([str(p) for p in paths], [0, 1, 2])
    with loader(m, batch_size=3) as ld:
        source = ld.source
        assert find_too_small(source, 0, 0, (128, 128)) == (0, (64, 48))
        assert find_too_small(source, 0, 0, (40, 16)) is None
        assert find_too_small(source, 0, 0, (48, 16)) == (2, (40, 200))


def test_spawned_reader_processes_give_the_same_clips(videos: Path) -> None:
    # A GPU loader starts its readers with spawn: the source must pickle and behave the same.
    kw = {"shuffle": True, "seed": 2, "clip": "random"}
    with loader(videos / "train.csv", **kw) as ld:
        here = [(b["index"].tolist(), b["start_frame"].tolist()) for b in ld]
    with loader(videos / "train.csv", workers=extsrc.Workers(num_workers=1, start_method="spawn"),
                **kw) as ld:
        spawned = [(b["index"].tolist(), b["start_frame"].tolist()) for b in ld]
    assert spawned == here


def test_frame_data_the_decoder_refuses_is_named_by_line(videos: Path, tmp_path: Path) -> None:
    import struct

    data = bytearray((videos / "v0.avi").read_bytes())
    j = data.index(b"movi") + 4
    while data[j:j + 4] == b"00dc":  # every frame's JPEG zeroed; the headers stay intact
        n = struct.unpack_from("<I", data, j + 4)[0]
        data[j + 8:j + 8 + n] = bytes(n)
        j += 8 + n + (n & 1)
    (tmp_path / "zeros.avi").write_bytes(data)
    assert probe_video(bytes(data)).num_frames == LENGTHS[0]  # the container reads well
    m = extsrc.Manifest.from_lists([str(videos / "v1.avi"), str(tmp_path / "zeros.avi")], [0, 1])
    with pytest.raises(extsrc.BadVideoError, match=r"line 2: .*zeros\.avi: DALI's video decoder "
                       r"refuses it \(DALI said: .*\) \[corrupt\]") as e:
        for _ in loader(m, workers=extsrc.Workers(num_workers=1, num_threads=1)):
            pass
    assert (e.value.line, e.value.reason) == (2, "corrupt")
