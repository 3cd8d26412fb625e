"""Video clips: ``extsrc.VideoLoader`` against a PyTorch DataLoader and DALI's own video reader.

The job: ``--n`` generated videos of ``--frames`` frames at ``--height`` x ``--width``, clips of
``--sequence-length`` frames every ``--stride`` frames from a random start, every frame resized
to ``--resize`` x ``--resize`` (stretched: the same job for every variant), with labels, batches
of ``--batch-size`` clips. Variants:

- ``extsrc``: ``extsrc.VideoLoader`` (raw bytes read by worker processes, each clip's window of
  its file cut there, ``fn.decoders.video``, on the GPU through NVDEC);
- ``extsrc_whole``: the same with ``windows=False``: DALI gets every whole file;
- ``dataloader_decord``, ``dataloader_pyav``: a PyTorch ``DataLoader`` with one worker per core,
  each decoding with decord (resizing while decoding) or PyAV (seek to the key frame, decode,
  resize); each skipped when its decoder is not installed. Ratios are taken against the faster;
- ``dali_reader``: DALI's ``fn.readers.video`` (GPU only) on the same files, then ``fn.resize``.

Videos are generated at start with PyAV: a smooth random texture with fine grain sliding one
pixel a frame, encoded at ``--bitrate`` (4 Mb/s, the rate of 720p camera footage) as H.264
(``libx264``, a key frame every ``--gop`` frames) for a GPU, VP9 for ``--device cpu`` (DALI's
CPU decoder has no H.264); ``--codec`` overrides. Each measurement runs ``--warmup`` whole epochs,
then times whole epochs until ``--min-seconds`` have passed; ``--repeats`` interleaves the
variants and the JSON holds every repeat and the medians.

    python benchmarks/bench_video.py --out benchmarks/results/DATE_h100_video.json     # GPU
    python benchmarks/bench_video.py --device cpu --n 8 --frames 64 --height 144 \\
        --width 256 --repeats 1 --min-seconds 0                                        # smoke
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("extsrc", "extsrc_whole", "dataloader_decord", "dataloader_pyav", "dali_reader")
DECODERS = {"dataloader_decord": "decord", "dataloader_pyav": "av"}


# -- data ------------------------------------------------------------------------------------------
def _encode(job: tuple) -> None:
    """Write one video: a window sliding over a fixed image of smooth texture and fine grain."""
    import av
    import cv2

    path, k, frames, height, width, codec, gop, bitrate, suffix = job
    rng = np.random.default_rng(k)
    size = (width + frames, height + frames)
    coarse = rng.integers(0, 256, (size[1] // 24 + 2, size[0] // 24 + 2, 3), dtype=np.uint8)
    grain = rng.integers(-6, 7, (size[1], size[0], 3))
    base = np.clip(cv2.resize(coarse, size, interpolation=cv2.INTER_CUBIC) + grain, 0, 255)
    base = base.astype(np.uint8)
    tmp = path.with_name(path.stem + ".part" + suffix)
    with av.open(str(tmp), "w") as c:
        s = c.add_stream(codec, rate=30)
        s.width, s.height = width, height
        s.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        s.gop_size = gop
        if bitrate and codec != "mjpeg":
            s.bit_rate = bitrate
        if codec == "libvpx-vp9":
            s.options = {"deadline": "realtime", "cpu-used": "8", "row-mt": "1"}
        elif codec == "libx264":
            s.options = {"preset": "veryfast"}
        for i in range(frames):
            img = np.ascontiguousarray(base[i + k % 7:i + k % 7 + height, i:i + width])
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    tmp.rename(path)


def make_videos(root: Path, *, n: int, frames: int, height: int, width: int, codec: str,
                gop: int, bitrate: int = 0) -> list[tuple[str, int]]:
    """``n`` videos (a sliding texture), two classes, encoded in parallel; reused when there."""
    from concurrent.futures import ProcessPoolExecutor

    suffix = {"libx264": ".mp4", "h264": ".mp4", "libvpx-vp9": ".webm", "mjpeg": ".avi"}[codec]
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"v{k:04d}_{frames}f_{height}p_{bitrate // 1000}k{suffix}" for k in range(n)]
    jobs = [(p, k, frames, height, width, codec, gop, bitrate, suffix)
            for k, p in enumerate(paths) if not p.exists()]
    if jobs:
        with ProcessPoolExecutor(min(len(jobs), len(os.sched_getaffinity(0)))) as pool:
            list(pool.map(_encode, jobs))
    return [(str(p), k % 2) for k, p in enumerate(paths)]


# -- variants --------------------------------------------------------------------------------------
def extsrc_epochs(pairs, args, gpu, windows=True):
    import extsrc

    m = extsrc.Manifest.from_lists([p for p, _ in pairs], [y for _, y in pairs])
    return extsrc.VideoLoader(
        m, batch_size=args.batch_size, sequence_length=args.sequence_length, stride=args.stride,
        clip="random", resize=args.resize, device="cuda" if gpu else "cpu", windows=windows,
        format=extsrc.BatchFormat(resize_mode="stretch"),
        workers=extsrc.Workers(num_workers=args.workers, num_threads=args.threads),
        sampling=extsrc.Sampling(last_batch="drop"),
    )


class ClipDataset:
    """One random clip per video, decoded on the CPU by decord (or PyAV), resized, as uint8
    ``(F, H, W, C)`` tensors."""

    def __init__(self, pairs, sequence_length, stride, size, backend):
        self.pairs, self.length, self.stride, self.size = pairs, sequence_length, stride, size
        self.backend = backend
        self.epoch = 0

    def __len__(self):
        return len(self.pairs)

    def frames(self, n, i):
        span = (self.length - 1) * self.stride + 1
        rng = np.random.default_rng([self.epoch, i])
        start = int(rng.integers(0, max(1, n - span + 1)))
        return [start + f * self.stride for f in range(self.length)]

    def __getitem__(self, i):
        import torch

        path, label = self.pairs[i]
        if self.backend == "decord":
            import decord

            vr = decord.VideoReader(path, ctx=decord.cpu(0), width=self.size, height=self.size,
                                    num_threads=1)
            clip = vr.get_batch(self.frames(len(vr), i)).asnumpy()
        else:
            clip = self._pyav(path, i)
        return torch.from_numpy(clip), label

    def _pyav(self, path, i):
        import av

        with av.open(path) as c:
            s = c.streams.video[0]
            s.thread_count = 1  # one worker per core: no decoding threads of its own
            want = self.frames(s.frames, i)
            # Frame numbers from presentation times: seek to the key frame before the first.
            rate = s.average_rate
            c.seek(int(want[0] / rate / s.time_base), stream=s, backward=True)
            got = {}
            for frame in c.decode(s):
                k = round(frame.pts * s.time_base * rate)
                if k in want:
                    got[k] = frame.reformat(width=self.size, height=self.size,
                                            format="rgb24").to_ndarray()
                if k >= want[-1]:
                    break
        last = got[max(got)]
        return np.stack([got.get(k, last) for k in want])


def dataloader_epochs(pairs, args, backend):
    import torch

    ds = ClipDataset(pairs, args.sequence_length, args.stride, args.resize, backend)
    return torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, shuffle=True, num_workers=os.cpu_count() or 1,
        persistent_workers=True, drop_last=True, prefetch_factor=2,
    )


def dali_reader_epochs(pairs, args):
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads, device_id=0, seed=0)
    def pipe():
        clips, labels = fn.readers.video(
            device="gpu", filenames=[p for p, _ in pairs], labels=[y for _, y in pairs],
            sequence_length=args.sequence_length, stride=args.stride, random_shuffle=True,
            initial_fill=len(pairs), name="Reader",
        )
        return fn.resize(clips, resize_x=args.resize, resize_y=args.resize), labels

    p = pipe()
    p.build()
    return DALIGenericIterator(p, ["video", "label"], reader_name="Reader",
                               last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)


# -- measurement -----------------------------------------------------------------------------------
def measure(iterable, *, warmup, min_seconds, gpu):
    """Clips per second over whole epochs after ``warmup`` whole epochs."""
    import torch

    def batches():
        for b in iterable:
            b = b[0] if isinstance(b, list) and isinstance(b[0], dict) else b
            video = b["video"] if isinstance(b, dict) else b[0]
            if gpu and not video.is_cuda:
                video = video.to("cuda", non_blocking=True)
            yield video

    for _ in range(warmup):  # whole epochs: a loop left part-way would restart a loader
        for _video in batches():
            pass
    if gpu:
        torch.cuda.synchronize()
    clips, t0 = 0, time.perf_counter()
    while True:
        for video in batches():
            clips += video.shape[0]
        if gpu:
            torch.cuda.synchronize()
        if time.perf_counter() - t0 >= min_seconds:
            break
    return clips / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--codec", default=None, help="PyAV encoder: libx264, libvpx-vp9, mjpeg")
    ap.add_argument("--gop", type=int, default=60, help="frames between key frames")
    ap.add_argument("--bitrate", type=float, default=4.0,
                    help="Mb/s (4: 720p camera footage); 0 leaves the encoder's default")
    ap.add_argument("--sequence-length", type=int, default=16)
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--resize", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=None, help="extsrc reader processes")
    ap.add_argument("--threads", type=int, default=None, help="DALI threads")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="whole epochs before timing")
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--data", type=Path, default=Path("/tmp/extsrc-bench-video"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    gpu = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    cores = os.cpu_count() or 1
    args.threads = args.threads or max(2, min(12, cores - 4))
    codec = args.codec or ("libx264" if gpu else "libvpx-vp9")
    pairs = make_videos(args.data / codec, n=args.n, frames=args.frames, height=args.height,
                        width=args.width, codec=codec, gop=args.gop,
                        bitrate=int(args.bitrate * 1e6))
    makers = {
        "extsrc": lambda: extsrc_epochs(pairs, args, gpu),
        "extsrc_whole": lambda: extsrc_epochs(pairs, args, gpu, windows=False),
        "dali_reader": (lambda: dali_reader_epochs(pairs, args)) if gpu else None,
    }
    for v, backend in DECODERS.items():
        installed = importlib.util.find_spec(backend) is not None
        makers[v] = (lambda b=backend: dataloader_epochs(pairs, args, b)) if installed else None
    results: dict[str, list[float]] = {v: [] for v in args.variants}
    skipped = {v: (f"{DECODERS[v]} is not installed" if v in DECODERS else "needs a GPU")
               for v in args.variants if makers[v] is None}
    for r in range(args.repeats):
        for v in args.variants:
            if makers[v] is None:
                continue
            it = makers[v]()
            try:
                rate = measure(it, warmup=args.warmup, min_seconds=args.min_seconds, gpu=gpu)
            finally:
                if hasattr(it, "close"):
                    it.close()
                del it
            results[v].append(rate)
            print(f"repeat {r} {v}: {rate:,.1f} clips/s", flush=True)
    medians = {v: statistics.median(x) for v, x in results.items() if x}
    ratios = {}
    loaders = [medians[v] for v in DECODERS if v in medians]
    if "extsrc" in medians:
        for v in ("extsrc_whole", *DECODERS, "dali_reader"):
            if v in medians:
                ratios[f"extsrc/{v}"] = medians["extsrc"] / medians[v]
        if loaders:
            ratios["extsrc/best_dataloader"] = medians["extsrc"] / max(loaders)
    import nvidia.dali

    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "machine": {"gpu": torch.cuda.get_device_name(0) if gpu else None, "cpu_cores": cores,
                    "platform": platform.platform(), "python": platform.python_version(),
                    "dali": nvidia.dali.__version__, "torch": torch.__version__},
        "job": {"videos": args.n, "frames": args.frames, "size": [args.height, args.width],
                "codec": codec, "gop": args.gop, "bitrate_mbps": args.bitrate,
                "sequence_length": args.sequence_length,
                "stride": args.stride, "resize": args.resize, "batch_size": args.batch_size,
                "dataloader_threads_per_worker": 1},
        "clips_per_s": results, "median_clips_per_s": medians, "ratios": ratios,
        "skipped": skipped,
    }
    print(json.dumps({"median_clips_per_s": medians, "ratios": ratios, "skipped": skipped}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
