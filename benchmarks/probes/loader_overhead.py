"""What the loader costs with no op, against raw DALI doing the same job, and where:

* a resize-only ``extsrc.Loader`` as it is;
* the same without its watchdog of the reader processes (``Workers(watchdog=False)``: DALI is
  called directly instead of from a helper thread the main thread watches);
* the loader's own DALI pipeline iterated by a plain ``DALIGenericIterator`` (none of the
  loader's Python per batch: what its graph and source cost);
* raw DALI's resize over the loader's own source (its readers and its three outputs);
* raw DALI's resize whose source gives a third output like the loader's ``info``;
* raw DALI's parallel external source -> decode -> resize (``baselines.raw_dali_iterator``).

The job and the data are ``bench_realops.py``'s: 1,024 generated 500x375 JPEGs, batch 128,
resized to 224 (stretched).

    python3 benchmarks/probes/loader_overhead.py --repeats 8 --out loader_overhead.json

Prints the median images/s per variant; ``--out`` gets every round, each with the CPU seconds
per second of the process's busiest threads from its first batch to its end (under ``dali``):
a thread near 1.0 there would be the one the others wait for.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from runs import Epochs, cpu_split, probe_options, run_probe  # noqa: E402  (benchmarks/, put on the path above)


def thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of each thread of this process, with its name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


class Busiest(Epochs):
    """``Epochs`` that records, from the first batch to ``close()``, the CPU seconds per second
    of the process's busiest threads (``self.threads``, filled in ``close()``)."""

    def epoch(self):
        for batch in super().epoch():
            if not hasattr(self, "_start"):
                self._start = (time.perf_counter(), thread_cpu())
            yield batch

    def close(self) -> None:
        if hasattr(self, "_start"):
            t0, before = self._start
            dt, after = time.perf_counter() - t0, thread_cpu()
            named = {t.native_id: t.name for t in threading.enumerate()}
            use = sorted(((cpu - before.get(tid, ("", 0.0))[1]) / dt, tid,
                          named.get(tid, name)) for tid, (name, cpu) in after.items())
            main = threading.main_thread().native_id
            self.dali = {"threads": [
                {"thread": ("main " if tid == main else "") + name, "cpu_per_s": round(u, 3)}
                for u, tid, name in reversed(use[-6:])]}
        super().close()


class WithInfo:
    """``baselines.RawSource`` with a third output: an ``(n, 3)`` int64 row per sample, as the
    loader's ``info`` (manifest index, epoch, pad flag)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def __call__(self, info: Any) -> tuple[Any, ...]:
        import numpy as np

        data, labels = self.source(info)
        rows = np.zeros((len(labels), 3), dtype=np.int64)
        rows[:, 0] = np.arange(len(labels))
        rows[:, 1] = info.epoch_idx
        return data, labels, rows


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

    def make_loader(watchdog: bool) -> Any:
        return extsrc.Loader(
            str(manifest), batch_size=128, resize=224, device="cuda:0",
            workers=extsrc.Workers(num_workers=workers, num_threads=threads, watchdog=watchdog),
            sampling=extsrc.Sampling(last_batch="partial"),
            format=extsrc.BatchFormat(resize_mode="stretch"))

    def loader(watchdog: bool) -> Any:
        return lambda: Busiest(make_loader(watchdog))

    def loader_graph() -> Busiest:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        it = make_loader(True)
        pipe = it._build_pipeline()  # the pipeline the loader would run, iterated by DALI alone
        pipe.build()
        names = [*it.config.output_names, *it.config.hidden_outputs]
        return Busiest(DALIGenericIterator(pipe, names, auto_reset=True,
                                           last_batch_policy=LastBatchPolicy.PARTIAL))

    def raw() -> Busiest:
        e = br.dali_epochs(str(manifest), name=None, num_outputs=1, batch_size=128, resize=224,
                           threads=threads, workers=workers, gpu=True)
        return Busiest(e.iterable)

    def raw_over(source: Any) -> Busiest:
        """Raw DALI's resize over ``source``, which gives info rows too, passed out."""
        from baselines import raw_dali_iterator

        from extsrc.loading.loader import DEFAULT_HW_DECODER_LOAD

        return Busiest(raw_dali_iterator(
            str(manifest), batch_size=128, resize=224, num_threads=threads, device_id=0,
            num_workers=workers, hw_decoder_load=DEFAULT_HW_DECODER_LOAD, source=source,
            info=True))

    def raw_info() -> Busiest:
        from baselines import RawSource, read_pairs

        return raw_over(WithInfo(RawSource(read_pairs(str(manifest)), 128)))

    def raw_on_loader_source() -> Busiest:
        return raw_over(make_loader(True).source)  # the loader's own ShardedSource

    variants = {
        "loader": loader(True),
        "loader_without_watchdog": loader(False),
        "loader_graph_alone": loader_graph,
        "dali_resize_loader_source": raw_on_loader_source,
        "dali_resize_info_output": raw_info,
        "dali_resize": raw,
    }
    run_probe(variants, args, cores=cores, mean_bytes=mean_bytes)


if __name__ == "__main__":
    main()
