"""GPU smoke test with a watchdog: loaders on each op path for two epochs, then close.

Prints the time of every step; if anything hangs, faulthandler dumps every thread's stack after
``--watchdog`` seconds and exits, so a hang shows where it is instead of eating the call's budget.

    python benchmarks/gpu_smoke.py --data /tmp/extsrc-smoke --watchdog 90
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/extsrc-smoke")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--watchdog", type=float, default=90)
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.watchdog, exit=True)

    from data import make_dataset

    import extsrc

    manifest, _ = make_dataset(args.data, args.n)
    t0 = time.perf_counter()
    cases = [
        ("auto grid2x2", dict(ops=["grid2x2"])),
        ("numpy grid2x2 (gpu decode)", dict(ops=["grid2x2"],
                                             op_runtime=extsrc.OpRuntime(op_path="numpy"))),
        ("gpu random_crop+random_hflip", dict(ops=["random_crop", "random_hflip"],
                                               op_runtime=extsrc.OpRuntime(op_path="gpu"))),
    ]
    for name, kw in cases:
        loader = extsrc.Loader(manifest, batch_size=64, resize=64, device="cuda", **kw)
        print(f"[smoke] {name}: {loader!r}", flush=True)
        for ep in range(2):
            n = sum(int(b["label"].shape[0]) for b in loader)
            print(f"[smoke]   epoch {ep}: {n} samples at {time.perf_counter() - t0:.1f} s",
                  flush=True)
        loader.close()
        print(f"[smoke]   closed at {time.perf_counter() - t0:.1f} s", flush=True)
    faulthandler.cancel_dump_traceback_later()
    print("[smoke] ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
