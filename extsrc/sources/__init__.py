"""What a dataset is and how its bytes are read: the :class:`~extsrc.sources.manifest.Manifest`
value type and its readers (:mod:`~extsrc.sources.table` for manifest files,
:mod:`~extsrc.sources.folders` for class folders), bounded file reads and image header checks,
the sharding arithmetic, the ``external_source`` callable that feeds DALI
(:mod:`~extsrc.sources.images`), and the same for videos (:mod:`extsrc.sources.video`).
Object storage URLs are read by :mod:`~extsrc.sources.storage`; tar shards are indexed into
byte ranges of their members by :mod:`~extsrc.sources.shards`.

The public names are re-exported by :mod:`extsrc` itself (``extsrc.read_manifest``...).
"""
