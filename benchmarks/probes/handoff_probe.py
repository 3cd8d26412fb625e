"""Time to the first batch with spawned readers, their sources sent through the spawn pipe or by
file (``extsrc._dali.handoff``), for loose files and tar shards of the same images, in fresh
processes, rounds interleaved.

    python3 benchmarks/probes/handoff_probe.py --n 4096 --shards 16 --workers 8 --rounds 3 \
        --out handoff.json

``pipe``: ``handoff.MIN_BYTES`` set past any source, so every source travels in the pipe as
DALI sends it; ``file``: the default. Prints one JSON object (and writes it to ``--out``).
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

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import sys, time
from extsrc._dali import handoff
import extsrc
if sys.argv[1] == "pipe":
    handoff.MIN_BYTES = 1 << 62
t = time.perf_counter()
loader = extsrc.Loader(sys.argv[2], batch_size=128, resize=224, shuffle=True, seed=0,
                       device=sys.argv[3], workers=extsrc.Workers(num_workers=int(sys.argv[4]),
                                                                  start_method="spawn"))
next(iter(loader))
print("FIRST", time.perf_counter() - t, flush=True)
loader.close()
"""


def first_batch(mode: str, source: str, device: str, workers: int) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, source, device, str(workers)],
                         capture_output=True, text=True, env=env, timeout=300, check=True)
    return float(next(line.split()[1] for line in out.stdout.splitlines()
                      if line.startswith("FIRST")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default=None, help="default: cuda if there is a GPU, else cpu")
    ap.add_argument("--data", default="/tmp/handoff_probe")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
    import torch
    from bench_shards import write_shards
    from data import make_dataset

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    data = Path(args.data)
    manifest, _ = make_dataset(str(data / "files"), args.n)
    pattern = write_shards(Path(manifest), data / "shards", args.shards)
    sources = {"files": str(manifest), "shards": pattern}
    rounds: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for mode in (("pipe", "file") if r % 2 == 0 else ("file", "pipe")):
            for name, source in sources.items():
                t = first_batch(mode, source, device, args.workers)
                rounds.setdefault(f"{name}:{mode}", []).append(round(t, 3))
                print(f"round {r} {name}:{mode} {t:.2f} s", file=sys.stderr, flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python3 benchmarks/probes/handoff_probe.py " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "cpus": len(os.sched_getaffinity(0)), "n": args.n, "shards": args.shards,
        "workers": args.workers,
        "median_first_batch_s": {k: statistics.median(v) for k, v in rounds.items()},
        "rounds": rounds,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
