"""A third set of augmentations copied from public libraries, chosen blind: to measure the tracer
on libraries neither other set draws on, picked without looking at what the tracer lowers.

None of these ops is in ``tests/realops`` or ``tests/realops_holdout`` (by name or by the
function copied). They are the common augmentations of libraries the other two sets do not use
(Pillow's ``ImageOps``, scikit-image, MONAI, batchgenerators, tensorpack), picked as a user
picks them (colour and intensity, flips, crops, pads, rotations by 90, noise, normalisation,
grayscale) without regard for whether the tracer lowers them. Libraries that are not installed
here have their functions' bodies (and the helpers those call) copied into the module; each
module says which. They are written, adapted and tabled as the corpus's (see ``realops``): each
module registers its ops with ``realops.realop`` and holds an ``EXPECT`` table and a
``KNOWN_FAILURES`` table. ``tests/test_realops.py`` holds the tracer to all three sets (ids
``blind-<op>``) and ``benchmarks/realops_report.py --set blind`` prints this set's share.
Imported as ``realops_blind``, with ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import realops
from realops import RealOp

MODULES = ("pil_ops", "skimage_ops", "monai_ops", "batchgenerators_ops", "tensorpack_ops")


def blind() -> list[RealOp]:
    """Every op of the blind set, module by module, in source order."""
    return realops.collection(__name__, MODULES)


def expected() -> dict[str, str]:
    """The ``EXPECT`` tables of every module of the blind set, merged."""
    return realops.expected(__name__, MODULES)


def known_failures() -> dict[str, str]:
    """The ``KNOWN_FAILURES`` tables of every module of the blind set, merged."""
    return realops.known_failures(__name__, MODULES)
