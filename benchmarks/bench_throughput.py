"""Throughput of extsrc against its baselines, all in one run on one dataset.

The job (the seed recipe's): JPEG -> RGB -> ``grid2x2`` -> the image and its four tiles resized to
``--resize`` (224), with labels, batch 128. Variants, in images/s:

1. ``extsrc_auto``: ``extsrc.Loader`` with its automatic choices.
2. ``extsrc_numpy``: ``extsrc.Loader`` forced to the card's path (CPU ``python_function``), with
   GPU decoding; ``extsrc_numpy_cpu_decode``: the card's literal recipe, CPU decoding too.
   ``extsrc_gpu``: the op's CuPy path (``python_function(device="gpu")``).
3. ``seed_recipe``: the blog recipe as users write it today (``baselines.py``).
4. ``torch_dataloader``: PyTorch DataLoader + PIL, one worker per core.
5. ``ceiling``: parallel raw-byte external source -> decode -> DALI slices -> resizes, nothing
   of extsrc in between.

On a GPU it also reports peak GPU memory and CPU utilisation for 1 and 4, and a training view:
ResNet-50 (channels-last, bf16 autocast) images/s fed by 1, by 4, and by synthetic GPU tensors.

    python benchmarks/bench_throughput.py --out benchmarks/results/gpu.json          # GPU machine
    python benchmarks/bench_throughput.py --device cpu --n 256 --epochs 2 --out cpu.json   # no GPU

``--variants`` also takes ``extsrc_auto_8w`` and ``ceiling_8w`` (8 reader processes instead of
the automatic count), to see whether file reading bounds either, and ``extsrc_auto_nowatchdog``
(DALI called directly, without the loader's dead-worker watchdog thread). ``--repeats N`` runs the
whole list N times, interleaved, and reports each variant's median with every repeat.

Machines are noisy: compare variants inside one run, as ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


class Monitor:
    """Samples whole-machine CPU utilisation and GPU memory in use every 0.1 s."""

    def __init__(self, gpu_index: int | None) -> None:
        self.gpu_index = gpu_index
        self.cpu: list[float] = []
        self.mem: list[int] = []
        self._stop = threading.Event()

    @staticmethod
    def _cpu_times() -> tuple[int, int]:
        """(busy, total) jiffies of all cores from /proc/stat (no psutil needed)."""
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        idle = vals[3] + vals[4]
        return sum(vals) - idle, sum(vals)

    def __enter__(self) -> Monitor:
        self._last = self._cpu_times()
        self._handle = None
        if self.gpu_index is not None:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.gpu_index)
                self._nvml = pynvml
            except Exception:  # no NVML: report memory as unknown
                self._handle = None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            busy, total = self._cpu_times()
            b0, t0 = self._last
            self._last = (busy, total)
            if total > t0:
                self.cpu.append(100.0 * (busy - b0) / (total - t0))
            if self._handle is not None:
                self.mem.append(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def summary(self) -> dict:
        out = {"cpu_util_pct_mean": round(sum(self.cpu) / max(1, len(self.cpu)), 1),
               "cpu_cores": os.cpu_count()}
        if self.mem:
            out["gpu_mem_used_peak_mib"] = round(max(self.mem) / 2**20)
        return out


def batch_size_of(batch) -> int:
    if isinstance(batch, dict):
        return int(batch["label"].shape[0])
    if isinstance(batch, list) and batch and isinstance(batch[0], dict):  # DALIGenericIterator
        return int(batch[0]["label"].shape[0])
    return int(batch[-1].shape[0])  # DataLoader: list of tensors, label last


def to_device(batch, device):
    """DataLoader batches arrive on the host; training needs them on the GPU."""
    if device == "cpu" or isinstance(batch, dict) or (batch and isinstance(batch[0], dict)):
        return batch
    return [t.to(device, non_blocking=True) for t in batch]


def sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def measure(make, *, epochs: int, device: str, monitor_gpu: int | None = None,
            monitor: bool = False) -> dict:
    """Build, run one warm-up epoch, then time ``epochs`` epochs."""
    t0 = time.perf_counter()
    it = make()
    for b in it:
        to_device(b, device)
    sync(device)
    warm = time.perf_counter() - t0
    mon = Monitor(monitor_gpu) if monitor else None
    if mon:
        mon.__enter__()
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for b in it:
            to_device(b, device)
            n += batch_size_of(b)
    sync(device)
    dt = time.perf_counter() - t0
    if mon:
        mon.__exit__()
    res = {"images": n, "seconds": round(dt, 3), "images_per_s": round(n / dt, 1),
           "build_and_warmup_s": round(warm, 2)}
    if mon:
        res.update(mon.summary())
    if hasattr(it, "close"):
        it.close()
    del it
    return res


def train_view(feed, *, steps: int, warmup: int, device: str, batch_size: int,
               resize: int) -> dict:
    """ResNet-50 training images/s when fed by ``feed`` (an endless iterator of (uint8 NHWC
    images on the GPU, labels))."""
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(num_classes=1000).to(device).to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def step(imgs, labels):
        x = imgs.permute(0, 3, 1, 2).float().sub_(mean).div_(std)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), labels.view(-1) % 1000)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step(*next(feed))
    torch.cuda.synchronize()
    n = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        imgs, labels = next(feed)
        step(imgs, labels)
        n += imgs.shape[0]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"images": n, "seconds": round(dt, 3), "images_per_s": round(n / dt, 1)}


def endless(make_epoch_iter, extract):
    it = make_epoch_iter()
    while True:
        for b in it:
            yield extract(b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=4096, help="number of JPEGs (default 4096)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--resize", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs after one warm-up epoch")
    ap.add_argument("--device", default=None, help="'cpu' for the CPU-only mode; default: GPU 0")
    ap.add_argument("--variants", default="extsrc_auto,extsrc_numpy,seed_recipe,torch_dataloader,"
                    "ceiling")
    ap.add_argument("--train-steps", type=int, default=40, help="0 skips the training view")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the variant list this many times, interleaved; report the median")
    ap.add_argument("--out", default=None, help="write the full results as JSON here")
    args = ap.parse_args(argv)

    import baselines
    import nvidia.dali
    import torch
    from data import make_dataset

    import augment_ops  # noqa: F401  (registers grid2x2)
    import extsrc

    gpu = args.device != "cpu" and torch.cuda.is_available()
    device = "cuda:0" if gpu else "cpu"
    device_id = 0 if gpu else None
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    manifest, mean_bytes = make_dataset(args.data, args.n)
    gen_s = time.perf_counter() - t0
    man = extsrc.read_manifest(manifest)
    bs, rs = args.batch_size, args.resize

    probe = extsrc.Loader(man, batch_size=bs, ops=["grid2x2"], resize=rs, device=device)
    threads, workers = probe.config.threads, probe.config.workers
    auto_paths = probe.op_paths
    probe.close()

    makers = {
        "extsrc_auto": lambda: extsrc.Loader(man, batch_size=bs, ops=["grid2x2"], resize=rs,
                                             device=device),
        "extsrc_numpy": lambda: extsrc.Loader(man, batch_size=bs, ops=["grid2x2"], resize=rs,
                                              device=device, op_path="numpy"),
        "extsrc_numpy_cpu_decode": lambda: extsrc.Loader(
            man, batch_size=bs, ops=["grid2x2"], resize=rs, device=device, op_path="numpy",
            decoder="cpu"),
        "extsrc_gpu": lambda: extsrc.Loader(man, batch_size=bs, ops=["grid2x2"], resize=rs,
                                            device=device, op_path="gpu"),
        "extsrc_auto_nowatchdog": lambda: extsrc.Loader(
            man, batch_size=bs, ops=["grid2x2"], resize=rs, device=device, watchdog=False),
        "extsrc_auto_8w": lambda: extsrc.Loader(man, batch_size=bs, ops=["grid2x2"], resize=rs,
                                                device=device, num_workers=8),
        "seed_recipe": lambda: baselines.seed_recipe_iterator(
            str(manifest), batch_size=bs, resize=rs, num_threads=threads, device_id=device_id),
        "torch_dataloader": lambda: baselines.torch_dataloader(
            str(manifest), batch_size=bs, resize=rs, num_workers=cores, pin_memory=gpu),
        "ceiling": lambda: baselines.ceiling_iterator(
            str(manifest), batch_size=bs, resize=rs, num_threads=threads, device_id=device_id,
            num_workers=workers),
        "ceiling_8w": lambda: baselines.ceiling_iterator(
            str(manifest), batch_size=bs, resize=rs, num_threads=threads, device_id=device_id,
            num_workers=8),
    }
    results: dict = {
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else
                                                         sys.argv[1:])]),
        "machine": {
            "gpu": torch.cuda.get_device_name(0) if gpu else None,
            "cpu_cores": cores, "platform": platform.platform(),
            "python": platform.python_version(), "dali": nvidia.dali.__version__,
            "torch": torch.__version__,
        },
        "dataset": {"n": args.n, "mean_jpeg_bytes": round(mean_bytes), "generate_s":
                    round(gen_s, 1), "image_size": "500x375"},
        "settings": {"batch_size": bs, "resize": rs, "timed_epochs": args.epochs,
                     "dali_threads": threads, "extsrc_workers": workers,
                     "extsrc_auto_op_paths": auto_paths, "dataloader_workers": cores},
        "throughput": {},
    }
    runs: dict[str, list[dict]] = {}
    for rep in range(args.repeats):  # interleaved, so slow drift hits every variant alike
        for name in args.variants.split(","):
            print(f"[bench] {name} (repeat {rep + 1}/{args.repeats}) ...", flush=True)
            r = measure(makers[name], epochs=args.epochs, device=device, monitor_gpu=device_id,
                        monitor=name in ("extsrc_auto", "torch_dataloader"))
            runs.setdefault(name, []).append(r)
            print(f"[bench] {name}: {r}", flush=True)
    for name, rs_ in runs.items():
        ordered = sorted(rs_, key=lambda r: r["images_per_s"])
        median = dict(ordered[len(ordered) // 2])  # the upper median for an even count
        if len(rs_) > 1:
            median["repeats_images_per_s"] = [r["images_per_s"] for r in rs_]
        results["throughput"][name] = median

    tp = {k: v["images_per_s"] for k, v in results["throughput"].items()}
    ratios = {}
    if "extsrc_auto" in tp:
        for other in ("ceiling", "seed_recipe", "torch_dataloader", "extsrc_numpy"):
            if other in tp:
                ratios[f"extsrc_auto/{other}"] = round(tp["extsrc_auto"] / tp[other], 2)
    results["ratios"] = ratios

    if gpu and args.train_steps > 0:
        import torch

        def synthetic():
            x = torch.randint(0, 256, (bs, rs, rs, 3), dtype=torch.uint8, device=device)
            y = torch.randint(0, 1000, (bs,), device=device)
            while True:
                yield x, y

        feeds = {
            "synthetic": synthetic,
            "extsrc_auto": lambda: endless(makers["extsrc_auto"],
                                           lambda b: (b["image"], b["label"])),
            "torch_dataloader": lambda: endless(
                makers["torch_dataloader"],
                lambda b: (b[0].to(device, non_blocking=True),
                           b[-1].to(device, non_blocking=True))),
        }
        train = {}
        for name, feed in feeds.items():
            print(f"[train] {name} ...", flush=True)
            train[name] = train_view(feed(), steps=args.train_steps, warmup=8, device=device,
                                     batch_size=bs, resize=rs)
            print(f"[train] {name}: {train[name]}", flush=True)
        results["train_resnet50"] = train
        s = train["synthetic"]["images_per_s"]
        results["ratios"]["train_extsrc/synthetic"] = round(
            train["extsrc_auto"]["images_per_s"] / s, 3)
        results["ratios"]["train_dataloader/synthetic"] = round(
            train["torch_dataloader"]["images_per_s"] / s, 3)

    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print("\n| variant | images/s |")
    print("|---|---|")
    for k, v in tp.items():
        print(f"| {k} | {v:,.0f} |")
    for k, v in results.get("train_resnet50", {}).items():
        print(f"| train ResNet-50 fed by {k} | {v['images_per_s']:,.0f} |")
    print(json.dumps(results["ratios"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
