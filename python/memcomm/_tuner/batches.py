"""The batches the probes draw from make_batch, checked for what would make a probe measure
something other than training: a batch of another size than asked, batches whose shape varies, and
data that ran out."""
from typing import Any, Callable, Dict, List

import torch

from memcomm._caller import warn


class Batches:
    """make_batch(b), each shape check warned about once per tuning."""

    def __init__(self, make_batch: Callable[[int], Any]):
        self.make_batch = make_batch
        self._first: Dict[int, List[int]] = {}  # the first tensor's shape of the first batch of b samples
        self._warned_size = self._warned_varying = False

    def draw(self, b: int) -> Any:
        try:
            batch = self.make_batch(b)
        except StopIteration:  # escaping tune(), it printed nothing, and would end a caller's loop silently
            raise ValueError(f"make_batch({b}) raised StopIteration: its data ran out (a DataLoader iterator with "
                             f"fewer than {b} samples left, or with drop_last=True and fewer than {b} in all, gives "
                             "no batch); make_batch must return a batch of any size the search asks for, up to the "
                             "per-rank batch") from None
        shape = first_shape(batch)
        if shape:
            self._check_size(b, shape)
            self._check_varying(b, shape)
        return batch

    def _check_size(self, b: int, shape: List[int]) -> None:
        # The probe would measure another micro-batch than it reports. Any dimension may be the batch's
        # (sequence-first layouts put it second), and packed or graph batches have none of size b: so
        # a warning, not an error.
        if b in shape or self._warned_size:
            return
        self._warned_size = True
        warn(f"memcomm.tune: make_batch({b}) returned a batch whose first tensor has shape {tuple(shape)}, no "
             f"dimension of {b} samples: its memory and speed are reported as those of micro-batch {b}")

    def _check_varying(self, b: int, shape: List[int]) -> None:
        # Sequences of random length: a probe fits the lengths it drew, and the recommendation ran out
        # of memory in training on a longer one. The search cannot know training's longest batch.
        first = self._first.setdefault(b, shape)
        if first == shape or self._warned_varying:
            return
        self._warned_varying = True
        warn(f"memcomm.tune: make_batch({b}) returned batches of different shapes ({tuple(first)}, then "
             f"{tuple(shape)}): the probes measure the batches they draw, and training that draws a larger one "
             "(a longer sequence) may run out of memory where its probe fitted; make_batch should return "
             "training's largest batch")


def first_shape(batch: Any) -> List[int]:
    """The shape of the first tensor in a batch (a tensor, or nested tuples, lists and dicts of them);
    [] when it holds none."""
    if isinstance(batch, torch.Tensor):
        return list(batch.shape)
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        shape = first_shape(item)
        if shape:
            return shape
    return []
