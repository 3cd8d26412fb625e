# ruff: noqa: E501, E702
"""How long DALI 2.4 takes to build a pipeline by part (external source only, mixed or CPU decoder,
decoder options), first and second build in one process. Run on the GPU machine:
    python3 benchmarks/probes/dali_build_probe.py es_only,mixed,mixed_hw0,mixed_nopad,cpu_dec
"""
import sys
import time

sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from pathlib import Path


def main():
    from data import make_dataset
    manifest, _ = make_dataset(Path("/tmp/extsrc-bench-data/1024"), 1024)
    import numpy as np
    from baselines import RawSource, read_pairs
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    pairs = read_pairs(manifest)
    variants = {
        "es_only": dict(dec=None),
        "mixed": dict(dec="mixed"),
        "mixed_hw0": dict(dec="mixed", hw=0.0),
        "mixed_nopad": dict(dec="mixed", dk=dict(device_memory_padding=0, host_memory_padding=0)),
        "mixed_t4": dict(dec="mixed", threads=4),
        "mixed_t1": dict(dec="mixed", threads=1),
        "mixed_legacy": dict(dec="mixed", legacy=True),
        "mixed_prealloc": dict(dec="mixed", dk=dict(preallocate_width_hint=500, preallocate_height_hint=500)),
        "cpu_dec": dict(dec="cpu"),
    }
    order = sys.argv[1].split(",")
    for rnd in range(2):
        for name in order:
            v = variants[name]
            t0 = time.perf_counter()
            pipe = Pipeline(batch_size=128, num_threads=v.get("threads", 12), device_id=0, seed=0)
            with pipe:
                jpegs, labels = fn.external_source(source=RawSource(pairs, 128), num_outputs=2,
                                                   batch=True, batch_info=True)
                if v["dec"] is None:
                    pipe.set_outputs(jpegs.gpu(), labels)
                else:
                    dk = dict(v.get("dk", {}))
                    if "hw" in v:
                        dk["hw_decoder_load"] = v["hw"]
                    dec = fn.legacy.decoders.image if v.get("legacy") and hasattr(fn, "legacy") else fn.decoders.image
                    img = dec(jpegs, device=v["dec"], output_type=types.RGB, **dk)
                    img = fn.resize(img.gpu() if v["dec"] == "cpu" else img, resize_shorter=224)
                    pipe.set_outputs(img, labels)
            t1 = time.perf_counter()
            pipe.build()
            t2 = time.perf_counter()
            out = pipe.run()
            np.asarray(out[1].as_tensor())
            t3 = time.perf_counter()
            print(f"round {rnd} {name:12} define {t1-t0:.2f} build {t2-t1:.2f} first {t3-t2:.2f}", flush=True)
            del pipe, out

if __name__ == "__main__":
    main()
