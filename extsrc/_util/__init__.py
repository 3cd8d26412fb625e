"""Small shared pieces with no knowledge of datasets, ops or DALI: argument checks
(:mod:`~extsrc._util.argcheck`), text made safe to print (:mod:`~extsrc._util.textsafe`),
optional extras (:mod:`~extsrc._util.extras`), orphaned-process cleanup
(:mod:`~extsrc._util.orphan`), the ``__main__`` guard (:mod:`~extsrc._util.mainguard`),
device parsing (:mod:`~extsrc._util.device`), the counter hash of random draws
(:mod:`~extsrc._util.counters`) and the user's line for warnings (:mod:`~extsrc._util.caller`)."""
