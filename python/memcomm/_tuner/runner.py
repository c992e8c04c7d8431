"""One rank's side of the probes: the user's steps, the agreements after them, the state copies."""
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

import torch

from memcomm._tuner.agreement import Agreed, Failure, Group, TuneError, failure
from memcomm._tuner.batches import Batches
from memcomm._tuner.buckets import Buckets
from memcomm._tuner.memory import Memory
from memcomm._tuner.options import Options
from memcomm._tuner.state import ScriptState, State, stray_leaves, trained_tensors


@dataclass
class Plan:
    """How long a probe runs (memcomm-tune's Note [Steady-state probes])."""
    warmup_micro: int = 0       # micro-steps consumed before timing starts
    min_steps: int = 3          # timed steps, at least
    min_seconds: float = 0.0    # timed wall time, at least
    max_steps: int = 3          # timed steps, at most


@dataclass
class StepTiming:
    early_s: float = 0.0        # the micro-steps before the last, together
    last_s: float = 0.0         # the last micro-step, the all-reduce and the optimizer step
    comm_s: float = 0.0         # the all-reduce alone


@dataclass
class Outcome:
    timed: List[StepTiming] = field(default_factory=list)
    oom_where: str = ""         # "" when no rank ran out of memory
    oom_rank: int = -1


class Runner:
    """One rank's side of the probes: the user's step, the agreements, the state copies."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable,
                 make_batch: Callable[[int], Any], group: Group, memory: Memory, o: Options, script: ScriptState):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.batches = Batches(make_batch)
        self.script = script  # its reach is what State saves before each probe
        self.strays: Optional[List[torch.Tensor]] = None  # found at the first backward (take_stray_gradients)
        self.group, self.memory, self.o = group, memory, o
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buckets: Optional[Buckets] = None
        self.saved: Optional[State] = None   # the copy the current probe restores from

    # -- one step of `accum` micro-steps

    def _micro_steps(self, b: int, accum: int, t: StepTiming) -> Optional[Failure]:
        """Data, forward and backward, with no collective inside."""
        for k in range(accum):
            start = self.memory.clock()
            phase = ["data"]
            try:
                self._forward_backward(b, accum, phase)
            # Agreed on, then re-raised (Note [Agreeing on an out-of-memory from Python]).
            except Exception as e:  # noqa: BLE001
                return failure(phase[0], e)
            if k < accum - 1:
                t.early_s += self.memory.clock() - start
            else:
                t.last_s += self.memory.clock() - start
        return None

    def _forward_backward(self, b: int, accum: int, phase: List[str]) -> None:
        # Its own frame: the batch and the graph go with it when an out-of-memory unwinds it.
        batch = self.batches.draw(b)
        phase[0] = "forward"
        with torch.inference_mode(False), torch.enable_grad():  # a probe trains, whatever context tune() is in
            loss = self.loss_fn(self.model, batch)
            _check_loss(loss)
            phase[0] = "backward"
            if self.strays is None:
                self.strays = stray_leaves(loss, trained_tensors(self.model, self.optimizer))
                self.script.take_stray_gradients(self.strays)
            (loss / accum).backward()

    def _sync_and_step(self, t: StepTiming) -> Optional[Failure]:
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
            return failure(phase, e)
        t.last_s += self.memory.clock() - start
        return None

    def agree(self, failed: Optional[Failure], more: bool) -> Agreed:
        """Joins the agreement. When some rank raised an exception that is not an out-of-memory, every
        rank restores the probe's state and raises: its own exception, or TuneError naming the rank."""
        oom = failed.phase if failed is not None and failed.error is None else ""
        err = failed.phase if failed is not None and failed.error is not None else ""
        a = self.group.agree(oom, err, more)
        if a.error is not None:
            if self.saved is not None:
                self.recover(self.saved)
            if failed is not None and failed.error is not None:
                raise failed.error
            raise TuneError(f"memcomm.tune: {self.group.where(a.error)} raised an exception (see that rank's "
                            "output); this rank stops too")
        return a

    def run_steps(self, b: int, accum: int, plan: Plan) -> Outcome:
        """Steps as `plan` says (memcomm-tune's run_steps), two agreements each (Note [Agreeing on an
        out-of-memory from Python]): after the micro-steps, and after the optimizer step, which also
        carries whether any rank wants another step."""
        out, consumed = Outcome(), 0
        t_timing = self.memory.clock() if plan.warmup_micro == 0 else -1.0
        while True:
            t = StepTiming()
            a = self.agree(self._micro_steps(b, accum, t), True)
            if a.oom is None:
                failed = self._sync_and_step(t)
                consumed += accum
                more = True
                if t_timing >= 0 and failed is None:
                    out.timed.append(t)
                    n, elapsed = len(out.timed), self.memory.clock() - t_timing
                    more = n < plan.max_steps and (n < plan.min_steps or elapsed < plan.min_seconds)
                a = self.agree(failed, more)
            if a.oom is not None:
                out.oom_rank, out.oom_where = a.oom[0], self.group.where(a.oom)
                return out
            if not a.more:
                return out
            if t_timing < 0 and consumed >= plan.warmup_micro:
                t_timing = self.memory.clock()

    # -- state and buckets

    def save(self) -> State:
        self.saved = State(self.script.reach, self.optimizer)
        return self.saved

    def recover(self, state: State) -> None:
        state.restore()
        for leaf in self.strays or ():  # the probe's gradients, in tensors the state does not hold
            leaf.grad = None
        self.memory.release_cache()
        self.saved = None

    def set_buckets(self, mb: float) -> Optional[Tuple[int, str]]:
        """Rebuilds the buckets at `mb` MiB, agreed over ranks: None, or (rank, "buckets") for the
        lowest rank that ran out of memory (then every rank keeps, or goes back to, the old layout)."""
        if self.group.world == 1 or (self.buckets is not None and self.buckets.mb == mb):
            return None
        old, failed = self.buckets, None
        try:
            self.buckets = Buckets(self.params, mb)
        except Exception as e:  # noqa: BLE001  (any error goes through the agreement: peers wait in it)
            failed = failure("buckets", e)
        a = self.agree(failed, False)
        if a.oom is not None:
            self.buckets = old
        return a.oom


def _check_loss(loss: Any) -> None:
    """What backward() needs of loss_fn's result, said in loss_fn's terms (torch's own words name
    neither the function nor the fix)."""
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"loss_fn must return a tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(f"loss_fn must return a scalar loss, got a tensor of shape {tuple(loss.shape)} (a loss with "
                         "reduction='none' needs its .mean() or .sum())")
    if not loss.requires_grad:
        raise ValueError("loss_fn returned a loss that does not require a gradient: it depends on no trained "
                         "parameter (computed under torch.no_grad(), or from detached outputs)")
