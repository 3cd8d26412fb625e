"""``Epoch``: one pass over a loader's batches, the iterator that ``iter(loader)`` returns.

It advances the loader's :class:`~extsrc.loading.position.ReadPosition` batch by batch, turns DALI's
batches into dicts of torch tensors, and owns its close: on an error, a Ctrl-C or
:meth:`Epoch.close` it stops DALI's threads and worker processes, the position staying at the
batch that did not arrive. An epoch the loader has moved past (a newer ``iter(loader)``,
``loader.close()``, ``load_state_dict``) refuses to go on instead of taking the newer one's
batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from extsrc._dali.run import PipelineRun, WorkersDied
from extsrc.errors import PipelineError
from extsrc.loading.failures import InFlight, shown_alone, worker_died

if TYPE_CHECKING:
    from extsrc.loading.loader import Loader

__all__ = ["Epoch"]


class Epoch(Iterator[dict[str, Any]]):
    """The batches of the loader's current epoch, from its read position on."""

    def __init__(self, loader: Loader, run: PipelineRun) -> None:
        self._loader = loader
        self._run = run
        #: Whether a batch was asked for: an epoch left part-way makes the next ``iter(loader)``
        #: start the next epoch.
        self.started = False
        self._finished = False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._finished:
            raise StopIteration
        loader = self._loader
        if loader._epoch is not self:
            raise RuntimeError(
                "this epoch's iterator was stopped by loader.close() or load_state_dict() "
                "(or an earlier error); start a new `for batch in loader:`"
            )
        self.started = True
        pos = loader.position
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
            loader._epoch = None
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
            err = loader._explain(e, self._in_flight())
            self.close()  # workers and threads stop now; the position stays at this batch
            # On its own, without DALI's traceback; shown_alone sets the chain (EXTSRC_DEBUG=1
            # chains DALI's exception again), and this line is the last one the user sees.
            err = shown_alone(err, e)
            raise err from err.__cause__
        pos.advance()
        return self._to_torch(batch[0])

    def close(self) -> None:
        """Stop this epoch and DALI's threads and worker processes now (if it is the loader's
        current epoch). The loader keeps its position: the next ``for`` continues with the
        batches still due."""
        if self._loader._epoch is self:
            self._loader.close()

    def _in_flight(self) -> InFlight:
        pos = self._loader.position
        return InFlight(self._loader.source, pos.epoch, pos.batch)

    def _to_torch(self, d: dict[str, Any]) -> dict[str, Any]:
        out = {name: d[name] for name in self._loader.config.output_names}
        if self._loader.config.dtype == "bfloat16":
            # DALI has no bfloat16: its float32 images convert here, on the batch's device.
            import torch

            n_images = len(out) - 1  # every output but the label
            for name in self._loader.config.output_names[:n_images]:
                out[name] = out[name].to(torch.bfloat16)
        meta = self._loader._metadata(d)
        if self._loader.config.device_id is not None:
            # Page-locked, so `.to("cuda", non_blocking=True)` (to mask pads in the loss) is a
            # real async copy; from pageable memory torch waits for the GPU to go idle first,
            # every step, and the CPU stops running ahead of the GPU.
            meta = {k: v.pin_memory() for k, v in meta.items()}
        out.update(meta)
        return out
