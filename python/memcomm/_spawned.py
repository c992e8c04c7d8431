"""Processes that a script run by `python -m memcomm` starts (torch.multiprocessing's spawn and
start_processes, multiprocessing's Process.start()), profiled too.

Note [Profiles of spawned processes]
DDP tutorials train in processes the script starts: pytorch/examples' ddp-tutorial-series and
Lightning's ddp_spawn with torch.multiprocessing.spawn or start_processes, PyTorch's "Writing
Distributed Applications" (dist_tuto) with multiprocessing.Process(target=init_process).start(). A
child runs one of the script's functions, never the runner. While the runner is open, the script's
own process (not its children, whose batch counter would be a copy) hands those functions to the
children inside an entry: start_processes' function inside SpawnedEntry, a Process's target inside
ProcessEntry, for the length of start() (a spawn or forkserver child gets a pickle of the entry by
reference to its class, around the target pickled as before: a target that does not pickle fails
with the error it fails with without memcomm). The child starts its profile when its default process
group is set (distributed_c10d._update_default_pg, which init_process_group calls however the script
imported it), or its RPC agent (rpc.api._init_rpc_states, which init_rpc calls: pytorch/examples'
RPC parameter server and RL agents set up no group; the rank is the RPC worker's id, Note [Ranks of
RPC workers] in profiler.py), so it knows its rank and names its file by it: NAME.spawnK.rankR.mct
(NAME.spawnK.rpc.rankR.mct for an RPC worker's; the parent's own is NAME.rankR.mct), with
--allocator's allocator installed and DDP buckets recorded as the runner does. What a child did
before init_process_group is not in its trace (tutorials set the group up first). The profile starts
inside init_process_group, so it measures no clock offsets: the children share the parent's host and
clock (Note [One clock per host] in memcomm/trace/clock.hpp).
- A start_processes child is a rank: it installs the allocator at its start, and says so when it
  sets up no group. A Process may be no rank at all (a script's own worker), so in a ProcessEntry
  everything waits for the group: one that never sets one up gets no allocator, no file and no line,
  unless it trained (ran a torch.optim step, as pytorch/examples' mnist_hogwild's processes do): then
  it says it was not profiled, and that a profile started inside it records it. Only a process group
  or an RPC agent names a child's rank, and a file named by anything else would not be one of a job's
  ranks.
  Installed at the group, the CPU allocator serves the tensors made from then on; the CUDA one is
  refused, with a warning, when torch's own allocator already holds CUDA memory.
- A target from multiprocessing, concurrent.futures or torch is a worker of that machinery, never a
  rank (DataLoader, Pool and ProcessPoolExecutor workers, Manager servers; start_processes' _wrap,
  whose function already is in SpawnedEntry): left alone, not even wrapped. A Process subclass that
  overrides run() has no target, and is not profiled.
- K numbers the batches of children in the order they start, one counter for both ways: one name
  rule, and no file of one way in the way of the other's. Each start_processes call is a batch. A
  Process started while every other Process of the current batch still runs joins it; once one of
  them has ended (or the script killed or terminated it), the next Process started opens batch K+1. So a loop that starts N processes, then
  joins them, is one batch, and a second such loop writes new files instead of overwriting the
  first's finished traces; two groups running at once in one batch that claim one rank meet a busy
  file (Note [One writer per trace file] in memcomm/trace/trace_writer.hpp): the second warns that
  it is not profiled.
- Children of the fork method (multiprocessing's default on Linux, for Process.start() and
  start_processes) are profiled the same way, from their entries: a forked child inherits the runner's
  profile, whose recorder is the parent's and records nothing there (Note [Recording across fork] in
  profiler/core/src/recorder.cpp). So the entry first lets go of it (profile_anew_in_forked_child:
  its hooks removed, its files left to the parent, a fresh recorder) and then starts the child's own.
  What the runner set up before the fork stays in force in the child rather than set up twice: the
  allocator it inherited (the CPU allocator's pages are a private copy: Note [Host pages across fork]
  in allocator/core/host_source.cpp) and the recording of DDP buckets. Whether a forked child can use
  CUDA is PyTorch's rule (not after the parent initialised CUDA), with memcomm or without.
"""
import argparse
import contextlib
import multiprocessing
import multiprocessing.process
import os
import sys
import threading
import weakref
from typing import Any, Callable, Iterator, List, Optional

