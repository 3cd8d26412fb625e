"""The reference DDP training loop: a torchvision ResNet on one fixed batch, nothing else.

What the several-GPU scaling of ``examples/train_ddp.py`` is measured against: a model, one batch
made once on the device (already the model's input: normalised float, channels-last, int64
labels), bf16 autocast around the forward pass and the loss, plain SGD, default DDP options. No
data loader, no loss masking, no per-step conversion, no host synchronisation inside the timing.

    torchrun --standalone --nproc_per_node=N benchmarks/ddp_minimal.py --arch resnet18 \\
        --json out.jsonl --tag minimal

Images/s are timed exactly as the example times them: after ``--warmup`` steps every rank
synchronises its GPU and meets the others at a barrier, then runs ``--steps`` steps and
synchronises again; per rank, images / its elapsed time; in total, all images / the slowest
rank's elapsed time. ``--json`` appends one line (rank 0) with the example's keys. On a machine
without a GPU it runs on the CPU with gloo (``--arch tiny`` keeps that fast, for tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class TinyCNN(nn.Module):
    """Two convolutions and a head: for running the loop on a CPU in tests."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def build_model(arch: str, num_classes: int) -> nn.Module:
    if arch == "tiny":
        return TinyCNN(num_classes)
    import torchvision

    return getattr(torchvision.models, arch)(num_classes=num_classes)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=("resnet18", "resnet50", "tiny"), default="resnet18")
    p.add_argument("--batch-size", type=int, default=128, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=300, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="steps before the timing")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--device-mode", choices=("auto", "cuda", "cpu"), default="auto",
                   help="auto: CUDA (nccl) when a GPU is visible, else CPU (gloo)")
    p.add_argument("--loader-manifest", type=Path, default=None,
                   help="also construct an extsrc.Loader on this manifest (never iterated), to "
                        "see whether building one changes the loop's speed")
    p.add_argument("--json", type=Path, default=None, help="append a JSON result line (rank 0)")
    p.add_argument("--tag", default="", help="a name for this run in the --json line")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    use_cuda = args.device_mode == "cuda" or (
        args.device_mode == "auto" and torch.cuda.is_available()
    )
    if use_cuda and not torch.cuda.is_available():
        raise SystemExit("--device-mode cuda but no CUDA GPU is visible")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    distributed = world > 1
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")

    loader = None
    if args.loader_manifest is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
        import extsrc

        loader = extsrc.Loader(args.loader_manifest, batch_size=args.batch_size, resize=224,
                               seed=0, device=None if use_cuda else "cpu")

    torch.manual_seed(rank)
    model = build_model(args.arch, args.num_classes).to(device)
    memory_format = torch.channels_last if use_cuda else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    s = args.image_size
    x = torch.randn(args.batch_size, 3, s, s, device=device).contiguous(
        memory_format=memory_format)
    y = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    model.train()
    t0 = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            sync()
            if distributed:
                dist.barrier()
            t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_cuda):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync()
    elapsed = time.perf_counter() - t0
    images = args.steps * args.batch_size
    ips = images / elapsed if elapsed > 0 else 0.0
    print(f"[rank {rank}/{world} {device}] {images} images in {elapsed:.2f} s: {ips:.1f} images/s "
          f"(loss {loss.item():.3f})", flush=True)

    per_rank, total = [ips], ips
    if distributed:
        stats = torch.tensor([float(images), elapsed], dtype=torch.float64, device=device)
        gathered = [torch.zeros_like(stats) for _ in range(world)]
        dist.all_gather(gathered, stats)
        per_rank = [float(g[0] / g[1]) if g[1] > 0 else 0.0 for g in gathered]
        slowest = max(float(g[1]) for g in gathered)
        total = sum(float(g[0]) for g in gathered) / slowest if slowest > 0 else 0.0
    if rank == 0:
        print(f"total: {total:.1f} images/s over {world} rank(s) "
              f"(per rank: {', '.join(f'{v:.1f}' for v in per_rank)})", flush=True)
        if args.json is not None:
            result = {
                "tag": args.tag, "world_size": world, "device": "cuda" if use_cuda else "cpu",
                "model": args.arch, "batch_size": args.batch_size, "feed": "minimal",
                "hw_decoder_load": None, "dali_workers": None, "dali_threads": None,
                "timed_steps": args.steps, "warmup_steps": args.warmup,
                "per_rank_images_per_s": per_rank, "total_images_per_s": total,
                "loader_built": loader is not None,
            }
            with open(args.json, "a") as f:
                f.write(json.dumps(result) + "\n")
    if loader is not None:
        loader.close()
    if distributed:
        dist.destroy_process_group()
        # With torch 2.13 and gloo, a rank's interpreter shutdown aborted in about 1 run in 7
        # ("terminate called without an active exception": a C++ thread still joinable when
        # static destructors run), after all its work and output, with or without a barrier
        # and the group destroyed first: leave without those destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
