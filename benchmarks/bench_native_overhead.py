"""What the traced (native) path of users' ops costs on the CPU, per batch, beside no op at all.

For each op of ``user_ops.SUITE`` that traces, ``extsrc.Loader(device="cpu",
op_runtime=extsrc.OpRuntime(op_path="native"))``
against the same loader with no op, on two generated datasets:

- ``large``: 500x375 JPEGs (``benchmarks/data.py``), the work of the GPU benchmark on the CPU;
  decoding dominates, so differences are small;
- ``small``: 48x64 JPEGs resized to ``--small-resize`` (32x32), where decoding, resizing and
  pixel work are nearly free, so the per-batch time above the no-op loader is what a traced op
  costs whatever the image size: its per-sample scalars (sizes, bounds, draws, checks) and its
  operators' fixed costs.

``--graph`` adds the most direct measure: the traced op's DALI graph alone (``emit``) on a batch
of pre-made 8x8 to 16x16 images from an external source, no decoding and no resizing, against
the same pipeline without the op, in milliseconds per batch; with the time that numpy takes to
compute the op's per-sample scalars for a batch outside DALI (the readers' share, in the code
that has one).

Every image output of ``large`` is resized (stretched) to ``--resize``, as in
``bench_user_ops.py``. Each measurement builds the loader, skips ``--warmup`` batches and times
``--batches-large`` (``--batches-small``) batches; the
repeats are interleaved (every variant once per round) and the result is the median of the
rounds in milliseconds per batch and images per second.

    python benchmarks/bench_native_overhead.py --out results/native_overhead.json
"""

from __future__ import annotations

import argparse
import datetime
import gc
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def small_dataset(root: Path, n: int, size: tuple[int, int] = (48, 64)) -> Path:
    """``n`` small JPEGs of smooth noise and their manifest (reused when complete)."""
    from PIL import Image

    manifest = root / "manifest.csv"
    if manifest.exists() and len(manifest.read_text().splitlines()) == n + 1:
        return manifest
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = ["path,label"]
    for i in range(n):
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        (root / "images" / f"{i:05d}.jpg").write_bytes(buf.getvalue())
        lines.append(f"images/{i:05d}.jpg,{i % 10}")
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def measure(manifest: Path, transforms, ops, args, *, resize: int, batches: int) -> dict:
    import extsrc

    loader = extsrc.Loader(
        manifest, batch_size=args.batch_size, transforms=transforms, ops=ops, resize=resize,
        device="cpu", seed=0,
        op_runtime=extsrc.OpRuntime(op_path="native" if (transforms or ops) else None),
        format=extsrc.BatchFormat(resize_mode="stretch"),
        workers=extsrc.Workers(num_threads=args.threads, num_workers=args.workers))
    from data import across_epochs

    try:
        feed = across_epochs(loader)
        n = 0
        for _ in range(args.warmup):
            next(feed)
        start = time.perf_counter()
        for _ in range(batches):
            n += int(next(feed)["label"].shape[0])
        elapsed = time.perf_counter() - start
        paths = dict(loader.op_paths)
    finally:
        loader.close()
        gc.collect()
    return {"ms_per_batch": 1e3 * elapsed / batches, "images_per_s": n / elapsed,
            "op_paths": paths}


