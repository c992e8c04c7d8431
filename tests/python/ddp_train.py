"""A small DDP training run (CPU, Gloo) for the tests: `python -m torch.distributed.run --nproc-per-node 2
ddp_train.py OUT [--memcomm]`. Rank 0 saves the final parameters to OUT. With --memcomm, memcomm's
CPU allocator serves every tensor of both ranks, the dataset's included, which a DataLoader worker (a
forked child) reads and batches (Note [Host pages across fork] in allocator/core/host_source.cpp)."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--memcomm", action="store_true")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    if args.memcomm:
        import memcomm
        memcomm.use_allocator("cpu")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 13 * 13, 10))
    ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets, so the overlap path runs
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    samples = TensorDataset(torch.randn(16 * args.steps, 1, 28, 28, generator=data),
                            torch.randint(0, 10, (16 * args.steps,), generator=data))
    for x, y in DataLoader(samples, batch_size=16, num_workers=1):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.out)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)


if __name__ == "__main__":
    main()
