"""Turn the ``device`` argument, written as torch users write it, into a DALI ``device_id``;
and the CUDA driver calls extsrc makes itself (page-locking the op pool's memory)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import numbers
import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["cuda_device_count", "pin_host_memory", "resolve_device"]


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


@functools.cache
def _libcuda() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _driver(call: str, *args: Any) -> None:
    code = int(getattr(_libcuda(), call)(*args))
    if code != 0:
        raise RuntimeError(f"the CUDA driver's {call} failed with error {code}")


@functools.cache
def _primary_context(device_id: int) -> ctypes.c_void_p:
    """GPU ``device_id``'s primary context, retained for the life of the process (torch and
    DALI hold it for that long anyway). Initialises the driver first."""
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    _driver("cuInit", 0)
    _driver("cuDeviceGet", ctypes.byref(dev), device_id)
    _driver("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    return ctx


if hasattr(os, "register_at_fork"):  # a forked child starts with no context of its own
    os.register_at_fork(after_in_child=_primary_context.cache_clear)


@contextlib.contextmanager
def _in_context(device_id: int) -> Iterator[None]:
    """GPU ``device_id``'s primary context (the one torch and DALI use) current in the calling
    thread for the block, whichever thread it is, and the thread's own context again after
    (a thread may start with none, and the user's may be another GPU's)."""
    primary = _primary_context(device_id)
    old = ctypes.c_void_p()
    _driver("cuCtxGetCurrent", ctypes.byref(old))
    _driver("cuCtxSetCurrent", primary)
    try:
        yield
    finally:
        _driver("cuCtxSetCurrent", old)


#: ``CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP``: what the runtime's
#: ``cudaHostRegister(..., 0)`` means on a machine with unified addressing.
_REGISTER_FLAGS = 0x01 | 0x02
#: What a missing or failing driver raises here.
_DRIVER_ERRORS = (RuntimeError, OSError, AttributeError)


def pin_host_memory(address: int, size: int, device_id: int) -> Callable[[], None] | None:
    """Page-lock ``size`` bytes at ``address`` for GPU ``device_id`` (direct DMA copies);
    returns what undoes it, or ``None`` where the driver refuses or cannot be reached (the
    memory then stays pageable: slower copies, same results).

    Through the driver API, from any thread. The runtime API records a refusal as its last
    error, which torch then raises at its next check, from an unrelated call (seen on an
    H100: a ``cudaHostRegister`` refused with ``cudaErrorHostMemoryAlreadyRegistered`` came
    back as an op's ``AcceleratorError``); and its calls need the GPU's context current in the
    calling thread, which a thread torch has not used lacks."""
    try:
        with _in_context(device_id):
            _driver("cuMemHostRegister_v2", ctypes.c_void_p(address), ctypes.c_size_t(size),
                    _REGISTER_FLAGS)
    except _DRIVER_ERRORS:
        return None

    def undo() -> None:
        try:
            with _in_context(device_id):
                _driver("cuMemHostUnregister", ctypes.c_void_p(address))
        except _DRIVER_ERRORS:
            pass  # not registered any more (a context reset): nothing to undo

    return undo
