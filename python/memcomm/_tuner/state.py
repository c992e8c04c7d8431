"""The copy of the model's and optimizer's state a probe restores from.

Note [State copies outside the cap]: the copy a probe restores from lives in numpy memory, which
no torch allocator serves, as memcomm-tune keeps its copy in host bytes: under the cap it would
take room from the probe it protects. Restoring writes into the existing tensors, so recovering from
an out-of-memory allocates nothing; optimizer state that a probe created is dropped.
The bytes are those of the memory a tensor covers, in storage order, so a channels_last weight or a
transposed parameter is written back where it lives (reshape(-1) of such a tensor is a copy, and
writing into the copy restored nothing). Only a tensor with gaps or overlaps between its elements
goes through a copy_ of its values. Every tensor the optimizer updates is saved, not only the
model's: a loss with parameters of its own (a margin head, a learned temperature) trains with it.

Note [What the probes leave as it was]: tune() promises the script's model and optimizer as they
were. Beyond the tensors (State) and the random generators (RandomState), a probe changes what
ScriptState puts back: module training flags (evaluate() may call model.eval()), gradients (set to
None between probes; a script may hold some from before tune()), and whatever the optimizer's own
step hooks update (they do not run during the probes), for the optimizer and every optimizer it
wraps (optimizers_within: a Lookahead's real state is its inner optimizer's). The allocator's peak
counters are reset when tune() returns, so a peak read after it is the run's, not a probe's.
"""
import copy
import random
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np
import torch


def _storage_flat(t: torch.Tensor) -> Optional[torch.Tensor]:
    """A 1-d view of the memory `t` covers, in storage order, or None when its elements leave gaps or
    overlap (a slice of a larger tensor, an expanded one)."""
    if t.is_contiguous():
        return t.detach().reshape(-1)
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) != 1 and t.stride(d) != expected:
            return None
        expected *= t.size(d)
    return t.detach().as_strided((t.numel(),), (1,))


def _host_bytes(t: torch.Tensor) -> np.ndarray:
    flat = _storage_flat(t)
    flat = (flat if flat is not None else t.detach().reshape(-1)).view(torch.uint8)
    return (flat.cpu() if flat.is_cuda else flat).numpy().copy()


def _write_back(t: torch.Tensor, saved: np.ndarray) -> None:
    with torch.no_grad():
        flat = _storage_flat(t)
        if flat is not None:
            flat.view(torch.uint8).copy_(torch.from_numpy(saved))
        else:
            t.copy_(torch.from_numpy(saved).view(t.dtype).reshape(t.shape))


@dataclass
class _SavedTensor:
    data: np.ndarray
    shape: torch.Size
    stride: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> "_SavedTensor":
        return cls(_host_bytes(t), t.shape, t.stride(), t.dtype, t.device)

    def fits(self, t: Any) -> bool:
        return (isinstance(t, torch.Tensor) and t.shape == self.shape and t.stride() == self.stride
                and t.dtype == self.dtype and t.device == self.device)

    def restore_into(self, current: Any) -> torch.Tensor:
        """Into `current` when it has the same layout (nothing allocated), else a new tensor."""
        t = current if self.fits(current) else torch.empty_strided(self.shape, self.stride, dtype=self.dtype,
                                                                   device=self.device)
        _write_back(t, self.data)
        return t


