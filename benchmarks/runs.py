"""What the throughput benchmarks of this folder (``bench_user_ops.py``, ``bench_realops.py``)
share: a variant under measurement (:class:`Epochs`) and how it is measured (:func:`measure`),
the rounds that interleave every variant (:func:`interleave`), the split of the cores between
DALI's readers and threads (:func:`cpu_split`), the options they share (:func:`add_options`)
and the head of every results file (:func:`header`: the date, the command, the machine and the
dataset).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any


class Epochs:
    """One variant under measurement: ``epoch()`` iterates one epoch; ``close()`` lets it go."""

    def __init__(self, iterable, *, gpu: bool = False, op_paths=None, dali=None) -> None:
        self.iterable, self.gpu, self.op_paths = iterable, gpu, op_paths
        self.dali = dali  # extsrc: the DALI threads and readers the loader chose

    def epoch(self):
        for batch in self.iterable:
            if self.gpu:  # DataLoader batches arrive on the host; training needs them on the GPU
                batch = [t.to("cuda", non_blocking=True) for t in batch]
            yield batch

    def close(self) -> None:
        if hasattr(self.iterable, "close"):
            self.iterable.close()
        # DataLoader workers and DALI pipelines end when collected: do it now, before the next
        # variant forks its own processes.
        self.iterable = None
        gc.collect()


def batch_len(batch) -> int:
    if isinstance(batch, dict):
        return int(batch["label"].shape[0])
    if isinstance(batch, list) and batch and isinstance(batch[0], dict):  # DALIGenericIterator
        return int(batch[0]["label"].shape[0])
    return int(batch[-1].shape[0])


def measure(make: Any, *, warmup: int, min_seconds: float, gpu: bool) -> dict[str, Any]:
    """Build, time the first batch, skip ``warmup`` batches, then time batches (across epochs,
    and stopping inside one) until ``min_seconds`` have passed."""

    def sync() -> None:
        if gpu:
            import torch

            torch.cuda.synchronize()

    t = time.perf_counter()
    runner = make()
    built = time.perf_counter() - t
    first = None
    seen, n, batches, t0 = 0, 0, 0, None
    try:
        done = False
        while not done:
            for b in runner.epoch():
                if first is None:
                    sync()
                    first = time.perf_counter() - t
                if t0 is None:
                    seen += 1
                    if seen >= warmup:
                        sync()
                        t0 = time.perf_counter()
                    continue
                n += batch_len(b)
                batches += 1
                if time.perf_counter() - t0 >= min_seconds:
                    done = True
                    break
        sync()
        dt = time.perf_counter() - t0
    finally:
        runner.close()  # before its figures are read: a runner may add some as it closes
        op_paths, dali = runner.op_paths, runner.dali
        gc.collect()
    out: dict[str, Any] = {"images": n, "seconds": round(dt, 3),
                           "images_per_s": round(n / dt, 1), "timed_batches": batches,
                           "build_s": round(built, 2), "to_first_batch_s": round(first or 0.0, 3)}
    if op_paths is not None:
        out["op_paths"] = op_paths
    if dali is not None:
        out["dali"] = dali
    return out


def add_options(ap: argparse.ArgumentParser, *, n: int, ops: str, repeats: int,
                cores: str = "") -> None:
    """The options of every throughput benchmark: the dataset (``--data``, ``--n``, default
    ``n``), the job (``--batch-size``, ``--resize``, ``--device``, ``--ops`` with the help
    ``ops``), DALI's readers and threads (``cores``: whose they are, for their help), and the
    measurement (``--warmup``, ``--min-seconds``, ``--repeats``, default ``repeats``, ``--out``)."""
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=n, help=f"number of JPEGs (default {n})")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--resize", type=int, default=224)
    ap.add_argument("--device", default=None, help="'cpu' for the CPU-only mode; default: GPU 0")
    ap.add_argument("--ops", default=None, help=ops)
    ap.add_argument("--workers", type=int, default=None, help=f"reader processes{cores}")
    ap.add_argument("--threads", type=int, default=None, help=f"DALI threads{cores}")
    ap.add_argument("--warmup", type=int, default=4, help="untimed batches first")
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--out", default=None, help="write the results as JSON here")


def probe_options(ap: argparse.ArgumentParser, *, data: str, repeats: int,
                  min_seconds: float) -> None:
    """The options every probe of ``probes/`` shares: the dataset (``--data``, default ``data``;
    ``--n``) and the measurement (``--repeats``, ``--min-seconds``, ``--out``)."""
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--min-seconds", type=float, default=min_seconds)
    ap.add_argument("--data", default=data)
    ap.add_argument("--out", default=None)


def run_probe(variants: Mapping[str, Callable[[], Epochs]], args: argparse.Namespace, *,
              cores: int, mean_bytes: float) -> dict[str, Any]:
    """A probe's variants measured on the GPU by :func:`interleave` (3 untimed batches each)
    with its :func:`probe_options`, the results written to ``--out`` after every round; prints
    each variant's median images/s and returns the results."""
    results = header(None, gpu=True, cores=cores, n=args.n, mean_bytes=mean_bytes,
                     generate_s=0.0)
    interleave(variants, repeats=args.repeats, warmup=3, min_seconds=args.min_seconds,
               gpu=True, after_round=medians_written(results, args.out))
    width = max(map(len, variants), default=0) + 2
    for k, v in results["median_images_per_s"].items():
        print(f"{k:{width}s} {v:10.1f}")
    return results


