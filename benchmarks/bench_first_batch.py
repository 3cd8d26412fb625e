"""Time to the first batch: what a person waits for between ``Loader(...)`` and training.

Every variant runs in a fresh Python process (``cold``: the first loader in a process), then
builds the same loader again in that process (``warm``: a second loader, a re-run notebook
cell). Stages, in seconds:

- ``import``: importing the loader's libraries (extsrc, DALI, torch);
- ``manifest``: reading the manifest (``extsrc.read_manifest``; the baselines read the same CSV);
- ``construct``: ``Loader(...)`` (arguments checked, ops traced) or the baseline's object;
  ``trace`` is the part of it spent in ``augment_ops.trace.trace_op``;
- ``first_batch``: ``next(iter(loader))`` (pipeline build, reader and op workers started, the
  first batch read, decoded, augmented, resized); ``build`` is the part spent in DALI's
  ``Pipeline.build`` (reader processes started and waited for);
- ``second_batch``: the next batch;
- ``to_first_batch``: manifest + construct + first_batch, the headline figure.

Variants: ``dali``, a bare DALI pipeline of the same job (parallel external source of raw
bytes -> decode, on the GPU when there is one -> resize); ``dataloader``, a PyTorch
``DataLoader`` with PIL, one worker per core (``--dl-workers``); ``extsrc``, the Loader without
ops; ``extsrc_builtin``, with the built-in ``random_hflip``; and the Loader with users' ops as
people write them: ``cutout`` (sizes from ``int(h * frac)``, ``rng.integers``, a copy and a
region fill), ``crop_flip`` (a random crop and a random flip), ``contrast`` (around
``img.mean()``), ``jitter`` (``benchmarks/user_ops.py``).

    python benchmarks/bench_first_batch.py --device cpu --n 256 --batch-size 32 --repeats 3 \
        --out benchmarks/results/first_batch_cpu.json
    python benchmarks/bench_first_batch.py --device cuda --n 1024 --repeats 3 --out gpu.json

Medians over ``--repeats`` rounds; rounds interleave the variants. Compare variants within one
run: absolute times drift between machines and days.
"""

from __future__ import annotations

import time

T_START = time.time()  # before any import of this process: interpreter start is measured too

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("dali", "dali_inline", "dataloader", "extsrc", "extsrc_inline", "extsrc_builtin",
            "cutout", "crop_flip", "contrast", "jitter")
STAGES = ("start", "import", "manifest", "construct", "trace", "first_batch", "build",
          "second_batch", "to_first_batch", "images_per_s")


# -- users' ops, written as people write them -----------------------------------------------------
def register_user_ops() -> None:
    import numpy as np

    from augment_ops import augment_op

    @augment_op(replace=True)
    def cutout(img, rng: np.random.Generator, frac: float = 0.25):
        h, w = img.shape[:2]
        ch, cw = max(1, int(h * frac)), max(1, int(w * frac))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        out = img.copy()
        out[y:y + ch, x:x + cw] = 0
        return out

    @augment_op(replace=True)
    def crop_flip(img, rng: np.random.Generator, size: int = 256):
        h, w = img.shape[:2]
        top = int(rng.integers(0, max(1, h - size + 1)))
        left = int(rng.integers(0, max(1, w - size + 1)))
        out = img[top:top + size, left:left + size]
        if rng.random() < 0.5:
            out = out[:, ::-1]
        return out

    @augment_op(replace=True)
    def contrast(img, rng: np.random.Generator, amount: float = 0.3):
        factor = rng.uniform(1 - amount, 1 + amount)
        mean = img.mean()
        return np.clip((img - mean) * factor + mean, 0, 255).astype(np.uint8)

    import user_ops  # noqa: F401  (jitter)


