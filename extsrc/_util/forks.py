"""One lock around every place extsrc starts processes, so that none forks while another starts.

A process made by ``fork()`` holds a copy of every file descriptor its parent had at that moment,
close-on-exec ones included, until it calls ``exec``. ``subprocess.Popen`` reads a pipe until
its child's ``exec`` closes the other end; a DALI reader forked by another thread in between
keeps a copy of that end for its whole life, and ``Popen`` then waits forever. This was seen as a
hang: an op worker process started while a second loader forked its readers. So extsrc's op
workers (:mod:`extsrc.ops_runtime.procs`) and DALI's reader processes
(:mod:`extsrc._dali.build`) are started under :data:`STARTING`, one after the other. A fork that
extsrc does not make (a user's, a ``DataLoader``'s) is not covered.
"""

from __future__ import annotations

import threading

__all__ = ["STARTING"]

#: Held while a process is being started; reentrant, as DALI's build may start several.
STARTING = threading.RLock()
