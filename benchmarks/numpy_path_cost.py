"""What the numpy path's plumbing costs, without any op: raw DALI pipelines, one change at a time.

Every variant reads the same generated 500x375 JPEGs through a parallel raw-byte external source,
decodes them, and resizes to 224x224 on the GPU. In between:

- ``gpu_decode``: nothing (the resize-only ceiling);
- ``gpu_decode+cpu+gpu``: the decoded images copied to host memory (``.cpu()``) and back;
- ``gpu_decode+pyfn``: the same with an identity ``python_function`` (batch) on the host copy:
  the numpy path with an op that does nothing;
- ``gpu_decode+pool``, ``gpu_decode+threads``: that identity op run by extsrc's op pool
  (worker processes, or threads) inside the host ``python_function``, images copied from
  DALI's host buffers into the pool's memory. A GPU loader no longer does this: its pool takes
  the images from GPU memory (``extsrc.ops_runtime.runners.DeviceBatchOpRunner``), the design these
  figures led to;
- ``cpu_decode``: DALI's CPU decoder, then the upload; ``cpu_decode+pyfn``: with the identity
  ``python_function``;
- ``gpu_decode+pyfn_gpu``: an identity ``python_function(device="gpu")`` on CuPy arrays.

    python benchmarks/numpy_path_cost.py --out results/numpy_path_cost.json

Medians of ``--repeats`` interleaved rounds; compare variants inside one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("gpu_decode", "gpu_decode+cpu+gpu", "gpu_decode+pyfn", "gpu_decode+pool",
            "gpu_decode+threads", "cpu_decode", "cpu_decode+pyfn", "gpu_decode+pyfn_gpu")


def identity(img):
    return img


def build(variant: str, pairs, *, batch_size: int, threads: int, workers: int, pool_workers: int):
    from baselines import RawSource
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    import augment_ops
    from extsrc.ops_runtime.pool import OpPool
    from extsrc.ops_runtime.runners import BatchOpRunner
    from extsrc.sources.manifest import Manifest

    pool = None
    pipe = Pipeline(batch_size=batch_size, num_threads=threads, device_id=0, seed=0,
                    py_num_workers=workers, py_start_method="spawn")
    with pipe:
        jpegs, labels = fn.external_source(source=RawSource(pairs, batch_size), num_outputs=2,
                                           batch=True, batch_info=True, parallel=True,
                                           prefetch_queue_depth=workers)
        cpu_decode = variant.startswith("cpu_decode")
        img = fn.decoders.image(jpegs, device="cpu" if cpu_decode else "mixed",
                                output_type=types.RGB)
        if variant == "gpu_decode+cpu+gpu":
            img = img.cpu()
        elif variant in ("gpu_decode+pyfn", "cpu_decode+pyfn"):
            host = img.cpu() if img.device == "gpu" else img
            img = fn.python_function(host, function=lambda xs: xs, batch_processing=True)
        elif variant in ("gpu_decode+pool", "gpu_decode+threads"):
            op = augment_ops.Op(name="identity", fn=identity)
            pool = OpPool(pool_workers, "thread" if variant.endswith("threads") else "process")
            n = len(pairs)
            m = Manifest.from_lists([p for p, _ in pairs], [lab for _, lab in pairs])
            runner = BatchOpRunner(op, seed=0, manifest=m, pool=pool)
            idx = fn.external_source(
                source=lambda info: [__import__("numpy").array(
                    [(info.iteration * batch_size + k) % n, 0, 0]) for k in range(batch_size)],
                batch=True, batch_info=True)
            img = fn.python_function(img.cpu(), idx, function=runner, batch_processing=True)
        elif variant == "gpu_decode+pyfn_gpu":
            img = fn.python_function(img, function=lambda xs: xs, batch_processing=True,
                                     device="gpu")
        pipe.set_outputs(fn.resize(img.gpu(), resize_x=224, resize_y=224), labels.gpu())
    pipe.build()
    return pipe, pool


def measure(variant: str, pairs, *, min_seconds: float, **kw) -> dict:
    import torch  # noqa: F401  (CUDA context as in training)
    from baselines import pipeline_rate

    t0 = time.perf_counter()
    pipe, pool = build(variant, pairs, **kw)
    start = time.perf_counter()
    images, elapsed = pipeline_rate(pipe, warmup=4, seconds=min_seconds)
    if pool is not None:
        pool.close()
    return {"images_per_s": round(images / elapsed, 1), "images": images,
            "build_s": round(start - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--pool-workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from baselines import read_pairs
    from data import make_dataset

    manifest, _ = make_dataset(args.data, args.n)
    pairs = read_pairs(str(manifest))
    kw = {"batch_size": args.batch_size, "threads": args.threads, "workers": args.workers,
          "pool_workers": args.pool_workers}
    runs: dict[str, list[float]] = {}
    results = {"date": datetime.date.today().isoformat(),
               "command": "python " + " ".join(sys.argv), "settings": kw, "runs": runs}
    for _ in range(args.repeats):
        for v in args.variants.split(","):
            try:
                r = measure(v, pairs, min_seconds=args.min_seconds, **kw)["images_per_s"]
            except Exception as e:
                print(f"{v}: {type(e).__name__}: {e}", flush=True)
                r = 0.0
            runs.setdefault(v, []).append(r)
            print(f"{v}: {r:,.0f} images/s", flush=True)
        results["median"] = {v: sorted(rs)[len(rs) // 2] for v, rs in runs.items()}
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    for v, r in results["median"].items():
        print(f"| {v} | {r:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
