"""Whether DALI runs Python operators of consecutive batches at the same time.

Two operators that each sleep 50 ms, one after the other, in one pipeline (prefetch depth 3):
about 50 ms per batch means DALI overlaps consecutive batches, about 100 ms means it runs one
batch's Python operators at a time. Kinds: ``gpu_only`` (one ``dl_tensor_python_function``, the
reference), ``gpu_gpu``, ``cpu_gpu`` (a host ``python_function`` then a GPU one) and ``cpu_cpu``;
each with DALI's default executor, ``exec_dynamic=True`` and ``exec_dynamic=False``.

    python benchmarks/python_op_overlap.py          # needs a GPU
"""

from __future__ import annotations

import time

import numpy as np


def slow_gpu(*xs):
    time.sleep(0.05)
    return xs[0] if len(xs) == 1 else xs


def slow_cpu(x):
    time.sleep(0.05)
    return x


def ms_per_batch(kind: str, executor: dict) -> float:
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    def on_gpu(x):
        return fn.dl_tensor_python_function(x, function=slow_gpu, batch_processing=True,
                                            device="gpu", synchronize_stream=False)

    def on_cpu(x):
        return fn.python_function(x, function=slow_cpu, batch_processing=True)

    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, prefetch_queue_depth=3, **executor)
    with pipe:
        x = fn.external_source(source=lambda: [np.zeros((8,), np.uint8)] * 4, batch=True)
        if kind == "gpu_only":
            out = on_gpu(x.gpu())
        elif kind == "gpu_gpu":
            out = on_gpu(on_gpu(x.gpu()))
        elif kind == "cpu_gpu":
            out = on_gpu(on_cpu(x).gpu())
        else:
            out = on_cpu(on_cpu(x))
        pipe.set_outputs(out)
    pipe.build()
    for _ in range(3):
        pipe.run()
    t = time.perf_counter()
    for _ in range(10):
        pipe.run()
    return round((time.perf_counter() - t) / 10 * 1000, 1)


if __name__ == "__main__":
    import nvidia.dali

    print("dali", nvidia.dali.__version__)
    for executor in ({}, {"exec_dynamic": True}, {"exec_dynamic": False}):
        for kind in ("gpu_only", "gpu_gpu", "cpu_gpu", "cpu_cpu"):
            print(executor, kind, ms_per_batch(kind, executor), "ms per batch", flush=True)
