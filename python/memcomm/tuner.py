"""memcomm.tune: memcomm-tune's search with the user's own train step as the probe.

    import memcomm, torch
    memcomm.use_allocator("cpu", memory_limit=512 << 20)   # before the model: its cap is the limit
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    result = memcomm.tune(model, opt, lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]),
                          lambda b: next_batch_of(b), global_batch=256)
    rec = result["recommendation"]        # {"micro_batch", "accum", "bucket_mb", ...} or None
    ddp = DDP(model, bucket_cap_mb=rec["bucket_mb"])

The search and the verification of its winner are memcomm-tune's own (memcomm_tuner_core through
memcomm._memcomm.tune_search), and the result is the document memcomm-tune --json writes. What
Python adds is the probe: steps of `loss_fn` on batches from `make_batch`, on every rank of the
process group, under the allocator's cap, with out-of-memory caught, agreed and recovered.

Note [Agreeing on an out-of-memory from Python]: memcomm-tune's Note [Agreeing on an out-of-memory]
(tuner/src/probe.cpp), with one change that needs nothing from the user's model: no collective runs
inside forward or backward. A probe step runs its micro-steps (make_batch, loss_fn, backward) on the
plain module, so nothing there waits for another rank; a rank that runs out of memory stops its
micro-steps where it is. Every rank then joins one all-reduce MAX of a flag (who failed, in which
phase). Only when nobody failed do the ranks all-reduce their gradients, bucketed as DDP does, and
step the optimizer, then agree again (an out-of-memory there, and whether to take another step). So
the collectives each rank issues do not depend on where any rank failed: the failed rank owes its
peers nothing but the flag, and nobody waits forever. After a failed probe every rank restores the
model and optimizer from the copy taken when the probe began, and empties the allocator's cache.
An exception that is not an out-of-memory goes through the same flag: the rank that raised it
raises it again after the agreement, the others raise RuntimeError naming that rank, and the model
is restored on all of them.

Note [State copies outside the cap]: the copy a probe restores from lives in numpy memory, which
no torch allocator serves, as memcomm-tune keeps its copy in host bytes: under the cap it would
take room from the probe it protects. Restoring writes into the existing tensors, so recovering from
an out-of-memory allocates nothing; optimizer state that a probe created is dropped.

Note [Gradient buckets from Python]: with several ranks the tuner holds DDP's buckets itself (a
flat tensor per bucket, parameters in reverse order, the first bucket 1 MiB and the others
bucket_mb), alive for the whole tuning as DDP's are for the whole run, and rebuilt, with the change
agreed, when a probe asks for another size. Gradients are copied in, all-reduced, averaged and
copied back, as DDP does with gradient_as_bucket_view=False (its default). Communication is not
overlapped with backward here, so the step time counts all of it as exposed.

Probes otherwise follow memcomm-tune's Notes [A first step before the probes], [Steady-state
probes] and [Probing long accumulations] (tuner/src/probe.cpp). Batches come from make_batch when
a micro-step asks, so there is no loader ring to allow for (loader_allowance is 0).
"""
import copy
import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from memcomm import _memcomm
from memcomm import allocator as _allocator

__all__ = ["tune", "TuneError"]

_SEARCHES = ("memcomm", "lightning", "grid")
_PHASES = ("?", "data", "forward", "backward", "communication", "optimizer", "buckets", "evaluation")
_FIRST_BUCKET_BYTES = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20) if dist.is_available() else 1 << 20
_MAX_GLOBAL_BATCH = 1 << 40
_MAX_ANY_MICRO_BATCH_CANDIDATES = 1 << 20
_MAX_BUCKET_MB = 1e6


class TuneError(RuntimeError):
    """Another rank raised an exception in its step; this rank stops with it (Note [Agreeing on an
    out-of-memory from Python])."""


# ---------------------------------------------------------------------------------------------
# Arguments


