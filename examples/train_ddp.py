"""Train ResNet-18 with PyTorch DDP on a generated dataset fed by ``extsrc.Loader``.

Run on one node with N processes (one per GPU; on a CPU-only machine gloo is used)::

    torchrun --nproc_per_node=N examples/train_ddp.py --data /tmp/ddpdata --epochs 1

The loader is built without ``shard_id``/``num_shards``/``device``: it shards by the global rank
and places its pipeline on the local GPU (``LOCAL_RANK``) by itself. Every rank gets the same
number of batches per epoch, so DDP never waits on a rank that ran out of data. Pad repeats
(``batch["is_pad"]``) get zero weight in the loss.

Prints images/s per rank and, on rank 0, the total; ``--json PATH`` appends the results as one
JSON line (rank 0). Without torchrun it runs as a single process.

``benchmarks/ddp_minimal.py`` is the reference loop its several-GPU scaling is compared with. Each
of the flags under "differences from benchmarks/ddp_minimal.py" switches one thing this loop does
to the way the reference does it (``benchmarks/ddp_bisect.sh`` times them one at a time); the
defaults keep this loop as it is.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import extsrc
from extsrc.loading.distributed import detect
from extsrc.sources.sharding import num_batches_per_shard
from extsrc.sources.table import read_manifest

MANIFEST = "manifest.csv"
NUM_CLASSES = 10
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def generate_dataset(root: Path, n: int, size: int = 256, seed: int = 0) -> Path:
    """Write ``n`` JPEGs with random smooth content and labels ``i % 10``, then the manifest.

    The manifest is written last (atomically), so its presence means the dataset is complete.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = ["path,label"]
    for i in range(n):
        # Low-resolution noise scaled up: varied content that compresses like a photo.
        small = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((size, size), Image.BILINEAR)
        rel = f"images/{i:06d}.jpg"
        img.save(root / rel, quality=90)
        lines.append(f"{rel},{i % NUM_CLASSES}")
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, root / MANIFEST)
    return root / MANIFEST


