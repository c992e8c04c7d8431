"""memcomm.tune's options and the checks memcomm-tune's flags make, with Python's exceptions."""
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

import torch

from memcomm._numbers import is_int, is_real
from memcomm._sharding import sharded_by

SEARCHES = ("memcomm", "lightning", "grid")
MAX_ANY_MICRO_BATCH_CANDIDATES = 1 << 20
_MAX_GLOBAL_BATCH = 1 << 40
_MAX_BUCKET_MB = 1e6


def check_int(name: str, value: Any, low: int, high: Optional[int] = None) -> int:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_float(name: str, value: Any, low: float, high: float) -> float:
    if not is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not low <= value <= high:  # also rejects NaN
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value}")
    return float(value)


def check_callables(model: Any, optimizer: Any, loss_fn: Any, make_batch: Any, evaluate: Any) -> None:
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError("pass the module before wrapping it in DistributedDataParallel: memcomm.tune all-reduces "
                        "the gradients itself, bucketed as DDP does, and DDP's own buckets would be counted twice")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    sharding = sharded_by(model)
    if sharding is not None:  # its probes would fail inside torch (DTensor's as_strided) or add DDP's all-reduce
        raise TypeError(f"the model is sharded by {sharding}: memcomm.tune probes data-parallel steps of a whole "
                        "model on every rank, so tune the module before sharding it, or not at all")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(optimizer, torch.optim.LBFGS):  # its step() needs a closure that re-evaluates the loss
        raise TypeError("memcomm.tune steps the optimizer once per step without a closure; torch.optim.LBFGS "
                        "needs one (it evaluates the loss several times a step), so it cannot be tuned this way")
    for name, f in (("loss_fn", loss_fn), ("make_batch", make_batch)):
        if not callable(f):
            raise TypeError(f"{name} must be callable, got {type(f).__name__}")
    if evaluate is not None and not callable(evaluate):
        raise TypeError(f"evaluate must be callable or None, got {type(evaluate).__name__}")
    if any(torch.nn.parameter.is_lazy(t) for t in (*model.parameters(), *model.buffers())):  # no size yet
        raise ValueError("model has parameters or buffers its first forward has not made yet (nn.LazyLinear, "
                         "nn.LazyBatchNorm1d...): "
                         "run one forward, then tune")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no parameter that requires a gradient: there is no training step to tune")
    held = {id(p) for p in model.parameters()}
    if not any(id(p) in held for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("optimizer updates none of the model's parameters (was it built for another model?): the "
                         "probes would time steps that do not train it")


@dataclass
class Options:
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


def check_options(o: Options) -> Options:
    """The checks memcomm-tune's flags make, with Python's exceptions; verify_steps may also be 0 here
    (no verification: memcomm.tune's documented way to skip it, where --verify-steps takes 1 or more)."""
    o.global_batch = check_int("global_batch", o.global_batch, 1, _MAX_GLOBAL_BATCH)
    if o.search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {o.search!r}")
    for name in ("fit_only", "any_micro_batch"):
        if not isinstance(getattr(o, name), bool):
            raise TypeError(f"{name} must be a bool, got {type(getattr(o, name)).__name__}")
    if o.any_micro_batch and not o.fit_only:
        raise ValueError("any_micro_batch needs fit_only=True: a recommended micro-batch must divide the per-rank batch")
    o.max_trials = check_int("max_trials", o.max_trials, 1, 1000)
    o.measured_steps = check_int("measured_steps", o.measured_steps, 3, 1000)
    o.probe_seconds = check_float("probe_seconds", o.probe_seconds, 0.0, 3600.0)
    o.accum_cap = check_int("accum_cap", o.accum_cap, 2, 1 << 20)
    o.bucket_mb = check_float("bucket_mb", o.bucket_mb, 1e-6, _MAX_BUCKET_MB)
    if isinstance(o.buckets, (str, bytes)) or not isinstance(o.buckets, Sequence):
        raise TypeError(f"buckets must be a sequence of sizes in MiB, got {type(o.buckets).__name__}")
    o.buckets = [check_float("buckets[]", b, 1e-6, _MAX_BUCKET_MB) for b in o.buckets]
    o.verify_steps = check_int("verify_steps", o.verify_steps, 0, 1 << 30)
    return o
