"""What an op's per-sample scalars cost per batch, computed by DALI operators or by numpy in one
operator (``augment_ops.trace.scalar_stage``), with the pixels taken out of the comparison: the
corpus ops with many scalar operators, run on small decoded images (the erases and slices then cost
little), each way, in one DALI pipeline per variant, rounds interleaved, medians.

    python benchmarks/probes/scalar_stage_probe.py --device cpu --batch-size 32 --rounds 5
    python3 benchmarks/probes/scalar_stage_probe.py --device gpu --batch-size 128 --rounds 5

Prints one JSON object: per op and variant the operator count and the median ms per batch.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def pipeline(op, *, batch: int, size: tuple[int, int], gpu: bool, stage: bool):
    """The op's traced graph on ``batch`` random images of ``size``, its draws given as the loader
    gives them (packed when the stage computes the scalars)."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    from augment_ops.lower_dali import SampleScalars, emit, sample_scalar_nodes, uses_stage
    from augment_ops.trace import scalar_stage, trace_op
    from extsrc.ops_runtime.seeding import counter_uniform

    scalar_stage.STAGE_MIN_OPERATORS = 0 if stage else 10**9
    traced = trace_op(op)
    nodes = sample_scalar_nodes(traced)
    program = SampleScalars(nodes, lambda i, e, s: counter_uniform(1, e, i, 3, s),
                            packed=uses_stage(traced) and bool(nodes))
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for _ in range(batch)]
    counter = [0]

    def values():
        counter[0] += 1
        index = np.arange(batch, dtype=np.int64) + batch * counter[0]
        return program(index, np.zeros(batch, np.int64)) if nodes else []

    pipe = Pipeline(batch_size=batch, num_threads=4, device_id=0 if gpu else None,
                    prefetch_queue_depth=2)
    with pipe:
        img = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        if gpu:
            img = img.gpu()
        given = list(fn.external_source(source=values, num_outputs=program.num_outputs,
                                        batch=True)) if nodes else []
        outs = emit(traced, img, sample_values=given, packed=program if program.packed else None)
        pipe.set_outputs(*outs)
    pipe.build()
    kinds = collections.Counter(type(o._op).__name__ for o in pipe._ops if o._op is not None)
    return pipe, sum(kinds.values()), dict(kinds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, nargs=2, default=[64, 64])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--min-cost", type=int, default=16,
                    help="the corpus ops whose scalars count at least this many operators")
    args = ap.parse_args()
    import realops

    from augment_ops.lower_dali import scalar_cost
    from augment_ops.trace import TraceError, trace_op

    ops, costs = [], {}
    for r in realops.corpus():
        try:
            costs[r.name] = scalar_cost(trace_op(r.op))
        except TraceError:
            continue
        if costs[r.name] >= args.min_cost:
            ops.append(r)
    gpu = args.device == "gpu"
    pipes, times = {}, collections.defaultdict(list)
    for r in ops:
        for stage in (False, True):
            pipes[(r.name, stage)] = pipeline(r.op, batch=args.batch_size,
                                              size=tuple(args.size), gpu=gpu, stage=stage)
    for _ in range(args.rounds):
        for key, (pipe, _, _) in pipes.items():
            for _ in range(3):
                pipe.run()
            t = time.perf_counter()
            for _ in range(args.batches):
                outs = pipe.run()
                if gpu:
                    outs[0].as_cpu()
            times[key].append((time.perf_counter() - t) / args.batches * 1000)
    result = {"device": args.device, "batch_size": args.batch_size, "size": args.size,
              "rounds": args.rounds, "batches_per_round": args.batches, "ops": {}}
    for (name, stage), (_, count, kinds) in pipes.items():
        result["ops"].setdefault(name, {})["numpy_scalars" if stage else "dali_scalars"] = {
            "operators": count, "scalar_cost": costs[name],
            "ms_per_batch": round(statistics.median(times[(name, stage)]), 3),
            "rounds_ms": [round(v, 3) for v in times[(name, stage)]], "kinds": kinds}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
