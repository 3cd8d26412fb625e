"""Saying what a slow start is doing, instead of leaving the user to wonder.

Building a loader is usually over in a fraction of a second; a large manifest to read or check,
``on_error="skip"`` validating every file, or DALI starting its reader processes can take far
longer. A stage that runs past :data:`SLOW_SECONDS` is named when that time has passed, through
the ``"extsrc"`` logger at ``INFO`` ("extsrc: building the DALI pipeline (4 reader processes,
spawn): over 2 s so far"), and again when it ends, with its time. A fast stage says nothing.

Where the application configured :mod:`logging` (``logging.basicConfig``, a handler on ``"extsrc"``
or on the root logger), the lines go where it sends ``INFO`` records of ``"extsrc"``, and
nowhere when it keeps only warnings; where nothing is configured, they go to stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LOGGER", "SLOW_SECONDS", "stage"]

#: The logger the lines go through.
LOGGER = logging.getLogger("extsrc")
#: Seconds a stage may take before it is named.
SLOW_SECONDS = 2.0


def _emit(message: str) -> None:
    if LOGGER.hasHandlers():
        LOGGER.info(message)
    else:  # logging not configured: its last resort would drop an INFO record
        print(f"extsrc: {message}", file=sys.stderr, flush=True)


@contextmanager
def stage(what: str, threshold: float | None = None) -> Iterator[None]:
    """Run the block; when it runs past ``threshold`` seconds (default :data:`SLOW_SECONDS`),
    say ``what`` it is doing then, and how long it took when it ends (or that it failed)."""
    limit = SLOW_SECONDS if threshold is None else threshold
    lock = threading.Lock()
    state = {"said": False, "over": False}
    start = time.monotonic()

    def announce() -> None:
        with lock:
            if state["said"] or state["over"]:
                return
            state["said"] = True
            _emit(f"{what}: over {limit:g} s so far")

    timer = threading.Timer(limit, announce)
    timer.daemon = True
    timer.name = "extsrc-slowstart"
    timer.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        timer.cancel()
        took = time.monotonic() - start
        with lock:
            state["over"] = True
            said = state["said"]
            if not said and took >= limit:  # ended before the timer's thread ran: say it now
                said = True
                _emit(f"{what}: over {limit:g} s so far")
        if said:
            _emit(f"{what}: {'failed' if failed else 'done'} after {took:.1f} s")
