"""memcomm's recorder inside a PyTorch training script, without changing its loop.

    with memcomm.profile(trace="run.mct", live="127.0.0.1:7433"):
        for x, y in memcomm.loader(train_loader):        # data-loader wait
            loss = criterion(model(x), y)                 # forward (hooks)
            loss.backward()                               # backward (autograd's entry point)
            optimizer.step(); optimizer.zero_grad()       # optimizer phase, end of the step

Each rank writes NAME.rankR.mct (rank and world from torch.distributed when it is initialised, else
from the launcher's environment: Note [A profile started before the process group]) in
the C++ trainer's format, through the C++ trainer's own run recorder (train::RunProfiler), so
memcomm-trace, memcomm-view and the advisor read it as they read memcomm-train's traces. This module
holds the Profiler (start, stop, the recorder); what it records comes from the hooks of
memcomm/_profiler/hooks.py (Note [Phases from hooks]) and the wrappers the script calls
(memcomm/_profiler/wrappers.py, collectives.py).

Note [A profile started before the process group]: scripts often call init_process_group inside
their main(), after the line that starts the profiler. The rank then comes from the launcher's
environment (torchrun's RANK and WORLD_SIZE, or Slurm's), as memcomm-train reads it, or Lightning's
LOCAL_RANK, NODE_RANK and WORLD_SIZE where no RANK is set (train::read_launch_identity, Note [Lightning's
launch environment]), so each rank still writes its own file: taking rank 0 for every process made
all of them write NAME.rank0.mct over each other (pytorch/examples' ddp-tutorial-series). Clock offsets
need the process group, so none is measured: 0, exact on one host (Note [One clock per host] in
memcomm/trace/clock.hpp); across hosts start the profiler after init_process_group.

Note [Processes that share a name]: processes started by torch.multiprocessing.spawn (or a Pool)
that start a profile before init_process_group have no rank yet, and no launcher environment to read
one from: each calls itself rank 0 and picks NAME.rank0.mct. The first holds the file (Note [One
writer per trace file] in memcomm/trace/trace_writer.hpp); the others write NAME.pidP.rank0.mct, with
a warning that says how to get files named by rank. Processes that do know their ranks and still
collide (two jobs with one name) get the error: the file being written is never truncated.

Note [Ranks of RPC workers]: a torch.distributed.rpc worker that sets up no process group (an RPC
parameter server, a master that drives trainers) knows its rank only as its RPC worker id, in the RPC
world; a job may also give some of its processes a process group, numbered from 0 apart
(pytorch/examples' ddp_rpc: trainers 0 and 1 of a group of 2 beside RPC workers up to 3). Named alike,
an RPC worker's file could be a trainer's name, and the later of the two was not profiled; read
together, their world sizes said they were two runs. So the file of a rank numbered by RPC says so:
NAME.rpc.rankR.mct (NAME.spawnK.rpc.rankR.mct for a spawned child), and `report NAME.rank*.mct` reads
the group's ranks alone. A rank the launcher's environment names (torchrun's RANK, one numbering for
the whole job), and an RPC world of one process, keep NAME.rankR.mct.

Note [Nothing left after stop]: stop() removes every module and optimizer hook and class wrapper it
added, puts torch.autograd.backward back and keeps no reference to the script's modules (those
named in `model=` it holds weakly, to hook them again if the same profiler starts again).
What the script holds (the loader wrapper, a DDP comm hook, memcomm.dist calls) checks one
module global and calls straight through while no profiler runs.
"""
import contextlib
import os
import sys
from typing import Any, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from memcomm import _memcomm
from memcomm._profiler import running
from memcomm._profiler.clock import agree_and_measure_clock, torchrun_restart
from memcomm._profiler.collectives import comm_hook, settle_in_flight
from memcomm._profiler.comms import Communicators
from memcomm._profiler.future_callbacks import wait_for_release
from memcomm._profiler.hooks import PhaseHooks
from memcomm._profiler.wrappers import category, loader
from memcomm._caller import NothingRecorded, ProfileAdvice, warn

__all__ = ["profile", "Profiler", "loader", "comm_hook", "category", "current", "step"]  # loader...: from _profiler

ModelArg = Union[None, torch.nn.Module, List[torch.nn.Module]]


