"""The runners of an op's numpy and gpu paths inside the DALI graph, one call per batch
(``python_function``): :class:`BatchOpRunner` runs the numpy path in DALI's thread or through the
op pool (:mod:`extsrc.ops_runtime.pool`), :class:`GpuBatchOpRunner` the gpu path on CuPy arrays,
and :class:`DeviceBatchOpRunner` the numpy path of a GPU loader, with the images copied straight
between the GPU and the pool's shared memory. Which path an op takes is chosen in
:mod:`extsrc.ops_runtime.paths`. A failure names the op, the manifest line and the path."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from augment_ops.registry import Op, OpContractError, implementation
from extsrc._util.device import pin_host_memory
from extsrc.errors import RAISED, OpError, OpOutputError
from extsrc.ops_runtime.seeding import op_salt, sample_rng
from extsrc.ops_runtime.worker import apply_sample, failure_info
from extsrc.sources.manifest import Manifest
from extsrc.sources.where import sample_where

if TYPE_CHECKING:
    from extsrc.ops_runtime.pool import OpPool

__all__ = ["BatchOpRunner", "DeviceBatchOpRunner", "GpuBatchOpRunner"]


class BatchOpRunner:
    """The numpy path: runs one op over a batch inside ``python_function(batch_processing=True)``.

    It receives the decoded images with each sample's manifest index and epoch, so a random op gets
    the generator of exactly that sample whatever order the batch arrives in, and a failure names
    the manifest line. ``channels``: the channel count each output must have, where a traced op
    on its native path reads the outputs (``readers``: its name or names), whose graph takes
    that count only (:mod:`extsrc.ops_runtime.op_inputs`).
    """

    def __init__(self, op: Op, *, seed: int, manifest: Manifest, occurrence: int = 0,
                 pool: OpPool | None = None, channels: int | None = None,
                 readers: tuple[str, ...] = ()) -> None:
        self.op = op
        self.seed = seed
        self.salt = op_salt(op.name, occurrence)
        self.manifest = manifest
        self.pool = pool
        self.channels = channels
        self.readers = readers

    def check_channels(self, results: list[tuple[Any, ...]], indices: list[int]) -> None:
        """Raise :class:`OpOutputError`, naming the sample, where an output has another channel
        count than :attr:`channels` (``indices``: the samples' manifest indices, -1 unknown)."""
        if self.channels is None:
            return
        for sample, index in zip(results, indices, strict=True):
            shape = tuple(int(d) for d in sample[0].shape)
            if shape[-1] == self.channels:
                continue
            m = self.manifest
            fields = ({"source": m.source, "line": m.lines[index], "path": m.paths[index]}
                      if index >= 0 else {})
            names = ", ".join(f"'{r}'" for r in self.readers)
            numpy = ", ".join(f"'{r}': 'numpy'" for r in self.readers)
            where = f"sample {self.where(index)}" if index >= 0 else "a sample"
            count = f"{shape[-1]} channel" + ("" if shape[-1] == 1 else "s")
            readers = (f"op {names} after it runs a traced native path, which takes"
                       if len(self.readers) == 1 else
                       f"ops {names} after it run traced native paths, which take")
            err = OpOutputError(
                f"op '{self.op.name}' output 0 has {count} (shape {shape}), but {readers} "
                f"{self.channels} [{where}]; return {self.channels} channels from "
                f"'{self.op.name}', or run the op after it on the numpy path "
                f"(OpRuntime(op_path={{{numpy}}}), with op_pool='thread' if it cannot be "
                "pickled)",
                op=self.op.name, **fields)
            RAISED.append(err)
            raise err

    def where(self, index: int) -> str:
        m = self.manifest
        return f"{sample_where(m.source, m.lines[index])} ({m.paths[index]})"

    def rng(self, index: int, epoch: int) -> np.random.Generator | None:
        return sample_rng(self.seed, epoch, index, self.salt) if self.op.random else None

    def run_one(self, img: Any, index: int, epoch: int) -> tuple[Any, ...]:
        try:
            return apply_sample(self.op, img, self.rng(index, epoch))
        except Exception as e:
            info = failure_info(e)
            raise self.failure(index, info) from (None if info["contract"] else e)

    def failure(self, index: int, info: dict[str, Any]) -> Exception:
        """The error of the op failing on sample ``index``, from :func:`failure_info` (made here
        or in an op worker process): the op's contract error, or an :class:`OpError` naming the
        op, the manifest line and the path, with the op's own traceback."""
        if info["contract"]:
            return OpContractError(f"{info['message']} [sample {self.where(index)}]")
        hint = ""
        if info["readonly"]:
            hint = "; ops must not change their input image: write into a copy, out = img.copy()"
        m = self.manifest
        err = OpError(
            f"op '{self.op.name}' raised {info['type']}: {info['message']}{hint} [sample "
            f"{self.where(index)}]",
            op=self.op.name, source=m.source, line=m.lines[index], path=m.paths[index],
            detail=f"Original traceback of the op:\n{info['traceback']}",
        )
        RAISED.append(err)
        return err

    def __call__(self, images: list[np.ndarray], infos: list[np.ndarray]) -> Any:
        # info rows are (manifest index, epoch, is_pad); see extsrc.sources.images.INFO_COLUMNS
        # One sample runs here, in DALI's thread, unless the pool must time the op.
        if self.pool is not None and (len(images) > 1 or self.pool.timeout is not None):
            results = self.pool.run(self, images, infos)
        else:
            results = [
                self.run_one(im, int(info[0]), int(info[1]))
                for im, info in zip(images, infos, strict=True)
            ]
        self.check_channels(results, [int(info[0]) for info in infos])
        return _transpose(results, self.op.num_outputs)


class GpuBatchOpRunner(BatchOpRunner):
    """The gpu path: the op's array code on CuPy arrays, a batch per Python call.

    Each sample's info row (manifest index, epoch, pad flag) arrives on the GPU; the rows are copied
    to the host once per batch, and only for random ops, which need them for their generators.
    """

    def __init__(self, op: Op, *, seed: int, manifest: Manifest, occurrence: int = 0,
                 channels: int | None = None, readers: tuple[str, ...] = ()) -> None:
        super().__init__(op, seed=seed, manifest=manifest, occurrence=occurrence,
                         channels=channels, readers=readers)
        self.impl = implementation(op, "gpu")

    def __call__(self, images: list[Any], *keys: list[Any]) -> Any:
        import cupy

        if keys:
            host = cupy.asnumpy(cupy.stack(keys[0])) if keys[0] else np.zeros((0, 3), np.int64)
            ids = [(int(k[0]), int(k[1])) for k in host]
        else:
            ids = [(-1, 0)] * len(images)
        results = []
        for img, (index, epoch) in zip(images, ids, strict=True):
            rng = self.rng(index, epoch)
            try:
                # The dedicated implementation, else the op's own array code, on a CuPy image,
                # with the op's bound parameters either way.
                f = self.impl if self.impl is not None else self.op.fn
                kwargs = {**dict(self.op.params), **({"rng": rng} if self.op.random else {})}
                out = f(img, **kwargs)
                outs = self.op.check_outputs(out, array_type=cupy.ndarray)
            except OpContractError as e:
                raise OpContractError(f"{e} [gpu path]") from None
            except Exception as e:
                where = self.where(index) if index >= 0 else "a sample"
                raise OpError(
                    f"op '{self.op.name}' (gpu path) raised {type(e).__name__}: {e} [{where}]"
                ) from e
            results.append(tuple(cupy.ascontiguousarray(o) for o in outs))
        self.check_channels(results, [index for index, _ in ids])
        return _transpose(results, self.op.num_outputs)


class _DeviceImage:
    """A GPU image as :meth:`OpPool.run` takes it: a torch tensor with numpy's dtype."""

    __slots__ = ("dtype", "nbytes", "shape", "tensor")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.shape = tuple(tensor.shape)
        self.dtype = np.dtype(str(tensor.dtype).removeprefix("torch."))
        self.nbytes = tensor.numel() * tensor.element_size()


def _copy_device_image(dst: np.ndarray, src: _DeviceImage) -> None:
    import torch

    # Asynchronous into page-locked memory; the pool calls _copies_done before a worker reads.
    torch.from_numpy(dst).copy_(src.tensor, non_blocking=True)


def _copies_done() -> None:
    import torch

    torch.cuda.current_stream().synchronize()


def _pin(m: Any, device_id: int) -> Callable[[], None] | None:
    """Page-lock a map of the op pool's memory, so copies to and from the GPU are direct DMA;
    left pageable (slower copies, same results) where CUDA refuses. Returns the undo."""
    import ctypes

    return pin_host_memory(ctypes.addressof(ctypes.c_char.from_buffer(m)), len(m), device_id)


@functools.cache
def _torch_dtype(dtype: str) -> tuple[Any, int]:
    """torch's dtype for numpy's ``dtype`` string, and its item size (once per dtype: this runs
    for every output of every sample)."""
    import torch

    dt = np.dtype(dtype)
    return torch.from_numpy(np.empty(0, dt)).dtype, dt.itemsize


def _typed(buf: Any, offset: int, shape: tuple[int, ...], dtype: str) -> Any:
    """The array at ``offset`` of a uint8 GPU buffer, as a tensor of ``dtype`` and ``shape``."""
    torch_dtype, itemsize = _torch_dtype(dtype)
    n = int(np.prod(shape)) * itemsize
    return buf[offset:offset + n].view(torch_dtype).view(shape)


class DeviceBatchOpRunner(BatchOpRunner):
    """The numpy path of a GPU loader with an op pool: each GPU-decoded image is copied straight
    into the pool's (page-locked) shared memory, the workers run the op, and the outputs go
    back to the GPU; through ``dl_tensor_python_function(device="gpu")`` and torch, so no host
    buffers of DALI's are in between (``benchmarks/numpy_path_cost.py`` measures why: an identity
    ``python_function`` on host copies halves the pipeline's throughput)."""

    def __init__(self, op: Op, *, seed: int, manifest: Manifest, occurrence: int = 0,
                 pool: OpPool, device_id: int, channels: int | None = None,
                 readers: tuple[str, ...] = ()) -> None:
        super().__init__(op, seed=seed, manifest=manifest, occurrence=occurrence, pool=pool,
                         channels=channels, readers=readers)
        self.device_id = device_id
        if pool.kind == "process" and pool.on_map is None:
            pool.on_map = functools.partial(_pin, device_id=device_id)
        # The previous batch's outputs: DALI copies them on its own stream after this call
        # returns, and synchronises that stream before the next call, when they can go.
        self._previous: list[Any] = []

    def __call__(self, images: list[Any], infos: list[Any]) -> Any:
        import torch
        from torch.utils.dlpack import from_dlpack, to_dlpack

        with torch.cuda.device(self.device_id):
            imgs = [from_dlpack(x) for x in images]
            rows = torch.stack([from_dlpack(x) for x in infos]).cpu().numpy()
            assert self.pool is not None
            device = torch.device("cuda", self.device_id)
            if self.pool.kind == "process":
                # One upload per chunk of samples, as its reply arrives: its outputs lie
                # together in its worker's memory.
                def upload(m: Any, start: int, end: int,
                           placed: list[Any]) -> list[tuple[Any, ...]]:
                    host = torch.from_numpy(np.frombuffer(m, np.uint8, count=end - start,
                                                          offset=start))
                    buf = host.to(device, non_blocking=True)
                    return [tuple(_typed(buf, off - start, shape, dt) for off, shape, dt in s)
                            for s in placed]

                try:
                    outs = self.pool.run(self, [_DeviceImage(t) for t in imgs], rows,
                                         copy_in=_copy_device_image, copied=_copies_done,
                                         on_outputs=upload)
                finally:  # also when a sample failed: earlier chunks' uploads may still run
                    torch.cuda.current_stream().synchronize()  # the pool's memory is free
            else:
                results = self.pool.run(self, [t.cpu().numpy() for t in imgs], rows)
                outs = [tuple(torch.from_numpy(np.ascontiguousarray(o)).to(device)
                              for o in sample) for sample in results]
                torch.cuda.current_stream().synchronize()
        self._previous = outs
        self.check_channels(outs, [int(r[0]) for r in rows])
        capsules = [tuple(to_dlpack(t) for t in sample) for sample in outs]
        return _transpose(capsules, self.op.num_outputs)


def _transpose(results: list[tuple[Any, ...]], num_outputs: int) -> Any:
    """Per-sample tuples -> per-output lists, as batch-mode ``python_function`` returns them."""
    if num_outputs == 1:
        return [r[0] for r in results]
    return tuple([r[k] for r in results] for k in range(num_outputs))
