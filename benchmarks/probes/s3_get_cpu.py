"""The CPU one process spends per S3 GET, and the GETs a second it reaches, by how it reads:
through s3fs (botocore), with extsrc's own signed GETs one request per pool thread
(``Storage.read`` from ``concurrency`` threads), and with a batch's GETs sent together
(``Storage.read_many``). The bucket is :class:`s3_static.StaticS3` over generated JPEGs, at 0
and 20 ms a request; CPU is this process's (``time.process_time``: the endpoint's processes are
not counted). Medians of ``--repeats`` rounds of ``--rounds`` reads of every object.

    python3 benchmarks/probes/s3_get_cpu.py --n 256 --concurrency 32 --repeats 3 \
        --out s3_get_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent.parent / "tests"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4, help="reads of every object per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--latencies", type=float, nargs="+", default=[0.0, 20.0])
    p.add_argument("--server-processes", type=int, default=2)
    p.add_argument("--data", default="/tmp/s3_get_cpu_data")
    p.add_argument("--out")
    args = p.parse_args()

    from data import make_dataset
    from s3_static import StaticS3
    from storage_server import storage_options

    from extsrc.sources.storage import Storage

    data = Path(args.data)
    make_dataset(data, args.n)
    names = sorted(q.relative_to(data).as_posix() for q in data.rglob("*.jpg"))[:args.n]
    urls = [f"s3://bench/ds/{n}" for n in names]
    results: dict[str, list[dict[str, float]]] = {}
    with StaticS3(data, "bench", args.latencies, args.server_processes, prefix="ds") as s3:
        for ms in args.latencies:
            options = storage_options(s3.endpoints[ms])
            modes = {
                "s3fs": Storage(options, concurrency=args.concurrency, s3_requests="s3fs"),
                "direct_thread_per_get": Storage(options, concurrency=args.concurrency),
                "direct_batch": Storage(options, concurrency=args.concurrency),
            }
            pool = ThreadPoolExecutor(args.concurrency)
            for _ in range(args.repeats):
                for mode, storage in modes.items():
                    if mode == "direct_thread_per_get":
                        def read(s: Storage = storage, ex: ThreadPoolExecutor = pool) -> None:
                            list(ex.map(s.read, urls))
                    else:
                        def read(s: Storage = storage) -> None:
                            s.read_many(urls)
                    read()  # connections made, credentials and clients ready
                    t, c = time.perf_counter(), time.process_time()
                    for _ in range(args.rounds):
                        read()
                    wall, cpu = time.perf_counter() - t, time.process_time() - c
                    gets = args.rounds * len(urls)
                    got = {"gets_per_s": gets / wall, "cpu_ms_per_get": 1000 * cpu / gets}
                    results.setdefault(f"{mode}_{ms:g}ms", []).append(got)
                    print(f"{mode}_{ms:g}ms: {got['gets_per_s']:.0f} GETs/s, "
                          f"{got['cpu_ms_per_get']:.3f} ms CPU a GET", flush=True)
            pool.shutdown()
    medians = {k: {m: statistics.median(r[m] for r in rs) for m in rs[0]}
               for k, rs in results.items()}
    print(json.dumps(medians, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "command": " ".join(["python3", *sys.argv]), "cpus": os.cpu_count(),
            "platform": platform.platform(), "args": vars(args), "medians": medians,
            "rounds": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
