"""tune()'s setup before the search: the ranks agree on their arguments, the search's configuration
and cache key, and the checks that the model fits at all."""
import json
import traceback
import zlib
from typing import Any, Dict, Optional, Tuple

import torch

from memcomm import _memcomm
from memcomm._tuner.agreement import Group, TuneError
from memcomm._tuner.options import MAX_ANY_MICRO_BATCH_CANDIDATES, SEARCHES, Options
from memcomm._tuner.runner import Plan, Runner
from memcomm._caller import warn


def _optimizer_copies(optimizer: torch.optim.Optimizer) -> int:
    """Tensors of optimizer state per parameter tensor, for the model's size (as memcomm-tune counts)."""
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 2
    return 0


def _model_state_bytes(runner: Runner) -> int:
    params = sum(p.numel() * p.element_size() for p in runner.params)
    buckets = 1 if runner.group.world > 1 else 0
    return params * (2 + buckets + _optimizer_copies(runner.optimizer))


def _one_step(runner: Runner, b: int) -> str:
    """One step at micro-batch b, then the state as it was: "" or where a rank ran out of memory."""
    pristine = runner.save()
    try:
        return runner.run_steps(b, 1, Plan(0, 1, 0.0, 1)).oom_where
    finally:
        runner.recover(pristine)


def train_mode_for_probes(runner: Runner) -> None:
    """Note [Probes step in training mode]: a model left in eval mode (tune() called after a
    validation pass or a checkpoint's load) was probed in eval mode: no dropout masks, BatchNorm
    without its batch statistics, so micro-batches fit that then ran out of memory in training
    (b = 256 recommended under a cap where training fits b = 128). The probes stand for training
    steps, so they run the model in training mode, said once; the modules loss_fn names beside it
    keep their flags (a frozen teacher in eval mode is the loss's choice), and ScriptState puts the
    model's flags back when tune() returns."""
    if runner.model.training:
        return
    if runner.group.rank == 0:
        warn("memcomm.tune: the model is in eval mode (model.training is False): the probes run it in training "
             "mode, as training steps would (dropout, BatchNorm's batch statistics), and tune() leaves it in eval "
             "mode; call model.train() before tune() to silence this")
    runner.model.train()


def _first_step(runner: Runner) -> Tuple[int, str]:
    """memcomm-tune's Note [A first step before the probes]: one step at b = 1, then the initial
    state; returns the smallest micro-batch the search may try, and "" or where a rank ran out of
    memory there.
    Note [A model that cannot step on one sample]: BatchNorm in training mode (and a contrastive or
    triplet loss) raises on a batch of one, which the user never asked for. Every rank takes the
    same path (the rank that raised its own exception, the others TuneError), so they all step at
    b = 2 instead, and the search leaves b = 1 out; when b = 2 raises too, the first error is the
    user's to see."""
    failed = runner.set_buckets(runner.o.bucket_mb)
    if failed is not None:
        return 1, runner.group.where(failed)
    try:
        return 1, _one_step(runner, 1)
    except Exception as at_one:  # noqa: BLE001 (re-raised unless b = 2 steps)
        if runner.o.global_batch // runner.group.world < 2:
            raise
        traceback.clear_frames(at_one.__traceback__)  # its frames' locals (b = 1's activations) go now
        try:
            where = _one_step(runner, 2)
        except Exception:  # noqa: BLE001
            raise at_one from None
        if runner.group.rank == 0:
            warn(f"memcomm.tune: one step at micro-batch 1 raised {type(at_one).__name__} ({at_one}); "
                 "the search starts at micro-batch 2")
        return 2, where


