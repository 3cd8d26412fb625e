"""DALI's own ``fn.readers.file`` over ``s3://`` URLs against the same reader over local paths,
beside which extsrc's S3 rows (``bench_storage.py``) are read: the measurement behind reading
objects in extsrc rather than in DALI's reader.

One bare DALI pipeline per source: ``fn.readers.file(files=..., labels=..., random_shuffle=True)``,
JPEG decoding (``mixed`` on a GPU, ``cpu`` without), shorter side to ``--resize`` and a centre
crop, batch ``--batch-size``, ``--threads`` CPU threads. The bucket is
:class:`s3_static.StaticS3` over the dataset's folder with each latency on a port of its own;
DALI's reader takes its endpoint and credentials from the environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``...), so each S3 row runs in a process of its own. Medians of ``--repeats``
rounds of ``--epochs`` epochs after the first batch.

    python3 benchmarks/probes/dali_s3_reader.py --device gpu --n 4096 --batch-size 128 \
        --threads 8 --epochs 4 --repeats 3 --latencies 0 20 --out dali_s3.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tests"))

BUCKET = "dali-s3"


def run_pipeline(files: list[str], labels: list[int], args: argparse.Namespace) -> dict:
    """Build, first batch and images/s of one bare DALI pipeline over ``files``."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    gpu = args.device == "gpu"

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads,
                  device_id=0 if gpu else None, prefetch_queue_depth=2)
    def pipe():
        jpegs, label = fn.readers.file(files=files, labels=labels, random_shuffle=True,
                                       seed=1, name="reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu",
                                   output_type=types.RGB)
        images = fn.resize(images, resize_shorter=args.resize)
        images = fn.crop(images, crop=(args.resize, args.resize))
        return images, label

    t0 = time.perf_counter()
    p = pipe()
    p.build()
    t1 = time.perf_counter()
    p.run()
    t2 = time.perf_counter()
    steps = args.epochs * (len(files) // args.batch_size)
    for _ in range(steps):
        p.run()
    t3 = time.perf_counter()
    return {"build": t1 - t0, "first_batch": t2 - t1,
            "images_per_s": steps * args.batch_size / (t3 - t2)}


def _child(args: argparse.Namespace) -> None:
    """One row in this process: ``--files-json`` lists the URLs or paths and labels."""
    rows = json.loads(Path(args.files_json).read_text())
    print("RESULT " + json.dumps(run_pipeline(rows["files"], rows["labels"], args)), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--resize", type=int, default=224)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--latencies", type=float, nargs="+", default=[0.0, 20.0])
    p.add_argument("--server-processes", type=int, default=4)
    p.add_argument("--data", default="/tmp/dali_s3_data")
    p.add_argument("--out")
    p.add_argument("--files-json", help=argparse.SUPPRESS)  # a child's row
    args = p.parse_args()
    if args.files_json:
        _child(args)
        return

    import csv

    from data import make_dataset
    from s3_static import StaticS3
    from storage_server import TEST_KEY, TEST_REGION, TEST_SECRET

    data = Path(args.data)
    manifest, mean_bytes = make_dataset(data, args.n)
    with open(manifest) as f:
        rows = [r for r in csv.reader(f)][1:]
    rel = [r[0] for r in rows]
    labels = [int(r[1]) for r in rows]
    out_dir = data / "rows"
    out_dir.mkdir(exist_ok=True)
    results: dict[str, list[dict]] = {}
    with StaticS3(data, BUCKET, args.latencies, args.server_processes) as s3:
        sources = {"local": ([str(data / r) for r in rel], None)}
        for ms in args.latencies:
            sources[f"s3_{ms:g}ms"] = ([f"s3://{BUCKET}/{r}" for r in rel], s3.endpoints[ms])
        for r in range(args.repeats):
            for name, (files, endpoint) in sources.items():
                rows_file = out_dir / f"{name}.json"
                rows_file.write_text(json.dumps({"files": files, "labels": labels}))
                env = dict(os.environ)
                if endpoint is not None:
                    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=TEST_KEY,
                               AWS_SECRET_ACCESS_KEY=TEST_SECRET, AWS_REGION=TEST_REGION,
                               AWS_DEFAULT_REGION=TEST_REGION)
                cmd = [sys.executable, __file__, "--files-json", str(rows_file),
                       "--batch-size", str(args.batch_size), "--resize", str(args.resize),
                       "--threads", str(args.threads), "--device", args.device,
                       "--epochs", str(args.epochs)]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
                found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode != 0 or not found:
                    got = {"error": (proc.stderr or proc.stdout)[-1500:]}
                else:
                    got = json.loads(found[-1][len("RESULT "):])
                results.setdefault(name, []).append(got)
                print(f"round {r} {name}: {got}", flush=True)
    medians = {name: {k: statistics.median(x[k] for x in runs) for k in runs[0]}
               for name, runs in results.items() if all("error" not in x for x in runs)}
    local = medians.get("local", {}).get("images_per_s")
    for m in medians.values():
        if local:
            m["vs_local"] = m["images_per_s"] / local
    print(json.dumps(medians, indent=1))
    if args.out:
        import nvidia.dali

        Path(args.out).write_text(json.dumps({
            "command": " ".join(["python3", *sys.argv]), "dali": nvidia.dali.__version__,
            "cpus": os.cpu_count(), "mean_bytes": mean_bytes, "args": vars(args),
            "medians": medians, "rounds": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