def graph_overhead(name: str, transforms, ops, args) -> dict:
    """ms per batch of the traced graphs of ``transforms`` then ``ops`` on tiny images, beside
    the same pipeline without them (``name == "no_op"``)."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    import augment_ops
    import augment_ops.lower_dali as lower
    import extsrc
    from augment_ops.trace import trace_op
    from extsrc.ops_runtime import native, seeding

    batch = args.batch_size
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (int(rng.integers(8, 17)), int(rng.integers(8, 17)), 3),
                         dtype=np.uint8) for _ in range(batch)]
    info = np.stack([np.arange(batch), np.zeros(batch, np.int64), np.zeros(batch, np.int64)],
                    axis=1).astype(np.int64)
    manifest = extsrc.Manifest.from_lists([f"{i}.jpg" for i in range(batch)], [0] * batch)
    reader_s = 0.0
    new_api = hasattr(lower, "SampleScalars")
    pipe = Pipeline(batch_size=batch, num_threads=args.threads, device_id=None)
    with pipe:
        img = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        inf = fn.external_source(source=lambda: info, batch=True)
        outs, image = [], img
        for k, op_name in enumerate((*transforms, *ops)):
            op = augment_ops.get(op_name)
            traced = trace_op(op)
            check = native.SizeCheck(op, manifest) if op.min_size > 1 else None
            if new_api:
                program = native.native_sample_scalars(op, seed=0)
                values = []
                if program is not None:
                    arrays = program(info[:, 0], info[:, 1])
                    start = time.perf_counter()
                    for _ in range(20):
                        program(info[:, 0], info[:, 1])
                    reader_s += (time.perf_counter() - start) / 20
                    values = [fn.external_source(source=(lambda v: lambda: v)(a), batch=True)
                              for a in arrays]
                got = lower.emit(traced, image, sample_values=values, info=inf, check=check,
                                 min_size=op.min_size)
            else:
                uniform = (native.CounterDraws(0, seeding.op_salt(op.name))
                           if traced.num_draws else None)
                got = lower.emit(traced, image, info=inf, uniform=uniform, check=check)
            if k < len(transforms):
                (image,) = got
            else:
                outs += got
        pipe.set_outputs(image, *outs)
    pipe.build()
    for _ in range(5):
        pipe.run()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.graph_batches):
            pipe.run()
        times.append(1e3 * (time.perf_counter() - start) / args.graph_batches)
    del pipe
    gc.collect()
    return {"ms_per_batch": round(statistics.median(times), 3),
            "repeats_ms": [round(t, 3) for t in times],
            "reader_ms_per_batch": round(1e3 * reader_s, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/tmp/extsrc-bench-native")
    p.add_argument("--datasets", default="small,large")
    p.add_argument("--n", type=int, default=1024, help="images per dataset")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--resize", type=int, default=224)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--small-resize", type=int, default=32)
    p.add_argument("--batches-small", type=int, default=40)
    p.add_argument("--batches-large", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--graph", action="store_true", help="also time the traced graphs alone")
    p.add_argument("--graph-batches", type=int, default=200)
    p.add_argument("--ops", default=None, help="comma-separated subset of user_ops.SUITE")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import user_ops
    from data import make_dataset

    import augment_ops

    suite = {name: spec for name, spec in user_ops.SUITE.items()
             if args.ops is None or name in args.ops.split(",")}
    skipped = {}
    for name, (transforms, ops) in list(suite.items()):
        why = [augment_ops.explain(o) for o in (*transforms, *ops)]
        if any(not w.startswith("native") for w in why):
            skipped[name] = "; ".join(w for w in why if not w.startswith("native"))
            del suite[name]
    variants = {"no_op": ((), ()), **suite}

    data = Path(args.data)
    manifests = {}
    for ds in filter(None, args.datasets.split(",")):
        if ds == "large":
            manifests[ds], _ = make_dataset(data / "large", args.n)
        else:
            manifests[ds] = small_dataset(data / "small", args.n)

    rounds: dict[str, dict[str, list[dict]]] = {ds: {v: [] for v in variants} for ds in manifests}
    for r in range(args.repeats):
        for ds, manifest in manifests.items():
            for name, (transforms, ops) in variants.items():
                small = ds == "small"
                got = measure(manifest, list(transforms), list(ops), args,
                              resize=args.small_resize if small else args.resize,
                              batches=args.batches_small if small else args.batches_large)
                rounds[ds][name].append(got)
                print(f"round {r} {ds:5s} {name:20s} {got['ms_per_batch']:8.2f} ms/batch "
                      f"{got['images_per_s']:8.0f} img/s", flush=True)

    results: dict[str, dict] = {}
    if args.graph:
        graph = {name: graph_overhead(name, *spec, args) for name, spec in variants.items()}
        for name, g in graph.items():
            g["ms_over_no_op"] = round(g["ms_per_batch"] - graph["no_op"]["ms_per_batch"], 3)
            print(f"graph {name:20s} {g['ms_per_batch']:8.3f} ms/batch "
                  f"(+{g['ms_over_no_op']:6.3f}), readers {g['reader_ms_per_batch']:.3f} ms",
                  flush=True)
        results["graph"] = graph
    for ds, per in rounds.items():
        base = statistics.median(g["ms_per_batch"] for g in per["no_op"])
        results[ds] = {}
        for name, gots in per.items():
            ms = statistics.median(g["ms_per_batch"] for g in gots)
            results[ds][name] = {
                "ms_per_batch": round(ms, 3),
                "images_per_s": round(statistics.median(g["images_per_s"] for g in gots), 1),
                "ms_over_no_op": round(ms - base, 3),
                "repeats_ms": [round(g["ms_per_batch"], 3) for g in gots],
                "op_paths": gots[0]["op_paths"],
            }
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                                capture_output=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    import nvidia.dali

    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "dali": nvidia.dali.__version__,
                    "numpy": np.__version__},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "not_traced": skipped,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for ds, per in results.items():
        for name, r in per.items():
            if ds == "graph":
                continue
            print(f"{ds:5s} {name:20s} {r['ms_per_batch']:8.2f} ms/batch "
                  f"(+{r['ms_over_no_op']:6.2f}) {r['images_per_s']:8.0f} img/s")


if __name__ == "__main__":
    main()