def _check_trace_dir(trace: str) -> None:
    if trace.endswith(("/", os.sep)) or os.path.isdir(trace) or not os.path.basename(trace):
        raise ValueError(f"profile(trace={trace!r}) names a folder; give a file name in it, such as "
                         f"{os.path.join(trace, 'run.mct')!r}")
    directory = os.path.dirname(os.path.abspath(trace))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"profile(trace={trace!r}): no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"profile(trace={trace!r}): cannot create files in {directory!r}")


def _dist_identity() -> Tuple[int, int, int, bool]:
    """(rank, world, local rank, numbered by RPC): torch.distributed's when initialised, else an RPC
    agent's (a worker of torch.distributed.rpc that set up no group: Note [Ranks of RPC workers]),
    else what the launcher's environment names (Note [A profile started before the process group])."""
    if _group_ready():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        agent = _rpc_agent()
        if agent is None:
            return (*_memcomm.launch_identity(), False)
        rank, world = agent.get_worker_info().id, len(agent.get_worker_infos())
        return rank, world, int(os.environ.get("LOCAL_RANK", rank)), world > 1  # alone, it shares no numbering
    return rank, world, int(os.environ.get("LOCAL_RANK", rank)), False


def _rpc_agent() -> Any:
    """This process's torch.distributed.rpc agent, or None (no RPC, or not initialised)."""
    api = sys.modules.get("torch.distributed.rpc.api")
    try:
        return api._get_current_rpc_agent() if api is not None and api._is_current_rpc_agent_set() else None
    except (AttributeError, RuntimeError):  # a torch whose private API moved, or an agent shut down meanwhile
        return None


def _group_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def _check_arguments(trace: Any, live: Any, model: ModelArg, cupti: Any) -> List[torch.nn.Module]:
    """Profiler's argument checks; returns the models as a list ([] for None)."""
    if trace is None and live is None:
        raise ValueError("profile() needs trace=FILE, live='HOST:PORT' or both")
    if trace is not None and not isinstance(trace, (str, os.PathLike)):
        raise TypeError(f"trace must be a file name (str or os.PathLike), got {type(trace).__name__}")
    if live is not None and not isinstance(live, str):
        raise TypeError(f"live must be a 'HOST:PORT' string, got {type(live).__name__}")
    for name, value in (("trace", trace), ("live", live)):  # C++ would stop the name at the byte: another file
        text = os.fspath(value) if value is not None else ""
        if (b"\0" if isinstance(text, bytes) else "\0") in text:
            raise ValueError(f"{name}={value!r}: embedded null byte")
    if live is not None:
        _memcomm.check_live_address(live)  # memcomm-train --live's rule
    models = [model] if isinstance(model, torch.nn.Module) else list(model or [])
    if model is not None and (not models or not all(isinstance(m, torch.nn.Module) for m in models)):
        raise TypeError(f"model must be a torch.nn.Module or a list of them, got {type(model).__name__}")
    if cupti not in ("auto", "on", "off"):
        raise ValueError(f"cupti must be 'auto', 'on' or 'off', got {cupti!r}")
    return models


