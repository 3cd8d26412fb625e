"""The PyTorch-facing objects: :class:`~extsrc.loading.loader.Loader` and
:class:`~extsrc.loading.video.VideoLoader`, their configuration (:mod:`.config`), epochs and
read positions, saved state, error translation (:mod:`.failures`), distributed defaults and the
presets. Nothing is imported here (``extsrc`` re-exports the public names lazily)."""
