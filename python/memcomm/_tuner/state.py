"""The copy of the model's and optimizer's state a probe restores from.

Note [State copies outside the cap]: the copy a probe restores from lives in numpy memory, which
no torch allocator serves, as memcomm-tune keeps its copy in host bytes: under the cap it would
take room from the probe it protects. Restoring writes into the existing tensors, so recovering from
an out-of-memory allocates nothing; optimizer state that a probe created is dropped.
"""
import copy
from dataclasses import dataclass
from typing import Any, List

import numpy as np
import torch


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


class State:
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
        self._restore_optimizer_state()
        for g, saved in zip(self.optimizer.param_groups, self.groups):
            g.update(copy.deepcopy(saved))

    def _restore_optimizer_state(self) -> None:
        state = self.optimizer.state
        for p in [p for p in state if p not in self.opt_state]:
            del state[p]
        for p, saved in self.opt_state.items():
            current = state[p]
            for k in [k for k in current if k not in saved]:
                del current[k]
            for k, v in saved.items():
                current[k] = v.restore_into(current.get(k)) if isinstance(v, _SavedTensor) else copy.deepcopy(v)
