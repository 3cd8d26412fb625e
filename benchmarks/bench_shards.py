"""Tar shards against loose files, and against webdataset's own loader on the same shards.

One generated dataset (``data.py``: JPEGs of 500x375, about 82 KB), written twice: as loose files
with a CSV manifest, and as webdataset-style shards (``train-{000000..NNNNNN}.tar``, members
``000123.jpg`` + ``000123.cls``). One job for every variant: decode, resize the shorter side to
``--resize``, batches of ``--batch-size`` with labels, shuffled, ``--workers`` reader processes.

Variants:

- ``files``: ``extsrc.Loader("manifest.csv", ...)``, the loose files;
- ``shards``: ``extsrc.Loader("train-{000000..NNNNNN}.tar", ...)``, the shards (indexed at
  construction, then one ``pread`` per sample);
- ``webdataset``: ``wds.WebDataset(urls, shardshuffle=True).shuffle(1000).decode("pil")``, the
  image resized with Pillow, in a ``torch.utils.data.DataLoader`` with the same worker count
  (with ``--device cuda`` each batch is then copied to the GPU, where extsrc's batches are);
- ``read_files``, ``read_shards``: extsrc's reader alone (``ShardedSource``: each sample's bytes
  read and their image header checked, no decoding) over one epoch in this process, what each
  reader process does;
- ``shards_s3`` (``--s3``): the same shards uploaded to a local S3 server (moto, on 127.0.0.1, in
  this process) and read through ``s3://`` URLs;
- ``<shard variant>_runs`` (``--run-length R``): the same shards shuffled in runs of ``R``
  consecutive members (``Sampling(run_length=R)``), so a batch reads whole runs;
- ``shards_s3_<L>ms`` (``--s3-latency L``): the same through the test suite's proxy
  (``tests/storage_server.py``) adding ``L`` ms to every request, as a remote bucket would.
  ``--s3-coalesce-gap`` sets the storage's ``coalesce_gap`` (``none``: one GET per member).
  ``--s3-server static``: the bucket is :class:`s3_static.StaticS3` instead (a read-only S3
  endpoint of ``--s3-server-processes`` processes, adding the latency itself), since moto in
  this process serves fewer GETs a second than the loader reads.

Reported per variant, medians over ``--repeats`` rounds (rounds interleave the variants, every
other round in reverse order):
``build`` (constructing the loader: for shards, indexing them), ``first_batch`` (``iter`` and
the first batch: the pipeline build and reader start), ``images_per_s`` over ``--epochs`` full
epochs after the first batch, and for the S3 variants the storage's counts per epoch:
``gets_per_epoch`` (ranged GETs), ``mb_per_epoch`` (MB they read) and ``amplification`` (bytes
read over the bytes of the members used; the loader's counts include the batches its readers
read ahead into the next epoch, so they run slightly over one epoch's); and ratios of
images/s paired round by round (``shards/files``, ``shards/webdataset``, ...), which a busy
machine's drift disturbs less.

    python benchmarks/bench_shards.py --n 1024 --shards 8 --batch-size 64 --resize 224 \
        --workers 2 --repeats 3 --s3 --out benchmarks/results/2026-11-25_cpu2_shards.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tarfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from data import make_dataset  # noqa: E402


def write_shards(manifest: Path, out: Path, shards: int) -> str:
    """The manifest's images as ``shards`` tar shards (reused when complete); the pattern."""
    lines = manifest.read_text().splitlines()[1:]
    out.mkdir(parents=True, exist_ok=True)
    per = -(-len(lines) // shards)
    pattern = str(out / f"train-{{000000..{shards - 1:06d}}}.tar")
    done = out / "complete"
    if done.exists() and done.read_text() == f"{len(lines)} {shards}":
        return pattern
    for s in range(shards):
        with tarfile.open(out / f"train-{s:06d}.tar", "w") as tf:
            for line in lines[s * per:(s + 1) * per]:
                rel, label = line.rsplit(",", 1)
                key = Path(rel).stem
                tf.add(manifest.parent / rel, arcname=f"{key}.jpg")
                cls = (out / "label.tmp")
                cls.write_text(label)
                tf.add(cls, arcname=f"{key}.cls")
    (out / "label.tmp").unlink(missing_ok=True)
    done.write_text(f"{len(lines)} {shards}")
    return pattern


def storage_counts(stats: dict, before: dict | None, epochs: int) -> dict[str, float]:
    """GETs and MB per epoch, and the read amplification, from storage stats (less
    ``before``, the counts of indexing in the same process)."""
    d = {k: stats[k] - (before or {}).get(k, 0) for k in ("reads", "bytes", "bytes_used")}
    return {"gets_per_epoch": d["reads"] / epochs, "mb_per_epoch": d["bytes"] / epochs / 1e6,
            "amplification": d["bytes"] / max(1, d["bytes_used"])}


def run_extsrc(source, args, run_length: int = 1) -> dict[str, float]:
    from data import time_epochs

    from extsrc import Loader, Sampling, Workers

    t0 = time.perf_counter()
    loader = Loader(source, batch_size=args.batch_size, resize=args.resize or None, shuffle=True,
                    seed=0, device=args.device, sampling=Sampling(run_length=run_length),
                    workers=Workers(num_workers=args.workers))
    t1 = time.perf_counter()
    sync = None
    if args.device != "cpu":
        import torch

        sync = torch.cuda.synchronize
    t = time_epochs(loader, args.epochs, sync)
    out = {"build": t1 - t0, "first_batch": t["first_batch"],
           "images_per_s": t["images"] / t["seconds"]}
    if getattr(source, "storage", None) is not None:  # the readers' counts, added up
        out.update(storage_counts(loader.storage_stats(), None, args.epochs))
    return out


def run_reader(source, args) -> dict[str, float]:
    """One epoch of extsrc's reader alone (``ShardedSource``: read and check each sample's bytes,
    no decoding), in this process: what a reader process does per batch."""
    from types import SimpleNamespace

    from extsrc import ShardedSource, read_manifest

    t0 = time.perf_counter()
    if callable(source):  # a remote source, indexed here
        source = source()
    manifest = read_manifest(source) if isinstance(source, str) else source
    src = ShardedSource(manifest, batch_size=args.batch_size, shuffle=True, seed=0)
    storage = getattr(manifest, "storage", None)
    before = None if storage is None else storage.stats.as_dict()
    t1 = time.perf_counter()
    n = 0
    for b in range(len(src)):
        n += len(src(SimpleNamespace(iteration=b, epoch_idx=0))[0])
    t2 = time.perf_counter()
    out = {"build": t1 - t0, "first_batch": 0.0, "images_per_s": n / (t2 - t1)}
    if storage is not None:
        out.update(storage_counts(storage.stats.as_dict(), before, 1))
    return out


def run_webdataset(pattern: str, args) -> dict[str, float]:
    import numpy as np
    import torch
    import webdataset as wds
    from PIL import Image

    size = args.resize

    def resize(sample):
        img, label = sample
        if not size:
            return torch.from_numpy(np.asarray(img)), int(label)
        w, h = img.size
        s = size / min(w, h)
        img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
        return torch.from_numpy(np.asarray(img)), int(label)

    t0 = time.perf_counter()
    ds = (wds.WebDataset(pattern, shardshuffle=True, seed=0, empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls").map(resize))
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers,
                                     persistent_workers=args.workers > 0)
    t1 = time.perf_counter()
    it = iter(dl)
    next(it)
    t2 = time.perf_counter()
    n = 0
    on_gpu = args.device != "cpu"  # the batch lands where extsrc's does: on the GPU
    for img, label in it:
        n += len(label)
        if on_gpu:
            img.cuda(non_blocking=True)
    for _ in range(args.epochs - 1):
        for img, label in dl:
            n += len(label)
            if on_gpu:
                img.cuda(non_blocking=True)
    if on_gpu:
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    del it, dl
    return {"build": t1 - t0, "first_batch": t2 - t1, "images_per_s": n / (t3 - t2)}


PAIRS = (("shards", "files"), ("shards", "webdataset"), ("read_shards", "read_files"),
         ("shards_s3", "shards"))


def paired_ratios(rounds: dict[str, list[dict[str, float]]]) -> dict[str, dict]:
    """images/s of one variant over another, round by round (the two ran minutes apart at
    most, so a busy machine's drift cancels better than in a ratio of medians)."""
    out = {}
    pairs = (*PAIRS, *((v, "shards") for v in rounds if v.startswith(("shards_s3_", "shards_r"))),
             *((v, "files") for v in rounds if v.startswith(("shards_s3", "shards_r"))),
             *((v, "read_shards") for v in rounds if v.startswith("read_shards_s3")))
    for a, b in pairs:
        if a in rounds and b in rounds:
            r = [x["images_per_s"] / y["images_per_s"] for x, y in zip(rounds[a], rounds[b],
                                                                          strict=True)]
            out[f"{a}/{b}"] = {"median": statistics.median(r), "rounds": [round(v, 3) for v in r]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--resize", type=int, default=224, help="0: no resize (the images are all "
                   "500x375, so batches stack without one)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cpu", help="extsrc's device: cpu, or cuda (decoding on "
                   "the GPU); webdataset decodes with Pillow in its workers either way")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="also read the shards from a local moto S3")
    p.add_argument("--s3-latency", type=float, action="append", default=[],
                   help="with --s3: also through a proxy adding this many ms per request "
                        "(repeatable)")
    p.add_argument("--s3-server", choices=["moto", "static"], default="moto",
                   help="with --s3: moto in this process, each latency through a proxy; or "
                        "s3_static.StaticS3, a read-only S3 endpoint of several processes that "
                        "adds the latency itself")
    p.add_argument("--s3-server-processes", type=int, default=4,
                   help="with --s3-server static: its processes (default: 4)")
    p.add_argument("--s3-coalesce-gap", default=str(1 << 20),
                   help="with --s3: the storage's coalesce_gap in bytes (members of a shard this "
                        "close read with one GET), or 'none': one GET per member")
    p.add_argument("--run-length", type=int, default=1,
                   help="> 1: every shard variant also runs as <variant>_runs, shuffled in runs "
                        "of this many consecutive members (Sampling(run_length=...))")
    p.add_argument("--server-cpus", type=int, default=0,
                   help="with --s3-server static: run the server on the last N cores and every "
                        "variant on the others (0: all share every core)")
    p.add_argument("--data", default="/tmp/extsrc_bench_shards")
    p.add_argument("--variants", default="read_files,read_shards,files,shards,webdataset",
                   help="comma-separated; with --s3, S3 variants (shards_s3, shards_s3_<L>ms, and "
                        "read_ before either) may be named too")
    p.add_argument("--out")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    server_cpus = None
    if args.server_cpus:
        from s3_static import split_cpus

        server_cpus = split_cpus(args.server_cpus)

    manifest, mean_bytes = make_dataset(Path(args.data) / "files", args.n)
    pattern = write_shards(manifest, Path(args.data) / "shards", args.shards)
    latencies = args.s3_latency if args.s3 else []
    given = args.variants.split(",")
    s3_variants = (["shards_s3"] if args.s3 else []) + [f"shards_s3_{ms:g}ms" for ms in latencies]
    # The S3 variants join the list unless it names some itself (read_shards_s3_20ms: the
    # reader alone over S3 with 20 ms per request).
    variants = given if any("s3" in v for v in given) else given + s3_variants
    if args.run_length > 1:  # every shard variant once more, shuffled in runs
        variants += [f"{v}_runs" for v in variants if v.startswith("shards")]
    sources: dict[str, object] = {"files": str(manifest), "shards": pattern}
    server = None
    proxies: list = []
    if args.s3:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from storage_server import FaultProxy, Faults, S3Server, storage_options

        from extsrc import read_shards
        from extsrc.sources.storage import Storage

        gap = None if args.s3_coalesce_gap == "none" else int(args.s3_coalesce_gap)
        url = f"s3://bench-shards/train/{Path(pattern).name}"
        if args.s3_server == "static":
            from s3_static import StaticS3

            server = StaticS3(Path(pattern).parent, "bench-shards", [0.0, *latencies],
                              args.s3_server_processes, prefix="train",
                              cpus=server_cpus).__enter__()
            endpoints = {f"shards_s3_{ms:g}ms" if ms else "shards_s3": e
                         for ms, e in server.endpoints.items()}
            options = storage_options
        else:
            server = S3Server().__enter__()
            server.make_bucket("bench-shards")
            server.upload_tree(Path(pattern).parent, "bench-shards", "train")
            endpoints = {"shards_s3": server.endpoint}
            for ms in latencies:
                proxy = FaultProxy(server.endpoint, Faults(delay=ms / 1000)).__enter__()
                proxies.append(proxy)
                endpoints[f"shards_s3_{ms:g}ms"] = proxy.endpoint
            options = server.storage_options
        for name, endpoint in endpoints.items():
            sources[name] = lambda e=endpoint: read_shards(url, storage_options=Storage(
                options(e), coalesce_gap=gap))

    rounds: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    try:
        for r in range(args.repeats):
            # Every other round in reverse, so no variant always runs after the same one.
            for v in (variants if r % 2 == 0 else variants[::-1]):
                if v == "webdataset":
                    res = run_webdataset(pattern, args)
                elif v.startswith("read_"):
                    res = run_reader(sources[v[len("read_"):]], args)
                else:
                    runs = v.endswith("_runs")
                    src = sources[v.removesuffix("_runs")]
                    if callable(src):  # indexing a remote shard counts as building the loader
                        t = time.perf_counter()
                        src = src()
                        extra = time.perf_counter() - t
                    else:
                        extra = 0.0
                    res = run_extsrc(src, args, args.run_length if runs else 1)
                    res["build"] += extra
                rounds[v].append(res)
                print(f"round {r} {v:12s} " + "  ".join(f"{k} {x:.3f}" for k, x in res.items()),
                      flush=True)
    finally:
        for proxy in proxies:
            proxy.__exit__(None, None, None)
        if server is not None:
            server.__exit__(None, None, None)
    medians = {v: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
               for v, rs in rounds.items()}
    for v, m in medians.items():
        print(f"median {v:12s} build {m['build']:.3f} s  first_batch {m['first_batch']:.3f} s  "
              f"{m['images_per_s']:.0f} images/s" + (
                  f"  {m['gets_per_epoch']:.0f} GETs/epoch  {m['mb_per_epoch']:.1f} MB/epoch  "
                  f"amplification {m['amplification']:.2f}" if "gets_per_epoch" in m else ""))
    ratios = paired_ratios(rounds)
    for name, r in ratios.items():
        print(f"paired {name:26s} median {r['median']:.2f}  rounds {r['rounds']}")
    if args.out:
        import nvidia.dali
        import torch

        try:
            import webdataset
            wds_version = webdataset.__version__
        except ImportError:  # the variants run without it need none
            wds_version = None

        Path(args.out).write_text(json.dumps({
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "loader_cpus": len(os.sched_getaffinity(0)),
                        "dali": nvidia.dali.__version__, "torch": torch.__version__,
                        "webdataset": wds_version},
            "args": vars(args), "mean_image_bytes": mean_bytes,
            "medians": medians, "paired_ratios": ratios, "rounds": rounds,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