# -- one variant in this process ------------------------------------------------------------------
class Clock:
    """Accumulates the seconds spent inside wrapped functions (trace, build)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, owner, name: str, stage: str) -> None:
        fn = getattr(owner, name)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.spent[stage] = self.spent.get(stage, 0.0) + time.perf_counter() - t

        setattr(owner, name, timed)

    def take(self, stage: str) -> float:
        return self.spent.pop(stage, 0.0)


def _bare_dali(manifest: str, args, gpu: bool, parallel: bool = True):
    from baselines import RawSource, read_pairs
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    cores = len(os.sched_getaffinity(0))
    workers = max(1, min(4, cores // 4))
    pipe = Pipeline(batch_size=args.batch_size, num_threads=max(1, min(12, cores - workers)),
                    device_id=0 if gpu else None, seed=0, py_num_workers=workers,
                    py_start_method="spawn" if gpu else "fork")
    readers = {"parallel": True, "prefetch_queue_depth": workers} if parallel else {}
    with pipe:
        jpegs, labels = fn.external_source(
            source=RawSource(read_pairs(manifest), args.batch_size), num_outputs=2, batch=True,
            batch_info=True, **readers)
        img = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        img = fn.resize(img, resize_shorter=args.resize)
        img = fn.crop(img, crop=(args.resize, args.resize))
        pipe.set_outputs(img, labels.gpu() if gpu else labels)
    pipe.build()
    return DALIGenericIterator(pipe, ["image", "label"], auto_reset=True,
                               last_batch_policy=LastBatchPolicy.PARTIAL)


def _dataloader(manifest: str, args, gpu: bool):
    import numpy as np
    import torch
    from baselines import pil_rgb, read_pairs
    from PIL import Image

    class Images(torch.utils.data.Dataset):
        def __init__(self, pairs):
            self.pairs = pairs

        def __len__(self):
            return len(self.pairs)

        def __getitem__(self, i):
            path, label = self.pairs[i]
            im = Image.fromarray(pil_rgb(path))
            w, h = im.size
            s = args.resize / min(w, h)
            im = im.resize((max(args.resize, round(w * s)), max(args.resize, round(h * s))),
                           Image.BILINEAR)
            w, h = im.size
            left, top = (w - args.resize) // 2, (h - args.resize) // 2
            im = im.crop((left, top, left + args.resize, top + args.resize))
            return torch.from_numpy(np.asarray(im)), label

    workers = args.dl_workers if args.dl_workers is not None else len(os.sched_getaffinity(0))
    return torch.utils.data.DataLoader(Images(read_pairs(manifest)), batch_size=args.batch_size,
                                       shuffle=True, num_workers=workers, pin_memory=gpu)


def _extsrc(manifest, args, gpu: bool, variant: str):
    import extsrc

    transforms = {"extsrc": [], "extsrc_inline": [], "extsrc_builtin": ["random_hflip"]}.get(
        variant, [variant])
    workers = extsrc.Workers(num_workers=0 if variant == "extsrc_inline" else None)
    return extsrc.Loader(manifest, batch_size=args.batch_size, transforms=transforms,
                         resize=args.resize, device="cuda" if gpu else "cpu", workers=workers)


def _steady(loader, it, batches: int, gpu: bool) -> float:
    """Images/s over ``batches`` more batches after the second, across epochs as needed."""
    import torch
    from data import across_epochs

    n, t = 0, time.perf_counter()
    feed = across_epochs(loader, it)
    for _ in range(batches):
        out = next(feed)
        if isinstance(out, (list, tuple)):
            out = out[0]  # DALI's iterator: one dict per pipeline; a DataLoader: (images, labels)
        n += len(next(iter(out.values()))) if isinstance(out, dict) else len(out)
    if gpu:
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t)


def child(args) -> dict:
    """Run one variant in this process: cold, then warm; the stage times as a dict."""
    t = time.perf_counter()
    wall0 = time.time()
    gpu = args.device == "cuda"
    if args.variant == "dataloader":
        import torch
    else:
        import nvidia.dali  # noqa: F401
        import torch

        import extsrc
        from augment_ops import trace
        from extsrc._dali import run as dali_run
    if args.variant not in ("dali", "dali_inline", "dataloader"):
        register_user_ops()
    out: dict = {"start": wall0 - args.spawned_at, "import": time.perf_counter() - t}
    clock = Clock()
    if args.variant != "dataloader":
        from nvidia.dali.pipeline import Pipeline

        if args.variant.startswith("dali"):
            clock.wrap(Pipeline, "build", "build")
        else:  # the Loader builds through extsrc._dali.build, which may bypass Pipeline.build
            clock.wrap(dali_run, "build", "build")
        clock.wrap(trace, "trace_op", "trace")
    rounds = {}
    for phase in ("cold", "warm"):
        stages: dict[str, float] = {}
        t = time.perf_counter()
        if args.variant in ("dali", "dali_inline", "dataloader"):
            from baselines import read_pairs

            read_pairs(args.manifest)
            manifest = args.manifest
        else:
            import extsrc

            manifest = extsrc.read_manifest(args.manifest)
        stages["manifest"] = time.perf_counter() - t
        t = time.perf_counter()
        if args.variant.startswith("dali"):
            loader = _bare_dali(args.manifest, args, gpu, parallel=args.variant == "dali")
        elif args.variant == "dataloader":
            loader = _dataloader(args.manifest, args, gpu)
        else:
            loader = _extsrc(manifest, args, gpu, args.variant)
        stages["construct"] = time.perf_counter() - t
        stages["trace"] = clock.take("trace")
        t = time.perf_counter()
        it = iter(loader)
        first = next(it)
        if gpu:
            import torch

            torch.cuda.synchronize()
        stages["first_batch"] = time.perf_counter() - t
        stages["build"] = clock.take("build")
        t = time.perf_counter()
        next(it)
        if gpu:
            torch.cuda.synchronize()
        stages["second_batch"] = time.perf_counter() - t
        stages["to_first_batch"] = (stages["manifest"] + stages["construct"]
                                    + stages["first_batch"])
        if args.steady and phase == "warm":
            stages["images_per_s"] = _steady(loader, it, args.steady, gpu)
        if hasattr(loader, "op_paths"):
            stages["op_paths"] = loader.op_paths
        del first, it
        if hasattr(loader, "close"):
            loader.close()
        del loader
        rounds[phase] = stages
    out.update(rounds)
    return out


# -- the parent: fresh processes, rounds, medians -------------------------------------------------
def run_child(variant: str, manifest: Path, args) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--manifest", str(manifest),
           "--device", args.device, "--batch-size", str(args.batch_size),
           "--resize", str(args.resize), "--steady", str(args.steady),
           "--spawned-at", repr(time.time())]
    if args.dl_workers is not None:
        cmd += ["--dl-workers", str(args.dl_workers)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{variant} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def summarise(runs: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for variant, rs in runs.items():
        row: dict = {"start": median([r["start"] for r in rs]),
                     "import": median([r["import"] for r in rs])}
        for phase in ("cold", "warm"):
            row[phase] = {s: median([r[phase][s] for r in rs]) for s in STAGES
                          if s in rs[0][phase]}
            if "op_paths" in rs[0][phase]:
                row[phase]["op_paths"] = rs[0][phase]["op_paths"]
        out[variant] = row
    return out


def print_table(summary: dict) -> None:
    dali = summary.get("dali", {}).get("cold", {}).get("to_first_batch")
    print(f"{'variant':16}{'import':>8}{'manifest':>9}{'construct':>10}{'trace':>7}"
          f"{'first':>7}{'build':>7}{'second':>8}{'to 1st':>8}{'/dali':>7}{'warm':>7}{'img/s':>8}")
    for v, row in summary.items():
        c, w = row["cold"], row["warm"]
        ratio = f"{c['to_first_batch'] / dali:7.2f}" if dali else f"{'':7}"
        print(f"{v:16}{row['import']:8.2f}{c['manifest']:9.2f}{c['construct']:10.2f}"
              f"{c['trace']:7.2f}{c['first_batch']:7.2f}{c['build']:7.2f}"
              f"{c['second_batch']:8.2f}{c['to_first_batch']:8.2f}{ratio}"
              f"{w['to_first_batch']:7.2f}{w.get('images_per_s', float('nan')):8.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--resize", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--dl-workers", type=int, default=None)
    ap.add_argument("--steady", type=int, default=0,
                    help="after the warm loader's second batch, time this many more (images/s)")
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--manifest", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spawned-at", type=float, default=T_START, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.child:
        args.variant = args.child
        print(json.dumps(child(args)))
        return 0
    from data import make_dataset

    manifest, mean_bytes = make_dataset(Path(args.data) / str(args.n), args.n)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(args.repeats):
        for v in variants:
            runs[v].append(run_child(v, manifest, args))
            print(f"round {r + 1}: {v}: {runs[v][-1]['cold']['to_first_batch']:.2f} s",
                  file=sys.stderr, flush=True)
    summary = summarise(runs)
    print_table(summary)
    if args.out:
        import nvidia.dali
        import torch

        meta = {
            "date": datetime.date.today().isoformat(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": platform.node(), "cores": len(os.sched_getaffinity(0)),
            "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
            "dali": nvidia.dali.__version__, "torch": torch.__version__,
            "n": args.n, "batch_size": args.batch_size, "resize": args.resize,
            "mean_file_bytes": mean_bytes,
        }
        Path(args.out).write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
