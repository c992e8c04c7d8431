"""Which profiler runs in this process: at most one, since the C++ recorder is process-wide.

What the script holds (memcomm.loader, a DDP comm hook, memcomm.dist) reads `profiler` once per call
and calls straight through while it is None (Note [Nothing left after stop] in memcomm/profiler.py).
"""
import threading
from typing import Any, Dict

profiler: Any = None          # the running memcomm.Profiler, or None; set under `control`
control = threading.Lock()    # start/stop
trace_sessions: Dict[str, int] = {}  # trace= (absolute) -> sessions started with it, by any profiler
