"""memcomm's caching allocator behind torch's tensors, and what it holds.

use_allocator() swaps it in for the CPU (every CPU tensor allocated afterwards; earlier tensors keep
their own deleter and stay valid) or for CUDA (torch.cuda's memory_stats, max_memory_allocated,
empty_cache and memory._snapshot keep working, since memcomm's CUDA allocator fills them).

dump_snapshot() writes a pickle in PyTorch's snapshot format ({"segments", "device_traces"}), so
memcomm-view, memcomm-replay and PyTorch's memory_viz all open it. Stack frames are not recorded:
every entry has "frames": []. Its "device_traces" hold events only when use_allocator(history=N) asked
for them, as PyTorch's hold them only after _record_memory_history().
"""
import os
import pickle
import threading
from typing import Any, Dict, Optional, Union

import torch

from memcomm import _memcomm
from memcomm._numbers import is_int, is_real

DeviceLike = Union[str, int, torch.device]

_installed: Dict[str, Dict[str, Any]] = {}   # "cpu" / "cuda" -> the options it was installed with
_install_lock = threading.Lock()
# Who installed an allocator when not the script itself: "python -m memcomm --allocator cpu".
installed_by: Dict[str, str] = {}


def _device_index(device: DeviceLike) -> int:
    """-1 for the CPU, the CUDA device number otherwise."""
    if is_int(device):
        if not -1 <= device < 1 << 16:
            raise ValueError(f"device must be -1 (CPU) or a CUDA device number, got {device}")
        return int(device)
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N', an int or a torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"not a device: {device!r} ({e})") from None
    if dev.type == "cpu":
        return -1
    if dev.type == "cuda":
        return dev.index if dev.index is not None else (torch.cuda.current_device() if torch.cuda.is_available() else 0)
    raise ValueError(f"memcomm's allocator serves 'cpu' and 'cuda' memory, not {dev.type!r}")


def _check_options(expandable: Any, memory_limit: Any, gc_threshold: Any, history: Any) -> Dict[str, Any]:
    if not isinstance(expandable, bool):  # numpy's bool_ is named bool too: say which
        raise TypeError(f"expandable must be True or False, got {expandable!r} of type "
                        f"{type(expandable).__module__}.{type(expandable).__qualname__}")
    if memory_limit is None:
        memory_limit = 0
    if not is_int(memory_limit):
        raise TypeError(f"memory_limit must be a number of bytes (int) or None, got {type(memory_limit).__name__}")
    memory_limit = int(memory_limit)
    if not 0 <= memory_limit <= 1 << 62:  # memcomm's sizes stop at 4 EiB (bytes.hpp); 2**64 - 1 failed at the first tensor
        raise ValueError(f"memory_limit must be a number of bytes from 0 to 2**62, got {memory_limit}")
    if gc_threshold is None:
        gc_threshold = 0.0
    if not is_real(gc_threshold):
        raise TypeError(f"gc_threshold must be a float in [0, 1) or None, got {type(gc_threshold).__name__}")
    if not 0.0 <= gc_threshold < 1.0:
        raise ValueError(f"gc_threshold must be in [0, 1) (a fraction of memory_limit), got {gc_threshold}")
    if gc_threshold > 0 and memory_limit == 0:
        raise ValueError("gc_threshold needs a memory_limit: it is a fraction of it")
    if not is_int(history) or not 0 <= history < 1 << 31:  # python -m memcomm --history's range
        raise ValueError(f"history must be a number of events from 0 to 2**31 - 1, got {history!r}")
    return {"expandable": expandable, "capacity": memory_limit, "gc_threshold": float(gc_threshold),
            "history_events": int(history)}


