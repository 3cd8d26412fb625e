"""What a clip's start costs DALI's ``fn.decoders.video``: the time to decode one clip from
raw bytes at several start frames, on the CPU (VP9, and Motion JPEG, where every frame is a key
frame) or on the GPU (``--device gpu``: H.264 through NVDEC).

A decoder that seeks to the key frame before the start decodes at most one key-frame interval
more than the clip, whatever the start; one that decodes from the first frame takes longer the
later the clip starts. Videos as in ``bench_video.py`` (``--frames`` frames, a key frame every
``--gop``), ``--batch`` of them per batch, every clip ``--sequence-length`` frames every
``--stride``.

    python benchmarks/video_seek_cost.py --out results/video_seek_cost.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def ms_per_batch(data: list[np.ndarray], start: int, *, device: str, args) -> float:
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=len(data), num_threads=args.threads,
                  device_id=0 if device == "gpu" else None)
    def pipe():
        enc = fn.external_source(source=lambda: data, batch=True)
        return fn.decoders.video(enc, device="mixed" if device == "gpu" else "cpu",
                                 start_frame=start, sequence_length=args.sequence_length,
                                 stride=args.stride)

    p = pipe()
    p.build()
    p.run()
    t0 = time.perf_counter()
    for _ in range(args.runs):
        p.run()
    return (time.perf_counter() - t0) / args.runs * 1e3


def main(argv=None) -> int:
    import bench_video

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--codecs", nargs="+", default=None)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--height", type=int, default=360)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--gop", type=int, default=60)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--sequence-length", type=int, default=16)
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path("/tmp/extsrc-video-seek"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    codecs = args.codecs or (["libx264"] if args.device == "gpu" else ["mjpeg", "libvpx-vp9"])
    span = (args.sequence_length - 1) * args.stride + 1
    starts = sorted({0, args.gop, 2 * args.gop, args.frames - span})
    results: dict[str, dict[str, float]] = {}
    for codec in codecs:
        pairs = bench_video.make_videos(args.data / codec, n=args.batch, frames=args.frames,
                                        height=args.height, width=args.width, codec=codec,
                                        gop=args.gop, bitrate=2_000_000)
        data = [np.fromfile(p, np.uint8) for p, _ in pairs]
        results[codec] = {str(s): round(ms_per_batch(data, s, device=args.device, args=args), 1)
                          for s in starts}
        print(codec, "ms per batch by start frame:", results[codec], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({
            "date": datetime.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv),
            "machine": {"platform": platform.platform()},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "ms_per_batch_by_start_frame": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
