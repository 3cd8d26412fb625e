"""Turn the ``device`` argument, written as torch users write it, into a DALI ``device_id``."""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["cuda_device_count", "resolve_device"]


def cuda_device_count() -> int:
    """Visible CUDA GPUs, asked of torch (0 on a CPU-only build)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(device: Any) -> int | None:
    """``None`` -> GPU 0 if one is visible else CPU-only; ``"cpu"`` -> CPU-only (``None``);
    ``"cuda"`` -> 0; ``"cuda:N"``, ``N`` or ``torch.device("cuda", N)`` -> N.

    Returns the DALI ``device_id`` (``None`` means DALI's CPU-only mode).
    """
    count = cuda_device_count()
    if device is None:
        return 0 if count > 0 else None
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        device = device.type if device.index is None else f"{device.type}:{device.index}"
    if isinstance(device, bool):
        raise TypeError("device must be None, 'cpu', 'cuda', 'cuda:N' or a GPU index, got a bool")
    if isinstance(device, numbers.Integral):  # numpy integers too
        index = int(device)
    elif isinstance(device, str):
        import torch

        d = device.strip().lower()
        if d == "cpu":
            return None
        if d.startswith("gpu"):  # DALI's word for it
            d = "cuda" + d[3:]
        try:
            parsed = torch.device(d)
        except (RuntimeError, ValueError):
            parsed = None
        if parsed is None or parsed.type != "cuda":
            raise ValueError(
                f"device must be None, 'cpu', 'cuda', 'cuda:N' or a GPU index, got {device!r}"
            )
        index = 0 if parsed.index is None else parsed.index
    else:
        raise TypeError(
            f"device must be None, 'cpu', 'cuda', 'cuda:N' or a GPU index, got "
            f"{type(device).__name__} {device!r}"
        )
    if index < 0:
        raise ValueError(f"GPU index must be >= 0, got {index}")
    if index >= count:
        seen = "no CUDA GPU is visible" if count == 0 else f"only {count} GPU(s) are visible"
        raise ValueError(
            f"device={device!r} asks for GPU {index} but {seen}; pass device='cpu' to run "
            "DALI's CPU-only pipeline, or check CUDA_VISIBLE_DEVICES"
        )
    return index