def _check_int(name: str, value: Any, low: int, high: Optional[int] = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _check_float(name: str, value: Any, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not low <= value <= high:  # also rejects NaN
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value}")
    return float(value)


def _check_callables(model: Any, optimizer: Any, loss_fn: Any, make_batch: Any, evaluate: Any) -> None:
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError("pass the module before wrapping it in DistributedDataParallel: memcomm.tune all-reduces "
                        "the gradients itself, bucketed as DDP does, and DDP's own buckets would be counted twice")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    for name, f in (("loss_fn", loss_fn), ("make_batch", make_batch)):
        if not callable(f):
            raise TypeError(f"{name} must be callable, got {type(f).__name__}")
    if evaluate is not None and not callable(evaluate):
        raise TypeError(f"evaluate must be callable or None, got {type(evaluate).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no parameter that requires a gradient: there is no training step to tune")


@dataclass
class _Options:
    global_batch: int
    search: str = "memcomm"
    fit_only: bool = False
    any_micro_batch: bool = False
    max_trials: int = 24
    measured_steps: int = 3
    probe_seconds: float = 0.5
    accum_cap: int = 4
    bucket_mb: float = 25.0
    buckets: List[float] = field(default_factory=lambda: [1.0, 5.0, 25.0, 100.0])
    verify_steps: int = 50


def _check_options(o: _Options) -> _Options:
    """The checks memcomm-tune's flags make, with Python's exceptions."""
    _check_int("global_batch", o.global_batch, 1, _MAX_GLOBAL_BATCH)
    if o.search not in _SEARCHES:
        raise ValueError(f"search must be one of {', '.join(_SEARCHES)}, got {o.search!r}")
    for name in ("fit_only", "any_micro_batch"):
        if not isinstance(getattr(o, name), bool):
            raise TypeError(f"{name} must be a bool, got {type(getattr(o, name)).__name__}")
    if o.any_micro_batch and not o.fit_only:
        raise ValueError("any_micro_batch needs fit_only=True: a recommended micro-batch must divide the per-rank batch")
    _check_int("max_trials", o.max_trials, 1, 1000)
    _check_int("measured_steps", o.measured_steps, 3, 1000)
    o.probe_seconds = _check_float("probe_seconds", o.probe_seconds, 0.0, 3600.0)
    _check_int("accum_cap", o.accum_cap, 2, 1 << 20)
    o.bucket_mb = _check_float("bucket_mb", o.bucket_mb, 1e-6, _MAX_BUCKET_MB)
    if isinstance(o.buckets, (str, bytes)) or not isinstance(o.buckets, Sequence):
        raise TypeError(f"buckets must be a sequence of sizes in MiB, got {type(o.buckets).__name__}")
    o.buckets = [_check_float("buckets[]", b, 1e-6, _MAX_BUCKET_MB) for b in o.buckets]
    _check_int("verify_steps", o.verify_steps, 0, 1 << 30)
    return o


def _is_oom(e: BaseException) -> bool:
    """Out-of-memory as memcomm-tune counts it (memcomm/tuner/oom.hpp), plus Python's MemoryError."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and _memcomm.is_oom_message(str(e))


# ---------------------------------------------------------------------------------------------
# The ranks


class _Group:
    """The process group's rank, world and the agreements (world 1: no collective at all)."""

    def __init__(self, process_group: Any, device: torch.device):
        self.pg = process_group
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world = dist.get_rank(process_group), dist.get_world_size(process_group)
            on_gpu = dist.get_backend(process_group) == "nccl"
        elif process_group is not None:
            raise ValueError("process_group was given but torch.distributed is not initialized")
        else:
            self.rank, self.world, on_gpu = 0, 1, False
        self.device = device if on_gpu else torch.device("cpu")
        # Right after an out-of-memory, agreeing must not need memory: the flags live in numpy memory
        # (no torch allocator) and, with NCCL, in one device tensor made now.
        self.host = np.zeros(3, dtype=np.float64)
        self.flags = torch.from_numpy(self.host) if not on_gpu else torch.zeros(3, dtype=torch.float64, device=device)

    def max(self, values: List[float]) -> List[float]:
        """Every value's largest over the ranks, in one all-reduce."""
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.pg)
        return t.tolist()

    def agree(self, oom_phase: str, error_phase: str, more: bool) -> "_Agreed":
        """One all-reduce MAX (Note [Agreeing on an out-of-memory from Python]). A failure goes over as
        (world - rank) * 8 + phase, so the MAX names the lowest rank that failed and its phase."""
        def code(phase: str) -> float:
            return float((self.world - self.rank) * 8 + _PHASES.index(phase)) if phase else 0.0
        self.host[:] = (code(oom_phase), 1.0 if more else 0.0, code(error_phase))
        if self.world > 1:
            if self.flags.is_cuda:
                self.flags.copy_(torch.from_numpy(self.host))
            dist.all_reduce(self.flags, op=dist.ReduceOp.MAX, group=self.pg)
            if self.flags.is_cuda:
                torch.from_numpy(self.host).copy_(self.flags)
        v = self.host.tolist()
        return _Agreed(self._decode(int(v[0])), v[1] > 0, self._decode(int(v[2])))

    def _decode(self, c: int) -> Optional[Tuple[int, str]]:
        return (self.world - c // 8, _PHASES[c % 8]) if c > 0 else None

    def where(self, failed: Tuple[int, str]) -> str:
        return f"rank {failed[0]} {failed[1]}" if self.world > 1 else failed[1]


@dataclass
class _Agreed:
    oom: Optional[Tuple[int, str]]     # (lowest rank that ran out of memory, its phase)
    more: bool                         # some rank wants another step
    error: Optional[Tuple[int, str]]   # (lowest rank that raised another exception, its phase)


# ---------------------------------------------------------------------------------------------
# Memory


class _Memory:
    """The allocator the limit is enforced by, and its peaks (memcomm's CPU allocator; on CUDA,
    torch.cuda's figures, which memcomm's CUDA allocator also fills when it is installed)."""

    def __init__(self, device: torch.device, memory_limit: Optional[int]):
        self.device = device
        if memory_limit is not None:
            _check_int("memory_limit", memory_limit, 1)
        self.limit = self._cpu_limit(memory_limit) if device.type == "cpu" else self._cuda_limit(memory_limit)

    @staticmethod
    def _cpu_limit(memory_limit: Optional[int]) -> int:
        cap = _allocator._installed.get("cpu", {}).get("capacity", 0)
        if cap == 0:
            raise RuntimeError("memcomm.tune on the CPU needs memcomm.use_allocator('cpu', memory_limit=...) before "
                               "the model is built: its cap makes the limit real")
        if memory_limit is not None and memory_limit != cap:
            raise ValueError(f"memory_limit {memory_limit} differs from the cap memcomm's CPU allocator enforces "
                             f"({cap}); leave it out, or install the allocator with the same limit")
        return cap

    def _cuda_limit(self, memory_limit: Optional[int]) -> int:
        cap = _allocator._installed.get("cuda", {}).get("capacity", 0)
        if cap:
            if memory_limit is not None and memory_limit != cap:
                raise ValueError(f"memory_limit {memory_limit} differs from the cap memcomm's CUDA allocator "
                                 f"enforces ({cap}); leave it out, or install the allocator with the same limit")
            return cap
        free, total = torch.cuda.mem_get_info(self.device)
        limit = memory_limit if memory_limit is not None else free + torch.cuda.memory_reserved(self.device)
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), self.device)
        self.capped_torch = True
        return limit

    capped_torch = False  # torch's CUDA allocator was capped here, and is uncapped by close()

    def close(self) -> None:
        """Gives torch's CUDA allocator its whole device back when tune() capped it."""
        self.release_cache()
        if self.capped_torch:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def clock(self) -> float:
        """Seconds, once the device's queued work is done (CUDA kernels run after their launch)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def release_cache(self) -> None:
        if self.device.type == "cpu":
            _allocator.empty_cache("cpu")
        else:
            torch.cuda.empty_cache()

    def reset_peaks(self) -> None:
        if self.device.type == "cpu":
            _allocator.reset_peak_memory_stats("cpu")
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> Tuple[int, int]:
        """(peak allocated, peak reserved) bytes since reset_peaks()."""
        s = _allocator.memory_stats("cpu") if self.device.type == "cpu" else torch.cuda.memory_stats(self.device)
        return int(s["allocated_bytes.all.peak"]), int(s["reserved_bytes.all.peak"])


# ---------------------------------------------------------------------------------------------
# State copies (Note [State copies outside the cap])


def _host_bytes(t: torch.Tensor) -> np.ndarray:
    flat = t.detach().reshape(-1).view(torch.uint8)
    return (flat.cpu() if flat.is_cuda else flat).numpy().copy()


def _write_back(t: torch.Tensor, saved: np.ndarray) -> None:
    with torch.no_grad():
        t.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(saved))


@dataclass
class _SavedTensor:
    data: np.ndarray
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> "_SavedTensor":
        return cls(_host_bytes(t), t.shape, t.dtype, t.device)

    def fits(self, t: Any) -> bool:
        return (isinstance(t, torch.Tensor) and t.shape == self.shape and t.dtype == self.dtype
                and t.device == self.device and t.is_contiguous())

    def restore_into(self, current: Any) -> torch.Tensor:
        """Into `current` when it has the same layout (nothing allocated), else a new tensor."""
        t = current if self.fits(current) else torch.empty(self.shape, dtype=self.dtype, device=self.device)
        _write_back(t, self.data)
        return t


class _State:
    """The model's parameters and buffers and the optimizer's state and hyperparameters."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer
        self.tensors = [_host_bytes(t) for t in self._model_tensors()]
        self.opt_state = {p: {k: _SavedTensor.of(v) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                              for k, v in s.items()} for p, s in optimizer.state.items()}
        self.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]

    def _model_tensors(self) -> List[torch.Tensor]:
        return list(self.model.parameters()) + list(self.model.buffers())

    def restore(self) -> None:
        for t, saved in zip(self._model_tensors(), self.tensors):
            _write_back(t, saved)
        self.model.zero_grad(set_to_none=True)
        state = self.optimizer.state
        for p in [p for p in state if p not in self.opt_state]:
            del state[p]
        for p, saved in self.opt_state.items():
            current = state[p]
            for k in [k for k in current if k not in saved]:
                del current[k]
            for k, v in saved.items():
                current[k] = v.restore_into(current.get(k)) if isinstance(v, _SavedTensor) else copy.deepcopy(v)
        for g, saved in zip(self.optimizer.param_groups, self.groups):
            g.update(copy.deepcopy(saved))


