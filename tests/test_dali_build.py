"""``extsrc._dali.build.build``: reader processes started while DALI builds its operators.

The delivery of every sample through spawned readers built this way is checked in
``test_source.py::test_parallel_external_source_in_dali``; here, a start that fails.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from helpers import children

from extsrc._dali.build import build, overlaps


class _FailsInWorker:
    """A batch source that cannot be unpickled in any process but the one that made it."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __reduce__(self):
        return (_rebuild, (self.pid,))

    def __call__(self, info):
        return [np.zeros(3, np.uint8)] * 2


def _rebuild(pid: int) -> _FailsInWorker:
    if os.getpid() != pid:
        raise RuntimeError("this source does not start in a reader process")
    return _FailsInWorker()


def _pipe(source):
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, py_num_workers=1,
                    py_start_method="spawn", prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(source=source, batch=True, batch_info=True,
                                            parallel=True))
    return pipe


@pytest.mark.slow
def test_readers_that_fail_to_start_fail_the_build_and_leave_nothing_running():
    before = children()
    pipe = _pipe(_FailsInWorker())
    assert overlaps(pipe)
    with pytest.raises(Exception, match=r"(?i)worker|initiali"):
        build(pipe)
    assert not pipe._built
    assert not [t for t in threading.enumerate() if t.name == "extsrc-readers-start"]
    del pipe
    import gc

    gc.collect()
    assert children() - before == set()


def test_a_built_pipeline_and_a_fork_pipeline_take_dalis_own_build():
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, py_num_workers=1,
                    py_start_method="fork", prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(source=_FailsInWorker(), batch=True,
                                            batch_info=True, parallel=True))
    assert not overlaps(pipe)  # fork: no thread may be inside DALI's build while it forks


class _Zeros:
    def __call__(self, info):
        if info.iteration >= 1:
            raise StopIteration
        return [np.zeros(3, np.uint8)] * 2


@pytest.mark.slow
def test_the_starting_thread_is_seen_waiting_for_its_workers():
    """build() lets DALI's C++ build (which holds the GIL) begin only once the thread starting
    the workers waits for them; that wait is found by the name of DALI's function."""
    from extsrc._dali.build import _waits_for_workers

    pipe = _pipe(_Zeros())
    assert overlaps(pipe)
    starter = threading.Thread(target=pipe.start_py_workers)
    starter.start()
    seen = False
    while starter.is_alive() and not seen:
        seen = _waits_for_workers(starter)
    starter.join()
    assert seen
    pipe.build()
    (out,) = pipe.run()
    assert [np.asarray(out.at(i)).tolist() for i in range(2)] == [[0, 0, 0]] * 2