import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing as torch_mp
from torch.optim.optimizer import register_optimizer_step_post_hook

import memcomm
from memcomm._caller import RunnerWarnings, entry_of_the_script, warn
from memcomm._ending import CloseOnce, close, closed_before_os_exit, closed_on_sigterm
from memcomm._profiler import running
from memcomm._profiler.ddp_buckets import recording_ddp_buckets
from memcomm.profiler import profile_anew_in_forked_child

_START_METHODS = ("spawn", "forkserver", "fork")
# Targets of these packages are their machinery's own workers (Note [Profiles of spawned processes]).
_LIBRARY_WORKERS = ("multiprocessing.", "concurrent.", "torch.")


def spawned_trace(path: str, batch: int) -> str:
    """The trace (or snapshot) name the children of the K-th batch take: NAME.spawnK.EXT."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.spawn{batch}{ext}"


class SpawnedEntry:
    """The script's function as a start_processes child runs it: inside memcomm's profile from the
    moment its process group exists (Note [Profiles of spawned processes]). Pickled to the child by
    reference to this class, with the runner's options."""

    waits_for_group = False

    def __init__(self, fn: Callable[..., Any], options: argparse.Namespace, forked: bool = False):
        self.fn = fn
        self.options = options
        self.forked = forked  # a child of the fork method, which inherited the runner's profile

    @entry_of_the_script
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.forked:
            profile_anew_in_forked_child()
        child = _ChildProfile(self.options, self.waits_for_group, self.forked)
        with child.open():
            try:
                return self.fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 (re-raised as it came)
                # The traceback the parent prints goes from torch's (or multiprocessing's) frame to
                # the script's, as without memcomm: this frame's entry is taken off, and a bare raise
                # adds none.
                if e.__traceback__ is not None and e.__traceback__.tb_frame is sys._getframe():
                    e.__traceback__ = e.__traceback__.tb_next
                raise


class ProcessEntry(SpawnedEntry):
    """A Process's target as its child runs it: as SpawnedEntry, but the allocator and everything
    else wait for a process group, and a child without one gets none of it."""

    waits_for_group = True


@contextlib.contextmanager
def _after_rank_known(on_rank: Callable[[], None]) -> Iterator[None]:
    """While open, `on_rank` runs once, when this process first knows its rank: its default process
    group is set, or its RPC agent (torch.distributed.rpc.init_rpc, whose workers may set up no group).
    A process this one forks (a rank that starts ranks of its own) inherits the patches, and is left
    alone."""
    pid, done = os.getpid(), [False]

    def after(real: Callable[[Any], None]) -> Callable[[Any], None]:
        def then_on_rank(value: Any) -> None:
            real(value)
            if value is not None and not done[0] and os.getpid() == pid:
                done[0] = True
                on_rank()
        return then_on_rank

    with contextlib.ExitStack() as patches:
        for module, name in ((c10d, "_update_default_pg"), (_rpc_api(), "_init_rpc_states")):
            real = getattr(module, name, None) if module is not None else None
            if real is not None:
                setattr(module, name, after(real))
                patches.callback(setattr, module, name, real)
        yield


def _rpc_api() -> Any:
    """torch.distributed.rpc's api module (loaded with torch.distributed), or None without RPC."""
    api = sys.modules.get("torch.distributed.rpc.api")
    return api if api is not None and getattr(sys.modules.get("torch.distributed.rpc"), "is_available", lambda: False)() else None


