"""``Epoch``: one pass over a loader's batches, the iterator that ``iter(loader)`` returns.

It advances the loader's :class:`~extsrc.loading.position.ReadPosition` batch by batch, turns DALI's
batches into dicts of torch tensors, and owns its close: on an error, a Ctrl-C or
:meth:`Epoch.close` it stops DALI's threads and worker processes, the position staying at the
batch that did not arrive. An epoch the loader has moved past (a newer ``iter(loader)``,
``loader.close()``, ``load_state_dict``) refuses to go on instead of taking the newer one's
batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from extsrc._dali.run import PipelineRun, WorkersDied
from extsrc.errors import PipelineError
from extsrc.loading.failures import InFlight, shown_alone, worker_died
from extsrc.loading.position import ReadPosition

__all__ = ["Epoch", "to_torch"]


def to_torch(outputs: Mapping[str, Any], *, names: Sequence[str], bfloat16: bool,
             metadata: Callable[[Mapping[str, Any]], dict[str, Any]],
             pin: bool) -> dict[str, Any]:
    """A batch as the user gets it: DALI's outputs (torch tensors already) under ``names``,
    the image outputs (all but the last, the label) made bfloat16 when ``bfloat16``, then the
    per-sample ``metadata`` made of the hidden outputs, page-locked when ``pin``."""
    out = {name: outputs[name] for name in names}
    if bfloat16:
        # DALI has no bfloat16: its float32 images convert here, on the batch's device.
        import torch

        for name in names[:-1]:
            out[name] = out[name].to(torch.bfloat16)
    meta = metadata(outputs)
    if pin:
        # Page-locked, so `.to("cuda", non_blocking=True)` (to mask pads in the loss) is a
        # real async copy; from pageable memory torch waits for the GPU to go idle first,
        # every step, and the CPU stops running ahead of the GPU.
        meta = {k: v.pin_memory() for k, v in meta.items()}
    out.update(meta)
    return out


class Epoch(Iterator[dict[str, Any]]):
    """The batches of the current epoch, from the read position on.

    It gets what it works with, not the loader: the built pipeline (``run``), the read
    ``position`` it advances, the ``source`` the pipeline reads (to name the samples of a
    failed batch), ``to_batch`` (DALI's outputs to the user's dict, :func:`to_torch`),
    ``explain`` (DALI's exception to extsrc's, for the batch in flight), ``is_current``
    (whether the loader still runs this epoch), ``stop`` (stop DALI's threads and workers) and
    ``ended`` (called once the epoch's last batch was taken and DALI's end read).
    """

    def __init__(
        self, run: PipelineRun, position: ReadPosition, source: Any, *,
        to_batch: Callable[[Mapping[str, Any]], dict[str, Any]],
        explain: Callable[[Exception, InFlight], Exception],
        is_current: Callable[[Epoch], bool],
        stop: Callable[[], None],
        ended: Callable[[Epoch], None],
    ) -> None:
        self._run = run
        self._position = position
        self._source = source
        self._to_batch = to_batch
        self._explain = explain
        self._is_current = is_current
        self._stop = stop
        self._ended = ended
        #: Whether a batch was asked for: an epoch left part-way makes the next ``iter(loader)``
        #: start the next epoch.
        self.started = False
        self._finished = False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._finished:
            raise StopIteration
        if not self._is_current(self):
            raise RuntimeError(
                "this epoch's iterator was stopped by loader.close() or load_state_dict() "
                "(or an earlier error); start a new `for batch in loader:`"
            )
        self.started = True
        pos = self._position
        try:
            batch = self._run.next()
        except StopIteration:
            if pos.batch != pos.num_batches:  # never end an epoch short in silence
                self.close()
                raise PipelineError(
                    f"DALI ended epoch {pos.epoch} after {pos.batch} of {pos.num_batches} "
                    "batches; this is a bug in extsrc, please report it"
                ) from None
            self._run.reset()
            pos.next_epoch()
            self._finished = True
            self._ended(self)
            raise
        except WorkersDied as e:
            err = worker_died(e.dead, self._in_flight())
            self.close()
            raise err from None
        except KeyboardInterrupt:
            # Ctrl-C mid-batch: stop DALI (the helper thread's call has finished or been
            # abandoned), so the next `for` restarts cleanly at this same batch.
            self.close()
            raise
        except Exception as e:
            err = self._explain(e, self._in_flight())
            self.close()  # workers and threads stop now; the position stays at this batch
            # On its own, without DALI's traceback; shown_alone sets the chain (EXTSRC_DEBUG=1
            # chains DALI's exception again), and this line is the last one the user sees.
            err = shown_alone(err, e)
            raise err from err.__cause__
        pos.advance()
        return self._to_batch(batch[0])

    def conclude(self) -> None:
        """End this epoch in place if every batch of it was taken: DALI's end of epoch is read
        (the source stops at the epoch's end, so nothing of the next epoch was read) and the
        pipeline resets for the next one."""
        pos = self._position
        if not self.started or pos.batch < pos.num_batches:
            return
        try:
            next(self)
        except StopIteration:
            return
        self.close()
        raise PipelineError(
            f"DALI gave a batch past the end of epoch {pos.epoch} ({pos.num_batches} batches); "
            "this is a bug in extsrc, please report it"
        )

    def close(self) -> None:
        """Stop this epoch and DALI's threads and worker processes now (if it is the loader's
        current epoch). The loader keeps its position: the next ``for`` continues with the
        batches still due."""
        if self._is_current(self):
            self._stop()

    def _in_flight(self) -> InFlight:
        pos = self._position
        return InFlight(self._source, pos.epoch, pos.batch)
