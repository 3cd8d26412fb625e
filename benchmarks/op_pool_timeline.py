"""Where a GPU loader's op pool spends a batch: medians of per-batch timings.

Runs ``extsrc.Loader(transforms=[op], device="cuda:0",
op_runtime=extsrc.OpRuntime(op_path="numpy"))`` over the generated
500x375 JPEGs (``data.py``) and times, for every batch the pool's ``dl_tensor_python_function``
is called with:

- ``before_pool_ms``: from the call to the pool's start (DLPack conversions, info rows to host);
- ``first_reply_ms`` / ``last_reply_ms``: from the pool's start to the first and the last
  worker reply (the spread between them is time some workers sit idle);
- ``pool_ms``: the pool's whole run (copies in, the workers, uploads as replies arrive);
- ``after_pool_ms``: from the pool's end to the call's return (waiting for the uploads);
- ``gap_between_calls_ms``: from one call's return to the next call (what the rest of the
  pipeline takes that the pool does not overlap).

It wraps extsrc's own functions to take the times (``OpPool._run_processes``, ``recv_message``,
``DeviceBatchOpRunner.__call__``), so it measures the code as it is. ``--bound`` also measures
what the op alone costs: the op on 8 random images in a loop, in 1 and in ``--workers`` spawned
processes at once, without the op workers' malloc settings.

    python benchmarks/op_pool_timeline.py --ops jitter,posterize --out timeline.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def _spin(args: tuple[str, float, int]) -> tuple[int, float]:
    """Images the op handles in this process over about ``seconds``, and the seconds taken,
    cycling over ``images`` distinct images (8 stay in the caches; 64, 36 MB a process, do
    not, as in the op pool). Timed after the images are made, the clock read every image."""
    name, seconds, images = args
    import user_ops  # noqa: F401  (registers the ops)

    import augment_ops

    op = augment_ops.get(name)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 255, (375, 500, 3), dtype=np.uint8) for _ in range(images)]
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        op.apply(imgs[n % images], np.random.default_rng(n) if op.random else None)
        n += 1
    return n, time.perf_counter() - t


def compute_bound(name: str, procs: int, seconds: float = 2.0, *,
                  worker_malloc: bool = False, images: int = 8) -> float:
    """Images/s of the op alone in ``procs`` processes at once; ``worker_malloc``: with the op
    pool workers' malloc settings (``extsrc.ops_runtime.procs.worker_env``), as the op pool runs it;
    ``images``: distinct images each process cycles over (see ``_spin``)."""
    import multiprocessing as mp
    from unittest import mock

    from extsrc.ops_runtime.procs import worker_env

    malloc = {k: v for k, v in worker_env().items() if k.startswith("MALLOC_")}
    # Read by glibc when each spawned process starts; this process's environment is restored.
    with mock.patch.dict(os.environ, malloc if worker_malloc else {}), \
            mp.get_context("spawn").Pool(procs) as pool:
        pool.map(_spin, [(name, 0.1, images)] * procs)  # imports done before timing
        timed = pool.map(_spin, [(name, seconds, images)] * procs)
    return round(sum(n / dt for n, dt in timed), 1)


def timeline(manifest: str, name: str, *, op_workers: int, threads: int, readers: int,
             epochs: int) -> dict:
    import torch

    import extsrc
    from extsrc.ops_runtime import pool as oppool
    from extsrc.ops_runtime import runners

    rec: list[tuple[float, float, float, float, list[float]]] = []
    state: dict = {}
    call0, run0, recv0 = (runners.DeviceBatchOpRunner.__call__, oppool.OpPool._run_processes,
                          oppool.recv_message)

    def call(self, images, infos):
        t0 = time.perf_counter()
        state["replies"] = []
        r = call0(self, images, infos)
        rec.append((t0, state["run0"], state["run1"], time.perf_counter(), state["replies"]))
        return r

    def run(self, *a, **k):
        state["run0"] = time.perf_counter()
        r = run0(self, *a, **k)
        state["run1"] = time.perf_counter()
        return r

    def recv(sock):
        r = recv0(sock)
        state.setdefault("replies", []).append(time.perf_counter())
        return r

    runners.DeviceBatchOpRunner.__call__ = call
    oppool.OpPool._run_processes = run
    oppool.recv_message = recv
    try:
        loader = extsrc.Loader(
            manifest, batch_size=128, transforms=(name,), resize=224, device="cuda:0",
            op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=op_workers),
            workers=extsrc.Workers(num_threads=threads, num_workers=readers),
            format=extsrc.BatchFormat(resize_mode="stretch"))
        n, t0 = 0, None
        for ep in range(epochs):
            for k, b in enumerate(loader):
                if ep == 0 and k == 4:
                    torch.cuda.synchronize()
                    t0, n = time.perf_counter(), 0
                n += b["label"].shape[0]
        torch.cuda.synchronize()
        rate = n / (time.perf_counter() - t0)
        loader.close()
    finally:
        runners.DeviceBatchOpRunner.__call__ = call0
        oppool.OpPool._run_processes = run0
        oppool.recv_message = recv0
    r = rec[8:]

    def med(xs) -> float:
        return round(1000 * float(np.median(xs)), 2)

    return {
        "images_per_s": round(rate, 1), "batches": len(r),
        "call_ms": med([x[3] - x[0] for x in r]),
        "before_pool_ms": med([x[1] - x[0] for x in r]),
        "pool_ms": med([x[2] - x[1] for x in r]),
        "first_reply_ms": med([x[4][0] - x[1] for x in r if x[4]]),
        "last_reply_ms": med([x[4][-1] - x[1] for x in r if x[4]]),
        "after_pool_ms": med([x[3] - x[2] for x in r]),
        "gap_between_calls_ms": med([r[i + 1][0] - r[i][3] for i in range(len(r) - 1)]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--ops", default="jitter,posterize")
    ap.add_argument("--settings", default="16:12,15:8",
                    help="op_workers:dali_threads pairs, comma-separated")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--bound", action="store_true", help="also time the op alone")
    ap.add_argument("--workers", type=int, default=16, help="processes for --bound")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch
    import user_ops  # noqa: F401
    from data import make_dataset

    manifest, _ = make_dataset(args.data, args.n)
    out: dict = {"date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
                 "gpu": torch.cuda.get_device_name(0), "cpu_cores": len(os.sched_getaffinity(0)),
                 "n": args.n, "bound": {}, "timeline": {}}
    for name in args.ops.split(","):
        if args.bound:
            out["bound"][name] = {"1_process": compute_bound(name, 1),
                                  f"{args.workers}_processes": compute_bound(name, args.workers)}
            print(name, out["bound"][name], flush=True)
        for pair in args.settings.split(","):
            ow, threads = (int(x) for x in pair.split(":"))
            got = timeline(str(manifest), name, op_workers=ow, threads=threads,
                           readers=args.readers, epochs=args.epochs)
            out["timeline"][f"{name} op_workers={ow} dali_threads={threads}"] = got
            print(name, ow, threads, got, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