def _trained_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    """The model's parameters and buffers, then the other parameters the optimizer updates."""
    tensors = list(model.parameters()) + list(model.buffers())
    seen = {id(t) for t in tensors}
    for g in optimizer.param_groups:
        for p in g["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                tensors.append(p)
    return tensors


def optimizers_within(optimizer: Any) -> List[torch.optim.Optimizer]:
    """`optimizer` and every optimizer it wraps, however deep (timm's Lookahead keeps its real state in
    `_base_optimizer`, SAM in `base_optimizer`, ZeroRedundancyOptimizer in `optim`): each keeps state
    and hyperparameters of its own that a probe's step changes."""
    found: List[torch.optim.Optimizer] = []
    todo = [optimizer]
    while todo:
        o = todo.pop()
        if any(o is f for f in found):
            continue
        found.append(o)
        todo.extend(v for v in vars(o).values() if isinstance(v, torch.optim.Optimizer))
    return found


class _OptimizerState:
    """One optimizer's per-parameter state and hyperparameters."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.state = {p: {k: _SavedTensor.of(v) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                          for k, v in s.items()} for p, s in optimizer.state.items()}
        self.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]

    def restore(self) -> None:
        state = self.optimizer.state
        for p in [p for p in state if p not in self.state]:
            del state[p]
        for p, saved in self.state.items():
            current = state[p]
            for k in [k for k in current if k not in saved]:
                del current[k]
            for k, v in saved.items():
                current[k] = v.restore_into(current.get(k)) if isinstance(v, _SavedTensor) else copy.deepcopy(v)
        for g, saved in zip(self.optimizer.param_groups, self.groups):
            g.update(copy.deepcopy(saved))


class State:
    """The model's parameters and buffers, the other parameters the optimizer updates, and the state
    and hyperparameters of the optimizer and of every optimizer it wraps."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer
        self.tensors = [_host_bytes(t) for t in self._model_tensors()]
        self.optimizers = [_OptimizerState(o) for o in optimizers_within(optimizer)]

    def _model_tensors(self) -> List[torch.Tensor]:
        return _trained_tensors(self.model, self.optimizer)

    def restore(self) -> None:
        for t, saved in zip(self._model_tensors(), self.tensors):
            _write_back(t, saved)
        self.model.zero_grad(set_to_none=True)
        self.optimizer.zero_grad(set_to_none=True)
        for o in self.optimizers:
            o.restore()


class ScriptState:
    """What tune() touches beyond the weights and the optimizer's state, put back when it returns
    (Note [What the probes leave as it was]): each module's training flag (an evaluate() that calls
    model.eval()), the gradients the script held (the probes set them to None), and the optimizer's
    own step hooks, which are taken out while the probes step (an EMA or a counter that
    register_step_post_hook updates is the script's training state, not the probes')."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.modes = [(m, m.training) for m in model.modules()]
        self.grads = [(p, _saved_grad(p)) for p in _trained_tensors(model, optimizer) if p.requires_grad]
        self.hooks = [(o, name, getattr(o, name).copy()) for o in optimizers_within(optimizer) for name in _STEP_HOOKS
                      if hasattr(o, name)]
        for o, name, _ in self.hooks:
            getattr(o, name).clear()
        self.restored = False

    def restore(self) -> None:
        """Once it has succeeded, later calls do nothing."""
        if self.restored:
            return
        for o, name, hooks in self.hooks:
            getattr(o, name).update(hooks)
        for m, training in self.modes:
            m.training = training
        for p, grad in self.grads:
            p.grad = grad.restore_into(p.grad) if isinstance(grad, _SavedTensor) else grad
        self.restored = True


def _saved_grad(p: torch.Tensor) -> Any:
    """A strided gradient's bytes (outside the allocator, Note [State copies outside the cap]); a sparse
    one itself, taken off the parameter so that no probe accumulates into it; None."""
    if p.grad is None:
        return None
    if p.grad.layout == torch.strided:
        return _SavedTensor.of(p.grad)
    grad, p.grad = p.grad, None
    return grad


# The optimizer's own step hooks (torch.optim.Optimizer.register_step_pre_hook / _post_hook).
_STEP_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")


class RandomState:
    """The random generators a probe's dropout and make_batch draw from (torch's, CUDA's, Python's
    and numpy's global ones), put back when tune() returns: a seeded script trains the same with
    and without tune()."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state().numpy().copy()  # outside the allocator, as State's copies
        self.cuda: Optional[List[torch.Tensor]] = (torch.cuda.get_rng_state_all()
                                                   if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        self.python = random.getstate()
        self.numpy = np.random.get_state()

    def restore(self) -> None:
        torch.set_rng_state(torch.from_numpy(self.torch))
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)
