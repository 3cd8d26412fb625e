"""Per-sample random generators, derived from (seed, epoch, sample index, salt) and nothing else.

A random op must give the same result for the same sample whatever process, thread or order runs
it, so there is no global ``np.random`` and no counter: each call builds its generator from the
sample's identity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The counter hash is shared with the video clip starts; its home is extsrc._util.counters.
from extsrc._util.counters import counter_uniform, name_salt

__all__ = [
    "counter_rng", "counter_uniform", "name_salt", "op_salt", "sample_rng",
]


def op_salt(name: str, occurrence: int = 0) -> int:
    """The generator salt of the ``occurrence``-th use (0-based) of op ``name`` in one loader.

    The first use salts with the name alone; later uses of the same op (two random crops for
    two views, say) get their own streams instead of repeating the first one's draws.
    """
    return name_salt(name if occurrence == 0 else f"{name}#{occurrence}")


def sample_rng(seed: int, epoch: int, index: int, salt: int = 0) -> np.random.Generator:
    """The generator a random op uses for manifest sample ``index`` in ``epoch``.

    ``salt`` separates ops, so two random ops on one sample do not draw the same numbers.
    """
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(epoch), int(index), int(salt)])
    return np.random.Generator(np.random.PCG64(ss))


def counter_rng(seed: int, epoch: int, index: int, salt: int = 0, noise: Any = None,
                noise_slots: frozenset[tuple[int, str]] | None = None) -> Any:
    """The generator whose draws a traced random op makes for one sample on the native path
    (``augment_ops.trace.DrawRng`` over :func:`counter_uniform`):
    ``op.apply(img, counter_rng(...))`` gives the native path's result on numpy, but for
    arrays of noise, which DALI's generator draws there (``noise``: what fills them here;
    ``noise_slots``: which draws they are, ``augment_ops.trace.rng.noise_slots``)."""
    from augment_ops.trace import DrawRng

    return DrawRng(lambda slot: float(counter_uniform(seed, epoch, index, salt, slot)), noise,
                   noise_slots)