class _ChildProfile:
    def __init__(self, options: argparse.Namespace, waits_for_group: bool, forked: bool):
        self.options = options
        self.waits_for_group = waits_for_group
        self.forked = forked  # the allocator and the DDP buckets' recording are the runner's, inherited
        self.profiler: Optional[memcomm.Profiler] = None
        self.start_failed = False  # said when it failed
        self.updates = 0           # torch.optim steps outside any profile (a Process that trains unprofiled says so)
        # At the child's end, before its os._exit(), or on SIGTERM's thread (Note [Closing on SIGTERM]): once.
        self._close = CloseOnce(self._close_now)
        self.prepared = contextlib.ExitStack()  # DDP buckets recorded, os._exit and SIGTERM closing first
        RunnerWarnings.on = True  # the script's child: memcomm's warnings never fail it either

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        try:
            with self.prepared:
                if not self.waits_for_group:
                    self._prepare()
                with _after_rank_known(self._start_with_group), self._updates_counted():
                    yield
        finally:
            self._close()

    @contextlib.contextmanager
    def _updates_counted(self) -> Iterator[None]:
        handle = register_optimizer_step_post_hook(self._updated)
        try:
            yield
        finally:
            handle.remove()

    def _updated(self, *_: Any) -> None:
        if running.profiler is None:  # not in the child's own profile, nor in one the script started in it
            self.updates += 1

    def _prepare(self) -> None:
        """memcomm's allocator where asked, DDP buckets recorded, the trace closed before os._exit or on SIGTERM
        (torch's spawn terminates the processes left when one fails)."""
        self.prepared.enter_context(closed_before_os_exit(self._close))
        self.prepared.enter_context(closed_on_sigterm(self._close))
        if self.forked:  # in force since the fork
            return
        for device in self.options.allocator:
            try:
                memcomm.use_allocator(device, memory_limit=self.options.memory_limit, history=self.options.history)
                memcomm.allocator.installed_by[device] = f"python -m memcomm --allocator {device}"
            except (OSError, RuntimeError, ValueError) as e:
                warn(f"memcomm: this process runs without memcomm's {device} allocator: {e}")
        if not self.options.no_ddp_buckets:
            self.prepared.enter_context(recording_ddp_buckets())

    def _start_with_group(self) -> None:
        if self.waits_for_group:
            self._prepare()
        try:
            profiler = memcomm.Profiler(self._trace(), self.options.live, cupti=self.options.cupti,
                                        clock_sync=False)
            profiler.started_by_runner = True
            profiler.started_in_child = True
            self.profiler = profiler.start()
        except (OSError, RuntimeError, ValueError) as e:
            self.start_failed = True
            warn(f"memcomm: this process is not profiled: {e}")

    def _trace(self) -> str:
        """--trace's name for this child, in the folder python -m memcomm started in: named in full when
        the script has changed its working folder since (the file then is not where the name leads)."""
        trace, start_dir = self.options.trace, getattr(self.options, "start_dir", None)
        if start_dir is None or os.path.isabs(trace) or os.path.realpath(os.getcwd()) == os.path.realpath(start_dir):
            return trace
        return os.path.join(start_dir, trace)

    def _close_now(self) -> None:
        if self.profiler is not None:
            close(self.options, self.profiler)
        elif not self.start_failed and self.updates:  # a Process of the script's own, training (Hogwild)
            print(f"memcomm: process {os.getpid()}, started by the script, ran {self.updates} optimizer step(s) without "
                  f"setting up a process group or RPC: not profiled (Note [Profiles of spawned processes]); "
                  f"memcomm.profile() inside it records it", file=sys.stderr)
        elif not self.start_failed and not self.waits_for_group:
            print(f"memcomm: process {os.getpid()}, started by torch.multiprocessing, set up no process group nor RPC: "
                  f"not profiled (Note [Profiles of spawned processes])", file=sys.stderr)


def _library_worker(target: Callable[..., Any]) -> bool:
    return (getattr(target, "__module__", None) or "").startswith(_LIBRARY_WORKERS)


def _start_method(process: multiprocessing.process.BaseProcess) -> str:
    """The method start() uses: the context's, or for multiprocessing.Process the default one (fixed
    here as start() fixes it)."""
    return getattr(process, "_start_method", None) or multiprocessing.get_start_method()


def _ended(process: multiprocessing.process.BaseProcess) -> bool:
    try:
        return process.exitcode is not None
    except ValueError:  # closed, so it had ended
        return True


