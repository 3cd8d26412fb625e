# ruff: noqa: E501, E701, E702, B023, F841
"""Whether the reader processes can start while DALI builds its operators: the build alone
(seq), workers started on a thread (overlap), and the operators built once the workers were
launched (wait_<seconds>), with the longest gap of a 1 ms ticker thread (DALI's C++ build holds
the GIL). Run on the GPU machine:
    python3 benchmarks/probes/dali_overlap_probe.py seq,overlap,wait_0.0,wait_0.05,wait_0.3
"""
import multiprocessing
import sys
import threading
import time

sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from pathlib import Path


def make(pairs):
    from baselines import RawSource
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    pipe = Pipeline(batch_size=128, num_threads=12, device_id=0, seed=0, py_num_workers=4, py_start_method="spawn")
    with pipe:
        jpegs, labels = fn.external_source(source=RawSource(pairs, 128), num_outputs=2, batch=True,
                                           batch_info=True, parallel=True, prefetch_queue_depth=4)
        img = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
        pipe.set_outputs(fn.resize(img, resize_shorter=224), labels)
    return pipe

def overlap(pipe, wait_children):
    pipe._build_graph()
    before = set(multiprocessing.active_children())
    failed = []
    def start():
        try: pipe.start_py_workers()
        except BaseException as e: failed.append(e)
    th = threading.Thread(target=start); th.start()
    if wait_children:
        t = time.perf_counter()
        while len(set(multiprocessing.active_children()) - before) < pipe._py_num_workers and th.is_alive():
            time.sleep(0.002)
        time.sleep(wait_children)
    pipe._init_pipeline_backend()
    t0 = time.perf_counter()
    pipe._pipe.Build(pipe._generate_build_args())
    tb = time.perf_counter() - t0
    th.join()
    pipe._setup_pipe_pool_dependency(); pipe._device_id = pipe._pipe.device_id(); pipe._built = True
    return tb

def main():
    from baselines import read_pairs
    from data import make_dataset
    manifest, _ = make_dataset(Path("/tmp/extsrc-bench-data/1024"), 1024)
    pairs = read_pairs(manifest)
    import numpy as np
    for rnd in range(2):
        for mode in sys.argv[1].split(","):
            pipe = make(pairs)
            # spinner
            stamps, stop = [], [False]
            def spin():
                while not stop[0]:
                    stamps.append(time.perf_counter()); time.sleep(0.001)
            sp = threading.Thread(target=spin); sp.start()
            t0 = time.perf_counter()
            if mode == "seq":
                pipe.build(); tb = float("nan")
            elif mode == "overlap":
                tb = overlap(pipe, 0)
            else:
                tb = overlap(pipe, float(mode.split("_")[1]))
            t1 = time.perf_counter()
            out = pipe.run(); np.asarray(out[1].as_tensor())
            t2 = time.perf_counter()
            stop[0] = True; sp.join()
            gaps = np.diff([s for s in stamps if t0 <= s <= t1]) if stamps else np.array([0])
            print(f"round {rnd} {mode:12} build {t1-t0:.2f} (Build call {tb:.2f}) first {t2-t1:.2f} longest GIL gap {gaps.max() if len(gaps) else -1:.2f}", flush=True)
            del pipe, out

if __name__ == "__main__":
    main()