def medians_written(results: dict[str, Any], out: str | None
                    ) -> Callable[[dict[str, list[dict[str, Any]]], int], None]:
    """An ``after_round`` for :func:`interleave` that puts the rounds done, each variant's
    median images/s and every round into ``results``, and writes it as JSON to ``out``."""
    import json
    import statistics
    from pathlib import Path

    def summary(runs: dict[str, list[dict[str, Any]]], rounds: int) -> None:
        results["rounds"] = rounds
        results["median_images_per_s"] = {
            k: statistics.median([r["images_per_s"] for r in v]) for k, v in runs.items()}
        results["runs"] = runs
        if out:
            Path(out).write_text(json.dumps(results, indent=1, default=str))
    return summary


def interleave(variants: Mapping[str, Callable[[], Epochs]], *, repeats: int, warmup: int,
               min_seconds: float, gpu: bool,
               after_round: Callable[[dict[str, list[dict[str, Any]]], int], None],
               ) -> dict[str, list[dict[str, Any]]]:
    """Every variant measured once per round, ``repeats`` rounds, interleaved so that slow
    drift of the machine hits every variant alike: ``{variant: [its measurement per round]}``.
    ``after_round(runs, rounds_done)`` runs after every round, so that a run cut short still
    leaves its finished rounds."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(repeats):
        for name, make in variants.items():
            try:
                r = measure(make, warmup=warmup, min_seconds=min_seconds, gpu=gpu)
            except Exception as e:  # one failing variant must not lose the others' numbers
                r = {"error": f"{type(e).__name__}: {str(e)[:400]}", "images_per_s": 0.0}
            runs.setdefault(name, []).append(r)
            print(f"[bench] {rep + 1}/{repeats} {name}: {r}", flush=True)
        after_round(runs, rep + 1)
    return runs


def cpu_split(workers: int | None, threads: int | None, cores: int) -> tuple[int, int]:
    """``(reader processes, DALI threads)``: those given, else a quarter of the cores (1 to 4)
    reading and the rest (2 to 12) as threads."""
    workers = workers if workers is not None else min(4, max(1, cores // 4))
    threads = threads if threads is not None else max(2, min(12, cores - workers))
    return workers, threads


def header(argv: list[str] | None, *, gpu: bool, cores: int, n: int, mean_bytes: float,
           generate_s: float) -> dict[str, Any]:
    """The head of a results file: the date, the command line (``argv``: the arguments
    ``main`` was given, ``None``: the process's), the machine and the generated dataset."""
    import numpy as np
    import nvidia.dali
    import torch

    return {
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                         else sys.argv[1:])]),
        "machine": {"gpu": torch.cuda.get_device_name(0) if gpu else None, "cpu_cores": cores,
                    "platform": platform.platform(), "python": platform.python_version(),
                    "dali": nvidia.dali.__version__, "torch": torch.__version__,
                    "numpy": np.__version__},
        "dataset": {"n": n, "mean_jpeg_bytes": round(mean_bytes),
                    "generate_s": round(generate_s, 1), "image_size": "500x375"},
    }