# ---------------------------------------------------------------------------------------------
# Gradient buckets (Note [Gradient buckets from Python])


class _Buckets:
    def __init__(self, params: List[torch.nn.Parameter], bucket_mb: float):
        self.mb = bucket_mb
        self.groups: List[Tuple[torch.Tensor, List[torch.nn.Parameter]]] = []
        cap, first = int(bucket_mb * (1 << 20)), True
        pending: Dict[Tuple[torch.dtype, torch.device], List[torch.nn.Parameter]] = {}
        size: Dict[Tuple[torch.dtype, torch.device], int] = {}
        for p in reversed(params):
            key = (p.dtype, p.device)
            pending.setdefault(key, []).append(p)
            size[key] = size.get(key, 0) + p.numel() * p.element_size()
            if size[key] >= (_FIRST_BUCKET_BYTES if first else cap):
                self._add(pending.pop(key))
                size.pop(key)
                first = False
        for ps in pending.values():
            self._add(ps)

    def _add(self, ps: List[torch.nn.Parameter]) -> None:
        flat = torch.empty(sum(p.numel() for p in ps), dtype=ps[0].dtype, device=ps[0].device)
        self.groups.append((flat, ps))

    def all_reduce(self, group: _Group) -> None:
        """Copies gradients in, all-reduces every bucket, then averages them back into the gradients."""
        with torch.no_grad():
            works = []
            for flat, ps in self.groups:
                self._pack(flat, ps)
                works.append(dist.all_reduce(flat, group=group.pg, async_op=True))
            for w in works:
                w.wait()
            for flat, ps in self.groups:
                flat.div_(group.world)
                self._unpack(flat, ps)

    @staticmethod
    def _pack(flat: torch.Tensor, ps: List[torch.nn.Parameter]) -> None:
        offset = 0
        for p in ps:
            part = flat[offset:offset + p.numel()]
            part.copy_(p.grad.reshape(-1)) if p.grad is not None else part.zero_()
            offset += p.numel()

    @staticmethod
    def _unpack(flat: torch.Tensor, ps: List[torch.nn.Parameter]) -> None:
        offset = 0
        for p in ps:
            if p.grad is not None:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
            offset += p.numel()


