"""Split pipelines: the numpy ops run between two DALI pipelines, in a thread of extsrc's own.

Inside one DALI pipeline the numpy path is a Python operator, and DALI runs a Python operator
for one batch at a time: DALI 2.4 takes one process-wide mutex around every Python operator
call (``dali::operator_lock``), and the operator waits for the operators before it in the
graph. While DALI reads, decodes and resizes, the op pool's workers wait; on an H100 with 16
cores that was about 5 ms of every 27 ms batch (``benchmarks/op_pool_timeline.py``).

When every op runs on the numpy path and an op pool runs them, the loader therefore splits the
graph in two (:func:`extsrc.pipeline.build_pipeline` with ``split=True``):

- the **front** pipeline reads (the source, in DALI's worker processes) and decodes;
- the **numpy stage** (:class:`NumpyStage`) runs the transforms and ops through the op pool,
  in a thread of this process (:class:`SplitRun`), batch after batch;
- the **back** pipeline receives the stage's images, labels and info through
  ``external_source`` (:class:`StageFeed`) and resizes and formats them.

The front pipeline decodes batch ``i + 1`` and the back pipeline finishes batch ``i - 1``
while the stage runs batch ``i``; the training loop takes batches from the back pipeline.
The stage runs the same runners the single pipeline would place in its graph
(:class:`StageRecorder` records them from the same graph-building code), so the batches are the
same. A failure in the front pipeline or the stage reaches the loop when the back pipeline
asks for that batch, tagged with its epoch and batch (:class:`StageFailure`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extsrc._dali.run import PipelineRun
from extsrc._dali.workers import shutdown_pipeline, stop_processes
from extsrc.device import use_cuda_device
from extsrc.errors import PipelineError

__all__ = [
    "NumpyStage", "Slot", "SplitPipelines", "SplitRun", "StageFailure", "StageFeed",
    "StageRecorder",
]

#: Batches the stage may finish ahead of the back pipeline.
FEED_DEPTH = 2
#: Seconds :meth:`SplitRun.close` waits for the stage's thread to leave a batch.
JOIN_SECONDS = 10.0
_POLL = 0.1  # seconds between checks of a closed feed while waiting


@dataclass(frozen=True)
class Slot:
    """A batch of images in the numpy stage: its number (0: the decoded images) and where its
    images are (``"gpu"``: torch CUDA tensors, ``"cpu"``: numpy arrays)."""

    index: int
    device: str


class StageFailure(Exception):
    """``error`` raised by the front pipeline or the numpy stage while making batch ``batch``
    of epoch ``epoch``."""

    def __init__(self, error: BaseException, epoch: int, batch: int) -> None:
        super().__init__(error, epoch, batch)
        self.error = error
        self.epoch = epoch
        self.batch = batch


class _End:
    """The end of an epoch, in the feed."""


_END = _End()


@dataclass
class StageItem:
    """One batch for the back pipeline: per output slot, its samples; the labels and info."""

    images: list[list[Any]]
    label: np.ndarray
    info: np.ndarray


class StageFeed:
    """The back pipeline's ``external_source`` callbacks, fed by the stage's thread.

    DALI calls ``images`` (the image outputs, on the loader's device) and ``meta`` (labels and
    info, on the CPU) once per batch, in an order of its own: whichever comes first takes the
    next batch from the queue, and the other one takes its part of the same batch. The images
    handed to DALI stay referenced for a few batches more, until DALI has surely copied them.
    ``device_id``: the GPU of the images (``None``: on the CPU).
    """

    def __init__(self, device_id: int | None = None, depth: int = FEED_DEPTH) -> None:
        self.device_id = device_id
        self._queue: queue.Queue[Any] = queue.Queue(depth)
        self._parts: dict[str, deque[Any]] = {"images": deque(), "meta": deque()}
        self._kept: deque[Any] = deque(maxlen=4)
        self.closed = False

    def put(self, item: Any) -> bool:
        """Queue ``item`` (a :class:`StageItem`, an epoch's end or a :class:`StageFailure`);
        ``False`` when the feed was closed meanwhile."""
        while not self.closed:
            try:
                self._queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Wake and stop both sides: the stage's ``put`` returns ``False``, a callback raises."""
        self.closed = True

    def _take(self, part: str) -> Any:
        mine = self._parts[part]
        if not mine:
            while True:
                if self.closed:
                    raise PipelineError("the loader was closed while DALI waited for a batch")
                try:
                    item = self._queue.get(timeout=_POLL)
                    break
                except queue.Empty:
                    continue
            for parts in self._parts.values():
                parts.append(item)
        item = mine.popleft()
        if item is _END:
            raise StopIteration
        if isinstance(item, StageFailure):
            raise item
        return item

    def images(self) -> list[list[Any]]:
        if self.device_id is not None:
            # DALI's copy of the GPU images runs in the calling thread (the loop's, or the
            # watchdog's helper), which needs the CUDA context current.
            use_cuda_device(self.device_id)
        item = self._take("images")
        self._kept.append(item.images)
        return item.images

    def meta(self) -> tuple[np.ndarray, np.ndarray]:
        item = self._take("meta")
        return item.label, item.info


@dataclass
class NumpyStage:
    """The numpy path's runners in order, as the stage's thread runs them on every batch.

    ``steps``: (runner, input slot, output slots); slot 0 is the decoded images. ``outputs``:
    the slots the back pipeline receives, in order. ``device_id``: the GPU whose CUDA tensors
    the images are (the runners are :class:`~extsrc.oppaths.DeviceBatchOpRunner`); ``None``:
    numpy arrays on the CPU."""

    steps: list[tuple[Any, int, tuple[int, ...]]]
    outputs: list[int]
    device_id: int | None
    feed: StageFeed = field(init=False)

    def __post_init__(self) -> None:
        self.feed = StageFeed(self.device_id)

    @property
    def gpu(self) -> bool:
        return self.device_id is not None

    def run(self, images: Any, label: Any, info: Any) -> StageItem:
        """The stage on one batch of the front pipeline's outputs (DALI tensor lists, valid
        until its next run: what goes on is copied or made anew here)."""
        rows = np.array(info.as_array(), dtype=np.int64)
        labels = np.array(label.as_array())
        n = len(images)
        values: dict[int, list[Any]] = {}
        if self.gpu:
            import torch

            values[0] = [torch.from_dlpack(images[i]) for i in range(n)]
        else:
            values[0] = [np.asarray(images[i]) for i in range(n)]
        for runner, src, dst in self.steps:
            results = runner.run_batch(values[src], rows)
            for k, slot in enumerate(dst):
                values[slot] = [r[k] for r in results]
        out = []
        for slot in self.outputs:
            # The front pipeline's buffers and the op workers' memory are written again by the
            # next batch; the GPU runners' uploads are this batch's own.
            if slot == 0 and self.gpu:
                out.append([t.clone() for t in values[0]])
            elif self.gpu:
                out.append(values[slot])
            else:
                out.append([np.array(a) for a in values[slot]])
        if self.gpu:
            import torch

            torch.cuda.current_stream().synchronize()  # the copies are done before DALI reads
        return StageItem(out, labels, rows)


class StageRecorder:
    """The ``step`` of :func:`extsrc.pipeline.build_pipeline`'s graph code for split
    pipelines: records each numpy-path runner with its input and output :class:`Slot`."""

    def __init__(self, *, device_id: int | None) -> None:
        self.device_id = device_id
        self.input = Slot(0, "cpu" if device_id is None else "gpu")
        self._steps: list[tuple[Any, int, tuple[int, ...]]] = []
        self._count = 1

    def __call__(self, runner: Any, img: Slot, num_outputs: int) -> list[Slot]:
        from extsrc.oppaths import DeviceBatchOpRunner

        device = "gpu" if isinstance(runner, DeviceBatchOpRunner) else "cpu"
        if (device == "gpu") != (img.device == "gpu"):
            raise RuntimeError(f"a {device} runner was given {img.device} images")
        outs = [Slot(self._count + k, device) for k in range(num_outputs)]
        self._count += num_outputs
        self._steps.append((runner, img.index, tuple(o.index for o in outs)))
        return outs

    def stage(self, outputs: Sequence[Slot]) -> NumpyStage:
        slots = []
        for s in outputs:
            if s.index not in slots:
                slots.append(s.index)
        return NumpyStage(list(self._steps), slots, self.device_id)


@dataclass(frozen=True)
class SplitPipelines:
    """What :func:`extsrc.pipeline.build_pipeline` defines with ``split=True``."""

    front: Any
    back: Any
    stage: NumpyStage


class SplitRun(PipelineRun):
    """A :class:`~extsrc._dali.run.PipelineRun` over split pipelines: the loop iterates the
    back pipeline; a thread runs the front pipeline and the stage, from batch ``start_batch``
    of epoch ``start_epoch`` on. The watchdog watches the front pipeline's readers. ``pool``:
    the op pool, closed by :meth:`close` to stop a batch the stage is running."""

    def __init__(self, split: SplitPipelines, output_names: Sequence[str], *, workers: int,
                 device_id: int | None, watchdog: bool, start_epoch: int, start_batch: int,
                 pool: Any) -> None:
        self.front = split.front
        self.stage = split.stage
        self._pool = pool
        self._stopping = False
        self.front.build()
        try:
            super().__init__(split.back, output_names, workers=workers, device_id=device_id,
                             watchdog=watchdog)
        except BaseException:
            self._close_front(stuck=False)
            raise
        self.reader_pipe = self.front
        self._thread = threading.Thread(target=self._work, args=(start_epoch, start_batch),
                                        name="extsrc-numpy-stage", daemon=True)
        self._thread.start()

    def _work(self, epoch: int, batch: int) -> None:
        feed = self.stage.feed
        device: Any = contextlib.nullcontext()
        if self._device_id is not None:
            import torch

            try:
                use_cuda_device(self._device_id)
            except BaseException as e:
                feed.put(StageFailure(e, epoch, batch))
                return
            device = torch.cuda.device(self._device_id)
        with device:
            while not self._stopping:
                try:
                    try:
                        outs = self.front.run()
                    except StopIteration:
                        self.front.reset()
                        if not feed.put(_END):
                            return
                        epoch, batch = epoch + 1, 0
                        continue
                    if self._stopping:
                        return
                    item = self.stage.run(*outs)
                except BaseException as e:  # handed to the loop, which raises it
                    if not self._stopping:
                        feed.put(StageFailure(e, epoch, batch))
                    return
                if not feed.put(item):
                    return
                batch += 1

    def processes(self, strict: bool = True) -> list[Any]:
        if self._workers == 0 or self.front is None:
            return []
        return self._processes_of(self.front, strict)

    def _interrupted(self) -> None:
        self.stage.feed.close()  # the helper thread's wait for a batch ends now

    def close(self) -> None:
        self._stopping = True
        self.stage.feed.close()
        thread = getattr(self, "_thread", None)
        stuck = False
        if thread is not None and thread.is_alive():
            if self._pool is not None:
                self._pool.close()  # ends a batch the stage is running
            thread.join(JOIN_SECONDS)
            stuck = thread.is_alive()
        self._close_front(stuck=stuck)
        super().close()

    def _close_front(self, *, stuck: bool) -> None:
        front, self.front = self.front, None
        if front is None:
            return
        procs = self._processes_of(front, strict=False) if self._workers else []
        if not stuck:  # a thread still inside the pipeline's run: leave it to its end
            shutdown_pipeline(front)
        stop_processes(procs)
