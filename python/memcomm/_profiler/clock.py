"""Each rank's clock offset to rank 0, measured over the process group when profilers start.

Note [Ranks that do not profile]: the measurement is collectives on the default group, which every
rank must join. A script that profiles rank 0 only (`if rank == 0: with memcomm.profile(...)`, as
people do with torch.profiler) had rank 0's all_gather meet the other ranks' DDP all-reduce: both
blocked until the group's timeout (30 minutes), silently. So the ranks first check in through the
group's store, which no collective uses: each sets its key and waits up to ARRIVAL_TIMEOUT_S for
the others'. Which way it goes is settled once, atomically (compare_set on one key): "go" when a
rank saw every key, "skip" when one gave up first; a rank that arrives later reads the verdict, so
no rank enters the collectives alone. Skipping records with no offset (exact on one host) and warns.
"""
import datetime
import itertools
import os
from typing import Any, List, Optional

import torch
import torch.distributed as dist

from memcomm import _memcomm
from memcomm._profiler.codes import now
from memcomm._caller import warn


def _comm_device() -> torch.device:
    """Where the default group's collectives take their tensors (NCCL: the current GPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


ARRIVAL_TIMEOUT_S = 30.0          # how long a rank waits for the others to start a profiler too
_syncs = itertools.count(1)       # this process's clock measurements, naming their store keys


def torchrun_restart() -> int:
    """torchrun's restart count of the job (TORCHELASTIC_RESTART_COUNT): 0 on its first attempt and
    without torchrun. Trace names and the clock check-in's store keys keep attempts apart by it."""
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return int(text) if text.isdigit() else 0


def _default_store() -> Optional[Any]:
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):  # a private API: without it, no check-in
        return None


def _missing_ranks(store: Any, sync: int, rank: int, world: int) -> Optional[List[int]]:
    """See Note [Ranks that do not profile]: None when every rank checked in for clock measurement
    `sync`, else the ranks that have not yet ([] for a rank that came after the others gave up)."""
    # A store can outlive an attempt (torchrun's agent store across restarts): each attempt its own keys.
    attempt = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}.{torchrun_restart()}"
    prefix = f"memcomm/profile/clock/{attempt}/{sync}"
    store.set(f"{prefix}/rank{rank}", "1")
    keys = [f"{prefix}/rank{r}" for r in range(world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=ARRIVAL_TIMEOUT_S))
        mine = b"go"
    except (RuntimeError, dist.DistError):  # DistStoreError: a timeout
        mine = b"skip"
    try:
        verdict = store.compare_set(f"{prefix}/verdict", b"", mine)
    except (RuntimeError, NotImplementedError):  # a store without compare_set: this rank's own reading
        verdict = mine
    if verdict == b"go":
        return None
    return [r for r in range(world) if not store.check([keys[r]])]


def agree_and_measure_clock(ok: bool, rounds: int = 8) -> int:
    """Every rank says whether its recorder started, then each rank's clock offset to rank 0 is
    measured by round trips. Note [Clock offsets at rendezvous] (trainer/include/memcomm/train/
    comm.hpp) does the same in C++: ranks that read rank 0's clock (Note [One clock per host]) skip
    the probes. Raises on every rank if any rank failed, so none starts training alone. Ranks that
    start no profiler within ARRIVAL_TIMEOUT_S leave the others recording without an offset (Note
    [Ranks that do not profile])."""
    rank, world = dist.get_rank(), dist.get_world_size()
    store = _default_store()
    if store is not None:
        missing = _missing_ranks(store, next(_syncs), rank, world)
        if missing is not None:
            who = (f"rank(s) {missing} started no profiler within {ARRIVAL_TIMEOUT_S:g} s" if missing else
                   f"the other ranks stopped waiting for this one (it started over {ARRIVAL_TIMEOUT_S:g} s after them)")
            warn(f"memcomm.profile: {who}, so clock offsets are not measured (they are exact on one "
                 "host); pass clock_sync=False where only some ranks profile")
            if not ok:
                raise RuntimeError("memcomm.profile could not start on this rank")
            return 0
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
