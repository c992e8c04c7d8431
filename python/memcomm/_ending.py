"""How a run under `python -m memcomm` ends, in the script's process and in the processes it spawned
(Note [Profiles of spawned processes] in _spawned.py): the profile stopped, the --snapshot written,
one line on stderr saying where the trace is; also when the code leaves by os._exit(), and when the
process is told to end by SIGTERM (Note [Closing on SIGTERM] in common/include/memcomm/common/termination.hpp)."""
import argparse
import contextlib
import os
import sys
import threading
from typing import Any, Callable, Iterator, List

import memcomm
from memcomm import _memcomm
from memcomm._caller import say
from memcomm._relaunched import same_file

# How long a SIGTERM'd process may take to close its trace before it ends anyway: well inside the
# time torchrun (30 s) and Slurm (KillWait, 30 s by default) give before SIGKILL.
SIGTERM_DEADLINE_S = 10.0


def snapshot_path(path: str, rank: int, world: int) -> str:
    """--snapshot's file for a rank: the name itself alone, NAME.rankR.pickle in a group."""
    if world <= 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext or '.pickle'}"


def _flush_stderr() -> None:
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stderr.flush()


def close(options: argparse.Namespace, profiler: memcomm.Profiler) -> bool:
    """Stops the profile, writes the snapshot and says where the trace is; False when the trace file
    could not be written whole (a full disk: the message says how much it holds)."""
    try:
        profiler.stop()
        whole = True
    except OSError as e:
        say(f"{e}\n")
        whole = False
    if options.snapshot:
        path = snapshot_path(options.snapshot, profiler.rank, profiler.world)
        try:
            if profiler.trace_file and same_file(path, profiler.trace_file):  # a group's names, known only now
                raise OSError(f"is this rank's trace ({profiler.trace_file}); not written over it")
            memcomm.dump_snapshot(path, options.allocator[0])
        except (OSError, RuntimeError) as e:
            say(f"memcomm: --snapshot {path}: {e}\n")
    events, dropped = profiler.result
    dropped_text = f", {dropped} dropped" if dropped else ""
    # One write: the lines of ranks that end at once do not interleave.
    say(f"memcomm: {profiler.trace_file}: {events} events{dropped_text}\n")
    return whole


class CloseOnce:
    """A run's close, by whichever way it ends first (the script's end, its os._exit(), SIGTERM on the
    watch's thread): run once, from any thread; a later caller waits for it and gets its result."""

    def __init__(self, close_run: Callable[[], Any]):
        self._close_run = close_run
        self._lock = threading.Lock()
        self._done = False
        self._result: Any = None

    def __call__(self) -> Any:
        with self._lock:
            if not self._done:
                self._result, self._done = self._close_run(), True
            return self._result


@contextlib.contextmanager
def closed_on_sigterm(close_run: Callable[[], object]) -> Iterator[None]:
    """While this is open, a SIGTERM runs `close_run` (on a thread of its own) and then ends the process
    by SIGTERM, as it would have ended without memcomm, within SIGTERM_DEADLINE_S. Where the script or a
    library set a SIGTERM handler of its own before, that one stays, and so does a later one."""

    def close_then_end() -> None:
        _flush_stderr()  # what the script wrote, then the line saying why it ends (written by the watch)
        close_run()
        _flush_stderr()

    watching = _memcomm.watch_termination(close_then_end, SIGTERM_DEADLINE_S)
    try:
        yield
    finally:
        if watching:
            _memcomm.unwatch_termination()


@contextlib.contextmanager
def closed_before_os_exit(close_run: Callable[[], object]) -> Iterator[None]:
    """Code that leaves by os._exit() (common after destroy_process_group, to dodge teardown races)
    skips every finally: while this is open, this process runs `close_run` first. Children it forks
    (DataLoader workers) leave as they always did."""
    real_exit, pid = os._exit, os.getpid()

    def exit_after_closing(code: int) -> None:
        try:
            if os.getpid() == pid:
                close_run()
                _flush_stderr()
        finally:
            real_exit(code)

    os._exit = exit_after_closing
    try:
        yield
    finally:
        os._exit = real_exit


@contextlib.contextmanager
def closed_before_exec(close_run: Callable[[], object]) -> Iterator[None]:
    """A script that replaces itself with another program (os.execv and the rest of os.exec*, all of
    which end in os.execv or os.execve; the "restart myself" idiom) ended with a trace of no steps,
    what it had not flushed lost, and the new program ran without a word: while this is open, this
    process closes the run first and says, once, that the new program runs without memcomm. Only an
    exec that can go ahead does: os.execvp tries each folder of PATH in turn, and a script may catch
    the failure and go on."""
    real = {name: getattr(os, name) for name in ("execv", "execve")}
    pid = os.getpid()
    said: List[bool] = []

    def closing(name: str) -> Callable[..., Any]:
        def exec_after_closing(path: Any, args: Any, *rest: Any) -> Any:
            runnable = isinstance(path, int) or (os.path.isfile(path) and os.access(path, os.X_OK))
            if os.getpid() == pid and runnable and not said:
                close_run()
                said.append(True)
                shown = f"descriptor {path}" if isinstance(path, int) else os.fsdecode(path)
                say(f"memcomm: the script replaced itself with {shown} ({name}): the trace ends here, "
                    f"and that program runs without memcomm\n")
            return real[name](path, args, *rest)
        return exec_after_closing

    for name in real:
        setattr(os, name, closing(name))
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(os, name, function)
