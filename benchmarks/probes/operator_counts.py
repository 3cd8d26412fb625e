"""How many DALI operators each lowered corpus op (``tests/realops``) takes: its traced graph
emitted on a CPU image as the loader emits it (``scalar_stage_probe.pipeline``: the draws given
by external sources, the scalars by DALI operators or by the scalar stage as the op would use),
counted after ``Pipeline.build``. Each operator costs a dispatch per batch whatever its work, so
the count is what the lowering rules reduce.

    python benchmarks/probes/operator_counts.py [--before counts.json] > counts.json
    python benchmarks/probes/operator_counts.py --time ffcv_cutout alb_random_rotate90

Prints one JSON object: per op the operator count and its kinds; with ``--before`` (an earlier
output of this script) also the earlier count and the difference; with ``--time``, for the ops
named, the median ms per batch of their pipelines on the CPU (random images of ``--size``,
rounds interleaved), instead of the counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "benchmarks" / "probes")]


def counts() -> dict[str, dict]:
    """Per lowered corpus op: ``{"operators": n, "kinds": {kind: n}}``."""
    import realops
    from scalar_stage_probe import pipeline

    from augment_ops.lower_dali import uses_stage
    from augment_ops.trace import TraceError, trace_op

    found = {}
    for r in realops.corpus():
        try:
            stage = uses_stage(trace_op(r.op))
        except TraceError:
            continue
        _, count, kinds = pipeline(r.op, batch=2, size=(33, 47), gpu=False, stage=stage)
        found[r.name] = {"operators": count, "kinds": dict(sorted(kinds.items()))}
    return found


def timings(names: list[str], *, batch: int, size: tuple[int, int], rounds: int,
            batches: int) -> dict[str, dict]:
    """Per op named: its operator count and median ms per batch on the CPU (each round runs
    every op's pipeline in turn, 3 batches of warm-up then ``batches`` timed)."""
    import realops
    from scalar_stage_probe import pipeline

    from augment_ops.lower_dali import uses_stage
    from augment_ops.trace import trace_op

    ops = {r.name: r for r in realops.corpus()}
    pipes = {}
    for name in names:
        op = ops[name].op
        pipes[name] = pipeline(op, batch=batch, size=size, gpu=False,
                               stage=uses_stage(trace_op(op)))
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name, (pipe, _, _) in pipes.items():
            for _ in range(3):
                pipe.run()
            t = time.perf_counter()
            for _ in range(batches):
                pipe.run()
            times[name].append((time.perf_counter() - t) / batches * 1000)
    return {name: {"operators": pipes[name][1],
                   "ms_per_batch": round(statistics.median(times[name]), 3),
                   "rounds_ms": [round(v, 3) for v in times[name]]} for name in names}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, help="an earlier output of this script")
    ap.add_argument("--time", nargs="+", metavar="OP", help="time these corpus ops instead")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, nargs=2, default=[64, 64])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    if args.time:
        print(json.dumps({"device": "cpu", "batch_size": args.batch_size, "size": args.size,
                          "rounds": args.rounds, "batches_per_round": args.batches,
                          "ops": timings(args.time, batch=args.batch_size,
                                         size=tuple(args.size), rounds=args.rounds,
                                         batches=args.batches)}, indent=1))
        return
    now = counts()
    result: dict = {"ops": now}
    if args.before is not None:
        before = json.loads(args.before.read_text())["ops"]
        for name, got in now.items():
            if name in before:
                got["before"] = before[name]["operators"]
                got["saved"] = got["before"] - got["operators"]
        result["total_before"] = sum(before[n]["operators"] for n in now if n in before)
    result["total"] = sum(v["operators"] for v in now.values())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
