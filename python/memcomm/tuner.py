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
process group, under the allocator's cap, with out-of-memory caught, agreed and recovered
(memcomm/_tuner/: Notes [Agreeing on an out-of-memory from Python] in agreement.py, [State copies
outside the cap] in state.py, [Gradient buckets from Python] in buckets.py).

Probes otherwise follow memcomm-tune's Notes [A first step before the probes], [Steady-state
probes] and [Probing long accumulations] (tuner/src/probe.cpp). Batches come from make_batch when
a micro-step asks, so there is no loader ring to allow for (loader_allowance is 0).
"""
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from memcomm import _memcomm
from memcomm._profiler import running
from memcomm._tuner.agreement import Group, TuneError
from memcomm._tuner.memory import Memory
from memcomm._tuner.options import Options, check_callables, check_options
from memcomm._tuner.prober import Prober
from memcomm._tuner.runner import Runner
from memcomm._tuner.state import RandomState, ScriptState, in_reach
from memcomm._tuner.setup import (agree_on_setup, cache_key, check_model_fits, check_same_arguments, device_of,
                                  format_bytes, group_device, search_config, train_mode_for_probes)

__all__ = ["tune", "TuneError"]


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
                    The probes run it in training mode: one left in eval mode is switched for them,
                    with a warning (Note [Probes step in training mode]).
    optimizer:      its optimizer; model and optimizer (with any parameters it updates outside the
                    model) are as they were when tune() returns: weights, buffers, optimizer state,
                    modules' training flags and gradients; so are the global random generators
                    (torch's, CUDA's, Python's and numpy's). The optimizer's own step hooks
                    (register_step_pre_hook/post_hook) do not run during the probes. The allocator's
                    peak counters are reset when tune() returns (its probes' out-of-memory errors
                    stay counted in num_ooms). Inside memcomm.profile() the probes record memory
                    but no phases: they are not the run's steps.
    loss_fn:        loss_fn(model, batch) -> scalar loss tensor: the forward of one micro-step; the
                    tuner calls backward, the gradient all-reduce and optimizer.step() itself.
                    It (like make_batch and evaluate) must run no collective of its own, such as an
                    all-gather contrastive loss: a rank that runs out of memory inside one would
                    leave the others waiting in it until the process group's timeout.
    make_batch:     make_batch(b) -> a batch of b samples for this rank, as loss_fn takes it (a batch whose
                    first tensor has no dimension of size b is warned about once: it is measured as b).
                    The probes measure the batches it returns, so where training's batches vary in
                    shape (sequences of random length) it should return the largest; batches of b
                    samples whose shapes differ are warned about once.
    memory_limit:   bytes per rank. On the CPU it is the cap of memcomm.use_allocator("cpu",
                    memory_limit=...) (installed before the model is built), which is required; on
                    CUDA with memcomm's allocator, the cap of use_allocator("cuda", memory_limit=...),
                    also required; with torch's CUDA allocator, torch's allocator is capped at it for
                    the tuning (default: free memory). The ranks search under the smallest one.
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
                    long run, as memcomm-tune's evaluation pass (None: none). Its batches are its own:
                    one that runs out of memory ends the search with no recommendation and a failure
                    that names it, since no smaller micro-batch would help.
    verbose:        rank 0 prints each probe and memcomm-tune's trial table and recommendation.

    Raises TypeError or ValueError for bad arguments (before any probe: among them a model with lazy
    parameters no forward has made yet, and an optimizer that updates none of the model's parameters),
    the user's own exception
    when loss_fn, make_batch or evaluate raises one on this rank (TuneError on the other ranks),
    ValueError when loss_fn returns a loss backward() cannot take (not one element, or needing no
    gradient) or make_batch raises StopIteration (its data ran out), and ValueError when one step at
    micro-batch 1 does not fit. A step that raises at micro-batch 1 but
    not at 2 (BatchNorm in training mode) is warned about, and the search starts at 2. An
    out-of-memory in a probe is never raised: it is a result
    (Note [Agreeing on an out-of-memory from Python]).
    """
    randomness = RandomState()
    script = ScriptState(in_reach(model, loss_fn), optimizer) if isinstance(model, torch.nn.Module) and isinstance(
        optimizer, torch.optim.Optimizer) else None  # else tune() raises TypeError before touching anything
    try:
        with running.paused():  # inside memcomm.profile(), the probes are not the run's steps
            return _tune(model, optimizer, loss_fn, make_batch, process_group, memory_limit, verbose, evaluate,
                         Options(global_batch, search, fit_only, any_micro_batch, max_trials, measured_steps,
                                 probe_seconds, accum_cap, bucket_mb, buckets, verify_steps), script)
    finally:  # Note [What the probes leave as it was] (_tuner/state.py); done already unless setup failed
        randomness.restore()
        if script is not None:
            script.restore()


