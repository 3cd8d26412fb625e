"""Users' own numpy ops through every path, against the resize-only ceiling, in one run.

The job: JPEG -> RGB -> the user's op (``benchmarks/user_ops.py``) -> every image output resized
to ``--resize`` (224x224), with labels, batch 128, over generated 500x375 JPEGs
(``benchmarks/data.py``). For each op of the suite:

- ``auto``: ``extsrc.Loader`` with its automatic choice (the traced ``native`` path when the op
  traces; ``loader.op_paths`` and ``augment_ops.explain`` are recorded);
- ``gpu``: the op's own code on CuPy arrays (GPU only);
- ``numpy``: the op through ``python_function`` on the CPU (GPU decoding on a GPU), one sample
  after another in DALI's thread (``OpRuntime(op_workers=0)``);
- ``pool``: the numpy path with its op pool of worker processes (``OpRuntime(op_pool="process")``,
  ``--op-workers``, default: every core), the automatic choice for ops that do not trace;
- ``threads``: the numpy path with a pool of threads (``OpRuntime(op_pool="thread")``);
- ``dataloader``: a PyTorch ``DataLoader``, one worker per core, PIL decoding, the same numpy op,
  PIL bilinear resizes.

Besides: ``ceiling``, raw DALI with nothing of extsrc (parallel raw-byte external source ->
decode -> resize), and ``extsrc_resize``, the Loader with no op. Reader processes, DALI threads
and the hardware-decoder share are the same for extsrc and the ceiling.

    python benchmarks/bench_user_ops.py --repeats 2 --out results/user_ops.json        # GPU
    python benchmarks/bench_user_ops.py --device cpu --n 256 --out cpu.json           # no GPU

Each measurement builds the loader, skips ``--warmup`` batches, then times batches, across
epochs, until at least ``--min-seconds`` have passed. The DataLoader runs in its steady state:
one ``iter()`` covers several shuffled epochs, so its workers never wait at an epoch boundary.
``--repeats N`` interleaves N rounds of every variant and
reports medians with every repeat, and each ratio taken within every round with the median of
those (``paired``). Compare variants inside one run, as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from runs import Epochs, add_options, cpu_split, header, interleave  # noqa: E402

#: Suite ops that ``_hand_written`` has.
HAND_WRITTEN = ("tiles", "random_flip", "jitter", "gray", "cutout")
#: Epochs one iteration of the DataLoader baseline covers (see ``dataloader_epochs``).
DL_EPOCHS = 8
PATHS = ("auto", "gpu", "numpy", "pool", "threads", "dataloader", "handwritten")
#: The numpy path's variants: (op_workers given by --op-workers?, op_pool).
NUMPY_VARIANTS = {"numpy": (False, "process"), "pool": (True, "process"),
                  "threads": (True, "thread")}


# -- the baselines ---------------------------------------------------------------------------------
class OpDataset:
    """PIL decode -> the same registered ops (transforms, then ops) -> PIL resize of each output."""

    def __init__(self, pairs, transforms, ops, resize, seed=0):
        self.pairs, self.transforms, self.ops = pairs, transforms, ops
        self.resize, self.seed = resize, seed
        self.epoch = 0

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        from baselines import pil_rgb, resized_tensors

        import augment_ops

        path, label = self.pairs[i]
        img = pil_rgb(path)
        rng = np.random.default_rng([self.seed, self.epoch, i])
        for name in self.transforms:
            op = augment_ops.get(name)
            (img,) = op.apply(img, rng if op.random else None)
        outs = [img]
        for name in self.ops:
            op = augment_ops.get(name)
            outs += op.apply(img, rng if op.random else None)
        return resized_tensors(outs, self.resize, label)


def _import_user_ops(_worker_id=None):
    import user_ops  # noqa: F401  (registers the ops in a DataLoader worker too)


def dataloader_epochs(manifest, *, transforms, ops, batch_size, resize, workers, gpu):
    import torch
    from baselines import read_pairs

    ds = OpDataset(read_pairs(manifest), transforms, ops, resize)
    # One iter() covers DL_EPOCHS shuffled epochs, so the workers never wait at an epoch's end
    # for the next iter() to prime them again: the DataLoader's steady state, its best case.
    sampler = torch.utils.data.RandomSampler(ds, num_samples=DL_EPOCHS * len(ds))
    dl = torch.utils.data.DataLoader(
        ds, batch_size=batch_size, sampler=sampler, num_workers=workers, pin_memory=gpu,
        persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else None,
        worker_init_fn=_import_user_ops, drop_last=False)

    return Epochs(dl, gpu=gpu)


def _hand_written(name: str, img):
    """The suite's ops as someone fluent in DALI writes them by hand (the same results as
    ``user_ops.py`` in distribution, not draw for draw): what "native DALI speed" means for
    each op. Every output is a list entry."""
    from nvidia.dali import fn, math, types

    if name == "tiles":
        h, w = img.shape()[0], img.shape()[1]
        hh, hw = h // 2, w // 2
        return [img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]]
    if name == "random_flip":
        return [fn.flip(img, horizontal=fn.random.coin_flip(probability=0.5))]
    if name == "jitter":
        c = fn.random.uniform(range=[0.8, 1.2])
        b = fn.random.uniform(range=[-0.2, 0.2]) * 255
        out = (fn.cast(img, dtype=types.FLOAT) - 128) * c + 128 + b
        return [fn.cast(math.clamp(out, 0, 255), dtype=types.UINT8)]
    if name == "gray":
        y = img[:, :, 0] * 0.299 + img[:, :, 1] * 0.587 + img[:, :, 2] * 0.114
        y = fn.cast(y, dtype=types.UINT8)
        return [fn.stack(y, y, y, axis=2)]
    if name == "cutout":
        shape = fn.cast(img.shape()[0:2], dtype=types.FLOAT)
        centre = fn.random.uniform(range=[0.0, 1.0], shape=[2]) * shape
        return [fn.erase(img, anchor=centre - 32, shape=[64.0, 64.0], axis_names="HW",
                         fill_value=0)]
    raise KeyError(name)


def ceiling_epochs(manifest, *, batch_size, resize, threads, workers, gpu, hw_decoder_load,
                   steps=()):
    """Raw DALI: parallel external source of raw bytes -> decode -> resize. ``steps``: suite op
    names written by hand in DALI (``_hand_written``), run between decoding and resizing as
    extsrc runs transforms (the first replaces the image) and ops (more outputs)."""
    from baselines import raw_dali_iterator

    def outputs(img):
        transforms, ops = steps if steps else ((), ())
        for name in transforms:
            (img,) = _hand_written(name, img)
        images = [img]
        for name in ops:
            images += _hand_written(name, img)
        return images

    return Epochs(raw_dali_iterator(manifest, batch_size=batch_size, resize=resize,
                                    num_threads=threads, device_id=0 if gpu else None,
                                    num_workers=workers, hw_decoder_load=hw_decoder_load,
                                    images=outputs))


def extsrc_epochs(manifest, *, transforms, ops, op_path, batch_size, resize, threads, workers,
                  device, op_workers=None, op_pool="process"):
    import extsrc

    loader = extsrc.Loader(
        manifest, batch_size=batch_size, transforms=transforms, ops=ops, resize=resize,
        device=device, sampling=extsrc.Sampling(last_batch="partial"),
        workers=extsrc.Workers(num_threads=threads, num_workers=workers),
        op_runtime=extsrc.OpRuntime(op_path=op_path, op_workers=op_workers, op_pool=op_pool),
        format=extsrc.BatchFormat(resize_mode="stretch"))  # as the ceiling and DataLoader resize

    return Epochs(loader, op_paths=loader.op_paths,
                  dali={"threads": loader.plan.threads, "readers": loader.plan.workers})


def median_of(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["images_per_s"])
    med = dict(ordered[len(ordered) // 2])
    med["repeats_images_per_s"] = [r["images_per_s"] for r in runs]
    return med


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(ap, n=4096, ops="comma-separated suite entries (default: all)", repeats=1,
                cores=" (extsrc, ceiling)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"subset of {PATHS}")
    ap.add_argument("--dataloader-workers", type=int, default=None,
                    help="DataLoader workers (default: one per core)")
    ap.add_argument("--op-workers", type=int, default=None,
                    help="op pool size of the pool/threads paths (default: every core)")
    ap.add_argument("--bound", action="store_true",
                    help="also time each single-op entry's op alone (no decoding, no resizing) "
                         "in one process and in one process per core, with the op workers' "
                         "malloc settings: the most any numpy path can deliver; on every core "
                         "also over 64 distinct images, out of the caches as in the pool")
    args = ap.parse_args(argv)

    import torch
    import user_ops
    from data import make_dataset

    import augment_ops
    from extsrc.loading.loader import DEFAULT_HW_DECODER_LOAD

    gpu = args.device != "cpu" and torch.cuda.is_available()
    device = "cuda:0" if gpu else "cpu"
    cores = len(os.sched_getaffinity(0))
    workers, threads = cpu_split(args.workers, args.threads, cores)
    dl_workers = args.dataloader_workers if args.dataloader_workers is not None else cores
    t0 = time.perf_counter()
    manifest, mean_bytes = make_dataset(args.data, args.n)
    gen_s = time.perf_counter() - t0
    suite = user_ops.SUITE if args.ops is None else {k: user_ops.SUITE[k]
                                                     for k in args.ops.split(",")}
    paths = [p for p in args.paths.split(",") if p != "gpu" or gpu]
    common = {"batch_size": args.batch_size, "resize": args.resize}
    dali_kw = {**common, "threads": threads, "workers": workers}
    # extsrc's loaders take their own defaults unless --threads/--workers are given (with an op
    # pool on a GPU they give DALI fewer threads than the ceiling's).
    ext_kw = {**common, "threads": args.threads, "workers": args.workers}

    def explain(name: str) -> str:
        f = getattr(augment_ops, "explain", None)
        return f(name) if f is not None else "augment_ops.explain is not available"

    variants: dict[str, object] = {
        "ceiling": lambda: ceiling_epochs(str(manifest), gpu=gpu,
                                          hw_decoder_load=DEFAULT_HW_DECODER_LOAD, **dali_kw),
        "extsrc_resize": lambda: extsrc_epochs(str(manifest), transforms=(), ops=(),
                                               op_path=None, device=device, **ext_kw),
    }
    for entry, (tr, ops) in suite.items():
        every_op_gpu = all("gpu" in augment_ops.get(n).paths for n in (*tr, *ops))
        for p in paths:
            if p == "gpu" and not every_op_gpu:
                continue
            if p == "handwritten":
                if not all(n in HAND_WRITTEN for n in (*tr, *ops)):
                    continue
                variants[f"{entry}:{p}"] = (
                    lambda tr=tr, ops=ops: ceiling_epochs(
                        str(manifest), gpu=gpu, hw_decoder_load=DEFAULT_HW_DECODER_LOAD,
                        steps=(tr, ops), **dali_kw))
            elif p == "dataloader":
                variants[f"{entry}:{p}"] = (
                    lambda tr=tr, ops=ops: dataloader_epochs(
                        str(manifest), transforms=tr, ops=ops, workers=dl_workers, gpu=gpu,
                        **common))
            elif p in NUMPY_VARIANTS:
                pooled, kind = NUMPY_VARIANTS[p]
                variants[f"{entry}:{p}"] = (
                    lambda tr=tr, ops=ops, pooled=pooled, kind=kind: extsrc_epochs(
                        str(manifest), transforms=tr, ops=ops, op_path="numpy", device=device,
                        op_workers=args.op_workers if pooled else 0, op_pool=kind, **ext_kw))
            else:
                variants[f"{entry}:{p}"] = (
                    lambda tr=tr, ops=ops, p=p: extsrc_epochs(
                        str(manifest), transforms=tr, ops=ops, op_path=None if p == "auto" else p,
                        device=device, **ext_kw))

    results: dict = {
        **header(argv, gpu=gpu, cores=cores, n=args.n, mean_bytes=mean_bytes, generate_s=gen_s),
        # The ceiling's; extsrc's loaders record theirs per measurement ("dali").
        "settings": {**common, "dali_threads": threads, "reader_workers": workers,
                     "dataloader_workers": dl_workers, "op_workers": args.op_workers or cores,
                     "warmup_batches": args.warmup,
                     "min_seconds": args.min_seconds, "repeats": args.repeats,
                     "hw_decoder_load": DEFAULT_HW_DECODER_LOAD if gpu else None},
        "explain": {n: explain(n) for tr, ops in suite.values() for n in (*tr, *ops)},
    }
    if args.bound:
        from op_pool_timeline import compute_bound

        results["bound"] = {}
        for entry, (tr, ops) in suite.items():
            if len((*tr, *ops)) != 1:
                continue
            (name,) = (*tr, *ops)
            results["bound"][entry] = {
                "1_process": compute_bound(name, 1, worker_malloc=True),
                f"{cores}_processes": compute_bound(name, cores, worker_malloc=True),
                # Images out of the caches, as the pool gets them (DMA'd into its memory).
                f"{cores}_processes_64_images": compute_bound(name, cores, worker_malloc=True,
                                                              images=64)}
            print(f"[bound] {entry}: {results['bound'][entry]}", flush=True)
    interleave(variants, repeats=args.repeats, warmup=args.warmup, min_seconds=args.min_seconds,
               gpu=gpu, after_round=lambda runs, rounds: summarise(results, runs, suite,
                                                                   rounds=rounds, out=args.out))
    print_table(results)
    return 0


def summarise(results: dict, runs: dict[str, list[dict]], suite: dict, *, rounds: int,
              out: str | None) -> None:
    """Medians, the per-op table and the ratios into ``results``; written to ``out``."""
    results["rounds_done"] = rounds
    results["throughput"] = {name: median_of(rs) for name, rs in runs.items()}
    tp = {k: v["images_per_s"] for k, v in results["throughput"].items()}
    ceiling = tp.get("ceiling") or float("nan")
    table = []
    for entry in suite:
        auto = tp.get(f"{entry}:auto", 0)
        row = {"op": entry, **{p: tp.get(f"{entry}:{p}") for p in PATHS}}
        row["auto/ceiling"] = round(auto / ceiling, 3)
        if tp.get(f"{entry}:handwritten"):
            row["handwritten/ceiling"] = round(tp[f"{entry}:handwritten"] / ceiling, 3)
            row["auto/handwritten"] = round(auto / tp[f"{entry}:handwritten"], 3)
        for other in ("numpy", "dataloader"):
            if tp.get(f"{entry}:{other}"):
                row[f"auto/{other}"] = round(auto / tp[f"{entry}:{other}"], 2)
                for pooled in ("pool", "threads"):
                    if tp.get(f"{entry}:{pooled}"):
                        row[f"{pooled}/{other}"] = round(
                            tp[f"{entry}:{pooled}"] / tp[f"{entry}:{other}"], 2)
        row["auto_op_paths"] = results["throughput"].get(f"{entry}:auto", {}).get("op_paths")
        row["paired"] = paired_ratios(runs, entry)
        bound = results.get("bound", {}).get(entry)
        if bound and tp.get(f"{entry}:dataloader"):
            # The op alone on every core, over the DataLoader: above this no numpy path goes.
            row["bound/dataloader"] = round(max(bound.values()) / tp[f"{entry}:dataloader"], 2)
        cold = (bound or {}).get(f"{results['machine']['cpu_cores']}_processes_64_images")
        if cold and tp.get(f"{entry}:pool"):
            # How much of the op's speed on out-of-cache images the pool keeps.
            row["pool/cold_bound"] = round(tp[f"{entry}:pool"] / cold, 2)
        table.append(row)
    results["table"] = table
    results["ceiling_images_per_s"] = tp.get("ceiling")
    results["extsrc_resize/ceiling"] = round(tp.get("extsrc_resize", 0) / ceiling, 3)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(results, indent=1) + "\n")


#: The ratios ``paired_ratios`` takes within each round: (numerator, denominator) variants.
PAIRS = {"auto/ceiling": ("{e}:auto", "ceiling"),
         "auto/numpy": ("{e}:auto", "{e}:numpy"),
         "auto/dataloader": ("{e}:auto", "{e}:dataloader"),
         "handwritten/ceiling": ("{e}:handwritten", "ceiling"),
         "auto/handwritten": ("{e}:auto", "{e}:handwritten"),
         "pool/numpy": ("{e}:pool", "{e}:numpy"),
         "pool/dataloader": ("{e}:pool", "{e}:dataloader"),
         "threads/numpy": ("{e}:threads", "{e}:numpy"),
         "threads/dataloader": ("{e}:threads", "{e}:dataloader")}


def paired_ratios(runs: dict[str, list[dict]], entry: str) -> dict:
    """Each ratio of :data:`PAIRS` taken within every round, with the median over the rounds:
    the two variants of a pair ran within minutes of each other, so drift of the machine over
    the run (other tenants, clocks) cancels in the ratio, where a ratio of medians may take its
    two medians from different rounds."""
    out = {}
    for key, (num, den) in PAIRS.items():
        a, b = runs.get(num.format(e=entry)), runs.get(den.format(e=entry))
        if not a or not b:
            continue
        per_round = [round(x["images_per_s"] / y["images_per_s"], 3)
                     for x, y in zip(a, b, strict=True) if x["images_per_s"] and y["images_per_s"]]
        if per_round:
            out[key] = {"median": float(np.median(per_round)), "rounds": per_round}
    return out


def print_table(results: dict) -> None:
    ceiling = results.get("ceiling_images_per_s") or float("nan")
    no_op = results["throughput"].get("extsrc_resize", {}).get("images_per_s", 0)
    print(f"\nceiling {ceiling:,.0f} images/s; extsrc, no op: {no_op:,.0f}"
          f" ({results['extsrc_resize/ceiling']}x)")
    print("| op | auto | gpu | numpy | pool | threads | DataLoader | hand-written DALI |"
          " auto/ceiling | auto/hand-written | pool/numpy | pool/DataLoader | auto paths |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in results["table"]:
        paired = {k: v["median"] for k, v in row.get("paired", {}).items()}
        if paired:
            print(f"[paired] {row['op']}: {paired}")
    for row in results["table"]:
        cells = [f"{row[p]:,.0f}" if row[p] else "-" for p in PATHS]
        print(f"| {row['op']} | {' | '.join(cells)} | {row['auto/ceiling']:.2f} | "
              f"{row.get('auto/handwritten', '-')} | "
              f"{row.get('pool/numpy', '-')} | {row.get('pool/dataloader', '-')} | "
              f"{row['auto_op_paths']} |")


if __name__ == "__main__":
    sys.exit(main())
