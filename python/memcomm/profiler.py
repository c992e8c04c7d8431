"""memcomm's recorder inside a PyTorch training script, without changing its loop.

    with memcomm.profile(trace="run.mct", live="127.0.0.1:7433"):
        for x, y in memcomm.loader(train_loader):        # data-loader wait
            loss = criterion(model(x), y)                 # forward (hooks)
            loss.backward()                               # backward (autograd's entry point)
            optimizer.step(); optimizer.zero_grad()       # optimizer phase, end of the step

Each rank writes NAME.rankR.mct (rank and world from torch.distributed when it is initialised) in
the C++ trainer's format, through the C++ trainer's own run recorder (train::RunProfiler), so
memcomm-trace, memcomm-view and the advisor read it as they read memcomm-train's traces.

Note [Phases from hooks]: what each hook records, on the thread that runs the training loop.
- A Step range opens at the step's first event (its data-loader wait, forward or optimizer step)
  and closes when an optimizer's step() returns (torch's global optimizer step hooks). Ids count
  from 1, as the trainer's.
- Forward is the outermost module call only. Until the first optimizer step, torch's global module
  hooks count the nesting depth per thread, and a call at depth 0 into a module that has parameters
  is a forward (so the loss function's module is not one). At that step the global hooks go, and
  the modules found (the model; both of a GAN's) get hooks of their own: the rest of the run pays
  nothing for the submodules' calls. profile(model=...) names the modules from the start.
- Backward is a call of torch.autograd.backward (what Tensor.backward calls): start() wraps that
  entry point and stop() puts it back. The wrapper is one Python call around the whole backward, on
  the thread that asked for it, and it ends after autograd's final callbacks (DDP's, which wait for
  the last bucket and write the gradients). A tensor hook on the forward's output and a final
  callback would also find it, but cost about 100 us a step between them on this project's 2-core
  machine, against some 20 us for the wrapper (bench/results/python-cpu.md). With gradient accumulation every backward is its own range;
  one inside another (a backward during a backward) is part of the outer one.
- A range still open when the next phase begins (a backward or step() that raised) is closed
  first, so ranges always nest.
Allocations are labelled while a phase runs (Note [Memory categories] in trainer/src/profiling.cpp):
input in the loader wait, activation in forward and backward (autograd allocates parameters'
gradients in the same kernels as the activations' gradients, so the two cannot be told apart when
they are allocated), optimizer state in step(), communication buffer inside collectives; memcomm.category() labels the script's own code (its model building).

Note [Nothing left after stop]: stop() removes every module and optimizer hook it added and puts
torch.autograd.backward back.
What the script holds (the loader wrapper, a DDP comm hook, memcomm.dist calls) checks one
module global and calls straight through while no profiler runs.
"""
import contextlib
import functools
import itertools
import os
import threading
import zlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from memcomm import _memcomm

_PHASE = _memcomm.phase_names()
_CATEGORY = _memcomm.category_names()
_OP = _memcomm.coll_op_names()
_DTYPE = _memcomm.dtype_names()
_STEP, _FORWARD, _BACKWARD, _OPTIMIZER, _DATA_WAIT = (
    _PHASE["step"], _PHASE["forward"], _PHASE["backward"], _PHASE["optimizer"], _PHASE["data_wait"])
_KEEP = -1  # phase_begin/phase_end: leave the memory label as it is
_ACTIVATION, _OPT_STATE, _INPUT, _COMM_BUFFER = (
    _CATEGORY["activation"], _CATEGORY["optimizer_state"], _CATEGORY["input"], _CATEGORY["comm_buffer"])
_TORCH_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
                torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64"}

_now = _memcomm.now_ns
_exchange = _memcomm.exchange_category

ModelArg = Union[None, torch.nn.Module, List[torch.nn.Module]]

_current: Optional["Profiler"] = None   # the running profiler (the recorder is process-wide)
_control = threading.Lock()             # start/stop


def dtype_code(dtype: torch.dtype) -> int:
    """The trace's code of a tensor element type (0, "unknown", for types it has no name for)."""
    return _DTYPE.get(_TORCH_DTYPE.get(dtype, "unknown"), 0)