class Profiler(contextlib.ContextDecorator):
    """Records this process's training into memcomm's trace format and/or live stream.

    trace: file name; each rank writes NAME.rankR.mct beside it (its folder must exist). A profiler
           started again, or another one given the same name in this process, writes
           NAME.2.rankR.mct, NAME.3.rankR.mct...: no session of the process overwrites another;
           torchrun's N-th restart writes NAME.restartN.rankR.mct (the failed attempt's are kept).
    live:  "HOST:PORT" ("[v6]:PORT", or ":PORT" for this machine) where memcomm-view listens
           (memcomm-view --listen), the rule of memcomm-train --live; the rank connects and
           reconnects in the background, so a viewer that is absent or goes away never blocks training.
    model: the module (or list of modules) whose forward calls are forwards; None: the outermost
           calls into modules with parameters: those alive at start, or, when there are none, those
           called before the first update and those alive then (Note [Finding the model] in
           _profiler/models.py). A model built after the first update and first called after it
           without training (a second model brought in later to evaluate, or one that only another
           thread trains) is not found: name it here.
    cupti: "auto" (GPU activity when CUDA is in use), "on" or "off".
    clock_sync: estimate each rank's clock offset over the process group at start (every rank
           starts its profiler then; when some rank starts none within 30 s, as where only rank 0
           profiles, the others warn and record without an offset: Note [Ranks that do not
           profile] in _profiler/clock.py). Started before init_process_group, the profiler takes
           the rank from the launcher's environment and measures no offset.

    Also a decorator: @memcomm.profile(trace=...) profiles each call of the function (the second
    call writes NAME.2.rankR.mct, and so on).

    start() raises before anything is recorded when the trace folder is missing or read-only, the
    live address is malformed, or another profiler runs. Thread safe: any thread may train, start or
    stop; hooks keep each thread's phases apart.
    """

    def __init__(self, trace: Optional[Union[str, os.PathLike]] = None, live: Optional[str] = None, *,
                 model: ModelArg = None, cupti: str = "auto", clock_sync: bool = True):
        models = _check_arguments(trace, live, model, cupti)
        self._trace = os.fspath(trace) if trace is not None else ""
        self._session = 0                     # this start's number among those with this trace= name
        self._pid_tag = False                 # the file name carries the pid (Note [Processes that share a name])
        self._rpc_numbered = False            # the rank is an RPC worker's id (Note [Ranks of RPC workers])
        self._live = live or ""
        self._cupti = cupti
        self._clock_sync = clock_sync
        self._run: Any = None
        self._process = 0                     # the process that started it (a forked child's copy is not its own)
        self._observing = False               # the run observes memcomm's allocator (_observe_allocator)
        self._hooks = PhaseHooks(self, models)
        self._comms = Communicators(self._group_formed)
        self.rank, self.world = 0, 1
        self.result: Tuple[int, int] = (0, 0)
        self._collector_ns = 0

    @property
    def active(self) -> bool:
        return running.profiler is self

    @property
    def trace_file(self) -> Optional[str]:
        """The file this rank writes (None without trace=)."""
        return _memcomm.rank_trace_path(self._session_trace(), self.rank) if self._trace else None

    started_by_runner = False  # python -m memcomm's profile of a whole script (its error messages say so)
    started_in_child = False  # python -m memcomm's profile of a process the script started (Note [Profiles of
                              # spawned processes] in _spawned.py)

    def _session_trace(self) -> str:
        """trace=, or NAME.K.mct for the K-th start (K >= 2) of a profiler with this name in the process,
        NAME.restartN.mct in torchrun's N-th restart of the job (its failed attempts' files are kept),
        with .rpc for a rank numbered by RPC (Note [Ranks of RPC workers]) and .pidP when another process
        writes that name, before the extension."""
        stem, ext = os.path.splitext(self._trace)
        restart = torchrun_restart()
        if restart > 0:
            stem += f".restart{restart}"
        if self._session > 1:
            stem += f".{self._session}"
        if self._rpc_numbered:
            stem += ".rpc"
        if self._pid_tag:
            stem += f".pid{os.getpid()}"
        return stem + ext

    def start(self) -> "Profiler":
        """Starts recording and installs the hooks. Raises if it cannot record (see the class)."""
        with running.control:
            profile_anew_in_forked_child()  # a profile and recorder this process inherited by a fork: the parent's
            if running.profiler is not None:
                raise RuntimeError("a memcomm profiler is already running in this process; " + (
                    "python -m memcomm started it and profiles the whole script: run a script that starts "
                    "its own profile with plain python" if running.profiler.started_by_runner else "stop() it first"))
            self._comms.clear()
            self._open_recorder()
            try:
                self._comms.index(None)
                self._hooks.install()
            except BaseException:
                self._hooks.remove()
                self._run.finish()
                self._run = None
                raise
            running.profiler = self
            self._process = os.getpid()
        return self

    def stop(self) -> Tuple[int, int]:
        """Removes every hook (Note [Nothing left after stop]), closes this thread's open phases and
        the trace. Returns (events recorded, events dropped; those a write error kept out of the file
        included). Safe to call twice. Raises OSError, once everything is stopped, when the trace file
        could not be written whole (a full disk): the message says how many events it holds."""
        with running.control:
            if running.profiler is not self:
                return self.result
            settle_in_flight()  # Note [Collectives that end after the script waited]
            self._world_at_stop()
            running.profiler = None
            self._hooks.remove()
            self._hooks.close_this_thread()
            self.result = tuple(self._run.finish())
            self._collector_ns = self._run.collector_cpu_ns()
            trace_error = self._run.trace_error()
            live_note = self._run.live_note()
            self._run = None
            self._observing = False
        wait_for_release(ran_only=False)  # Note [Python callables released on torch's threads]
        if self._hooks.backwards and not self._hooks.step_ends:
            warn(f"memcomm: {self._hooks.backwards} backward passes but no optimizer step (torch.optim) "
                 "and no memcomm.step(): the trace has them all in one step; call memcomm.step() where "
                 "a step of a loop that updates its parameters by hand ends", ProfileAdvice)
        if not (self._hooks.forwards or self._hooks.backwards or self._hooks.step_ends):
            warn("memcomm: this profile recorded no forward, backward or optimizer step in this process; " + (
                 "it ran none of its own (an RPC master or parameter server runs none; a forward called as "
                 "module.forward() is not seen)" if self.started_in_child else
                 "if the training ran in processes this one started (torch.multiprocessing.spawn, "
                 "Lightning's ddp_spawn, a launcher), start the profile in them (python -m memcomm goes after a "
                 "launcher: LAUNCHER ... -m memcomm SCRIPT)"), NothingRecorded)
        if self._hooks.backwards and not self._hooks.forwards:
            warn(f"memcomm: {self._hooks.backwards} backward passes but no forward: {self._why_no_forward()}", ProfileAdvice)
        recorded = "(memcomm records DDP's bucket all-reduces and the collectives called through memcomm.dist)"
        if self._hooks.sharded:
            warn(f"memcomm: the model is sharded by {self._hooks.sharded} are not recorded {recorded}")
        if self._hooks.forwards and "torch.distributed.pipelining" in sys.modules:  # only a script that pipelines loads it
            warn("memcomm: the script loaded torch.distributed.pipelining: the sends and receives between pipeline "
                 f"stages are not recorded {recorded}")
        if live_note:
            warn(f"memcomm: {live_note}", RuntimeWarning)
        if trace_error:  # a full disk: the recording has ended cleanly, but the file is short
            raise OSError(f"memcomm: {trace_error}")
        return self.result

    def _forget_in_forked_child(self) -> None:
        """In a process forked while this profiler ran: its hooks go and its run is let go of, unfinished
        (finishing would close the parent's files: Note [Recording across fork] in
        profiler/core/src/recorder.cpp)."""
        self._hooks.forget_in_forked_child()
        if self._run is not None:
            self._run.abandon()
            self._run = None
        self._observing = False

    def _why_no_forward(self) -> str:
        if self._hooks.compiles:
            return ("the forward ran inside code torch.compile compiled (a loss function or training step that calls "
                    "the model), where memcomm records nothing; compile the model itself (torch.compile(model)) for "
                    "its forwards to be recorded")
        if not self._hooks.modules_found:
            return ("no nn.Module with parameters was found or called (a model of bare tensors or Parameters), and a "
                    "forward is a module's call")
        return ("the modules watched were never called themselves (torch.utils.checkpoint.checkpoint_sequential "
                "calls a Sequential's children); give profile(model=...) the module the loop calls, or leave model= "
                "out to find it")

    def _ends_by_exception(self) -> None:
        """The profile is about to stop because an exception ends the run: a step open then is cut off,
        whether or not an update ended one before (Note [A step without its update])."""
        self._hooks.ended_by_exception = True

    def step(self) -> None:
        """Ends the calling thread's step, for a loop that updates its parameters without a torch.optim
        optimizer (whose step() ends it otherwise). A no-op while this profiler is not running."""
        if running.profiler is self:
            self._hooks.end_step()

    def __enter__(self) -> "Profiler":
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._ends_by_exception()
        try:
            self.stop()
        except OSError as e:
            if exc_type is None:
                raise
            warn(str(e))  # the body's own exception is the one to see

    def counter(self, name: str, value: float) -> None:
        """Records a named value (loss, samples/s, learning rate) at this moment."""
        run = self._run  # stop() may clear it meanwhile: then the call is a no-op ("has stopped")
        if run is not None:
            with contextlib.suppress(RuntimeError):
                run.counter(str(name), float(value))

    def _observe_allocator(self) -> None:
        """Observes memcomm's allocator from now on when the recording began before it served this process:
        use_allocator() inside the with block, or a CUDA engine, made at its GPU's first allocation. Its
        state at that moment comes first, then its events (the hooks call this as each step opens)."""
        run = self._run
        if run is None or self._observing:
            return
        with contextlib.suppress(RuntimeError):  # stopped meanwhile
            self._observing = run.observe_allocator(_cuda_device())

    def collector_cpu_ns(self) -> int:
        """CPU time the recorder's background thread used: the profiler's own cost."""
        return self._run.collector_cpu_ns() if self._run is not None else self._collector_ns

    def bucket_issued(self) -> None:
        """A DDP bucket's all-reduce went out through memcomm's hook (Note [The wait at backward's end])."""
        self._hooks.bucket_issued()

    def next_collective(self, group: Any) -> Tuple[int, int]:
        """(communicator index, sequence number) for a collective about to be issued on `group`."""
        return self._comms.next_collective(group)

    def _open_recorder(self) -> None:
        if self._trace:
            _check_trace_dir(self._trace)
            key = os.path.abspath(self._trace)
            self._session = running.trace_sessions[key] = running.trace_sessions.get(key, 0) + 1
        self.rank, self.world, local_rank, self._rpc_numbered = _dist_identity()
        device = _cuda_device()
        on_gpu = device >= 0
        error: Optional[BaseException] = None
        self._pid_tag = False
        try:
            try:
                self._run = self._new_run(local_rank, on_gpu, device)
            except _memcomm.TraceFileBusy:
                if self.world > 1 or _group_ready():  # two processes claim one rank: no name to fall back on
                    raise
                busy = self.trace_file
                self._pid_tag = True  # Note [Processes that share a name]
                self._run = self._new_run(local_rank, on_gpu, device)
                warn(f"memcomm.profile: another process is writing {busy}, and this one knows no rank "
                     f"(no process group, no launcher environment): writing {self.trace_file} instead. "
                     f"Processes of one job that start the profile after init_process_group name "
                     f"their files by rank.", RuntimeWarning)
            self._observing = self._run.observe_allocator(device)
        except Exception as e:  # noqa: BLE001 (re-raised below, after the other ranks know)
            error = e
        if self.world > 1 and self._clock_sync and _group_ready():
            try:
                offset = agree_and_measure_clock(error is None)
            except Exception:
                if self._run is not None:
                    self._run.finish()
                    self._run = None
                if error is not None:
                    raise error from None
                raise
            self._run.clock_offset(offset)
        elif error is not None:
            raise error

    def _group_formed(self, size: int) -> None:
        """The default process group's size, at its first collective: a profile that started before a
        launcher set the world up (Lightning's strategy="ddp" sets WORLD_SIZE in the script's own
        process after it started) records it, so its file and its peers' name one world."""
        if size != self.world and self._run is not None:
            self.world = size
            self._run.world_size(size)

    def _world_at_stop(self) -> None:
        """The default group's size for a run that formed it but ended before its first collective (a
        script that failed in its first backward), for the same reason as _group_formed."""
        if dist.is_available() and dist.is_initialized():
            try:
                self._group_formed(dist.get_world_size())
            except RuntimeError:  # a group torn down under the profile: the size recorded last stands
                pass

    def _new_run(self, local_rank: int, on_gpu: bool, device: int) -> Any:
        return _memcomm.RunProfiler(self._session_trace(), self._live, self.rank, self.world, local_rank, self._cupti,
                                    on_gpu, device)


