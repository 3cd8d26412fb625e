"""What one small CPU operator on the per-sample sizes costs a GPU pipeline, and what one
``fn.python_function`` on them costs: raw DALI (parallel external source of raw bytes -> mixed
decode -> resize to 224, ``baselines.raw_dali_iterator``), with the decoded image reshaped to its
own shape after ``k`` chained CPU operators on that shape (``shape + 0``, each a DALI arithmetic
operator on a 3-vector per sample), or after one batch-processing ``fn.python_function`` that
returns its input. The native path's scalars and checks are such operators, so this is what
each of them costs an op. The job and the data are ``bench_realops.py``'s: 1,024 generated
500x375 JPEGs, batch 128.

    python3 benchmarks/probes/cpu_op_cost.py --ops 0,4,8,16 --out cpu_op_cost.json

Prints the median images/s per variant; ``--out`` gets every round.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from runs import Epochs, cpu_split, probe_options, run_probe  # noqa: E402  (benchmarks/, put on the path above)


def _identity(shapes: list[Any]) -> list[Any]:
    return shapes


def _with_ops(count: int, python: bool) -> Any:
    def images(img: Any) -> list[Any]:
        from nvidia.dali import fn, types

        shape = img.shape()
        for _ in range(count):
            shape = shape + types.Constant(0, dtype=types.INT64)
        if python:
            shape = fn.python_function(shape, function=_identity, batch_processing=True)
        return [fn.reshape(img, shape=shape)] if count or python else [img]
    return images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="0,4,8,16", help="comma-separated operator counts")
    probe_options(ap, data="/tmp/extsrc-cpu-op-cost", repeats=4, min_seconds=1.5)
    args = ap.parse_args()
    from baselines import raw_dali_iterator
    from data import make_dataset

    from extsrc.loading.loader import DEFAULT_HW_DECODER_LOAD

    manifest, mean_bytes = make_dataset(Path(args.data), args.n)
    cores = len(os.sched_getaffinity(0))
    workers, threads = cpu_split(None, None, cores)

    def variant(count: int, python: bool) -> Any:
        return lambda: Epochs(raw_dali_iterator(
            str(manifest), batch_size=128, resize=224, num_threads=threads, device_id=0,
            num_workers=workers, hw_decoder_load=DEFAULT_HW_DECODER_LOAD,
            images=_with_ops(count, python)))

    variants = {f"cpu_ops_{k}": variant(int(k), False) for k in args.ops.split(",")}
    variants["python_function_1"] = variant(0, True)
    run_probe(variants, args, cores=cores, mean_bytes=mean_bytes)


if __name__ == "__main__":
    main()
