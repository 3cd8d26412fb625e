"""The command line (:mod:`.cli`, ``extsrc`` and ``python -m extsrc``), batch previews and the
sample data sets."""
