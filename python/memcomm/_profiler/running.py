"""Which profiler runs in this process: at most one, since the C++ recorder is process-wide.

What the script holds (memcomm.loader, a DDP comm hook, memcomm.dist) reads `profiler` once per call
and calls straight through while it is None (Note [Nothing left after stop] in memcomm/profiler.py).
"""
import contextlib
import os
import threading
from typing import Any, Dict, Iterator

profiler: Any = None          # the running memcomm.Profiler, or None; set under `control`
control = threading.Lock()    # start/stop
trace_sessions: Dict[str, int] = {}  # trace= (absolute) -> sessions started with it, by any profiler


def _fresh_lock_in_forked_child() -> None:
    """A parent thread that held `control` at the fork is not in the child: its lock would stay held."""
    global control
    control = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_forked_child)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No phase is recorded inside (the hooks pass calls through as if no profiler ran; memory events
    still are): memcomm.tune()'s hundreds of probe steps are not the training run's steps."""
    global profiler
    with control:
        was, profiler = profiler, None
    try:
        yield
    finally:
        with control:
            if profiler is None:
                profiler = was