class ChildProcesses:
    """The runner's side: which children get an entry, and their batch numbers (Note [Profiles of
    spawned processes])."""

    def __init__(self, options: argparse.Namespace):
        self.options = options
        self.batches = 0
        self._batch: List[multiprocessing.process.BaseProcess] = []  # the current Process batch
        self._lock = threading.Lock()       # scripts (and start_processes) may start from threads
        self._stopped: "weakref.WeakSet[multiprocessing.process.BaseProcess]" = weakref.WeakSet()

    @property
    def any_started(self) -> bool:
        """Whether some child was given an entry: the training may have run there, not here."""
        return bool(self.batches)

    def function_entry(self, fn: Callable[..., Any], start_method: str) -> Callable[..., Any]:
        """start_processes' function as its children run it."""
        if start_method not in _START_METHODS:
            return fn
        with self._lock:
            self.batches += 1
            self._batch = []  # the Processes started next open a batch of their own
            return SpawnedEntry(fn, self._batch_options(self.batches), start_method == "fork")

    def target_entry(self, process: multiprocessing.process.BaseProcess) -> Optional[Callable[..., Any]]:
        """The entry a Process about to start runs instead of its target; None: left alone."""
        target = getattr(process, "_target", None)
        if target is None or _library_worker(target):
            return None
        method = _start_method(process)
        if method not in _START_METHODS:
            return None
        with self._lock:
            if not self._batch or any(_ended(p) or p in self._stopped for p in self._batch):
                self.batches += 1
                self._batch = []
            self._batch.append(process)
            return ProcessEntry(target, self._batch_options(self.batches), method == "fork")

    def stopped(self, process: multiprocessing.process.BaseProcess) -> None:
        """The script killed or terminated `process`: it has ended for batching, though the signal may
        not have landed yet when the next Process starts (a stuck batch given up on, then a retry)."""
        with self._lock:
            self._stopped.add(process)

    def not_started(self, process: multiprocessing.process.BaseProcess) -> None:
        """A start() that failed (its target did not pickle): the process is no batch's."""
        with self._lock:
            if process in self._batch:
                self._batch.remove(process)

    def _batch_options(self, batch: int) -> argparse.Namespace:
        child = argparse.Namespace(**vars(self.options))
        child.trace = spawned_trace(self.options.trace, batch)
        child.snapshot = spawned_trace(self.options.snapshot, batch) if self.options.snapshot else None
        return child


@contextlib.contextmanager
def profiling_spawned_processes(children: ChildProcesses) -> Iterator[None]:
    """While open, the children this process starts with torch.multiprocessing.start_processes (and
    spawn, which calls it) or multiprocessing's Process.start() run inside the entries `children`
    hands out."""
    runner = os.getpid()
    spawn_module = sys.modules["torch.multiprocessing.spawn"]
    real_start_processes = spawn_module.start_processes
    real_start = multiprocessing.process.BaseProcess.start

    def start_processes(fn: Callable[..., Any], args: Any = (), nprocs: int = 1, join: bool = True,
                        daemon: bool = False, start_method: str = "spawn") -> Any:
        if os.getpid() == runner:
            fn = children.function_entry(fn, start_method)
        return real_start_processes(fn, args, nprocs, join, daemon, start_method)

    def start(process: multiprocessing.process.BaseProcess) -> None:
        entry = children.target_entry(process) if os.getpid() == runner else None
        if entry is None:
            return real_start(process)
        target, process._target = process._target, entry
        try:
            real_start(process)
        finally:
            if hasattr(process, "_target"):  # start() failed before it let go of the target: as it was
                process._target = target
                children.not_started(process)

    def stopping(real_stop: Callable[[multiprocessing.process.BaseProcess], None]) -> Callable[..., None]:
        def stop(process: multiprocessing.process.BaseProcess) -> None:
            if os.getpid() == runner:
                children.stopped(process)
            real_stop(process)
        return stop

    base = multiprocessing.process.BaseProcess
    real = {name: getattr(base, name) for name in ("terminate", "kill")}
    spawn_module.start_processes = torch_mp.start_processes = start_processes
    base.start = start
    for name, real_stop in real.items():
        setattr(base, name, stopping(real_stop))
    try:
        yield
    finally:
        spawn_module.start_processes = torch_mp.start_processes = real_start_processes
        base.start = real_start
        for name, real_stop in real.items():
            setattr(base, name, real_stop)
