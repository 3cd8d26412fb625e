"""What the native path's per-sample check costs (``augment_ops.trace.sample_gate``), and where
its sizes come from: corpus ops whose traced graph has one (a ``min_size``, a guard, an output
that may come out empty), or a scalar stage, each run by ``extsrc.Loader`` on its native path as
it is (sizes from ``fn.peek_image_shape`` of the encoded bytes), with the sizes read from the
decoded image (``image_shape``), and with the check left out of the graph (``emit(...,
check=None)``: what the op costs without it, never a configuration the loader offers), beside
the op's hand-written DALI pipeline where ``bench_realops.hand_written`` has one, a resize-only
loader and raw DALI's resize. The job and the data are ``bench_realops.py``'s:
1,024 generated 500x375 JPEGs, batch 128, every image output resized to 224 (stretched).

    python3 benchmarks/probes/check_probe.py --ops readme_halves,ffcv_cutout --out check.json

Prints the median images/s per variant; ``--out`` gets every round.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT)]

from runs import cpu_split, probe_options, run_probe  # noqa: E402  (benchmarks/, put on the path above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", required=True, help="comma-separated op names (corpus, held-out)")
    probe_options(ap, data="/tmp/extsrc-check-probe", repeats=3, min_seconds=1.0)
    args = ap.parse_args()
    # Spawned readers import the corpus by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    import bench_realops as br
    import realops
    import realops_holdout
    from data import make_dataset

    import extsrc.graph.image as graph_image
    from augment_ops.lower_dali import emit
    from augment_ops.trace import trace_op
    from extsrc.ops_runtime.native import native_outputs

    variant = {"now": "native"}

    def outputs(op: Any, img: Any, info: Any, *, manifest: Any, sample_values: Any = (),
                program: Any = None, shape: Any = None) -> list[Any]:
        if variant["now"] == "image_shape":
            shape = None
        if variant["now"] != "without_check":
            return native_outputs(op, img, info, manifest=manifest, sample_values=sample_values,
                                  program=program, shape=shape)
        return emit(trace_op(op), img, sample_values=sample_values, info=info, check=None,
                    packed=program if program is not None and program.packed else None,
                    shape=shape)

    graph_image.native_outputs = outputs  # the graph module's own name for it
    ops = {e.name: e for e in realops.corpus() + realops_holdout.holdout()}
    manifest, mean_bytes = make_dataset(Path(args.data), args.n)
    manifest = str(manifest)
    cores = len(os.sched_getaffinity(0))
    workers, threads = cpu_split(None, None, cores)
    common = {"batch_size": 128, "resize": 224}
    dali_kw = {**common, "threads": threads, "workers": workers, "gpu": True}
    ext_kw = {**common, "threads": None, "workers": None, "device": "cuda:0"}

    def loader(op: Any, kind: str) -> Any:
        def make() -> Any:
            variant["now"] = kind  # read while the pipeline is defined
            return br.loader_epochs(manifest, op=op, op_path="native", **ext_kw)
        return make

    variants: dict[str, Any] = {
        "resize": loader(None, "native"),
        "dali_resize": lambda: br.dali_epochs(manifest, name=None, num_outputs=1, **dali_kw)}
    for name in args.ops.split(","):
        e = ops[name]
        for kind in ("native", "image_shape", "without_check"):
            variants[f"{name}:{kind}"] = loader(e.op, kind)
        if name in br.HAND_WRITTEN or name in br.HAND_WRITTEN_MORE:
            variants[f"{name}:handwritten"] = (
                lambda e=e: br.dali_epochs(manifest, name=e.name, num_outputs=e.op.num_outputs,
                                           **dali_kw))
    run_probe(variants, args, cores=cores, mean_bytes=mean_bytes)


if __name__ == "__main__":
    main()
