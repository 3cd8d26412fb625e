"""Video sources: probing a file's streams (:mod:`~extsrc.sources.video.probe`), trimming what
DALI's reader cannot seek (:mod:`~extsrc.sources.video.trim`), the clip arithmetic
(:mod:`~extsrc.sources.video.clips`) and the ``external_source`` callable that feeds clips to
DALI (:mod:`~extsrc.sources.video.source`)."""