class _ThreadState:
    """What one training thread has open."""
    __slots__ = ("generation", "stack", "step_open", "depth", "fwd_module", "in_backward")

    def __init__(self, generation: int):
        self.generation = generation
        self.stack: List[Tuple[int, int, int]] = []   # open (phase, id, label to restore)
        self.step_open = False
        self.depth = 0                                 # module call nesting (global hooks)
        self.fwd_module: Any = None
        self.in_backward = False


def _check_trace_dir(trace: str) -> None:
    directory = os.path.dirname(os.path.abspath(trace))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"profile(trace={trace!r}): no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"profile(trace={trace!r}): cannot create files in {directory!r}")


def _dist_identity() -> Tuple[int, int, int]:
    """(rank, world, local rank): torch.distributed's when initialised, else one process."""
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        return rank, dist.get_world_size(), int(os.environ.get("LOCAL_RANK", rank))
    return 0, 1, 0


def _comm_device() -> torch.device:
    """Where the default group's collectives take their tensors (NCCL: the current GPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _agree_and_measure_clock(ok: bool, rounds: int = 8) -> int:
    """Every rank says whether its recorder started, then each rank's clock offset to rank 0 is
    measured by round trips. Note [Clock offsets at rendezvous] (trainer/include/memcomm/train/
    comm.hpp) does the same in C++: ranks that read rank 0's clock (Note [One clock per host]) skip
    the probes. Raises on every rank if any rank failed, so none starts training alone."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _comm_device()
    domain = 0 if os.environ.get("MEMCOMM_CLOCK_PROBE") == "1" else _signed64(_memcomm.clock_domain_id())
    mine = torch.tensor([int(ok), domain], dtype=torch.int64, device=dev)
    every = [torch.zeros(2, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(every, mine)
    table = [t.tolist() for t in every]
    failed = [r for r, (good, _) in enumerate(table) if not good]
    if failed:
        raise RuntimeError(f"memcomm.profile could not start on rank(s) {failed}; no rank records")
    offset = 0
    for peer in range(1, world):
        if table[peer][1] != 0 and table[peer][1] == table[0][1]:
            continue  # one clock: offset 0
        if rank == 0:
            _answer_probes(peer, rounds, dev)
        elif rank == peer:
            offset = _send_probes(rounds, dev)
    return offset


def _answer_probes(peer: int, rounds: int, dev: torch.device) -> None:
    buf = torch.zeros(2, dtype=torch.int64, device=dev)
    for _ in range(rounds):
        dist.recv(buf, peer)
        t1 = _now()
        buf.copy_(torch.tensor([t1, _now()], dtype=torch.int64))
        dist.send(buf, peer)


def _send_probes(rounds: int, dev: torch.device) -> int:
    buf = torch.zeros(2, dtype=torch.int64, device=dev)
    probes = []
    for _ in range(rounds):
        t0 = _now()
        dist.send(buf, 0)
        dist.recv(buf, 0)
        t3 = _now()
        t1, t2 = buf.tolist()
        probes.append((t0, t1, t2, t3))
    return _memcomm.estimate_clock_offset(probes)[0]


class Profiler:
    """Records this process's training into memcomm's trace format and/or live stream.

    trace: file name; each rank writes NAME.rankR.mct beside it (its folder must exist).
    live:  "HOST:PORT" where memcomm-view listens (memcomm-view --listen); the rank connects and
           reconnects in the background, so a viewer that is absent or goes away never blocks training.
    model: the module (or list of modules) whose forward calls are forwards; None: the outermost
           calls into modules with parameters, found during the first step (Note [Phases from hooks]).
    cupti: "auto" (GPU activity when CUDA is in use), "on" or "off".
    clock_sync: estimate each rank's clock offset over the process group at start (every rank must
           start its profiler then, as for any collective).

    start() raises before anything is recorded when the trace folder is missing or read-only, the
    live address is malformed, or another profiler runs. Thread safe: any thread may train, start or
    stop; hooks keep each thread's phases apart.
    """

    def __init__(self, trace: Optional[Union[str, os.PathLike]] = None, live: Optional[str] = None, *,
                 model: ModelArg = None, cupti: str = "auto", clock_sync: bool = True):
        if trace is None and live is None:
            raise ValueError("profile() needs trace=FILE, live='HOST:PORT' or both")
        if trace is not None and not isinstance(trace, (str, os.PathLike)):
            raise TypeError(f"trace must be a file name (str or os.PathLike), got {type(trace).__name__}")
        if live is not None and not isinstance(live, str):
            raise TypeError(f"live must be a 'HOST:PORT' string, got {type(live).__name__}")
        models = [model] if isinstance(model, torch.nn.Module) else list(model or [])
        if model is not None and (not models or not all(isinstance(m, torch.nn.Module) for m in models)):
            raise TypeError(f"model must be a torch.nn.Module or a list of them, got {type(model).__name__}")
        if cupti not in ("auto", "on", "off"):
            raise ValueError(f"cupti must be 'auto', 'on' or 'off', got {cupti!r}")
        self._trace = os.fspath(trace) if trace is not None else ""
        self._live = live or ""
        self._models = models
        self._roots: List[torch.nn.Module] = []      # outermost modules the global hooks found
        self._global_handles: List[Any] = []
        self._hook_lock = threading.Lock()
        self._cupti = cupti
        self._clock_sync = clock_sync
        self._run: Any = None
        self._handles: List[Any] = []
        self._generation = 0
        self._steps = itertools.count(1)
        self._tls = threading.local()
        self._seq: Dict[int, Iterator[int]] = {}
        self._comms: Dict[Any, int] = {}
        self._comm_lock = threading.Lock()
        self.rank, self.world = 0, 1
        self.result: Tuple[int, int] = (0, 0)
        self._collector_ns = 0

    # --- control ---
    @property
    def active(self) -> bool:
        return _current is self

    @property
    def trace_file(self) -> Optional[str]:
        """The file this rank writes (None without trace=)."""
        return _memcomm.rank_trace_path(self._trace, self.rank) if self._trace else None

    def start(self) -> "Profiler":
        """Starts recording and installs the hooks. Raises if it cannot record (see the class)."""
        global _current
        with _control:
            if _current is not None:
                raise RuntimeError("a memcomm profiler is already running in this process; stop() it first")
            self._comms.clear()
            self._seq.clear()
            self._open_recorder()
            try:
                self._comm_index(None)
                self._generation += 1
                self._install_hooks()
            except BaseException:
                for h in self._handles + self._global_handles:
                    h.remove()
                self._handles.clear()
                self._global_handles.clear()
                self._run.finish()
                self._run = None
                raise
            _current = self
        return self

    def stop(self) -> Tuple[int, int]:
        """Removes every hook (Note [Nothing left after stop]), closes this thread's open phases and
        the trace. Returns (events recorded, events dropped). Safe to call twice."""
        global _current
        with _control:
            if _current is not self:
                return self.result
            _current = None
            with self._hook_lock:
                for h in self._handles + self._global_handles:
                    h.remove()
                self._handles.clear()
                self._global_handles.clear()
            st = getattr(self._tls, "state", None)
            if st is not None and st.generation == self._generation:
                self._close_all(st)
            self.result = tuple(self._run.finish())
            self._collector_ns = self._run.collector_cpu_ns()
            self._run = None
        return self.result

    def __enter__(self) -> "Profiler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def counter(self, name: str, value: float) -> None:
        """Records a named value (loss, samples/s, learning rate) at this moment."""
        run = self._run  # stop() may clear it meanwhile: then the call is a no-op ("has stopped")
        if run is not None:
            with contextlib.suppress(RuntimeError):
                run.counter(str(name), float(value))

    def collector_cpu_ns(self) -> int:
        """CPU time the recorder's background thread used: the profiler's own cost."""
        return self._run.collector_cpu_ns() if self._run is not None else self._collector_ns

    def _open_recorder(self) -> None:
        if self._trace:
            _check_trace_dir(self._trace)
        self.rank, self.world, local_rank = _dist_identity()
        on_gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
        device = torch.cuda.current_device() if on_gpu else -1
        error: Optional[BaseException] = None
        try:
            self._run = _memcomm.RunProfiler(self._trace, self._live, self.rank, self.world, local_rank,
                                             self._cupti, on_gpu, device)
        except Exception as e:  # noqa: BLE001 (re-raised below, after the other ranks know)
            error = e
        if self.world > 1 and self._clock_sync:
            try:
                offset = _agree_and_measure_clock(error is None)
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

    # --- hooks ---
    def _install_hooks(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim
        add = self._handles.append
        self._roots = []
        if self._models:
            self._hook_modules(self._models)
        else:
            self._global_handles += [nn_module.register_module_forward_pre_hook(self._global_pre),
                                     nn_module.register_module_forward_hook(self._global_post, always_call=True)]
        self._wrap_backward()
        add(optim.register_optimizer_step_pre_hook(self._optimizer_pre))
        add(optim.register_optimizer_step_post_hook(self._optimizer_post))

    def _hook_modules(self, modules: List[torch.nn.Module]) -> None:
        for m in modules:
            self._handles.append(m.register_forward_pre_hook(self._model_pre))
            self._handles.append(m.register_forward_hook(self._model_post, always_call=True))

    def _narrow_hooks(self) -> None:
        """Note [Phases from hooks]: from the first step on, only the modules found are hooked."""
        with self._hook_lock:
            if not self._global_handles or _current is not self:
                return
            for h in self._global_handles:
                h.remove()
            self._global_handles.clear()
            self._hook_modules(self._roots)

    def _state(self) -> _ThreadState:
        st = getattr(self._tls, "state", None)
        if st is None or st.generation != self._generation:
            st = self._tls.state = _ThreadState(self._generation)
        return st


    def _open(self, st: _ThreadState, phase: int, ident: int, category: int, ts: int = 0) -> None:
        st.stack.append((phase, ident, _memcomm.phase_begin(phase, ident, category, ts)))

    def _close(self, st: _ThreadState, phase: int) -> None:
        """Closes `phase` and whatever opened inside it and never closed (an exception)."""
        for i in range(len(st.stack) - 1, -1, -1):
            if st.stack[i][0] == phase:
                while len(st.stack) > i:
                    p, ident, restore = st.stack.pop()
                    _memcomm.phase_end(p, ident, restore)
                return

    def _close_all(self, st: _ThreadState) -> None:
        if st.stack:
            self._close(st, st.stack[0][0])
        st.step_open = False

    def _ensure_step(self, st: _ThreadState, ts: int = 0) -> None:
        if not st.step_open:
            st.step_open = True
            self._open(st, _STEP, next(self._steps), _KEEP, ts)

    # Forward: one module (profile(model=...)).
    def _model_pre(self, module: torch.nn.Module, args: Any) -> None:
        if _in_backward():
            return
        st = self._state()
        if torch.is_grad_enabled():  # an evaluation's forward opens no step
            self._ensure_step(st)
        self._open(st, _FORWARD, 0, _ACTIVATION)

    def _model_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _in_backward():
            return
        st = self._state()
        self._close(st, _FORWARD)

    # Forward: the outermost module call with parameters (global hooks).
    def _global_pre(self, module: torch.nn.Module, args: Any) -> None:
        st = self._state()
        st.depth += 1
        if st.depth == 1 and next(module.parameters(), None) is not None and not _in_backward():
            st.fwd_module = module
            if not any(module is r for r in self._roots):
                self._roots.append(module)
            if torch.is_grad_enabled():
                self._ensure_step(st)
            self._open(st, _FORWARD, 0, _ACTIVATION)

    def _global_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        st = self._state()
        st.depth = max(st.depth - 1, 0)
        if st.depth == 0 and st.fwd_module is module:
            st.fwd_module = None
            self._close(st, _FORWARD)

    # Backward: a call of torch.autograd.backward (Note [Phases from hooks]).
    def _wrap_backward(self) -> None:
        original = torch.autograd.backward

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if _current is not self:
                return original(*args, **kwargs)
            st = self._state()
            if st.in_backward:
                return original(*args, **kwargs)
            st.in_backward = True
            self._open(st, _BACKWARD, 0, _ACTIVATION)
            try:
                return original(*args, **kwargs)
            finally:
                st.in_backward = False
                self._close(st, _BACKWARD)

        torch.autograd.backward = backward
        self._handles.append(_Restore(original, backward))

    # Optimizer: the step's last phase.
    def _optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        st = self._state()
        self._ensure_step(st)
        self._open(st, _OPTIMIZER, 0, _OPT_STATE)

    def _optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        st = self._state()
        self._close(st, _STEP)
        st.step_open = False
        if self._global_handles:
            self._narrow_hooks()

    # Data-loader wait (memcomm.loader).
    def _data_wait(self, begin_ns: int) -> None:
        st = self._state()
        self._ensure_step(st, begin_ns)
        _memcomm.phase_span(_DATA_WAIT, 0, begin_ns, _now())

    # Collectives (memcomm.comm_hook, memcomm.dist).
    def _comm_index(self, group: Any) -> int:
        """The trace's communicator index of `group` (None: the default group), with its CommInfo."""
        key = id(group) if group is not None else None
        index = self._comms.get(key)
        if index is not None:
            return index
        with self._comm_lock:
            if key not in self._comms:
                self._comms[key] = self._new_comm(group)
            return self._comms[key]

    def _new_comm(self, group: Any) -> int:
        index = len(self._comms)
        if index > 254:
            raise RuntimeError("memcomm records at most 255 process groups")
        self._seq[index] = itertools.count()
        if dist.is_available() and dist.is_initialized():
            ranks = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)
            size, rank = len(ranks), dist.get_rank(group) if group is not None else dist.get_rank()
            _memcomm.comm_info(index, size, rank, zlib.crc32(repr(sorted(ranks)).encode()) | (1 << 32))
        return index

    def next_collective(self, group: Any) -> Tuple[int, int]:
        """(communicator index, sequence number) for a collective about to be issued on `group`."""
        index = self._comm_index(group)
        return index, next(self._seq[index])


class _Restore:
    """Puts torch.autograd.backward back at stop() (unless something replaced it since; then the
    wrapper stays and passes calls straight through)."""

    def __init__(self, original: Callable[..., Any], wrapper: Callable[..., Any]):
        self._original, self._wrapper = original, wrapper

    def remove(self) -> None:
        if torch.autograd.backward is self._wrapper:
            torch.autograd.backward = self._original


def _in_backward() -> bool:
    """True inside autograd's backward: a module called there is activation checkpointing's
    recomputation, part of the backward rather than a forward of its own."""
    return torch._C._current_graph_task_id() != -1


def profile(trace: Optional[Union[str, os.PathLike]] = None, live: Optional[str] = None, *,
            model: ModelArg = None, cupti: str = "auto", clock_sync: bool = True) -> Profiler:
    """A Profiler, for `with memcomm.profile(trace="run.mct"):` (the with block starts and stops it;
    an exception inside still closes the trace). See Profiler for the arguments."""
    return Profiler(trace, live, model=model, cupti=cupti, clock_sync=clock_sync)


def current() -> Optional[Profiler]:
    """The running profiler, or None."""
    return _current


class _Loader:
    """Iterates like the loader it wraps; while a profiler runs, each batch's wait is a DataWait."""

    def __init__(self, loader: Iterable[Any]):
        self._loader = loader

    def __iter__(self) -> Iterator[Any]:
        it = iter(self._loader)
        while True:
            p = _current
            if p is None:
                try:
                    yield next(it)
                except StopIteration:
                    return
                continue
            prev = _exchange(_INPUT)
            begin = _now()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                _exchange(prev)
            p._data_wait(begin)
            yield batch

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def loader(data_loader: Iterable[Any]) -> Iterable[Any]:
    """Wraps a DataLoader (any iterable): `for x, y in memcomm.loader(train_loader):` records the time
    each batch took to arrive as the step's data_wait phase. Costs nothing while no profiler runs."""
    if not hasattr(data_loader, "__iter__"):
        raise TypeError(f"loader() takes an iterable such as a DataLoader, got {type(data_loader).__name__}")
    return _Loader(data_loader)


@contextlib.contextmanager
def category(name: str) -> Iterator[None]:
    """Labels this thread's allocations in the trace while the block runs:
    `with memcomm.category("parameter"): model = Net()`. Names: parameter, gradient,
    optimizer_state, activation, temporary, comm_buffer, input."""
    if name not in _CATEGORY or name == "unknown":
        raise ValueError(f"category must be one of {sorted(k for k in _CATEGORY if k != 'unknown')}, got {name!r}")
    prev = _exchange(_CATEGORY[name])
    try:
        yield
    finally:
        _exchange(prev)


def record_collective(p: Profiler, op: str, dtype: int, nbytes: int, group: Any, bucket: int,
                      call: Callable[[], Any], async_op: bool) -> Any:
    """Runs `call` (a collective on `group`) and records it on `p`: issued when called, ended when it
    returned or, with async_op, when its work completed."""
    comm, seq = p.next_collective(group)
    code = _OP[op]
    prev = _exchange(_COMM_BUFFER)
    begin = _now()
    try:
        work = call()
    finally:
        _exchange(prev)
    if async_op and work is not None:
        def done(_: Any) -> None:
            _memcomm.record_collective(code, dtype, nbytes, comm, seq, bucket, begin, _now())
        work.get_future().add_done_callback(done)
    else:
        _memcomm.record_collective(code, dtype, nbytes, comm, seq, bucket, begin, _now())
    return work


_WIRE = {"allreduce": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def comm_hook(hook: Union[str, Callable[..., Any]] = "allreduce", *, wire_dtype: Optional[torch.dtype] = None
              ) -> Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]:
    """A DDP communication hook that records each bucket's all-reduce (issue, end, bytes on the wire,
    bucket index, wire type) and then does what `hook` does:

        ddp.register_comm_hook(None, memcomm.comm_hook())          # DDP's default all-reduce
        ddp.register_comm_hook(None, memcomm.comm_hook("fp16"))    # torch's fp16_compress_hook
        ddp.register_comm_hook(state, memcomm.comm_hook(my_hook, wire_dtype=torch.float16))

    `hook` is "allreduce", "fp16", "bf16" or any hook(state, bucket) -> Future; `wire_dtype` is the
    element type it sends (default: the bucket's, or the compression's)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if isinstance(hook, str):
        if hook not in _WIRE:
            raise ValueError(f"comm_hook: hook must be 'allreduce', 'fp16', 'bf16' or a callable, got {hook!r}")
        wire_dtype = wire_dtype or _WIRE[hook]
        inner = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                 "bf16": default_hooks.bf16_compress_hook}[hook]
    elif callable(hook):
        inner = hook
    else:
        raise TypeError(f"comm_hook: hook must be a name or a callable, got {type(hook).__name__}")
    if wire_dtype is not None and not isinstance(wire_dtype, torch.dtype):
        raise TypeError(f"comm_hook: wire_dtype must be a torch.dtype, got {type(wire_dtype).__name__}")

    # DDP checks these two annotations (GradBucket in, Future[Tensor] out) when the hook is registered.
    def memcomm_comm_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        p = _current
        if p is None:
            return inner(state, bucket)
        buf = bucket.buffer()
        wire = wire_dtype or buf.dtype
        nbytes = buf.numel() * wire.itemsize
        group = state if isinstance(state, dist.ProcessGroup) else None
        comm, seq = p.next_collective(group)
        prev = _exchange(_COMM_BUFFER)
        begin = _now()
        try:
            fut = inner(state, bucket)
        finally:
            _exchange(prev)
        args = (_OP["all_reduce"], dtype_code(wire), nbytes, comm, seq, bucket.index(), begin)
        fut.add_done_callback(lambda _: _memcomm.record_collective(*args, _now()))
        return fut

    return memcomm_comm_hook
