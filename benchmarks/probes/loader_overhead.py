"""What the loader costs with no op, against raw DALI doing the same job: a resize-only
``extsrc.Loader`` as it is, the same without its watchdog of the reader processes
(``Workers(watchdog=False)``: DALI is called directly instead of from a helper thread the main
thread watches), and raw DALI's parallel external source -> decode -> resize
(``baselines.raw_dali_iterator``). The job and the data are ``bench_realops.py``'s: 1,024
generated 500x375 JPEGs, batch 128, resized to 224 (stretched).

    python3 benchmarks/probes/loader_overhead.py --repeats 5 --out loader_overhead.json

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    probe_options(ap, data="/tmp/extsrc-loader-overhead", repeats=5, min_seconds=2.0)
    args = ap.parse_args()
    import bench_realops as br
    from data import make_dataset

    import extsrc

    manifest, mean_bytes = make_dataset(Path(args.data), args.n)
    cores = len(os.sched_getaffinity(0))
    workers, threads = cpu_split(None, None, cores)

    def loader(watchdog: bool) -> Any:
        def make() -> Epochs:
            it = extsrc.Loader(
                str(manifest), batch_size=128, resize=224, device="cuda:0",
                workers=extsrc.Workers(num_workers=workers, num_threads=threads,
                                       watchdog=watchdog),
                sampling=extsrc.Sampling(last_batch="partial"),
                format=extsrc.BatchFormat(resize_mode="stretch"))
            return Epochs(it)
        return make

    variants = {
        "loader": loader(True),
        "loader_without_watchdog": loader(False),
        "dali_resize": lambda: br.dali_epochs(str(manifest), name=None, num_outputs=1,
                                              batch_size=128, resize=224, threads=threads,
                                              workers=workers, gpu=True),
    }
    run_probe(variants, args, cores=cores, mean_bytes=mean_bytes)


if __name__ == "__main__":
    main()
