"""How a run under `python -m memcomm` ends, in the script's process and in the processes it spawned
(Note [Profiles of spawned processes] in _spawned.py): the profile stopped, the --snapshot written,
one line on stderr saying where the trace is; also when the code leaves by os._exit()."""
import argparse
import contextlib
import os
import sys
from typing import Callable, Iterator

import memcomm


def snapshot_path(path: str, rank: int, world: int) -> str:
    """--snapshot's file for a rank: the name itself alone, NAME.rankR.pickle in a group."""
    if world <= 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext or '.pickle'}"


def close(options: argparse.Namespace, profiler: memcomm.Profiler) -> bool:
    """Stops the profile, writes the snapshot and says where the trace is; False when the trace file
    could not be written whole (a full disk: the message says how much it holds)."""
    try:
        profiler.stop()
        whole = True
    except OSError as e:
        print(e, file=sys.stderr)
        whole = False
    if options.snapshot:
        path = snapshot_path(options.snapshot, profiler.rank, profiler.world)
        try:
            memcomm.dump_snapshot(path, options.allocator[0])
        except (OSError, RuntimeError) as e:
            print(f"memcomm: --snapshot {path}: {e}", file=sys.stderr)
    events, dropped = profiler.result
    dropped_text = f", {dropped} dropped" if dropped else ""
    # One write: the lines of ranks that end at once do not interleave.
    sys.stderr.write(f"memcomm: {profiler.trace_file}: {events} events{dropped_text}\n")
    return whole


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
                sys.stderr.flush()
        finally:
            real_exit(code)

    os._exit = exit_after_closing
    try:
        yield
    finally:
        os._exit = real_exit
