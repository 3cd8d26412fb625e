"""What carries decoded images through DALI's parallel external source, and how fast.

A diagnostic: worker processes return either raw JPEG bytes or decoded-size ``uint8`` images
(500x375x3, no decoding work unless ``decode`` is in the case), and the pipeline only moves them:
to its CPU outputs, or to the GPU (``.gpu()``, which places the external source's output in
page-locked memory). Each case reports samples/s over whole epochs after a warm-up epoch.

    python benchmarks/es_transport.py --out results/es_transport.json              # GPU
    python benchmarks/es_transport.py --device cpu --workers 1,2 --out cpu.json    # no GPU

Cases (``--cases``): ``bytes`` (80 KB per sample), ``list`` (one array per sample), ``batch``
(one ``(B, H, W, 3)`` array per batch), ``decode`` (cv2 decodes real JPEGs in the worker, one
OpenCV thread per worker), each ``:cpu`` (outputs stay on the host) or ``:gpu`` (moved to the
GPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
H, W = 375, 500


class Source:
    """Picklable batch source for ``fn.external_source(batch=True, batch_info=True)``."""

    def __init__(self, kind: str, batch_size: int, batches: int, files: list[str]) -> None:
        self.kind, self.bs, self.batches, self.files = kind, batch_size, batches, files
        self._blank = None

    def __call__(self, info):
        if info.iteration >= self.batches:
            raise StopIteration
        labels = np.arange(self.bs, dtype=np.int64)
        if self.kind == "bytes":
            return [np.full(80_000, i, np.uint8) for i in range(self.bs)], labels
        if self.kind == "decode":
            import cv2

            cv2.setNumThreads(1)
            out = []
            for i in range(self.bs):
                k = (info.iteration * self.bs + i) % len(self.files)
                buf = np.fromfile(self.files[k], dtype=np.uint8)
                out.append(cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
            return out, labels
        if self._blank is None:  # fresh pages once; the copy into shared memory is what's timed
            self._blank = np.random.default_rng(0).integers(0, 256, (self.bs, H, W, 3), np.uint8)
        if self.kind == "batch":
            return self._blank, labels
        return [self._blank[i] for i in range(self.bs)], labels


def run_case(kind: str, where: str, *, workers: int, threads: int, batch_size: int,
             batches: int, epochs: int, gpu: bool, files: list[str], es_depth: int) -> dict:
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=batch_size, num_threads=threads, device_id=0 if gpu else None,
                    py_num_workers=workers, py_start_method="spawn" if gpu else "fork",
                    prefetch_queue_depth=2)
    with pipe:
        data, labels = fn.external_source(
            source=Source(kind, batch_size, batches, files), num_outputs=2, batch=True,
            batch_info=True, parallel=True, prefetch_queue_depth=es_depth)
        if where == "gpu":
            data, labels = data.gpu(), labels.gpu()
        pipe.set_outputs(data, labels)
    pipe.build()

    def epoch() -> int:
        n = 0
        try:
            while True:
                pipe.run()
                n += batch_size
        except StopIteration:
            pipe.reset()
        return n

    epoch()  # warm-up: workers start, shared memory grows to size
    t0 = time.perf_counter()
    n = sum(epoch() for _ in range(epochs))
    dt = time.perf_counter() - t0
    return {"samples": n, "seconds": round(dt, 3), "samples_per_s": round(n / dt, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--cases", default="bytes:gpu,list:cpu,list:gpu,batch:gpu,decode:cpu,"
                    "decode:gpu")
    ap.add_argument("--workers", default="2,4,8,14")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--batches", type=int, default=12, help="batches per epoch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--es-depth", default="1",
                    help="the external source's prefetch_queue_depth: batches computed ahead "
                         "(DALI's default 1), or 'workers' for one per worker; a comma list runs "
                         "each")
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import nvidia.dali
    import torch
    from data import make_dataset

    gpu = args.device != "cpu" and torch.cuda.is_available()
    manifest, _ = make_dataset(args.data, 512)
    files = sorted(str(p) for p in (Path(manifest).parent / "images").glob("*.jpg"))
    res = {"date": datetime.date.today().isoformat(),
           "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
           "machine": {"gpu": torch.cuda.get_device_name(0) if gpu else None,
                       "cpu_cores": len(os.sched_getaffinity(0)),
                       "platform": platform.platform(), "dali": nvidia.dali.__version__},
           "settings": vars(args), "cases": {}}
    for case in args.cases.split(","):
        kind, where = case.split(":")
        if where == "gpu" and not gpu:
            continue
        for w in (int(x) for x in args.workers.split(",")):
            for d in args.es_depth.split(","):
                depth = w if d == "workers" else int(d)
                r = run_case(kind, where, workers=w, threads=args.threads,
                             batch_size=args.batch_size, batches=args.batches,
                             epochs=args.epochs, gpu=gpu, files=files, es_depth=depth)
                res["cases"][f"{case}/w{w}/d{depth}"] = r
                print(f"{case:12s} workers={w:2d} depth={depth:2d} "
                      f"{r['samples_per_s']:>10,.0f} samples/s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
