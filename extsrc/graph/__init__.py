"""The DALI graph definition: the image graph (:mod:`.image`), the video graph (:mod:`.video`),
and the batch format both end with (:mod:`.batchformat`). These modules know DALI, not PyTorch."""