# ---------------------------------------------------------------------------------------------
# Steps


@dataclass
class _Plan:
    """How long a probe runs (memcomm-tune's Note [Steady-state probes])."""
    warmup_micro: int = 0       # micro-steps consumed before timing starts
    min_steps: int = 3          # timed steps, at least
    min_seconds: float = 0.0    # timed wall time, at least
    max_steps: int = 3          # timed steps, at most


@dataclass
class _StepTiming:
    early_s: float = 0.0        # the micro-steps before the last, together
    last_s: float = 0.0         # the last micro-step, the all-reduce and the optimizer step
    comm_s: float = 0.0         # the all-reduce alone


@dataclass
class _Outcome:
    timed: List[_StepTiming] = field(default_factory=list)
    oom_where: str = ""         # "" when no rank ran out of memory
    oom_rank: int = -1


@dataclass
class _Failure:
    """A phase of this rank's step failed: an out-of-memory (error None) or another exception. It is
    returned, not raised, and holds no out-of-memory exception: that one's traceback would keep the
    failed step's tensors alive through the agreement and the recovery."""
    phase: str
    error: Optional[BaseException] = None


def _failure(phase: str, e: BaseException) -> _Failure:
    return _Failure(phase, None if _is_oom(e) else e)


class _Runner:
    """One rank's side of the probes: the user's step, the agreements, the state copies."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable,
                 make_batch: Callable[[int], Any], group: _Group, memory: _Memory, o: _Options):
        self.model, self.optimizer, self.loss_fn, self.make_batch = model, optimizer, loss_fn, make_batch
        self.group, self.memory, self.o = group, memory, o
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buckets: Optional[_Buckets] = None
        self.saved: Optional[_State] = None   # the copy the current probe restores from

    # -- one step of `accum` micro-steps

    def _micro_steps(self, b: int, accum: int, t: _StepTiming) -> Optional[_Failure]:
        """Data, forward and backward, with no collective inside."""
        for k in range(accum):
            start = self.memory.clock()
            phase = ["data"]
            try:
                self._forward_backward(b, accum, phase)
            except Exception as e:  # noqa: BLE001  (agreed, then re-raised: Note [Agreeing on ...])
                return _failure(phase[0], e)
            if k < accum - 1:
                t.early_s += self.memory.clock() - start
            else:
                t.last_s += self.memory.clock() - start
        return None

    def _forward_backward(self, b: int, accum: int, phase: List[str]) -> None:
        # Its own frame: the batch and the graph go with it when an out-of-memory unwinds it.
        batch = self.make_batch(b)
        phase[0] = "forward"
        loss = self.loss_fn(self.model, batch)
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"loss_fn must return a tensor, got {type(loss).__name__}")
        phase[0] = "backward"
        (loss / accum).backward()

    def _sync_and_step(self, t: _StepTiming) -> Optional[_Failure]:
        """The gradient all-reduce (every rank, nobody having failed) and the optimizer step."""
        phase = "communication"
        start = self.memory.clock()
        try:
            if self.buckets is not None:
                self.buckets.all_reduce(self.group)
                t.comm_s = self.memory.clock() - start
            phase = "optimizer"
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        except Exception as e:  # noqa: BLE001
            return _failure(phase, e)
        t.last_s += self.memory.clock() - start
        return None

    def agree(self, failure: Optional[_Failure], more: bool) -> _Agreed:
        """Joins the agreement. When some rank raised an exception that is not an out-of-memory, every
        rank restores the probe's state and raises: its own exception, or TuneError naming the rank."""
        oom = failure.phase if failure is not None and failure.error is None else ""
        err = failure.phase if failure is not None and failure.error is not None else ""
        a = self.group.agree(oom, err, more)
        if a.error is not None:
            if self.saved is not None:
                self.recover(self.saved)
            if failure is not None and failure.error is not None:
                raise failure.error
            raise TuneError(f"memcomm.tune: {self.group.where(a.error)} raised an exception (see that rank's "
                            "output); this rank stops too")
        return a

    def run_steps(self, b: int, accum: int, plan: _Plan) -> _Outcome:
        """Steps as `plan` says (memcomm-tune's run_steps), two agreements each (Note [Agreeing on an
        out-of-memory from Python]): after the micro-steps, and after the optimizer step, which also
        carries whether any rank wants another step."""
        out, consumed = _Outcome(), 0
        t_timing = self.memory.clock() if plan.warmup_micro == 0 else -1.0
        while True:
            t = _StepTiming()
            a = self.agree(self._micro_steps(b, accum, t), True)
            if a.oom is None:
                failure = self._sync_and_step(t)
                consumed += accum
                more = True
                if t_timing >= 0 and failure is None:
                    out.timed.append(t)
                    n, elapsed = len(out.timed), self.memory.clock() - t_timing
                    more = n < plan.max_steps and (n < plan.min_steps or elapsed < plan.min_seconds)
                a = self.agree(failure, more)
            if a.oom is not None:
                out.oom_rank, out.oom_where = a.oom[0], self.group.where(a.oom)
                return out
            if not a.more:
                return out
            if t_timing < 0 and consumed >= plan.warmup_micro:
                t_timing = self.memory.clock()

    # -- state and buckets

    def save(self) -> _State:
        self.saved = _State(self.model, self.optimizer)
        return self.saved

    def recover(self, state: _State) -> None:
        state.restore()
        self.memory.release_cache()
        self.saved = None

    def set_buckets(self, mb: float) -> Optional[Tuple[int, str]]:
        """Rebuilds the buckets at `mb` MiB, agreed over ranks: None, or (rank, "buckets") for the
        lowest rank that ran out of memory (then every rank keeps, or goes back to, the old layout)."""
        if self.group.world == 1 or (self.buckets is not None and self.buckets.mb == mb):
            return None
        old, failed = self.buckets, ""
        try:
            self.buckets = _Buckets(self.params, mb)
        except Exception as e:  # noqa: BLE001
            if not _is_oom(e):
                raise
            failed = "buckets"
        a = self.group.agree(failed, "", False)
        if a.oom is not None:
            self.buckets = old
        return a.oom