def _cuda_device() -> int:
    """The current CUDA device once CUDA is initialised in this process, else -1 (the run is on the CPU
    so far, and asking would initialise CUDA)."""
    return torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else -1


def profile(trace: Optional[Union[str, os.PathLike]] = None, live: Optional[str] = None, *,
            model: ModelArg = None, cupti: str = "auto", clock_sync: bool = True) -> Profiler:
    """A Profiler, for `with memcomm.profile(trace="run.mct"):` (the with block starts and stops it;
    an exception inside still closes the trace). See Profiler for the arguments."""
    return Profiler(trace, live, model=model, cupti=cupti, clock_sync=clock_sync)


def profile_anew_in_forked_child() -> None:
    """In a process forked while a profile ran (one that python -m memcomm's script forks to train, or
    one that starts a profile of its own): the parent's profile stays the parent's, recording nothing
    here, and this process gets a recorder of its own, so a profile may start here (Note [Recording
    across fork] in profiler/core/src/recorder.cpp). Elsewhere, nothing changes."""
    inherited = running.profiler
    if inherited is not None and inherited._process != os.getpid():
        running.profiler = None
        inherited._forget_in_forked_child()
    _memcomm.renew_recorder_in_forked_child()


def current() -> Optional[Profiler]:
    """The running profiler, or None."""
    return running.profiler


def step() -> None:
    """Ends the calling thread's step in the running profiler (Profiler.step); a no-op without one."""
    p = running.profiler
    if p is not None:
        p.step()
