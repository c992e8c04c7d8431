"""The ranks' agreement after each phase of a probe: who ran out of memory or raised, and where.

Note [Agreeing on an out-of-memory from Python]: the trainer's Note [Agreeing on an out-of-memory]
(trainer/src/trial.cpp), with one change that needs nothing from the user's model: no collective runs
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
"""
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from memcomm import _memcomm

PHASES = ("?", "data", "forward", "backward", "communication", "optimizer", "buckets", "evaluation")


class TuneError(RuntimeError):
    """Another rank raised an exception in its step; this rank stops with it (Note [Agreeing on an
    out-of-memory from Python])."""


TuneError.__module__ = "memcomm.tuner"  # its public home, as tracebacks and pickles name it


def is_oom(e: BaseException) -> bool:
    """Out-of-memory as memcomm-tune counts it (memcomm/common/oom_message.hpp), plus Python's MemoryError."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and _memcomm.is_oom_message(str(e))


@dataclass
class Failure:
    """A phase of this rank's step failed: an out-of-memory (error None) or another exception. It is
    returned, not raised, and holds no out-of-memory exception: that one's traceback would keep the
    failed step's tensors alive through the agreement and the recovery."""
    phase: str
    error: Optional[BaseException] = None


def failure(phase: str, e: BaseException) -> Failure:
    return Failure(phase, None if is_oom(e) else e)


@dataclass
class Agreed:
    oom: Optional[Tuple[int, str]]     # (lowest rank that ran out of memory, its phase)
    more: bool                         # some rank wants another step
    error: Optional[Tuple[int, str]]   # (lowest rank that raised another exception, its phase)


class Group:
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

    def agree(self, oom_phase: str, error_phase: str, more: bool) -> Agreed:
        """One all-reduce MAX (Note [Agreeing on an out-of-memory from Python]). A failure goes over as
        (world - rank) * 8 + phase, so the MAX names the lowest rank that failed and its phase."""
        def code(phase: str) -> float:
            return float((self.world - self.rank) * 8 + PHASES.index(phase)) if phase else 0.0
        self.host[:] = (code(oom_phase), 1.0 if more else 0.0, code(error_phase))
        if self.world > 1:
            if self.flags.is_cuda:
                self.flags.copy_(torch.from_numpy(self.host))
            dist.all_reduce(self.flags, op=dist.ReduceOp.MAX, group=self.pg)
            if self.flags.is_cuda:
                torch.from_numpy(self.host).copy_(self.flags)
        v = self.host.tolist()
        return Agreed(self._decode(int(v[0])), v[1] > 0, self._decode(int(v[2])))

    def _decode(self, c: int) -> Optional[Tuple[int, str]]:
        return (self.world - c // 8, PHASES[c % 8]) if c > 0 else None

    def where(self, failed: Tuple[int, str]) -> str:
        return f"rank {failed[0]} {failed[1]}" if self.world > 1 else failed[1]
