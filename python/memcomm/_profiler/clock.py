"""Each rank's clock offset to rank 0, measured over the process group when profilers start."""
import os

import torch
import torch.distributed as dist

from memcomm import _memcomm
from memcomm._profiler.codes import now


def _comm_device() -> torch.device:
    """Where the default group's collectives take their tensors (NCCL: the current GPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def agree_and_measure_clock(ok: bool, rounds: int = 8) -> int:
    """Every rank says whether its recorder started, then each rank's clock offset to rank 0 is
    measured by round trips. Note [Clock offsets at rendezvous] (trainer/include/memcomm/train/
    comm.hpp) does the same in C++: ranks that read rank 0's clock (Note [One clock per host]) skip
    the probes. Raises on every rank if any rank failed, so none starts training alone."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _comm_device()
    domain = 0 if os.environ.get("MEMCOMM_CLOCK_PROBE") == "1" else _signed64(_memcomm.clock_domain_id())
    mine = torch.tensor([int(ok), domain], dtype=torch.int64, device=dev)
    every = [torch.zeros(2, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(every, mine)
    table = [t.tolist() for t in every]
    failed = [r for r, (good, _) in enumerate(table) if not good]
    if failed:
        raise RuntimeError(f"memcomm.profile could not start on rank(s) {failed}; no rank records")
    offset = 0
    for peer in range(1, world):
        if table[peer][1] != 0 and table[peer][1] == table[0][1]:
            continue  # one clock: offset 0
        if rank == 0:
            _answer_probes(peer, rounds, dev)
        elif rank == peer:
            offset = _send_probes(rounds, dev)
    return offset


def _arrived(dev: torch.device) -> None:
    """Waits until a recv's data is really here: NCCL's recv returns once it is queued on the stream."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _answer_probes(peer: int, rounds: int, dev: torch.device) -> None:
    buf = torch.zeros(2, dtype=torch.int64, device=dev)
    for _ in range(rounds):
        dist.recv(buf, peer)
        _arrived(dev)
        t1 = now()
        buf.copy_(torch.tensor([t1, now()], dtype=torch.int64))
        dist.send(buf, peer)


def _send_probes(rounds: int, dev: torch.device) -> int:
    buf = torch.zeros(2, dtype=torch.int64, device=dev)
    probes = []
    for _ in range(rounds):
        t0 = now()
        dist.send(buf, 0)
        dist.recv(buf, 0)
        _arrived(dev)
        t3 = now()
        t1, t2 = buf.tolist()
        probes.append((t0, t1, t2, t3))
    return _memcomm.estimate_clock_offset(probes)[0]