def use_allocator(device: str = "cpu", *, expandable: bool = True, memory_limit: Optional[int] = None,
                  gc_threshold: Optional[float] = None, history: int = 0, cuda_source: str = "auto") -> None:
    """Makes memcomm's caching allocator serve torch's `device` ("cpu" or "cuda") tensors.

    expandable:   grow segments by mapping pages into one reserved range (memcomm's default policy);
                  False gives whole segments, as PyTorch's default allocator.
    memory_limit: bytes the allocator may reserve (None: no limit); over it, allocations raise
                  torch.OutOfMemoryError.
    gc_threshold: with a limit, give back cached blocks unused for a while once reserved bytes pass
                  this fraction of it (None: off).
    history:      the last N allocator events kept for dump_snapshot()'s "device_traces" (memory_viz's
                  Active Memory Timeline), like torch.cuda.memory._record_memory_history(max_entries=N).
                  0 (the default, as in PyTorch) keeps none: writing every event into a ring of
                  N x 48 bytes costs cache misses, about 0.3 us per alloc+free (bench/python/allocator_speed.py).
    cuda_source:  "auto" (virtual memory management where the driver has it), "cuda-vmm" or "cuda".

    Calling it again with the same options does nothing; with other options it is a RuntimeError,
    as is installing the CUDA allocator after torch's own has allocated CUDA memory.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"use_allocator serves 'cpu' or 'cuda', got {device!r}")
    if cuda_source not in ("auto", "cuda-vmm", "cuda"):
        raise ValueError(f"cuda_source must be 'auto', 'cuda-vmm' or 'cuda', got {cuda_source!r}")
    options = _check_options(expandable, memory_limit, gc_threshold, history)
    with _install_lock:
        if device in _installed:
            if _installed[device] != options:
                by = f", by {installed_by[device]}" if device in installed_by else ""
                raise RuntimeError(f"memcomm's {device} allocator is already installed with other options "
                                   f"({_installed[device]}{by}); it serves the process until it exits")
            return
        if device == "cpu":
            _memcomm.install_cpu_allocator(**options)
        else:
            if torch.cuda.is_available() and torch.cuda.memory_reserved() > 0:
                raise RuntimeError("use_allocator('cuda') must come before the first CUDA allocation: torch's own "
                                   f"allocator already holds {torch.cuda.memory_reserved()} bytes")
            _memcomm.install_cuda_allocator(source=cuda_source, **options)
        _installed[device] = options
    # A recording that began before the allocator served this process observes it from now on.
    from memcomm import profiler
    running = profiler.current()
    if running is not None:
        running._observe_allocator()


def memory_stats(device: DeviceLike = "cpu") -> Dict[str, Union[int, float]]:
    """The allocator's statistics under torch.cuda.memory_stats()'s names ("allocated_bytes.all.peak",
    "reserved_bytes.all.current", "num_alloc_retries", ...), plus memcomm's own ("memcomm.fragmentation":
    1 - peak allocated / peak reserved, map and unmap counts)."""
    return _memcomm.memory_stats(_device_index(device))


def empty_cache(device: DeviceLike = "cpu") -> None:
    """Gives every cached block that no tensor uses back to the system."""
    _memcomm.empty_cache(_device_index(device))


def reset_peak_memory_stats(device: DeviceLike = "cpu") -> None:
    """Starts the ".peak" figures again from the current values."""
    _memcomm.reset_peak_memory_stats(_device_index(device))


def snapshot(device: DeviceLike = "cpu") -> Dict[str, Any]:
    """The allocator's state in torch.cuda.memory._snapshot()'s format: {"segments": [...],
    "device_traces": [[...]]}. On CUDA it is torch's own call, which memcomm's allocator answers."""
    index = _device_index(device)
    if index >= 0 and "cuda" in _installed:
        snap = torch.cuda.memory._snapshot()
        traces = snap.setdefault("device_traces", [])
        while len(traces) <= index:
            traces.append([])
        traces[index] = _memcomm.snapshot_trace(index)
        return snap
    # The host's snapshot is a one-device snapshot: its segments name device 0, the index of its trace
    # in device_traces, which is how memory_viz and memcomm-replay pair them (with -1, a replay of a
    # history that had wrapped left out every block allocated before it, and under-reported live bytes).
    segments = _memcomm.snapshot_segments(index)
    for segment in segments:
        segment["device"] = 0
    return {"segments": segments, "device_traces": [_memcomm.snapshot_trace(index)],
            "allocator_settings": {"memcomm": True, "host": True}}


def dump_snapshot(path: Union[str, os.PathLike], device: DeviceLike = "cpu") -> None:
    """Writes snapshot(device) as a pickle that memcomm-view, memcomm-replay and memory_viz open. The
    file appears complete or not at all (written beside it, then renamed), unless it is no regular file
    (a device, a FIFO): that is written in place, as memcomm's tools write one (a rename replaced
    /dev/full with a regular file, and a full disk went unreported)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"dump_snapshot: no directory {directory!r} for {path!r}")
    snap = snapshot(device)
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
        return
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
