"""One rank of test_tuner.py's distributed runs, launched by torch.distributed.run (2 ranks, Gloo).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tune_ranks.py OUT_DIR

Each rank is a fresh process (memcomm.use_allocator is for a process's lifetime) and writes what it
decided to OUT_DIR/rank<R>.json, one entry per scenario, run one after the other (one launch):
  rank1-backward  only rank 1 runs out of memory, in backward: a hook there asks for b * EXTRA more
                  bytes. Tunes with search "memcomm", then "grid" (the exhaustive reference).
  rank1-raises    rank 1's loss_fn raises ValueError once the micro-batch reaches 16.
  other-batch     rank 1 asks for another global batch: both ranks refuse before any probe.
  rank1-bad-arg   rank 1 alone passes a bad argument: it raises ValueError, rank 0 TuneError.
"""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import memcomm

LIMIT = 48 << 20               # bytes each rank's allocator may reserve
EXTRA = 384 << 10              # rank 1's backward asks for this much more per sample
GLOBAL_BATCH = 512             # 256 per rank: candidates 1, 2, 4, ... 256
QUICK = dict(probe_seconds=0.0, measured_steps=3, verify_steps=3, verbose=False)


def mlp(rank: int) -> nn.Module:
    """memcomm-train's MLP (trainer/src/models.cpp) at --hidden 256, the same on every rank; the
    random data after it is each rank's own."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))
    torch.manual_seed(1 + rank)
    return model


def make_batch(b: int):
    return torch.randn(b, 784), torch.randint(0, 10, (b,))


def heavy_backward_loss(rank: int):
    """loss_fn whose backward, on rank 1 only, allocates b * EXTRA bytes for a moment (mid-backward:
    the hook runs when the first layer's output gradient is ready)."""
    def loss_fn(model: nn.Module, batch):
        x, y = batch
        h = model[1](model[0](x))
        if rank == 1:
            def heavier(grad: torch.Tensor) -> None:
                torch.empty(x.shape[0] * EXTRA, dtype=torch.uint8)
            h.register_hook(heavier)
        out = model[5](model[4](model[3](model[2](h))))
        return F.cross_entropy(out, y)
    return loss_fn


def decisions(r: dict) -> dict:
    """What every rank must agree on (wall times are each rank's own)."""
    return {"largest_feasible": r["largest_feasible"], "smallest_infeasible": r["smallest_infeasible"],
            "boundary_probes": r["boundary_probes"], "recommendation": r["recommendation"],
            "trials": [(t["purpose"], t["micro_batch"], t["bucket_mb"], t["oom"], t["oom_where"], t["peak_reserved"])
                       for t in r["trials"]]}


def rank1_backward(rank: int) -> dict:
    model = mlp(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]
    out = {}
    for search in ("memcomm", "grid"):
        r = memcomm.tune(model, opt, heavy_backward_loss(rank), make_batch, GLOBAL_BATCH, search=search, **QUICK)
        out[search] = decisions(r)
    out["state_restored"] = all(torch.equal(a, p) for a, p in zip(before, model.parameters())) and not opt.state
    out["grads_none"] = all(p.grad is None for p in model.parameters())
    return out


def rank1_raises(rank: int) -> dict:
    model = mlp(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def loss_fn(m: nn.Module, batch):
        if rank == 1 and batch[0].shape[0] >= 16:
            raise ValueError("rank 1's own step failed")
        return F.cross_entropy(m(batch[0]), batch[1])
    try:
        memcomm.tune(model, opt, loss_fn, make_batch, GLOBAL_BATCH, **QUICK)
    except Exception as e:  # noqa: BLE001  (what the test checks)
        return {"raised": type(e).__name__, "message": str(e),
                "raised_in": traceback.extract_tb(e.__traceback__)[-1].name}
    return {"raised": None}


def other_batch(rank: int) -> dict:
    model = mlp(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        memcomm.tune(model, opt, heavy_backward_loss(rank), make_batch, GLOBAL_BATCH * (1 + rank), **QUICK)
    except ValueError as e:
        return {"raised": "ValueError", "message": str(e)}
    return {"raised": None}


def rank1_bad_arg(rank: int) -> dict:
    model = mlp(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        memcomm.tune(model, opt, heavy_backward_loss(rank), make_batch, GLOBAL_BATCH,
                     search="bogus" if rank == 1 else "memcomm", **QUICK)
    except Exception as e:  # noqa: BLE001  (what the test checks)
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None}


def main() -> None:
    out_dir = sys.argv[1]
    torch.set_num_threads(1)
    memcomm.use_allocator("cpu", memory_limit=LIMIT)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"rank1-backward": rank1_backward(rank), "rank1-raises": rank1_raises(rank),
              "other-batch": other_batch(rank), "rank1-bad-arg": rank1_bad_arg(rank)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    # Both ranks reach the end before either tears Gloo down. Once, in a loaded CI run, rank 1 aborted
    # ("terminate called without an active exception") after both had written their results, with
    # rank 0 already past destroy_process_group: torch's teardown with a peer gone, not the tuner.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)


if __name__ == "__main__":
    main()
