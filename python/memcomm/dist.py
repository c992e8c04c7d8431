"""torch.distributed's collectives, recorded: `memcomm.dist.all_reduce(t)` does what
`torch.distributed.all_reduce(t)` does and, while a profiler runs, records the collective (issue,
end, bytes, element type, communicator and sequence number, which match the same call on every
rank). The arguments of torch.distributed's, by the same names, and its results; with async_op=True
the end is when the work completes. Bytes follow nccl-tests' "size": the gathered total for all_gather.
"""
from typing import Any, List, Optional

import torch
import torch.distributed as _dist

from memcomm._profiler import running as _running
from memcomm._profiler.codes import dtype_code as _dtype_code
from memcomm._profiler.collectives import hook_bucket as _hook_bucket
from memcomm._profiler.collectives import record_collective as _record_collective

ReduceOp = _dist.ReduceOp


def _world(group: Any) -> int:
    return _dist.get_world_size(group) if group is not None else _dist.get_world_size()


def _nbytes(name: str, tensor: Any) -> int:
    """A tensor argument's bytes; a TypeError naming it for anything else (a list raised AttributeError)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    return tensor.nbytes


def _run(op: str, tensor: Optional[torch.Tensor], nbytes: int, group: Any, async_op: bool, call: Any) -> Any:
    p = _running.profiler
    if p is None:
        return call()
    dtype = _dtype_code(tensor.dtype) if tensor is not None else 0
    return _record_collective(p, op, dtype, nbytes, group, _hook_bucket(), call, async_op)


def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
    """torch.distributed.all_reduce, recorded."""
    return _run("all_reduce", tensor, _nbytes("tensor", tensor), group, async_op,
                lambda: _dist.all_reduce(tensor, op=op, group=group, async_op=async_op))


def broadcast(tensor: torch.Tensor, src: Optional[int] = None, group: Any = None, async_op: bool = False,
              **kwargs: Any) -> Any:
    """torch.distributed.broadcast, recorded (other keywords, such as group_src, go to torch)."""
    return _run("broadcast", tensor, _nbytes("tensor", tensor), group, async_op,
                lambda: _dist.broadcast(tensor, src, group=group, async_op=async_op, **kwargs))


def reduce(tensor: torch.Tensor, dst: Optional[int] = None, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, **kwargs: Any) -> Any:
    """torch.distributed.reduce, recorded (other keywords, such as group_dst, go to torch)."""
    return _run("reduce", tensor, _nbytes("tensor", tensor), group, async_op,
                lambda: _dist.reduce(tensor, dst, op=op, group=group, async_op=async_op, **kwargs))


def all_gather(tensor_list: List[torch.Tensor], tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> Any:
    """torch.distributed.all_gather, recorded (bytes: the gathered total)."""
    return _run("all_gather", tensor, _nbytes("tensor", tensor) * _world(group), group, async_op,
                lambda: _dist.all_gather(tensor_list, tensor, group=group, async_op=async_op))


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None,
                           async_op: bool = False) -> Any:
    """torch.distributed.all_gather_into_tensor, recorded (bytes: the gathered total)."""
    _nbytes("input_tensor", input_tensor)
    return _run("all_gather", input_tensor, _nbytes("output_tensor", output_tensor), group, async_op,
                lambda: _dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op))


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None,
                          async_op: bool = False) -> Any:
    """torch.distributed.reduce_scatter_tensor, recorded (bytes: the input's)."""
    return _run("reduce_scatter", input, _nbytes("input", input), group, async_op,
                lambda: _dist.reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op))


def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes: Optional[List[int]] = None,
                      input_split_sizes: Optional[List[int]] = None, group: Any = None, async_op: bool = False) -> Any:
    """torch.distributed.all_to_all_single, recorded (bytes: the input's, whatever the splits)."""
    return _run("all_to_all", input, _nbytes("input", input), group, async_op,
                lambda: _dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes, group=group,
                                                async_op=async_op))


def barrier(group: Any = None, async_op: bool = False, device_ids: Optional[List[int]] = None) -> Any:
    """torch.distributed.barrier, recorded."""
    return _run("barrier", None, 0, group, async_op,
                lambda: _dist.barrier(group=group, async_op=async_op, device_ids=device_ids))


__all__ = ["all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
           "all_to_all_single", "barrier", "ReduceOp"]
