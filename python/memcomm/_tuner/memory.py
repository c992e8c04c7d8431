"""The memory limit a tuning runs under, its allocator's peaks and cache, and the device clock."""
import time
from typing import Optional, Tuple

import torch

from memcomm import _memcomm, allocator as _allocator
from memcomm._tuner.options import check_int
from memcomm._caller import warn


class Memory:
    """The allocator the limit is enforced by, and its peaks (memcomm's CPU allocator; on CUDA,
    torch.cuda's figures, which memcomm's CUDA allocator also fills when it is installed)."""

    def __init__(self, device: torch.device, memory_limit: Optional[int]):
        self.device = device
        if memory_limit is not None:
            memory_limit = check_int("memory_limit", memory_limit, 1)
        self.limit = self._cpu_limit(memory_limit) if device.type == "cpu" else self._cuda_limit(memory_limit)

    @staticmethod
    def _cpu_limit(memory_limit: Optional[int]) -> int:
        cap = _allocator._installed.get("cpu", {}).get("capacity", 0)
        if cap == 0:
            raise RuntimeError("memcomm.tune on the CPU needs memcomm.use_allocator('cpu', memory_limit=...) before "
                               "the model is built: its cap makes the limit real")
        if memory_limit is not None and memory_limit != cap:
            raise ValueError(f"memory_limit {memory_limit} differs from the cap memcomm's CPU allocator enforces "
                             f"({cap}); leave it out, or install the allocator with the same limit")
        return cap

    def _cuda_limit(self, memory_limit: Optional[int]) -> int:
        cap = _allocator._installed.get("cuda", {}).get("capacity", 0)
        if cap:
            if memory_limit is not None and memory_limit != cap:
                raise ValueError(f"memory_limit {memory_limit} differs from the cap memcomm's CUDA allocator "
                                 f"enforces ({cap}); leave it out, or install the allocator with the same limit")
            return cap
        if "cuda" in _allocator._installed:  # memcomm's CUDA allocator refuses torch's fraction cap
            raise RuntimeError("memcomm.tune on CUDA with memcomm's allocator needs "
                               "memcomm.use_allocator('cuda', memory_limit=...): its cap makes the limit real")
        free, total = torch.cuda.mem_get_info(self.device)
        limit = memory_limit if memory_limit is not None else free + torch.cuda.memory_reserved(self.device)
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), self.device)
        self.capped_torch = True
        return limit

    def check_model_inside(self, model: torch.nn.Module) -> None:
        """Warns when memcomm's CPU allocator holds less than the model's parameters: it was installed
        after the model was built, so the parameters sit outside the cap and outside every peak."""
        if self.device.type != "cpu":
            return
        params = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type == "cpu")
        held = int(_allocator.memory_stats("cpu")["allocated_bytes.all.current"])
        if held < params:
            warn(f"memcomm.tune: the model's parameters ({_memcomm.format_bytes(params)}) are not in "
                 f"memcomm's CPU allocator (it holds {_memcomm.format_bytes(held)}): it was installed after "
                 f"the model was built, so the limit and the peaks leave them out; call "
                 f"memcomm.use_allocator('cpu', memory_limit=...) before building the model")

    capped_torch = False  # torch's CUDA allocator was capped here, and is uncapped by close()

    def close(self) -> None:
        """Gives torch's CUDA allocator its whole device back when tune() capped it, and leaves peak
        counters that a probe did not set (Note [What the probes leave as it was])."""
        self.release_cache()
        self.reset_peaks()
        if self.capped_torch:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def clock(self) -> float:
        """Seconds, once the device's queued work is done (CUDA kernels run after their launch)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def release_cache(self) -> None:
        if self.device.type == "cpu":
            _allocator.empty_cache("cpu")
        else:
            torch.cuda.empty_cache()

    def reset_peaks(self) -> None:
        if self.device.type == "cpu":
            _allocator.reset_peak_memory_stats("cpu")
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> Tuple[int, int]:
        """(peak allocated, peak reserved) bytes since reset_peaks()."""
        s = _allocator.memory_stats("cpu") if self.device.type == "cpu" else torch.cuda.memory_stats(self.device)
        return int(s["allocated_bytes.all.peak"]), int(s["reserved_bytes.all.peak"])