def _tune(model: Any, optimizer: Any, loss_fn: Any, make_batch: Any, process_group: Any, memory_limit: Optional[int],
          verbose: Any, evaluate: Any, options: Options, script: Optional[ScriptState]) -> Dict[str, Any]:
    group = Group(process_group, group_device(model))
    o, device, memory = _agreed_setup(group, model, optimizer, loss_fn, make_batch, evaluate, verbose, memory_limit,
                                      options)
    try:
        limit = -int(group.max([-memory.limit])[0])  # the smallest rank's limit: one search for all
        config = search_config(o, group.world, limit)
        check_same_arguments(group, config)
        return _search(Runner(model, optimizer, loss_fn, make_batch, group, memory, o, script), config,
                       cache_key(model, optimizer, device, o, group.world, limit), verbose, evaluate)
    finally:  # whatever happened, with the probes' tensors gone: the script's state back, then torch's
        if script is not None:  # CUDA allocator uncapped if tune() capped it, and its peak counters reset
            script.restore()
        memory.close()


def _agreed_setup(group: Group, model: Any, optimizer: Any, loss_fn: Any, make_batch: Any, evaluate: Any,
                  verbose: Any, memory_limit: Optional[int], options: Options) -> Tuple[Options, torch.device, Memory]:
    """tune()'s argument checks, agreed over the ranks before any other collective: the checked
    options, the model's device and the memory it is tuned in."""
    try:
        check_callables(model, optimizer, loss_fn, make_batch, evaluate)
        if not isinstance(verbose, bool):
            raise TypeError(f"verbose must be a bool, got {type(verbose).__name__}")
        o = check_options(options)
        device = device_of(model)
        memory = Memory(device, memory_limit)
        memory.check_model_inside(model)
        failed = None
    except (TypeError, ValueError, RuntimeError) as e:
        failed = e
    agree_on_setup(group, failed)
    return o, device, memory


def _search(runner: Runner, config: Dict[str, Any], key: Dict[str, Any], verbose: bool,
            evaluate: Optional[Callable]) -> Dict[str, Any]:
    """memcomm-tune's search and verification, probing with the runner's steps (verbose: rank 0
    prints the search's start and its result)."""
    o, group, limit = runner.o, runner.group, config["memory_limit"]
    if verbose and group.rank == 0:
        print(f"memcomm.tune: global batch {o.global_batch} on {group.world} rank(s), limit {format_bytes(limit)} per "
              f"rank, search {o.search}", flush=True)
    train_mode_for_probes(runner)
    config["min_micro_batch"] = check_model_fits(runner, limit)
    prober = Prober(runner, o, verbose, evaluate)
    try:
        result = _memcomm.tune_search(config, prober.probe, prober.verify if o.verify_steps > 0 else None, key)
    finally:  # also when a probe raised or was interrupted: the model as it came, no buckets left
        if runner.saved is not None:
            runner.recover(runner.saved)
        runner.buckets = None
    if verbose and group.rank == 0:
        print("\n" + _memcomm.format_result(result), end="", flush=True)
    return result