class SmallCNN(nn.Module):
    """Fallback when torchvision is not installed."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c_out in (32, 64, 128, 256):
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                       nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def build_model(num_classes: int, arch: str = "resnet18") -> tuple[nn.Module, str]:
    try:
        import torchvision
    except ImportError:
        return SmallCNN(num_classes), "SmallCNN (torchvision not installed)"
    return getattr(torchvision.models, arch)(num_classes=num_classes), arch


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and its live children (the loader's DALI
    reader processes) so far; without psutil, this process only."""
    try:
        import psutil
    except ImportError:
        return time.process_time()
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # a child that ended in between
            pass
    return total


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True,
                   help=f"dataset folder; generated there if it has no {MANIFEST}")
    p.add_argument("--num-images", type=int, default=2048, help="images to generate")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--arch", choices=("resnet18", "resnet50"), default="resnet18",
                   help="torchvision model (default resnet18)")
    p.add_argument("--steps", type=int, default=None,
                   help="cap on steps per epoch (a cut epoch restarts the loader's pipeline for "
                        "the next one, inside the timing: leave it unset to time whole epochs)")
    p.add_argument("--warmup", type=int, default=5, help="steps excluded from the timing")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--num-workers", type=int, default=None, help="DALI reader processes per rank")
    p.add_argument("--num-threads", type=int, default=None,
                   help="DALI CPU threads per rank (default: the rank's share of the cores, less "
                        "its readers)")
    p.add_argument("--hw-decoder-load", default=None,
                   help="share of JPEGs for the GPU's hardware decoder, or 'dali' for DALI's "
                        "default (default: the loader's)")
    p.add_argument("--synthetic", action="store_true",
                   help="train on one fixed batch already on the device instead of the loader's "
                        "batches (same step count): the training-only ceiling to compare with")
    p.add_argument("--device-mode", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA (nccl) when a GPU is visible, else CPU (gloo)")
    p.add_argument("--json", type=Path, default=None, help="append a JSON result line (rank 0)")
    p.add_argument("--tag", default="", help="a name for this run in the --json line")
    p.add_argument("--watchdog", type=float, default=None,
                   help="dump every thread's stack and exit if the run takes longer (seconds)")
    g = p.add_argument_group(
        "differences from benchmarks/ddp_minimal.py",
        "each switches one thing to the reference loop's way (default: this loop's way)")
    p.add_argument("--synthetic-per-epoch", action="store_true",
                   help="--synthetic: make the fixed batch again at every epoch, on the CPU, "
                        "inside the timing (default: once, before the timing). This cost a "
                        "quarter of the 2-GPU throughput, see benchmarks/README.md")
    g.add_argument("--synthetic-float", action="store_true",
                   help="--synthetic: the fixed batch is the model's input already (normalised "
                        "float, channels-last, int64 labels): no uint8-to-float conversion, "
                        "normalisation and label reshaping every step")
    g.add_argument("--no-pad-mask", action="store_true",
                   help="mean cross-entropy over the batch: no is_pad copy to the device and no "
                        "masking every step")
    g.add_argument("--loss-in-autocast", action="store_true",
                   help="cross-entropy on the bf16 logits inside autocast (default: on "
                        "logits.float(), after it)")
    g.add_argument("--no-weight-decay", action="store_true",
                   help="SGD with momentum only (default: weight_decay=1e-4 as well)")
    g.add_argument("--no-loader", action="store_true",
                   help="--synthetic: construct no extsrc.Loader (steps per epoch from the "
                        "manifest's length and the world size, as the loader counts them)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.watchdog:
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    use_cuda = args.device_mode == "cuda" or (
        args.device_mode == "auto" and torch.cuda.is_available()
    )
    if use_cuda and not torch.cuda.is_available():
        raise SystemExit("--device-mode cuda but no CUDA GPU is visible")

    info = detect()  # from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK)
    distributed = info.world_size > 1
    if use_cuda:
        torch.cuda.set_device(info.local_rank)  # the LOCAL gpu; the global rank picks the shard
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = info.rank, info.world_size
    for name in ("synthetic_per_epoch", "synthetic_float", "no_loader"):
        if getattr(args, name) and not args.synthetic:
            raise SystemExit(f"--{name.replace('_', '-')} changes the --synthetic feed; add "
                             "--synthetic")

    manifest = args.data / MANIFEST
    if rank == 0 and not manifest.exists():
        t = time.perf_counter()
        generate_dataset(args.data, args.num_images)
        print(f"generated {args.num_images} images in {args.data} "
              f"({time.perf_counter() - t:.1f} s)", flush=True)
    if distributed:
        dist.barrier()  # the other ranks wait for the dataset

    decode_kw = {}
    if args.hw_decoder_load is not None:
        decode_kw["hw_decoder_load"] = (
            None if args.hw_decoder_load == "dali" else float(args.hw_decoder_load))
    loader = None
    if args.no_loader:
        labels = read_manifest(manifest).labels
        batches_per_epoch = num_batches_per_shard(
            len(labels), batch_size=args.batch_size, num_shards=world)
        device = torch.device("cuda", info.local_rank) if use_cuda else torch.device("cpu")
    else:
        loader = extsrc.Loader(
            manifest, batch_size=args.batch_size, resize=224, seed=0,
            device=None if use_cuda else "cpu",
            workers=extsrc.Workers(num_workers=args.num_workers, num_threads=args.num_threads,
                                   **decode_kw),
        )
        labels, batches_per_epoch = loader.manifest.labels, len(loader)
        device = torch.device(loader.device)  # cuda:LOCAL_RANK, picked by the loader
    # Size the head from the manifest, not a constant: a label >= num_classes is a device-side
    # assert on CUDA (seen on the GPU machine with a 1000-class manifest), not a clean error.
    num_classes = max(NUM_CLASSES, int(labels.max()) + 1)
    model, model_name = build_model(num_classes, args.arch)
    model = model.to(device)
    if use_cuda:
        model = model.to(memory_format=torch.channels_last)
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if use_cuda else None
        )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                          weight_decay=0.0 if args.no_weight_decay else 1e-4)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    steps_per_epoch = batches_per_epoch if args.steps is None else min(args.steps,
                                                                         batches_per_epoch)
    total_steps = args.epochs * steps_per_epoch
    warmup = min(args.warmup, total_steps // 2)  # time at least half of a short run
    if rank == 0:
        what = repr(loader) if loader is not None else "no loader"
        print(f"{what}; model {model_name}; {world} rank(s); {steps_per_epoch} steps/epoch, "
              f"{warmup} warm-up", flush=True)

    def to_input(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The loader's HWC uint8 images and (N, 1) labels as the model's input and targets."""
        # HWC uint8 -> NCHW float; the permuted NHWC tensor already has channels-last strides.
        x = batch["image"].to(device, non_blocking=True).permute(0, 3, 1, 2).float()
        x = (x - mean) / std
        y = batch["label"].to(device, non_blocking=True).reshape(-1).long()
        return x, y

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    def synthetic_batch() -> dict:
        """A loader-shaped batch made on the device (with --synthetic-float, also the model's
        input made from it, under "x" and "y")."""
        g = torch.Generator().manual_seed(rank)
        fixed = {
            "image": torch.randint(0, 256, (args.batch_size, 224, 224, 3), dtype=torch.uint8,
                                   generator=g).to(device),
            "label": torch.randint(0, num_classes, (args.batch_size, 1), generator=g).to(device),
            "is_pad": torch.zeros(args.batch_size, dtype=torch.bool),
        }
        if use_cuda:  # as the loader hands it over
            fixed["is_pad"] = fixed["is_pad"].pin_memory()
        if args.synthetic_float:
            fixed["x"], fixed["y"] = to_input(fixed)
        return fixed

    made_once = synthetic_batch() if args.synthetic and not args.synthetic_per_epoch else None

    def synthetic_epoch():
        """One synthetic batch (made before the timing, or now with --synthetic-per-epoch),
        yielded as many times as the loader has batches."""
        fixed = made_once if made_once is not None else synthetic_batch()
        for _ in range(batches_per_epoch):
            yield fixed

    def loss_of(logits: torch.Tensor, y: torch.Tensor, batch: dict) -> torch.Tensor:
        if args.no_pad_mask:
            return F.cross_entropy(logits, y)
        per_sample = F.cross_entropy(logits, y, reduction="none")
        # is_pad is a page-locked CPU tensor: a non-blocking copy keeps the CPU queueing work
        # ahead of the GPU (a blocking one waits for the GPU to go idle, every step).
        keep = (~batch["is_pad"].to(device, non_blocking=True)).reshape(-1).float()
        return (per_sample * keep).sum() / keep.sum().clamp(min=1.0)

    step, images, t0, loss = 0, 0, None, torch.zeros(())
    model.train()
    for _epoch in range(args.epochs):
        for i, batch in enumerate(synthetic_epoch() if args.synthetic else loader):
            if i >= steps_per_epoch:
                break
            if step == warmup:
                sync()
                if distributed:
                    dist.barrier()
                t0 = time.perf_counter()
                cpu0 = cpu_seconds()
            x, y = (batch["x"], batch["y"]) if "x" in batch else to_input(batch)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_cuda):
                logits = model(x)
                if args.loss_in_autocast:
                    loss = loss_of(logits, y, batch)
            if not args.loss_in_autocast:
                loss = loss_of(logits.float(), y, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if t0 is not None:
                images += x.shape[0]  # pads included: they are decoded and trained on too
    sync()
    elapsed = time.perf_counter() - t0 if t0 is not None else 0.0
    # Cores this rank kept busy while timed: training loop, DALI threads and reader processes.
    cores_busy = (cpu_seconds() - cpu0) / elapsed if elapsed > 0 else 0.0

    ips = images / elapsed if elapsed > 0 else 0.0
    print(f"[rank {rank}/{world} {device}] {images} images in {elapsed:.2f} s: {ips:.1f} images/s "
          f"(loss {loss.item():.3f})", flush=True)

    per_rank = [ips]
    per_rank_cores = [cores_busy]
    total = ips
    if distributed:
        stats = torch.tensor([float(images), elapsed, cores_busy], dtype=torch.float64,
                             device=device)
        gathered = [torch.zeros_like(stats) for _ in range(world)]
        dist.all_gather(gathered, stats)
        per_rank = [float(s[0] / s[1]) if s[1] > 0 else 0.0 for s in gathered]
        per_rank_cores = [round(float(s[2]), 2) for s in gathered]
        slowest = max(float(s[1]) for s in gathered)
        total = sum(float(s[0]) for s in gathered) / slowest if slowest > 0 else 0.0
    if rank == 0:
        print(f"total: {total:.1f} images/s over {world} rank(s) "
              f"(per rank: {', '.join(f'{v:.1f}' for v in per_rank)})", flush=True)
        if args.json is not None:
            result = {
                "tag": args.tag, "world_size": world, "device": "cuda" if use_cuda else "cpu",
                "model": model_name, "batch_size": args.batch_size,
                "feed": "synthetic" if args.synthetic else "extsrc",
                "hw_decoder_load": (None if loader is None
                                    else loader.config.workers.hw_decoder_load),
                "dali_workers": None if loader is None else loader.plan.workers,
                "dali_threads": None if loader is None else loader.plan.threads,
                "timed_steps": step - warmup, "warmup_steps": warmup,
                "per_rank_images_per_s": per_rank, "total_images_per_s": total,
                "per_rank_cores_busy": per_rank_cores,
                "cores_per_rank": (os.cpu_count() or 1)
                / int(os.environ.get("LOCAL_WORLD_SIZE", world)),
                "synthetic_per_epoch": args.synthetic_per_epoch,
                "minimal_flags": sorted(
                    n for n in ("synthetic_float", "no_pad_mask",
                                "loss_in_autocast", "no_weight_decay", "no_loader")
                    if getattr(args, n)),
            }
            with open(args.json, "a") as f:
                f.write(json.dumps(result) + "\n")
    if loader is not None:
        loader.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
