"""Whether a model is sharded across ranks (FSDP, DTensor): the profiler's warning that their
collectives go unrecorded, and the tuner's refusal, which probes whole-model data-parallel steps."""
import sys
from typing import Callable, Iterable, List, Optional

import torch


def sharded_by(module: torch.nn.Module,
               parameters: Callable[[torch.nn.Module], Iterable[torch.Tensor]] = lambda m: m.parameters()
               ) -> Optional[str]:
    """What shards `module`: "FSDP" (FullyShardedDataParallel, or fully_shard on it or on any module
    inside it, as torchtitan shards the blocks only), "DTensor" (parameters that are DTensors: tensor
    or sequence parallelism); None when nothing does. Neither is imported for the question.
    `parameters` lists a module's parameters (the profiler's copes with modules that refuse to)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    kinds = tuple(getattr(fsdp, name) for name in ("FullyShardedDataParallel", "FSDPModule") if hasattr(fsdp, name))
    if kinds and any(isinstance(m, kinds) for m in _submodules(module)):
        return "FSDP"
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    if dtensor is not None and any(isinstance(p, dtensor) for p in parameters(module)):
        return "DTensor"
    return None


def _submodules(module: torch.nn.Module) -> List[torch.nn.Module]:
    """`module` and those inside it; only `module` where it cannot list them (a RemoteModule inside)."""
    try:
        return list(module.modules())
    except ValueError:
        return [module]
