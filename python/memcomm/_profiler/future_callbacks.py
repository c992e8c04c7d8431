"""Python callables that memcomm hands to torch futures, counted until torch lets go of them, and the
wait that lets it (Note [Python callables released on torch's threads]).

Note [Python callables released on torch's threads]
A Python callable given to a torch future (fut.then, add_done_callback) runs on the thread that
completes the work, a Gloo worker for a CPU collective, and torch releases it there afterwards,
taking the GIL to drop its reference. The script's thread wakes as soon as the callable has run,
before that release, and usually holds the GIL by then. If it goes on to tear the process group down
within the interpreter's switch interval (destroy_process_group and then dropping the DDP model, or
the end of the script), ~ProcessGroupGloo joins its workers while holding the GIL that the release
waits for: the join never returns (4 of 8 two-rank runs of a five-step script under `torchrun -m
memcomm`), or, during the interpreter's finalisation, the worker is ended while it waits and the
process aborts ("terminate called without an active exception"). Plain torch does the latter with
any Python comm hook: default_hooks.allreduce_hook aborted 3 of 8 such runs, and none without one.

memcomm counts its callables from hand-over to release (Tracked) and, before the points where the
group may be torn down, lets go of the GIL until torch has released those that have run
(wait_for_release), plus a moment for the rest of the worker's clean-up (the future the callable
made, whose value is a Python object too):
- the end of each training step (an optimizer's step or memcomm.step()): the usual last thing before
  a script tears down, and cheap, since the worker has been queued for the GIL since the backward;
- a DDP model's death under `python -m memcomm`, before its reducer goes (a weakref's callback runs
  before the model's attributes are dropped);
- the profiler's stop and the interpreter's exit (atexit runs before finalisation), which also give
  work still running a bounded time to complete and have its callable released.
A thread that Python did not start (a Gloo worker dropping the last reference to a hook) never waits:
the release it would wait for may be its own, still to come. No wait is longer than its timeout:
work that never completes keeps its callable, and the teardown then fares as it would without memcomm.

Note [Errors through memcomm's callbacks]
A future's error passes through each Python callable chained to it with then(), and torch's binding
wraps it there: "Got the following error when running the callback: " + the error's type and message
+ "At:" and the callable's frames. A DDP bucket recorded by memcomm passes through two (the default
all-reduce's and the record's), so a peer's death reached the surviving rank's backward as two
wrappings around Gloo's message, naming memcomm's files, where plain torch raises Gloo's message
alone. without_our_wrappings() takes off the wrappings whose callable is memcomm's, from the outside
in, and stops at the first that is not (a script's hook keeps its own, as torch prints it).
"""
import re
import atexit
import os
import threading
import time
from typing import Any, Callable, Tuple

from memcomm._caller import in_memcomm

POLL_S = 0.0002

class _Counts:
    """What Tracked counts, reached through its class: a release during the interpreter's finalisation
    may come after this module's globals are gone."""
    lock = threading.RLock()  # re-entrant: a garbage collection inside the lock may release a Tracked
    unreleased = 0            # callables handed over and not yet released
    ran_unreleased = 0        # of those, the ones that have run: their release is imminent
    handed_over = False       # whether any was, in this process (nothing to wait for otherwise)
    process = os.getpid()     # the process counting: a forked child counts its own callables alone


def _count_afresh_in_forked_child() -> None:
    """The parent's callables belong to torch threads the child does not have: none will run or be
    released here, so waiting for them would only time out, and a thread that held the lock is gone."""
    _Counts.lock = threading.RLock()
    _Counts.unreleased = _Counts.ran_unreleased = 0
    _Counts.process = os.getpid()


os.register_at_fork(after_in_child=_count_afresh_in_forked_child)


class Tracked:
    """`fn`, counted from now until torch drops the last reference to this object."""
    __slots__ = ("_fn", "_ran", "_process")
    _counts = _Counts

    def __init__(self, fn: Callable[..., Any]):
        self._fn, self._ran, self._process = fn, False, _Counts.process
        with _Counts.lock:
            if not _Counts.handed_over:
                _Counts.handed_over = True
                atexit.register(wait_for_release, ran_only=False)
            _Counts.unreleased += 1

    def __call__(self, *args: Any) -> Any:
        counts = self._counts
        with counts.lock:
            if not self._ran:
                self._ran = True
                counts.ran_unreleased += self._process == counts.process
        return self._fn(*args)

    def __del__(self) -> None:
        counts = self._counts
        if self._process != counts.process:  # the parent's, counted there
            return
        with counts.lock:
            counts.unreleased -= 1
            counts.ran_unreleased -= self._ran


def counts() -> Tuple[int, int]:
    """(callables torch holds, of those the ones that have run)."""
    return _Counts.unreleased, _Counts.ran_unreleased


def wait_for_release(ran_only: bool = True, timeout_s: float = 1.0) -> None:
    """Lets go of the GIL until torch has released every Tracked callable that has run (with
    `ran_only=False`, every one), and a moment more, or until `timeout_s`; returns at once when there
    is none, or on a thread Python did not start."""
    if not _Counts.handed_over or isinstance(threading.current_thread(), threading._DummyThread):
        return
    deadline = time.monotonic() + timeout_s
    waited = False
    while (_Counts.ran_unreleased if ran_only else _Counts.unreleased) > 0 and time.monotonic() < deadline:
        time.sleep(POLL_S)
        waited = True
    if waited:
        time.sleep(POLL_S)  # the worker's clean-up after the release (the future it completed)


_WRAPPED = "Got the following error when running the callback: "
_FRAME = re.compile(r"^  (.*)\((\d+)\): (.*)$")
_FUTURES = os.path.join("torch", "futures", "__init__.py")


def without_our_wrappings(error: BaseException) -> None:
    """Takes off `error`'s message the wrappings that torch's then() put on it in memcomm's callables
    (Note [Errors through memcomm's callbacks]); the error's type and traceback stay."""
    if not error.args or not isinstance(error.args[0], str):
        return
    message = error.args[0]
    while message.startswith(_WRAPPED):
        inner, at, frames = message.rpartition("\n\nAt:\n")
        if not at or not _raised_in_memcomm(frames):
            break
        inner = inner[len(_WRAPPED):]
        message = inner[len(type(error).__name__) + 2:] if inner.startswith(type(error).__name__ + ": ") else inner
    error.args = (message,) + error.args[1:]


def _raised_in_memcomm(frames: str) -> bool:
    """Whether the callable that raised, the innermost frame outside torch's futures, is memcomm's."""
    for line in frames.splitlines():
        frame = _FRAME.match(line)
        if frame and not frame.group(1).endswith(_FUTURES):
            return in_memcomm(frame.group(1))
    return False
