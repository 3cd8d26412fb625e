"""Which byte ranges of one object to read together: nearby ranges merged into spans.

Reading the members of a tar shard that one batch needs with a ranged GET each costs a request
per member, and an object store's requests, not its bytes, are what limit a reader of small
members (a request costs tens of milliseconds of latency and a share of the server's request
rate; a megabyte more in an answer costs about as much on a single connection). So the ranges of
one object are sorted and merged while the gap between one and the next is at most ``max_gap``
bytes and the merged span stays within ``max_span`` bytes. The bytes read beyond those used are
at most ``max_gap`` per merged range, which bounds the read amplification; ``max_span`` bounds
the memory one read holds. Pure arithmetic, no I/O: :meth:`Storage.read_ranges
<extsrc.sources.storage.Storage.read_ranges>` does the reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Span", "merge_ranges"]


@dataclass(frozen=True)
class Span:
    """One read: bytes ``[start, end)`` of the object, holding the ranges at positions
    ``members`` of the list given to :func:`merge_ranges`."""

    start: int
    end: int
    members: tuple[int, ...]


def merge_ranges(ranges: Sequence[tuple[int, int]], *, max_gap: int, max_span: int,
                 ) -> list[Span]:
    """The ``(offset, size)`` ranges of one object as spans to read, in offset order.

    Each range lies in exactly one span. A range joins the span before it when it starts at
    most ``max_gap`` bytes after that span ends (an overlapping or repeated range is a gap below
    zero) and the span would still hold at most ``max_span`` bytes; a range larger than
    ``max_span`` is a span of its own.

    >>> [(s.start, s.end, s.members) for s in merge_ranges(
    ...     [(900, 100), (0, 100), (150, 50), (5000, 10)], max_gap=100, max_span=1000)]
    [(0, 200, (1, 2)), (900, 1000, (0,)), (5000, 5010, (3,))]
    """
    order = sorted(range(len(ranges)), key=lambda k: (ranges[k][0], ranges[k][1]))
    spans: list[Span] = []
    start = end = 0
    members: list[int] = []
    for k in order:
        offset, size = ranges[k]
        if offset < 0 or size < 0:
            raise ValueError(f"merge_ranges: range {k} is ({offset}, {size}); offsets and "
                             "sizes must be >= 0")
        if members and offset - end <= max_gap and max(end, offset + size) - start <= max_span:
            end = max(end, offset + size)
            members.append(k)
            continue
        if members:
            spans.append(Span(start, end, tuple(members)))
        start, end, members = offset, offset + size, [k]
    if members:
        spans.append(Span(start, end, tuple(members)))
    return spans
