"""Fit PyTorch DDP: find this process's rank, world size and local GPU; derive sharding from them.

Two numbers are easy to confuse under ``torchrun``:

* the **global rank** (``RANK``, ``torch.distributed.get_rank()``), ``0 .. world_size-1`` over all
  nodes: it picks the *shard* of the dataset a process reads (``shard_id``);
* the **local rank** (``LOCAL_RANK``), ``0 .. nproc_per_node-1`` on one node: it picks the *GPU*
  the pipeline runs on (``device``).

On two nodes of four GPUs, global rank 6 reads shard 6 of 8 and runs on local GPU 2. :class:`Loader`
calls :func:`detect` and :func:`resolve_sharding` when ``shard_id``/``num_shards`` are not given,
so under ``torchrun`` nothing needs passing. Equal batch counts on every rank (so DDP never hangs)
come from :mod:`extsrc.sources.sharding` by construction.

torch is imported lazily, so ``import extsrc`` stays light.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extsrc._util.caller import user_stacklevel
from extsrc._util.device import cuda_device_count

__all__ = ["DistInfo", "detect", "resolve_sharding"]


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in a (possibly single-process) job.

    ``rank``: global rank, ``0 <= rank < world_size`` (use it as ``shard_id``). ``world_size``:
    number of processes over all nodes (use it as ``num_shards``). ``local_rank``: index of this
    process on its node (use it as the GPU index).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(
            f"environment variable {name}={raw!r} is not an integer; torchrun sets RANK, "
            "WORLD_SIZE and LOCAL_RANK to integers (unset them to run as a single process)"
        ) from None


def _local_rank(env: Mapping[str, str], rank: int) -> int:
    if "LOCAL_RANK" in env:
        local = _env_int(env, "LOCAL_RANK")
        if local < 0:
            raise ValueError(f"environment variable LOCAL_RANK must be >= 0, got {local}")
        return local
    count = cuda_device_count()
    # Without LOCAL_RANK, assume ranks are laid out node by node with one process per GPU.
    return rank % count if count > 0 else 0


def _torch_group() -> tuple[int, int] | None:
    """(rank, world size) of an initialised default process group, else ``None``."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


def detect(env: Mapping[str, str] | None = None) -> DistInfo:
    """Rank, world size and local rank of this process.

    In order: an initialised ``torch.distributed`` default process group (rank and world size from
    it; local rank from ``LOCAL_RANK``, else ``rank % GPU count``, else 0); the torchrun
    environment variables ``RANK``, ``WORLD_SIZE`` (both needed) and ``LOCAL_RANK`` (optional,
    same fallback); else a single process ``DistInfo(0, 1, 0)``. ``env`` defaults to
    ``os.environ``. Raises ``ValueError`` naming the variable when one is malformed.
    """
    if env is None:
        env = os.environ
    group = _torch_group()
    if group is not None:
        rank, world_size = group
        return DistInfo(rank, world_size, _local_rank(env, rank))

    has_rank, has_world = "RANK" in env, "WORLD_SIZE" in env
    if not has_rank and not has_world:
        return DistInfo(0, 1, 0)
    if has_rank != has_world:
        present, missing = ("RANK", "WORLD_SIZE") if has_rank else ("WORLD_SIZE", "RANK")
        raise ValueError(
            f"environment variable {present} is set but {missing} is not; set both (torchrun "
            "does) or neither"
        )
    world_size = _env_int(env, "WORLD_SIZE")
    if world_size < 1:
        raise ValueError(f"environment variable WORLD_SIZE must be >= 1, got {world_size}")
    rank = _env_int(env, "RANK")
    if not 0 <= rank < world_size:
        raise ValueError(
            f"environment variable RANK={rank} is out of range: it must satisfy "
            f"0 <= RANK < WORLD_SIZE={world_size}"
        )
    return DistInfo(rank, world_size, _local_rank(env, rank))


def resolve_sharding(
    shard_id: int | None, num_shards: int | None, device: Any, info: DistInfo
) -> tuple[int, int, Any]:
    """Fill in ``shard_id``, ``num_shards`` and ``device`` that the user left as ``None``.

    * Neither ``shard_id`` nor ``num_shards`` given: ``(info.rank, info.world_size)`` — shard by
      the **global** rank. Only one given: ``ValueError`` (both are needed). Both given: kept
      as they are (a ``UserWarning`` if ``num_shards`` differs from a multi-process world size,
      since ranks would then read overlapping data).
    * ``device`` is ``None``, ``info.world_size > 1`` and GPUs are visible: ``info.local_rank`` —
      the **local** GPU, not the global rank. Otherwise ``device`` is returned unchanged (and
      :func:`extsrc._util.device.resolve_device` turns ``None`` into GPU 0 or the CPU).

    Hint: on several nodes, passing ``device=rank`` (the global rank) asks for a GPU that does not
    exist on the node (e.g. GPU 6 on a 4-GPU node); ``resolve_device`` then fails with "asks for
    GPU 6 but only 4 GPU(s) are visible". Pass ``device=local_rank``, or leave ``device=None``.
    """
    if shard_id is None and num_shards is None:
        shard_id, num_shards = info.rank, info.world_size
    elif shard_id is None or num_shards is None:
        given, missing = ("shard_id", "num_shards") if num_shards is None else (
            "num_shards", "shard_id")
        raise ValueError(
            f"{given} was given but {missing} was not; pass both (shard_id is the global rank, "
            f"num_shards the world size) or neither, to take them from torch.distributed or the "
            f"torchrun environment (here: rank {info.rank} of {info.world_size})"
        )
    elif info.world_size > 1 and num_shards != info.world_size:
        warnings.warn(
            f"num_shards={num_shards} but the process group has world size {info.world_size}: "
            "ranks will not split the dataset between them. Leave shard_id and num_shards unset "
            "to shard by global rank",
            UserWarning,
            stacklevel=user_stacklevel(),
        )

    if device is None and info.world_size > 1:
        count = cuda_device_count()
        if count > 0:
            if info.local_rank >= count:
                raise ValueError(
                    f"local rank {info.local_rank} has no GPU of its own: only {count} GPU(s) "
                    "are visible on this node; start at most that many processes per node "
                    "(torchrun --nproc_per_node), or pass device= explicitly"
                )
            device = info.local_rank
    return shard_id, num_shards, device
