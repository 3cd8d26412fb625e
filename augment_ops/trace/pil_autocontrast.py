"""PIL's ``ImageOps.autocontrast`` of a traced image, band by band, as PIL computes it.

PIL finds each band's lowest and highest value in its histogram (with no ``cutoff``, ``ignore``
or ``mask``: the band's minimum and maximum) and maps value ``v`` through a table built in
Python floats: ``int(v * scale + offset)`` clamped to 0..255, with ``scale = 255.0 / (hi - lo)``
and ``offset = -lo * scale``, or the identity where ``hi <= lo``. The same float64 operations on
the pixels give the table's entries exactly (a multiply and an add, each rounded once, as
Python rounds them; ``int()`` truncates a value that is never negative there), and the
minimum and maximum are exact reductions. The bands of an RGB image are computed together,
with a vector of three minima and maxima: the same values in a third of the operators.
"""

from __future__ import annotations

import numpy as np

from augment_ops.trace.sym import Sym

__all__ = ["autocontrast_bands"]


def autocontrast_bands(x: Sym) -> Sym:
    """A uint8 image (HxW, or HxWxC: each band on its own) through PIL's autocontrast tables."""
    axes = (0, 1)
    lo = x.min(axis=axes).astype(np.int64)
    hi = x.max(axis=axes).astype(np.int64)
    scale = 255.0 / np.maximum(hi - lo, 1)  # the quotient is read only where hi > lo
    offset = -lo * scale
    v = x.astype(np.int64) * scale + offset
    stretched = np.clip(v.astype(np.int64), 0, 255).astype(np.uint8)
    return np.where(hi <= lo, x, stretched)
