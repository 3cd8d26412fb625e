"""Finding the bad files of a manifest before training does: the report types
(:mod:`~extsrc.validation.report`), the image checks (:mod:`~extsrc.validation.images`), the
video checks (:mod:`~extsrc.validation.videos`), and :func:`extsrc.validate`
(:mod:`~extsrc.validation.validate`), which picks the media and runs one of them."""
