"""Moved to :mod:`augment_ops.trace.lower_dali`; this name is the same module."""

import sys

from augment_ops.trace import lower_dali

sys.modules[__name__] = lower_dali
