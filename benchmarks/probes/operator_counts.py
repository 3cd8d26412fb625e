"""How many DALI operators each lowered corpus op (``tests/realops``) takes: its traced graph
emitted on a CPU image as the loader emits it (``scalar_stage_probe.pipeline``: the draws given
by external sources, the scalars by DALI operators or by the scalar stage as the op would use),
counted after ``Pipeline.build``. Each operator costs a dispatch per batch whatever its work, so
the count is what the lowering rules reduce.

    python benchmarks/probes/operator_counts.py [--before counts.json] > counts.json

Prints one JSON object: per op the operator count and its kinds; with ``--before`` (an earlier
output of this script) also the earlier count and the difference.
"""

from __future__ import annotations

import argparse
import json
import sys
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, help="an earlier output of this script")
    args = ap.parse_args()
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
