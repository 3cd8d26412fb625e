"""The same Loader over local files and over object storage (a local S3 server), with latency.

The dataset (``benchmarks/data.py``: ImageNet-sized JPEGs) is written to disk and uploaded to
moto's S3 server, which runs in a process of its own with one fault-injecting proxy per latency
(``tests/storage_server.py``): every request through a proxy waits ``--latencies`` ms before it is
forwarded, as a request to a remote bucket waits for the network. Rows:

- ``local``: ``Loader("manifest.csv")``, the files on the local disk;
- ``s3_<L>ms``: ``Loader(read_manifest("s3://.../manifest.csv", storage_options=...))`` through
  the proxy adding ``L`` ms per request; with ``--server static`` the bucket is
  :class:`s3_static.StaticS3` instead, a read-only S3 endpoint of ``--server-processes``
  processes that adds the latency itself: moto's one process serves fewer GETs a
  second than a GPU machine's loader reads;
- ``s3fs_<L>ms`` (``--s3fs-rows``): the same with ``Storage(s3_requests="s3fs")``, every GET
  through s3fs and botocore rather than extsrc's own signed GETs;
- ``litdata_local``, ``litdata_s3_<L>ms`` (``--litdata``, where ``pip install litdata``
  works): the same JPEG bytes and labels written once into litdata's chunked format
  (``litdata.optimize``, ``--litdata-chunk-bytes`` chunks, in the dataset folder, so also in the
  bucket), streamed by
  ``litdata.StreamingDataset`` + ``StreamingDataLoader`` with ``--workers`` workers, each image
  decoded, its shorter side resized to ``--resize`` and centre-cropped with Pillow (what
  ``Loader(resize=...)`` does with DALI); from the bucket through the same proxies. litdata
  downloads whole chunks into a local cache (a fresh folder every round): its second epoch reads
  the local disk, where extsrc's rows read the bucket again (extsrc's ``cache_dir`` is off);
- more rows can be added with :func:`add_row` (a name and a function returning the manifest, or
  anything ``Loader`` takes, for a given server) before :func:`main` runs, e.g. tar shards.

Per row and round: ``construct`` (``Loader(...)``, the manifest already read), ``first_batch``
(``next(iter(loader))``: the pipeline build included), and the throughput of the rest
of ``--epochs`` epochs in images per second; ``manifest``: reading the manifest (from the bucket
for the ``s3`` rows). Medians over ``--repeats`` rounds after ``--warmup`` unrecorded ones; rounds
interleave the rows. ``server_cpu_s``: CPU seconds the S3 server and proxies used during the
row, taken from the same cores as the loader here (a remote bucket's are not).

    python benchmarks/bench_storage.py --n 512 --batch-size 32 --resize 224 --workers 2 \\
        --repeats 3 --out benchmarks/results/storage_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

BUCKET = "extsrc-bench"

#: Rows beyond ``local`` and ``s3_<L>ms``: name -> function(server info) -> what Loader takes.
EXTRA_ROWS: dict[str, Callable[[dict[str, Any]], Any]] = {}


def add_row(name: str, make: Callable[[dict[str, Any]], Any]) -> None:
    """Add a row: ``make(server)`` returns the manifest (or path) for ``Loader``; ``server`` has
    ``endpoints`` (latency in ms -> proxy endpoint), ``direct`` (the server itself),
    ``storage_options(endpoint)``, ``bucket`` and ``local`` (the dataset's folder)."""
    EXTRA_ROWS[name] = make


def _serve(data: str, latencies: list[float], ready: Any, stop: Any) -> None:
    """In a process of its own: the S3 server, the dataset uploaded, one proxy per latency."""
    import contextlib

    from storage_server import FaultProxy, Faults, S3Server

    with contextlib.ExitStack() as stack:
        server = stack.enter_context(S3Server())
        server.make_bucket(BUCKET)
        server.upload_tree(Path(data), BUCKET, "ds")
        endpoints = {}
        for ms in latencies:
            proxy = stack.enter_context(FaultProxy(server.endpoint, Faults(delay=ms / 1000)))
            endpoints[ms] = proxy.endpoint
        ready.put({"direct": server.endpoint, "endpoints": endpoints, "pids": [os.getpid()]})
        stop.wait()


def _wait_ready(server: Any, ready: Any, timeout: float = 600) -> dict[str, Any]:
    """The server process's endpoints once it has uploaded the dataset; an error as soon as the
    process has died instead of the whole timeout."""
    import queue

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return ready.get(timeout=1)
        except queue.Empty:
            if not server.is_alive():
                raise SystemExit(
                    f"the S3 server process died (exit code {server.exitcode})") from None
    raise SystemExit(f"the S3 server was not ready after {timeout:g} s")


def storage_options(endpoint: str) -> dict[str, Any]:
    from storage_server import storage_options as options

    return options(endpoint)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes ``pids`` so far (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _litdata_item(row: tuple[str, str]) -> dict[str, Any]:
    """One sample for ``litdata.optimize``: the JPEG's bytes as they are on disk, its label."""
    path, label = row
    return {"image": Path(path).read_bytes(), "label": int(label)}


def write_litdata(manifest: Path, out: Path, chunk_bytes: str = "64MB") -> Path:
    """The manifest's samples in litdata's format at ``out``, in chunks of ``chunk_bytes``
    (reused when complete)."""
    from litdata import optimize

    if not (out / "index.json").exists():
        rows = [(str(manifest.parent / line.rsplit(",", 1)[0]), line.rsplit(",", 1)[1])
                for line in manifest.read_text().splitlines()[1:]]
        optimize(_litdata_item, rows, str(out), chunk_bytes=chunk_bytes, num_workers=1,
                 verbose=False)
    return out


class LitdataDecode:
    """litdata's transform: decode with Pillow, shorter side to ``size`` (bilinear), centre
    crop ``size`` x ``size``, HWC uint8 (a class, so that it pickles into the workers)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        import io

        import numpy as np
        import torch
        from PIL import Image

        img = Image.open(io.BytesIO(bytes(item["image"]))).convert("RGB")
        w, h = img.size
        s = self.size / min(w, h)
        img = img.resize((max(self.size, round(w * s)), max(self.size, round(h * s))),
                         Image.BILINEAR)
        left, top = (img.size[0] - self.size) // 2, (img.size[1] - self.size) // 2
        img = img.crop((left, top, left + self.size, top + self.size))
        return {"image": torch.from_numpy(np.array(img)), "label": item["label"]}


@dataclass(frozen=True)
class Litdata:
    """A litdata row's source: the optimized folder or URL, and the storage options."""

    input_dir: str
    storage_options: dict[str, Any] | None = None


def run_litdata(source: Litdata, args: argparse.Namespace) -> dict[str, float]:
    import shutil

    from data import time_epochs
    from litdata import StreamingDataLoader, StreamingDataset

    if source.storage_options:
        # moto and the proxies speak plain http; litdata's S3 reader (obstore) refuses http
        # unless told. A real bucket is https and needs no such option.
        from litdata.streaming import downloader

        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
    cache = tempfile.mkdtemp(prefix="bench_litdata_cache_")
    try:
        t0 = time.perf_counter()
        dataset = StreamingDataset(source.input_dir, cache_dir=cache, shuffle=True,
                                   drop_last=True, storage_options=source.storage_options,
                                   transform=LitdataDecode(args.resize))
        loader = StreamingDataLoader(dataset, batch_size=args.batch_size,
                                     num_workers=args.workers, drop_last=True)
        t1 = time.perf_counter()
        t = time_epochs(loader, args.epochs)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"construct": t1 - t0, **t, "images_per_s": t["images"] / t["seconds"]}


def run_row(source: Any, args: argparse.Namespace) -> dict[str, float]:
    from data import time_epochs

    from extsrc import Loader, Sampling, Workers

    if isinstance(source, Litdata):
        return run_litdata(source, args)

    t0 = time.perf_counter()
    loader = Loader(source, batch_size=args.batch_size, resize=args.resize, device=args.device,
                    workers=Workers(num_workers=args.workers),
                    sampling=Sampling(last_batch="drop"))
    t1 = time.perf_counter()
    t = time_epochs(loader, args.epochs)
    return {"construct": t1 - t0, **t, "images_per_s": t["images"] / t["seconds"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--resize", type=int, default=224)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="rounds run first and not recorded")
    p.add_argument("--latencies", type=float, nargs="+", default=[0.0, 20.0, 50.0])
    p.add_argument("--data", default=None, help="dataset folder (default: a temporary one)")
    p.add_argument("--server", choices=["moto", "static"], default="moto",
                   help="moto: moto's S3 server behind latency proxies; static: "
                        "s3_static.StaticS3, a read-only S3 endpoint of several processes")
    p.add_argument("--server-processes", type=int, default=4,
                   help="with --server static: its processes (default: 4)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="the S3 rows' Storage(concurrency=...): requests in flight per reader "
                        "process (default: Storage's)")
    p.add_argument("--s3fs-rows", action="store_true",
                   help="also s3fs_<L>ms rows: the same reads through s3fs "
                        "(Storage(s3_requests='s3fs')) instead of extsrc's own S3 GETs")
    p.add_argument("--litdata", action="store_true",
                   help="also litdata's StreamingDataset on the same images, local and from S3")
    p.add_argument("--litdata-chunk-bytes", default="64MB",
                   help="litdata's chunk size (default: 64MB)")
    p.add_argument("--server-cpus", type=int, default=0,
                   help="with --server static: run the server on the last N cores and every "
                        "row (local files too) on the others (0: all share every core)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    server_cpus = None
    if args.server_cpus:
        from s3_static import split_cpus

        server_cpus = split_cpus(args.server_cpus)

    from data import make_dataset

    from extsrc import read_manifest

    data = Path(args.data or tempfile.mkdtemp(prefix="bench_storage_"))
    manifest, mean_bytes = make_dataset(data, args.n)
    if args.litdata:  # before the upload: the bucket gets the optimized chunks too
        # In a process of its own: run in this one, litdata.optimize left it so that the
        # StreamingDataLoader workers' S3 reads refused http again (allow_http below lost).
        litdata_dir = f"litdata-{args.litdata_chunk_bytes}"
        writer = mp.get_context("spawn").Process(
            target=write_litdata,
            args=(Path(manifest), data / litdata_dir, args.litdata_chunk_bytes))
        writer.start()
        writer.join()
        if writer.exitcode != 0:
            raise SystemExit(f"litdata.optimize failed (exit code {writer.exitcode})")
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    if args.server == "static":
        from s3_static import StaticS3

        server = StaticS3(data, BUCKET, args.latencies, args.server_processes, prefix="ds",
                          cpus=server_cpus)
        server.__enter__()
        info = {"direct": server.endpoints[args.latencies[0]], "endpoints": server.endpoints,
                "pids": server.pids}
    else:
        server = ctx.Process(target=_serve, args=(str(data), args.latencies, ready, stop),
                             daemon=True)
        server.start()
    try:
        if args.server == "moto":
            info = _wait_ready(server, ready)
        url = f"s3://{BUCKET}/ds/manifest.csv"
        rows: dict[str, Callable[[], Any]] = {"local": lambda: str(manifest)}
        from extsrc.sources.storage import Storage

        concurrency = {} if args.concurrency is None else {"concurrency": args.concurrency}
        for ms in args.latencies:
            endpoint = info["endpoints"][ms]
            rows[f"s3_{ms:g}ms"] = (lambda e=endpoint: read_manifest(
                url, storage_options=Storage(storage_options(e), **concurrency)))
            if args.s3fs_rows:
                rows[f"s3fs_{ms:g}ms"] = (lambda e=endpoint: read_manifest(
                    url, storage_options=Storage(storage_options(e), s3_requests="s3fs",
                                                 **concurrency)))
        if args.litdata:
            from storage_server import TEST_KEY, TEST_REGION, TEST_SECRET

            rows["litdata_local"] = lambda: Litdata(str(data / litdata_dir))
            for ms in args.latencies:
                so = {"endpoint_url": info["endpoints"][ms], "aws_access_key_id": TEST_KEY,
                      "aws_secret_access_key": TEST_SECRET, "region_name": TEST_REGION}
                rows[f"litdata_s3_{ms:g}ms"] = (lambda so=so: Litdata(
                    f"s3://{BUCKET}/ds/{litdata_dir}", so))
        server_info = {**info, "bucket": BUCKET, "local": str(data),
                       "storage_options": storage_options}
        for name, make in EXTRA_ROWS.items():
            rows[name] = lambda make=make: make(server_info)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in rows}
        for r in range(-args.warmup, args.repeats):  # rounds < 0 warm up: imports, caches
            for name, make in rows.items():
                t, cpu = time.perf_counter(), _cpu_seconds(info["pids"])
                source = make()
                read = time.perf_counter() - t
                got = {"manifest": read, **run_row(source, args)}
                # The local server and its proxies share this machine's cores with the loader;
                # a remote bucket's would not: their CPU time is recorded beside the throughput.
                got["server_cpu_s"] = _cpu_seconds(info["pids"]) - cpu
                if r < 0:
                    continue
                results[name].append(got)
                print(f"round {r} {name}: {got['images_per_s']:.1f} images/s, first batch "
                      f"{got['first_batch']:.2f} s", flush=True)
    finally:
        if args.server == "static":
            server.__exit__(None, None, None)
        else:
            stop.set()
            server.join(timeout=30)
            if server.is_alive():
                server.kill()
    keys = ("manifest", "construct", "first_batch", "images_per_s", "server_cpu_s")
    medians = {name: {k: statistics.median(x[k] for x in runs) for k in keys}
               for name, runs in results.items()}
    local = medians["local"]["images_per_s"]
    for m in medians.values():
        m["vs_local"] = m["images_per_s"] / local
    import nvidia.dali as dali
    import torch

    out = {
        "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "loader_cpus": len(os.sched_getaffinity(0)),
                    "python": platform.python_version(), "dali": dali.__version__,
                    "torch": torch.__version__},
        "dataset": {"n": args.n, "mean_bytes": mean_bytes},
        "args": vars(args),
        "medians": medians,
        "rounds": results,
    }
    print(json.dumps(medians, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
