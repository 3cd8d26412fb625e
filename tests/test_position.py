"""The read position: what the epoch iterator advances, and the epoch rollover rule."""

from __future__ import annotations

from extsrc.loading.position import ReadPosition


def test_a_batch_past_the_end_is_the_next_epochs_first():
    pos = ReadPosition(3, epoch=2, batch=1)
    assert pos.due() == (2, 1)
    pos.advance()
    pos.advance()
    assert (pos.epoch, pos.batch) == (2, 3)  # every batch of epoch 2 was yielded...
    assert pos.due() == (3, 0)  # ...so the next one is epoch 3's first
    assert pos.settle() == (3, 0) and (pos.epoch, pos.batch) == (3, 0)


def test_move_to_and_next_epoch():
    pos = ReadPosition(5)
    pos.move_to(1, 5)  # a state saved right after epoch 1's last batch
    assert (pos.epoch, pos.batch) == (2, 0)
    pos.move_to(4, 2)
    pos.next_epoch()  # epoch 4 left part-way
    assert (pos.epoch, pos.batch) == (5, 0)
