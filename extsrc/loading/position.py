"""``ReadPosition``: where a loader stands in its stream of batches, owned by what advances it.

The epoch iterator advances it by one batch per batch yielded and to the next epoch at an
epoch's end; ``state_dict`` / ``load_state_dict`` read and set it; the source of a newly built
pipeline starts where it says. The rule "a batch past an epoch's last one is the first batch of
the next epoch" (a state saved right after an epoch's last batch, a loop stopped there) is
:meth:`ReadPosition.due`, here only.
"""

from __future__ import annotations

__all__ = ["ReadPosition"]


class ReadPosition:
    """Batch ``batch`` of epoch ``epoch`` is the next one due (``batch`` batches of the epoch
    were yielded), in epochs of ``num_batches`` batches."""

    def __init__(self, num_batches: int, epoch: int = 0, batch: int = 0) -> None:
        self.num_batches = num_batches
        self.epoch = epoch
        self.batch = batch

    def due(self) -> tuple[int, int]:
        """``(epoch, batch)`` of the next batch to read: past an epoch's last batch, the first
        batch of the next epoch."""
        if self.batch >= self.num_batches:
            return self.epoch + 1, 0
        return self.epoch, self.batch

    def settle(self) -> tuple[int, int]:
        """Move to :meth:`due` (before a pipeline starts reading there) and return it."""
        self.epoch, self.batch = self.due()
        return self.epoch, self.batch

    def advance(self) -> None:
        """One more batch of this epoch was yielded."""
        self.batch += 1

    def next_epoch(self) -> None:
        """This epoch is over (or left part-way): the next batch is the next epoch's first."""
        self.epoch, self.batch = self.epoch + 1, 0

    def move_to(self, epoch: int, batch: int) -> None:
        """Resume at batch ``batch`` of epoch ``epoch`` (``batch == num_batches``: the next
        epoch's start)."""
        self.epoch, self.batch = epoch, batch
        self.settle()

    def __repr__(self) -> str:
        return f"ReadPosition(epoch={self.epoch}, batch={self.batch} of {self.num_batches})"
