"""Where a CPU-only pipeline spends its time: DALI's CPU decoding and resizing, against Pillow.

Raw DALI pipelines (a parallel raw-byte external source, one reader, ``--threads`` DALI
threads) over the JPEGs of ``data.py``: decoding alone, decoding and resizing to 224x224 with
DALI's defaults (linear, antialiased), and without antialiasing; then Pillow in one thread,
decoding alone and decoding plus a bilinear resize (Pillow antialiases when it shrinks); and
the resize alone on one core, in milliseconds per image: DALI's ``fn.resize`` (one thread, over
a batch of the decoded images) against ``extsrc.ops_runtime.hostresize.HostResize`` (Pillow), the
resize CPU loaders use.

    python benchmarks/cpu_resize_cost.py --n 256 --out results/cpu_resize_cost.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def dali_rate(pairs, build, *, threads: int, seconds: float) -> float:
    from baselines import RawSource, pipeline_rate
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=128, num_threads=threads, device_id=None, py_num_workers=1,
                    py_start_method="fork")
    with pipe:
        jpegs, labels = fn.external_source(source=RawSource(pairs, 128), num_outputs=2,
                                           batch=True, batch_info=True, parallel=True,
                                           prefetch_queue_depth=1)
        pipe.set_outputs(build(jpegs), labels)
    pipe.build()

    images, elapsed = pipeline_rate(pipe, warmup=1, seconds=seconds)
    return images / elapsed


def pil_rate(pairs, resize: bool) -> float:
    import numpy as np
    from PIL import Image

    start = time.perf_counter()
    for path, _ in pairs[:128]:
        with Image.open(path) as im:
            rgb = im.convert("RGB")
            np.asarray(rgb.resize((224, 224), Image.BILINEAR) if resize else rgb)
    return 128 / (time.perf_counter() - start)


def resize_ms(pairs) -> dict[str, float]:
    """Milliseconds per image to resize 128 decoded images to 224x224 on one core."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def
    from PIL import Image

    sys.path.insert(0, str(HERE.parent))
    from extsrc.ops_runtime.hostresize import HostResize

    imgs = []
    for path, _ in pairs[:128]:
        with Image.open(path) as im:
            imgs.append(np.asarray(im.convert("RGB")))
    out: dict[str, float] = {}
    for name, aa in (("dali_resize_one_thread", True), ("dali_resize_no_antialias_one_thread",
                                                         False)):
        @pipeline_def(batch_size=len(imgs), num_threads=1, device_id=None)
        def pipe(aa=aa):
            x = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
            return fn.resize(x, resize_x=224, resize_y=224, antialias=aa)

        p = pipe()
        p.build()
        p.run()
        start = time.perf_counter()
        for _ in range(3):
            p.run()
        out[name] = round((time.perf_counter() - start) / (3 * len(imgs)) * 1e3, 3)
        del p
    for name, mode in (("hostresize_stretch", "stretch"),
                       ("hostresize_shorter_side", "shorter_side")):
        rs = HostResize((224, 224), mode)
        start = time.perf_counter()
        for _ in range(3):
            for im in imgs:
                rs(im)
        out[name] = round((time.perf_counter() - start) / (3 * len(imgs)) * 1e3, 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from baselines import read_pairs
    from data import make_dataset
    from nvidia.dali import fn, types

    manifest, _ = make_dataset(args.data, args.n)
    pairs = read_pairs(str(manifest))

    def decode(j):
        return fn.decoders.image(j, device="cpu", output_type=types.RGB)

    variants = {
        "dali_decode": lambda j: decode(j),
        "dali_decode+resize": lambda j: fn.resize(decode(j), resize_x=224, resize_y=224),
        "dali_decode+resize_no_antialias": lambda j: fn.resize(
            decode(j), resize_x=224, resize_y=224, antialias=False),
    }
    rates = {k: round(dali_rate(pairs, b, threads=args.threads, seconds=args.seconds), 1)
             for k, b in variants.items()}
    rates["pil_decode_one_thread"] = round(pil_rate(pairs, False), 1)
    rates["pil_decode+resize_one_thread"] = round(pil_rate(pairs, True), 1)
    for k, v in rates.items():
        print(f"| {k} | {v:,.0f} |")
    ms = resize_ms(pairs)
    for k, v in ms.items():
        print(f"| {k} | {v} ms |")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "date": datetime.date.today().isoformat(),
            "command": "python " + " ".join(sys.argv),
            "machine": {"cpu_cores": len(os.sched_getaffinity(0)),
                        "platform": platform.platform()},
            "images_per_s": rates, "resize_ms_per_image": ms}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
