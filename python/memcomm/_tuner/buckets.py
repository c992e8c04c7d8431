"""Gradient buckets, all-reduced as DDP's are.

Note [Gradient buckets from Python]: with several ranks the tuner holds DDP's buckets itself (a
flat tensor per bucket, parameters in reverse order, the first bucket 1 MiB and the others
bucket_mb), alive for the whole tuning as DDP's are for the whole run, and rebuilt, with the change
agreed, when a probe asks for another size. Gradients are copied in, all-reduced, averaged and
copied back, as DDP does with gradient_as_bucket_view=False (its default). Communication is not
overlapped with backward here, so the step time counts all of it as exposed. A sparse gradient
(nn.Embedding(sparse=True)) travels dense in its bucket and comes back sparse, averaged; DDP
all-reduces it sparse, so its bytes on the wire are DDP's upper bound.
"""
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from memcomm._tuner.agreement import Group

_FIRST_BUCKET_BYTES = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1 << 20) if dist.is_available() else 1 << 20


class Buckets:
    """DDP's bucket layout over `params` at `bucket_mb` MiB (Note [Gradient buckets from Python])."""

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

    def all_reduce(self, group: Group) -> None:
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
            if p.grad is None:
                part.zero_()
            else:
                part.copy_((p.grad.to_dense() if p.grad.is_sparse else p.grad).reshape(-1))
            offset += p.numel()

    @staticmethod
    def _unpack(flat: torch.Tensor, ps: List[torch.nn.Parameter]) -> None:
        offset = 0
        for p in ps:
            if p.grad is not None and p.grad.is_sparse:
                p.grad = flat[offset:offset + p.numel()].view_as(p).to_sparse(p.grad.sparse_dim())
            elif p.grad is not None:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
            offset += p.numel()
