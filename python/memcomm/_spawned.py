"""Processes that a script run by `python -m memcomm` starts with torch.multiprocessing, profiled too.

Note [Profiles of spawned processes]
DDP tutorials (pytorch/examples' ddp-tutorial-series) and Lightning's ddp_spawn train in processes
they start with torch.multiprocessing.spawn or start_processes: fresh interpreters that run one of
the script's functions, never the runner. While the runner is open, start_processes (the spawn and
forkserver methods; a child of the fork method inherits the parent's state instead, and records
nothing: Note [Recording across fork]) hands each child the script's function inside SpawnedEntry.
The child installs memcomm's allocator where asked, records
DDP buckets as the runner does, and starts its profile when its default process group is set
(distributed_c10d._update_default_pg, which init_process_group calls however the script imported
it), so the child knows its rank and names its file by it: NAME.spawnK.rankR.mct for the K-th
start_processes call (the parent's own profile is NAME.rankR.mct). What a child did before
init_process_group is not in its trace (tutorials set the group up first). A child that never sets
up a group records nothing and says so at its end. The profile starts inside init_process_group,
so it measures no clock offsets: the children share the parent's host and clock (Note [One clock
per host] in memcomm/trace/clock.hpp).
"""
import argparse
import contextlib
import os
import sys
from typing import Any, Callable, Iterator, List, Optional

import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing as torch_mp

import memcomm
from memcomm._caller import warn
from memcomm._ending import close, closed_before_os_exit
from memcomm._profiler.ddp_buckets import recording_ddp_buckets

_FRESH_INTERPRETERS = ("spawn", "forkserver")


def spawned_trace(path: str, spawn: int) -> str:
    """The trace (or snapshot) name the K-th start_processes call's children take: NAME.spawnK.EXT."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.spawn{spawn}{ext}"


class SpawnedEntry:
    """The script's function as a spawned child runs it: inside memcomm's profile from the moment its
    process group exists (Note [Profiles of spawned processes]). Pickled to the child by reference
    to this class, with the runner's options."""

    def __init__(self, fn: Callable[..., Any], options: argparse.Namespace):
        self.fn = fn
        self.options = options

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        child = _ChildProfile(self.options)
        with child.open():
            return self.fn(*args, **kwargs)


class _ChildProfile:
    def __init__(self, options: argparse.Namespace):
        self.options = options
        self.profiler: Optional[memcomm.Profiler] = None
        self.start_failed = False  # said when it failed
        self.closed = False

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        for device in self.options.allocator:
            try:
                memcomm.use_allocator(device, memory_limit=self.options.memory_limit, history=self.options.history)
                memcomm.allocator.installed_by[device] = f"python -m memcomm --allocator {device}"
            except (OSError, RuntimeError, ValueError) as e:
                warn(f"memcomm: this spawned process runs without memcomm's {device} allocator: {e}")
        real_update = getattr(c10d, "_update_default_pg", None)
        if real_update is not None:
            c10d._update_default_pg = self._start_with_group(real_update)
        try:
            with recording_ddp_buckets() if not self.options.no_ddp_buckets else contextlib.nullcontext(), \
                    closed_before_os_exit(self._close):
                yield
        finally:
            if real_update is not None:
                c10d._update_default_pg = real_update
            self._close()

    def _start_with_group(self, real_update: Callable[[Any], None]) -> Callable[[Any], None]:
        def update_default_pg(pg: Any) -> None:
            real_update(pg)
            if pg is not None and self.profiler is None:
                self._start()
        return update_default_pg

    def _start(self) -> None:
        try:
            profiler = memcomm.Profiler(self.options.trace, self.options.live, cupti=self.options.cupti,
                                        clock_sync=False)
            profiler.started_by_runner = True
            self.profiler = profiler.start()
        except (OSError, RuntimeError, ValueError) as e:
            self.start_failed = True
            warn(f"memcomm: this spawned process is not profiled: {e}")

    def _close(self) -> None:
        """At the child's end, or before its os._exit(): once."""
        if self.closed:
            return
        self.closed = True
        if self.profiler is not None:
            close(self.options, self.profiler)
        elif not self.start_failed:
            print(f"memcomm: process {os.getpid()}, started by torch.multiprocessing, set up no process group: "
                  f"not profiled (Note [Profiles of spawned processes])", file=sys.stderr)


@contextlib.contextmanager
def profiling_spawned_processes(options: argparse.Namespace) -> Iterator[List[int]]:
    """While open, the children of torch.multiprocessing.start_processes (and spawn, which calls it)
    run under SpawnedEntry. Yields a list that holds one entry per start_processes call made."""
    spawn_module = sys.modules["torch.multiprocessing.spawn"]
    real = spawn_module.start_processes
    calls: List[int] = []

    def start_processes(fn: Callable[..., Any], args: Any = (), nprocs: int = 1, join: bool = True,
                        daemon: bool = False, start_method: str = "spawn") -> Any:
        if start_method in _FRESH_INTERPRETERS:
            calls.append(nprocs)
            child = argparse.Namespace(**vars(options))
            child.trace = spawned_trace(options.trace, len(calls))
            child.snapshot = spawned_trace(options.snapshot, len(calls)) if options.snapshot else None
            fn = SpawnedEntry(fn, child)
        return real(fn, args, nprocs, join, daemon, start_method)

    spawn_module.start_processes = torch_mp.start_processes = start_processes
    try:
        yield calls
    finally:
        spawn_module.start_processes = torch_mp.start_processes = real