# ---------------------------------------------------------------------------------------------
# Probe and verification: what memcomm._memcomm.tune_search calls


def _step_seconds(timed: List[_StepTiming], measured_accum: int, accum: int) -> float:
    """memcomm-tune's Note [Probing long accumulations]: early micro-steps averaged over every timed
    step, the synchronising last one by its median, scaled to the K asked for."""
    if not timed:
        return 0.0
    lasts = sorted(t.last_s for t in timed)
    early = (sum(t.early_s for t in timed) / ((measured_accum - 1) * len(timed))) if measured_accum > 1 else 0.0
    return (accum - 1) * early + lasts[len(lasts) // 2]


class _Prober:
    def __init__(self, runner: _Runner, o: _Options, verbose: bool, evaluate: Optional[Callable]):
        self.r, self.o, self.verbose, self.evaluate, self.n = runner, o, verbose, evaluate, 0

    def probe(self, q: Dict[str, Any]) -> Dict[str, Any]:
        start = time.perf_counter()
        x = self._measure(q)
        x["wall_s"] = time.perf_counter() - start
        self.n += 1
        self._print(q, x)
        return x

    def _measure(self, q: Dict[str, Any]) -> Dict[str, Any]:
        r, b = self.r, q["micro_batch"]
        x = {"oom": False, "oom_where": "", "oom_rank": -1, "peak_allocated": -1, "peak_reserved": -1, "step_s": 0.0,
             "exposed_comm_s": 0.0, "measured_accum": 0, "wall_s": 0.0, "loader_allowance": 0}
        failed = r.set_buckets(q["bucket_mb"])
        if failed is not None:
            x.update(oom=True, oom_where=r.group.where(failed), oom_rank=failed[0])
            return x
        state = r.save()
        r.memory.release_cache()
        r.memory.reset_peaks()
        accum = min(q["accum"], self.o.accum_cap)
        plan = _Plan(max(accum, 2), q["measured_steps"], self.o.probe_seconds, max(q["measured_steps"], 200))
        out = r.run_steps(b, accum, plan)
        x["measured_accum"] = accum
        if out.oom_where:
            x.update(oom=True, oom_where=out.oom_where, oom_rank=out.oom_rank)
        else:
            alloc, resv = r.memory.peaks()
            exposed = sum(t.comm_s for t in out.timed) / max(1, len(out.timed))
            agreed = r.group.max([_step_seconds(out.timed, accum, q["accum"]), exposed, alloc, resv])
            x.update(step_s=agreed[0], exposed_comm_s=agreed[1], peak_allocated=int(agreed[2]),
                     peak_reserved=int(agreed[3]))
        r.recover(state)
        return x

    def _print(self, q: Dict[str, Any], x: Dict[str, Any]) -> None:
        if not self.verbose or self.r.group.rank != 0:
            return
        head = f"  probe {self.n:>2}: b={q['micro_batch']} K={q['accum']} bucket={q['bucket_mb']:g} MiB: "
        if x["oom"]:
            print(f"{head}out of memory in {x['oom_where']} ({x['wall_s']:.1f} s)", flush=True)
        else:
            print(f"{head}fits, peak reserved {x['peak_reserved'] / 2**20:.1f} MiB, step {x['step_s'] * 1e3:.1f} ms "
                  f"({x['wall_s']:.1f} s)", flush=True)

    def verify(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        """The winner's long run: verify_steps full steps (all K micro-steps), then `evaluate`."""
        r, b, k = self.r, rec["micro_batch"], rec["accum"]
        if self.verbose and r.group.rank == 0:
            print(f"  verifying b={b} K={k}: {self.o.verify_steps} steps"
                  f"{' and an evaluation pass' if self.evaluate else ''}", flush=True)
        v = {"steps": 0, "oom": False, "oom_where": "", "samples_per_s": 0.0, "peak_reserved": -1,
             "peak_allocated": -1, "eval_accuracy": 0.0, "eval_loss": 0.0,
             "evaluated": self.evaluate is not None}
        failed = r.set_buckets(rec["bucket_mb"])
        if failed is not None:
            return dict(v, oom=True, oom_where=r.group.where(failed))
        state = r.save()
        r.memory.release_cache()
        r.memory.reset_peaks()
        start = r.memory.clock()
        out = r.run_steps(b, k, _Plan(0, self.o.verify_steps, 0.0, self.o.verify_steps))
        wall = r.memory.clock() - start
        v.update(steps=len(out.timed), oom=bool(out.oom_where), oom_where=out.oom_where)
        if not out.oom_where:
            v["samples_per_s"] = self.o.verify_steps * b * k * r.group.world / r.group.max([wall])[0]
            self._evaluate(v)
            alloc, resv = r.memory.peaks()
            v["peak_allocated"], v["peak_reserved"] = (int(x) for x in r.group.max([alloc, resv]))
        r.recover(state)
        return v

    def _evaluate(self, v: Dict[str, Any]) -> None:
        """The user's evaluation, its out-of-memory agreed like a step's."""
        if self.evaluate is None:
            return
        failure = None
        try:
            with torch.no_grad():
                acc, loss = self.evaluate(self.r.model)
            v["eval_accuracy"], v["eval_loss"] = float(acc), float(loss)
        except Exception as e:  # noqa: BLE001
            failure = _failure("evaluation", e)
        a = self.r.agree(failure, False)
        if a.oom is not None:
            v.update(oom=True, oom_where=self.r.group.where(a.oom))


# ---------------------------------------------------------------------------------------------
# memcomm.tune


def _optimizer_copies(optimizer: torch.optim.Optimizer) -> int:
    """Tensors of optimizer state per parameter tensor, for the model's size (as memcomm-tune counts)."""
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2
    return 0


def _model_state_bytes(runner: _Runner) -> int:
    params = sum(p.numel() * p.element_size() for p in runner.params)
    buckets = 1 if runner.group.world > 1 else 0
    return params * (2 + buckets + _optimizer_copies(runner.optimizer))


def _first_step(runner: _Runner, limit: int) -> None:
    """memcomm-tune's Note [A first step before the probes]: one step at b = 1, then the initial state."""
    failed = runner.set_buckets(runner.o.bucket_mb)
    where = runner.group.where(failed) if failed is not None else ""
    if not where:
        pristine = runner.save()
        where = runner.run_steps(1, 1, _Plan(0, 1, 0.0, 1)).oom_where
        runner.recover(pristine)
    if where:
        raise ValueError(f"memory_limit {_bytes(limit)} is below the model's own size: one step at micro-batch 1 "
                         f"runs out of memory ({where})")


def _bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 1 << 30 else f"{n / 2**30:.2f} GiB"


def _key(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, o: _Options,
         world: int, limit: int) -> Dict[str, Any]:
    """What the result depends on, as memcomm-tune's cache key names it (Note [Tuning cache])."""
    return {"memcomm_version": _memcomm.__version__, "device": str(device), "torch": torch.__version__,
            "model": {"name": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())},
            "optimizer": type(optimizer).__name__, "world": world, "global_batch": o.global_batch,
            "memory_limit": limit, "search": _SEARCHES.index(o.search), "fit_only": o.fit_only,
            "any_micro_batch": o.any_micro_batch, "max_trials": o.max_trials, "verify_steps": o.verify_steps}


def _config(o: _Options, world: int, limit: int) -> Dict[str, Any]:
    if o.global_batch < world:
        raise ValueError(f"global_batch {o.global_batch} is smaller than the {world} ranks: every rank needs a sample")
    if o.any_micro_batch and o.global_batch // world > _MAX_ANY_MICRO_BATCH_CANDIDATES:
        raise ValueError(f"any_micro_batch tries every micro-batch up to the per-rank batch: at most "
                         f"{_MAX_ANY_MICRO_BATCH_CANDIDATES} of them")
    return {"global_batch": o.global_batch, "world": world, "memory_limit": limit, "max_trials": o.max_trials,
            "search": o.search, "fit_only": o.fit_only, "any_micro_batch": o.any_micro_batch,
            "bucket_mb": o.bucket_mb, "bucket_candidates": o.buckets, "measured_steps": o.measured_steps}


def _group_device(model: Any) -> torch.device:
    """Where the agreement flags go with NCCL: the model's device (checked properly later)."""
    p = next(model.parameters(), None) if isinstance(model, torch.nn.Module) else None
    return p.device if p is not None else torch.device("cpu")


def _agree_on_setup(group: _Group, failed: Optional[BaseException]) -> None:
    """A bad argument or setting on one rank stops every rank before the first collective that the
    others would wait in: that rank raises its own exception, the others TuneError."""
    a = group.agree("", "?" if failed is not None else "", False)
    if failed is not None:
        raise failed
    if a.error is not None:
        raise TuneError(f"memcomm.tune: rank {a.error[0]} refused its arguments (see that rank's output); this "
                        "rank stops too")


def _check_same_arguments(group: _Group, config: Dict[str, Any]) -> None:
    """Every rank must walk the same search: ranks that were given different arguments would issue
    different collectives and wait for each other forever, so they stop here, all of them."""
    crc = float(zlib.crc32(json.dumps(config, sort_keys=True).encode()))
    high, neg_low = group.max([crc, -crc])
    if high != -neg_low:
        raise ValueError("the ranks called memcomm.tune with different arguments (global_batch, search, max_trials, "
                         "buckets, ...): every rank must pass the same ones")


def _device_of(model: torch.nn.Module) -> torch.device:
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1:
        raise ValueError(f"the model's parameters must live on one device, found {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"memcomm.tune probes on 'cpu' or 'cuda', not {device.type!r}")
    return device


def tune(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor], make_batch: Callable[[int], Any],
         global_batch: int, *, memory_limit: Optional[int] = None, process_group: Any = None,
         search: str = "memcomm", fit_only: bool = False, any_micro_batch: bool = False, max_trials: int = 24,
         measured_steps: int = 3, probe_seconds: float = 0.5, accum_cap: int = 4, bucket_mb: float = 25.0,
         buckets: Sequence[float] = (1.0, 5.0, 25.0, 100.0), verify_steps: int = 50,
         evaluate: Optional[Callable[[torch.nn.Module], Tuple[float, float]]] = None,
         verbose: bool = True) -> Dict[str, Any]:
    """The fastest micro-batch x gradient accumulation for `global_batch` samples per optimizer step
    over all ranks, under a memory limit per rank: memcomm-tune's search, probing with this step.

    Every rank of the process group calls it with the same arguments (but its own data) and gets the
    same result: memcomm-tune --json's document as a dict, with "recommendation" ({"micro_batch",
    "accum", "world", "bucket_mb", "samples_per_s", "peak_reserved", "peak_allocated", "headroom",
    ...} or None with "failure" saying why), "trials", "largest_feasible", "boundary_probes", ...

    model:          the module, not yet wrapped in DistributedDataParallel (the tuner all-reduces
                    gradients itself, bucketed as DDP does; Note [Gradient buckets from Python]).
    optimizer:      its optimizer; model and optimizer are as they were when tune() returns.
    loss_fn:        loss_fn(model, batch) -> scalar loss tensor: the forward of one micro-step; the
                    tuner calls backward, the gradient all-reduce and optimizer.step() itself.
    make_batch:     make_batch(b) -> a batch of b samples for this rank, as loss_fn takes it.
    memory_limit:   bytes per rank. On the CPU the cap of memcomm.use_allocator("cpu", memory_limit=...)
                    (installed before the model is built), which is the default; on CUDA the cap of
                    memcomm's CUDA allocator, else torch's allocator is capped at it (default: free
                    memory). The ranks search under the smallest one.
    process_group:  the group of ranks (default: torch.distributed's world, or one rank when it is
                    not initialized).
    search:         "memcomm" (peak fit + speed search), "lightning" (Lightning's binsearch) or
                    "grid" (every candidate, the exhaustive reference).
    fit_only:       stop once the largest micro-batch that fits is known.
    any_micro_batch: with fit_only, candidates are every b up to the per-rank batch, not its divisors.
    max_trials, measured_steps, probe_seconds, accum_cap, bucket_mb, buckets, verify_steps: as
                    memcomm-tune's --max-trials, --measured-steps, --probe-seconds, --probe-accum-cap,
                    --bucket-mb, --buckets and --verify-steps (0: no verification).
    evaluate:       evaluate(model) -> (accuracy, loss), run under torch.no_grad() after the winner's
                    long run, as memcomm-tune's evaluation pass (None: none).
    verbose:        rank 0 prints each probe and memcomm-tune's trial table and recommendation.

    Raises TypeError or ValueError for bad arguments (before any probe), the user's own exception
    when loss_fn, make_batch or evaluate raises one on this rank (TuneError on the other ranks), and
    ValueError when one step at micro-batch 1 does not fit. An out-of-memory in a probe is never
    raised: it is a result (Note [Agreeing on an out-of-memory from Python]).
    """
    group = _Group(process_group, _group_device(model))
    try:
        _check_callables(model, optimizer, loss_fn, make_batch, evaluate)
        if not isinstance(verbose, bool):
            raise TypeError(f"verbose must be a bool, got {type(verbose).__name__}")
        o = _check_options(_Options(global_batch, search, fit_only, any_micro_batch, max_trials, measured_steps,
                                    probe_seconds, accum_cap, bucket_mb, buckets, verify_steps))
        device = _device_of(model)
        memory = _Memory(device, memory_limit)
        failed = None
    except (TypeError, ValueError, RuntimeError) as e:
        failed = e
    _agree_on_setup(group, failed)
    limit = -int(group.max([-memory.limit])[0])  # the smallest rank's limit: one search for all
    config = _config(o, group.world, limit)
    _check_same_arguments(group, config)
    runner = _Runner(model, optimizer, loss_fn, make_batch, group, memory, o)
    if _model_state_bytes(runner) >= limit:
        raise ValueError(f"memory_limit {_bytes(limit)} is below the model's own size: "
                         f"{_bytes(_model_state_bytes(runner))} for parameters, gradients and optimizer state")
    _first_step(runner, limit)
    if verbose and group.rank == 0:
        print(f"memcomm.tune: global batch {o.global_batch} on {group.world} rank(s), limit {_bytes(limit)} per "
              f"rank, search {o.search}", flush=True)
    prober = _Prober(runner, o, verbose, evaluate)
    try:
        result = _memcomm.tune_search(config, prober.probe, prober.verify if o.verify_steps > 0 else None,
                                      _key(model, optimizer, device, o, group.world, limit))
    finally:  # also when a probe raised or was interrupted: the model as it came, no buckets left
        if runner.saved is not None:
            runner.recover(runner.saved)
        runner.buckets = None
        memory.close()
    if verbose and group.rank == 0:
        print("\n" + _memcomm.format_result(result), end="", flush=True)
    return result
