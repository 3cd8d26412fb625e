"""Which of a batch's files decode to another shape than the one read from their headers.

Native ops read an image's size from its header (``fn.peek_image_shape``, EXIF orientation
applied) so that their scalars need not wait for the decoder; the pipeline stops where the two
differ (:func:`extsrc.graph.image._decoded_as_read`). Its error names the batch, not the file:
this decodes the batch's files again on the CPU, header beside image, to name it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["sizes_unlike_headers"]


def sizes_unlike_headers(
    blobs: Sequence[np.ndarray],
) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """``(position, decoded shape, header shape)`` of each encoded image in ``blobs`` whose RGB
    decoding on the CPU has another shape than its header gives; files DALI cannot read at all
    are left out."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    found = []
    for k, blob in enumerate(blobs):  # one at a time: a file DALI refuses fails only its own run
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
        with pipe:
            encoded = fn.external_source(source=_once(blob), batch=True)
            image = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
            pipe.set_outputs(image.shape(), fn.peek_image_shape(encoded))
        try:
            pipe.build()
            decoded, header = (tuple(int(v) for v in np.asarray(out[0])) for out in pipe.run())
        except Exception:  # a file DALI cannot read here is not the one looked for
            continue
        finally:
            del pipe
        if decoded != header:
            found.append((k, decoded, header))
    return found


def _once(blob: np.ndarray) -> Callable[[], list[np.ndarray]]:
    # No parameters: DALI calls a source that takes one with the iteration's number.
    return lambda: [blob]
