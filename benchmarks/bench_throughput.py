"""Throughput of extsrc against its baselines, all in one run on one dataset.

The job (the seed recipe's): JPEG -> RGB -> ``grid2x2`` -> the image and its four tiles resized to
``--resize`` (224), with labels, batch 128. Variants, in images/s:

1. ``extsrc_auto``: ``extsrc.Loader`` with its automatic choices.
2. ``extsrc_numpy``: ``extsrc.Loader`` forced to the numpy path (CPU ``python_function``), with
   GPU decoding; ``extsrc_numpy_cpu_decode``: the same with CPU decoding too.
   ``extsrc_gpu``: the op's CuPy path (``python_function(device="gpu")``).
3. ``seed_recipe``: the blog recipe as users write it today (``baselines.py``).
4. ``torch_dataloader``: PyTorch DataLoader + PIL, one worker per core.
5. ``ceiling``: parallel raw-byte external source -> decode -> DALI slices -> resizes, nothing
   of extsrc in between.

On a GPU it also reports peak GPU memory and CPU utilisation for 1 and 4, and a training view:
ResNet-50 (channels-last, bf16 autocast) images/s fed by 1, by 4, and by synthetic GPU tensors.

    python benchmarks/bench_throughput.py --out benchmarks/results/gpu.json          # GPU machine
    python benchmarks/bench_throughput.py --device cpu --n 256 --epochs 2 --out cpu.json   # no GPU

``--variants`` also takes modifiers after a base name: ``+wN`` reader processes, ``+tN`` DALI
threads, ``+hwX`` the share of JPEGs given to the GPU's hardware decoder (``+hwdali``: DALI's
default), ``+nowd`` extsrc without its dead-worker watchdog thread; e.g. ``ceiling+w8+hw1.0``.
``extsrc_auto_8w``, ``ceiling_8w`` and ``extsrc_auto_nowatchdog`` are older names of three of
them. ``extsrc_graph`` drives extsrc's DALI graph with DALI's iterator, without the Loader.
extsrc is compared with the fastest ``ceiling*`` variant of the run as well as with the plain
one. ``--repeats N`` runs the whole list (and the training view) N times, interleaved, and
reports each median with every repeat.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def median_of(runs: list[dict]) -> dict:
    """The run with the median images/s (the upper one for an even count), with every repeat."""
    ordered = sorted(runs, key=lambda r: r["images_per_s"])
    median = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        median["repeats_images_per_s"] = [r["images_per_s"] for r in runs]
    return median


def endless(make_epoch_iter, extract):
    it = make_epoch_iter()
    try:
        while True:
            for b in it:
                yield extract(b)
    finally:  # closing the generator stops the loader's workers too
        if hasattr(it, "close"):
            it.close()


#: Old names of variants, kept so that earlier commands in benchmarks/README.md still run.
ALIASES = {"extsrc_auto_8w": "extsrc_auto+w8", "ceiling_8w": "ceiling+w8",
           "extsrc_auto_nowatchdog": "extsrc_auto+nowd"}


def parse_variant(name: str) -> tuple[str, dict]:
    """``base+mod+mod``: ``wN`` reader processes, ``tN`` DALI threads, ``hwX`` hardware-decoder
    share (``hwdali``: DALI's default), ``nowd`` no watchdog (extsrc only).
    E.g. ``ceiling+hw1.0+w8``."""
    base, *mods = ALIASES.get(name, name).split("+")
    kw: dict = {}
    for m in mods:
        if m == "hwdali":
            kw["hw_decoder_load"] = None  # DALI's own default split
        elif m.startswith("hw"):
            kw["hw_decoder_load"] = float(m[2:])
        elif m.startswith("w") and m[1:].isdigit():
            kw["num_workers"] = int(m[1:])
        elif m.startswith("t") and m[1:].isdigit():
            kw["num_threads"] = int(m[1:])
        elif m == "nowd":
            kw["watchdog"] = False
        else:
            raise SystemExit(f"unknown modifier {m!r} in variant {name!r}")
    return base, kw


# -- variants ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every variant needs: the dataset, the job and where it runs."""

    manifest_path: str
    manifest: Any  # extsrc.Manifest
    batch_size: int
    resize: int
    device: str
    device_id: int | None
    cores: int
    threads: int  # DALI threads extsrc picks here (the baselines get as many)
    workers: int  # reader processes extsrc picks here

    @property
    def gpu(self) -> bool:
        return self.device_id is not None

    def loader(self, op_path: str | None = None, decoder: str = "auto", **workers):
        """extsrc's Loader of the job; ``workers``: fields of ``extsrc.Workers`` (the
        variants' modifiers)."""
        import extsrc

        # The baselines stretch every output to a square: so does extsrc here.
        return extsrc.Loader(self.manifest, batch_size=self.batch_size, ops=["grid2x2"],
                             resize=self.resize, device=self.device,
                             format=extsrc.BatchFormat(resize_mode="stretch"),
                             op_runtime=extsrc.OpRuntime(op_path=op_path),
                             workers=extsrc.Workers(decoder=decoder, **workers))


@dataclass(frozen=True)
class Variant:
    """A way to produce the job's batches: ``make(setup, **modifiers)`` returns an object whose
    every ``iter()`` is one epoch (and which may have ``close()``)."""

    name: str
    make: Callable[..., Any]
    modifiers: frozenset[str]
    train_feed: bool  # the training view knows its batches' layout


VARIANTS: dict[str, Variant] = {}
EXTSRC_MODIFIERS = frozenset({"num_workers", "num_threads", "hw_decoder_load", "watchdog"})


def variant(name: str, *, modifiers=EXTSRC_MODIFIERS, train_feed: bool = False):
    """Register ``make(setup, **modifiers)`` as the variant ``name``."""
    def register(make):
        VARIANTS[name] = Variant(name, make, frozenset(modifiers), train_feed)
        return make
    return register


@variant("extsrc_auto", train_feed=True)
def extsrc_auto(setup: Setup, **kw):
    return setup.loader(**kw)


@variant("extsrc_numpy", train_feed=True)
def extsrc_numpy(setup: Setup, **kw):
    return setup.loader(op_path="numpy", **kw)


@variant("extsrc_numpy_cpu_decode", train_feed=True)
def extsrc_numpy_cpu_decode(setup: Setup, **kw):
    return setup.loader(op_path="numpy", decoder="cpu", **kw)


@variant("extsrc_gpu", train_feed=True)
def extsrc_gpu(setup: Setup, **kw):
    return setup.loader(op_path="gpu", **kw)


@variant("extsrc_graph")
def extsrc_graph(setup: Setup, **kw):
    """extsrc's DALI graph and source driven by DALI's own iterator, without the Loader's
    per-batch Python (diagnostic): the loader's configuration through the public
    ``extsrc.graph.image.build_pipeline``."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from extsrc.graph.image import build_pipeline

    loader = setup.loader(**kw)
    c = loader.config
    pipe = build_pipeline(
        loader.source, ops=c.ops, transforms=c.transforms, op_paths=loader.op_paths,
        resize=c.resize, stages=c.stages, decoder=c.decoder, hw_decoder_load=c.hw_decoder_load,
        device_id=c.device_id, num_threads=c.threads, num_workers=c.workers,
        start_method=c.method, prefetch_queue_depth=c.prefetch_queue_depth, seed=c.seed)
    pipe.build()
    return DaliEpochs(DALIGenericIterator(
        pipe, [*c.output_names, "__info"], last_batch_policy=LastBatchPolicy.PARTIAL,
        auto_reset=False, prepare_first_batch=False))


class DaliEpochs:
    """A DALI iterator as an object whose every ``iter()`` is one epoch."""

    def __init__(self, it) -> None:
        self.it = it

    def __iter__(self):
        yield from self.it
        self.it.reset()

    def close(self) -> None:
        self.it = None


@variant("seed_recipe", modifiers=())
def seed_recipe(setup: Setup):
    import baselines

    return baselines.seed_recipe_iterator(
        setup.manifest_path, batch_size=setup.batch_size, resize=setup.resize,
        num_threads=setup.threads, device_id=setup.device_id)


@variant("torch_dataloader", modifiers=(), train_feed=True)
def torch_dataloader(setup: Setup):
    import baselines

    return baselines.torch_dataloader(
        setup.manifest_path, batch_size=setup.batch_size, resize=setup.resize,
        num_workers=setup.cores, pin_memory=setup.gpu)


@variant("ceiling", modifiers=("num_workers", "num_threads", "hw_decoder_load"))
def ceiling(setup: Setup, num_workers=None, num_threads=None, hw_decoder_load=None):
    import baselines

    return baselines.ceiling_iterator(
        setup.manifest_path, batch_size=setup.batch_size, resize=setup.resize,
        num_threads=setup.threads if num_threads is None else num_threads,
        device_id=setup.device_id,
        num_workers=setup.workers if num_workers is None else num_workers,
        hw_decoder_load=hw_decoder_load)


def maker(setup: Setup, name: str) -> Callable[[], Any]:
    """The factory of variant ``name`` (``base+modifiers``); a bad name fails here."""
    base, kw = parse_variant(name)
    if base not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}; bases: {sorted(VARIANTS)}")
    v = VARIANTS[base]
    extra = sorted(set(kw) - v.modifiers)
    if extra:
        raise SystemExit(f"variant {name!r}: {base} takes no modifier for {extra}")
    return lambda: v.make(setup, **kw)


# -- the run -------------------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/extsrc-bench-data")
    ap.add_argument("--n", type=int, default=4096, help="number of JPEGs (default 4096)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--resize", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs after one warm-up epoch")
    ap.add_argument("--device", default=None, help="'cpu' for the CPU-only mode; default: GPU 0")
    ap.add_argument("--variants", default="extsrc_auto,extsrc_numpy,seed_recipe,torch_dataloader,"
                    "ceiling")
    ap.add_argument("--train-steps", type=int, default=100,
                    help="timed ResNet-50 steps per feed; 0 skips the training view")
    ap.add_argument("--train-feeds", default="extsrc_auto,torch_dataloader",
                    help="variants that feed the training view (besides synthetic tensors)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the variant list this many times, interleaved; report the median")
    ap.add_argument("--out", default=None, help="write the full results as JSON here")
    return ap.parse_args(argv)


def run_throughput(setup: Setup, names: list[str], *, repeats: int, epochs: int) -> dict:
    runs: dict[str, list[dict]] = {}
    for rep in range(repeats):  # interleaved, so slow drift hits every variant alike
        for name in names:
            print(f"[bench] {name} (repeat {rep + 1}/{repeats}) ...", flush=True)
            r = measure(maker(setup, name), epochs=epochs, device=setup.device,
                        monitor_gpu=setup.device_id,
                        monitor=name in ("extsrc_auto", "torch_dataloader"))
            runs.setdefault(name, []).append(r)
            print(f"[bench] {name}: {r}", flush=True)
    return runs


def throughput_ratios(tp: dict[str, float]) -> dict:
    ratios: dict = {}
    if "extsrc_auto" in tp:
        for other in ("ceiling", "seed_recipe", "torch_dataloader", "extsrc_numpy"):
            if other in tp:
                ratios[f"extsrc_auto/{other}"] = round(tp["extsrc_auto"] / tp[other], 2)
        # The ceiling with DALI's defaults is not the only raw graph: if a tuned one (more
        # readers, another decoder split) is faster, extsrc is held to that one too.
        ceilings = {k: v for k, v in tp.items() if parse_variant(k)[0] == "ceiling"}
        if ceilings:
            best = max(ceilings, key=ceilings.get)
            ratios["extsrc_auto/best_ceiling"] = round(tp["extsrc_auto"] / ceilings[best], 2)
            ratios["best_ceiling"] = best
    return ratios


def run_training(setup: Setup, feed_names: list[str], *, repeats: int, steps: int) -> dict:
    """ResNet-50 images/s fed by synthetic GPU tensors and by each of ``feed_names``."""
    import torch

    bs, rs, device = setup.batch_size, setup.resize, setup.device

    def synthetic():
        x = torch.randint(0, 256, (bs, rs, rs, 3), dtype=torch.uint8, device=device)
        y = torch.randint(0, 1000, (bs,), device=device)
        while True:
            yield x, y

    def to_pair(b):
        if isinstance(b, dict):  # extsrc
            return b["image"], b["label"]
        return (b[0].to(device, non_blocking=True),  # DataLoader: host tensors
                b[-1].to(device, non_blocking=True))

    feeds = {"synthetic": synthetic}
    for name in feed_names:
        feeds[name] = lambda name=name: endless(maker(setup, name), to_pair)
    train_runs: dict[str, list[dict]] = {}
    for rep in range(repeats):  # interleaved like the throughput runs
        for name, feed in feeds.items():
            print(f"[train] {name} (repeat {rep + 1}/{repeats}) ...", flush=True)
            it = feed()
            r = train_view(it, steps=steps, warmup=8, device=device, batch_size=bs, resize=rs)
            it.close()  # stops the feed's loader before the next one starts
            train_runs.setdefault(name, []).append(r)
            print(f"[train] {name}: {r}", flush=True)
    return {name: median_of(rs_) for name, rs_ in train_runs.items()}


def main(argv=None) -> int:
    args = parse_args(argv)

    import nvidia.dali
    import torch
    from data import make_dataset

    import augment_ops  # noqa: F401  (registers grid2x2)
    import extsrc

    gpu = args.device != "cpu" and torch.cuda.is_available()
    device = "cuda:0" if gpu else "cpu"
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    manifest, mean_bytes = make_dataset(args.data, args.n)
    gen_s = time.perf_counter() - t0
    man = extsrc.read_manifest(manifest)
    with extsrc.Loader(man, batch_size=args.batch_size, ops=["grid2x2"], resize=args.resize,
                       device=device) as probe:  # what extsrc picks on this machine
        threads, workers, auto_paths = probe.plan.threads, probe.plan.workers, probe.op_paths
    setup = Setup(str(manifest), man, args.batch_size, args.resize, device, 0 if gpu else None,
                  cores, threads, workers)
    names, feed_names = args.variants.split(","), args.train_feeds.split(",")
    for name in [*names, *feed_names]:
        maker(setup, name)  # a typo fails here, not after minutes of benchmarking
    for name in feed_names:
        if not VARIANTS[parse_variant(name)[0]].train_feed:
            feeders = sorted(n for n, v in VARIANTS.items() if v.train_feed)
            raise SystemExit(f"--train-feeds takes variants of {feeders} "
                             f"(extsrc's batches or the DataLoader's), got {name!r}")
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
        "settings": {"batch_size": args.batch_size, "resize": args.resize,
                     "timed_epochs": args.epochs, "dali_threads": threads,
                     "extsrc_workers": workers, "extsrc_auto_op_paths": auto_paths,
                     "dataloader_workers": cores},
        "throughput": {},
    }
    runs = run_throughput(setup, names, repeats=args.repeats, epochs=args.epochs)
    results["throughput"] = {name: median_of(rs_) for name, rs_ in runs.items()}
    tp = {k: v["images_per_s"] for k, v in results["throughput"].items()}
    results["ratios"] = throughput_ratios(tp)
    if gpu and args.train_steps > 0:
        train = run_training(setup, feed_names, repeats=args.repeats, steps=args.train_steps)
        results["train_resnet50"] = train
        s = train["synthetic"]["images_per_s"]
        for name in train:
            if name != "synthetic":
                results["ratios"][f"train_{name}/synthetic"] = round(
                    train[name]["images_per_s"] / s, 3)

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
    for name, runs_ in runs.items():
        if len(runs_) > 1:
            print(f"{name}: repeats {[r['images_per_s'] for r in runs_]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