def check_model_fits(runner: Runner, limit: int) -> int:
    """Raises ValueError when one step at the smallest micro-batch runs out of memory, naming the
    model's state when it alone reaches the limit; returns that micro-batch (Note [A model that
    cannot step on one sample]).
    The state is an estimate (a gradient and the optimizer's copies for every trained parameter), so
    it only words the refusal of a step that ran out: parameters the loss never reaches get no
    gradient and no optimizer state, and a model with a large unused head was refused up front while
    its steps fitted."""
    smallest, where = _first_step(runner)
    if not where:
        return smallest
    state = _model_state_bytes(runner)
    if state >= limit:
        raise ValueError(f"memory_limit {format_bytes(limit)} is below the model's own size: {format_bytes(state)} "
                         f"for parameters, gradients and optimizer state (one step at micro-batch {smallest} runs "
                         f"out of memory, {where})")
    raise ValueError(f"memory_limit {format_bytes(limit)} is too small for one step at micro-batch {smallest}: it "
                     f"runs out of memory ({where}) beside the model's {format_bytes(state)} of parameters, "
                     "gradients and optimizer state")


format_bytes = _memcomm.format_bytes  # the one way memcomm prints bytes (common/bytes.hpp)


def _device_description(device: torch.device) -> str:
    """As memcomm-tune's key describes the device: the GPU's name, or the CPU's model and the threads a
    step runs on (a key of "cpu" alone reused speeds measured on another machine)."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{device.type}{':' + model if model else ''} x{torch.get_num_threads()} threads"


def cache_key(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, o: Options,
              world: int, limit: int) -> Dict[str, Any]:
    """What the result depends on, as memcomm-tune's cache key names it (Note [Tuning cache])."""
    return {"memcomm_version": _memcomm.__version__, "device": _device_description(device), "torch": torch.__version__,
            "model": {"name": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())},
            "optimizer": type(optimizer).__name__, "world": world, "global_batch": o.global_batch,
            "memory_limit": limit, "search": SEARCHES.index(o.search), "fit_only": o.fit_only,
            "any_micro_batch": o.any_micro_batch, "max_trials": o.max_trials, "verify_steps": o.verify_steps}


def search_config(o: Options, world: int, limit: int) -> Dict[str, Any]:
    if o.global_batch < world:
        raise ValueError(f"global_batch {o.global_batch} is smaller than the {world} ranks: every rank needs a sample")
    if o.any_micro_batch and o.global_batch // world > MAX_ANY_MICRO_BATCH_CANDIDATES:
        raise ValueError(f"any_micro_batch tries every micro-batch up to the per-rank batch: at most "
                         f"{MAX_ANY_MICRO_BATCH_CANDIDATES} of them")
    return {"global_batch": o.global_batch, "world": world, "memory_limit": limit, "max_trials": o.max_trials,
            "search": o.search, "fit_only": o.fit_only, "any_micro_batch": o.any_micro_batch,
            "bucket_mb": o.bucket_mb, "bucket_candidates": o.buckets, "measured_steps": o.measured_steps,
            "verify_steps": o.verify_steps}


def group_device(model: Any) -> torch.device:
    """Where the agreement flags go with NCCL: the model's device (checked properly later)."""
    p = next(model.parameters(), None) if isinstance(model, torch.nn.Module) else None
    return p.device if p is not None else torch.device("cpu")


def agree_on_setup(group: Group, failed: Optional[BaseException]) -> None:
    """A bad argument or setting on one rank stops every rank before the first collective that the
    others would wait in: that rank raises its own exception, the others TuneError."""
    a = group.agree("", "?" if failed is not None else "", False)
    if failed is not None:
        raise failed
    if a.error is not None:
        raise TuneError(f"memcomm.tune: rank {a.error[0]} refused its arguments (see that rank's output); this "
                        "rank stops too")


def check_same_arguments(group: Group, config: Dict[str, Any]) -> None:
    """Every rank must walk the same search: ranks that were given different arguments would issue
    different collectives and wait for each other forever, so they stop here, all of them."""
    crc = float(zlib.crc32(json.dumps(config, sort_keys=True).encode()))
    high, neg_low = group.max([crc, -crc])
    if high != -neg_low:
        raise ValueError("the ranks called memcomm.tune with different arguments (global_batch, search, max_trials, "
                         "buckets, ...): every rank must pass the same ones")


def device_of(model: torch.nn.Module) -> torch.device:
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1:
        raise ValueError(f"the model's parameters must live on one device, found {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"memcomm.tune probes on 'cpu' or 'cuda', not {device.type!r}")
    return device
