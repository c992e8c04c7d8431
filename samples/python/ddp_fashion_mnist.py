"""The Fashion-MNIST loop with DistributedDataParallel and gradient accumulation, with memcomm's lines
added (marked "memcomm"). On the CPU it runs over Gloo:

    .venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \
        samples/python/ddp_fashion_mnist.py --trace ddp.mct [--accum 2] [--max-steps 50]

Each rank writes its own trace (ddp.rank0.mct, ddp.rank1.mct); memcomm-view opens them together.
The bucket all-reduces are recorded through DDP's comm hook, the loader's waits through memcomm.loader.
"""
import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import memcomm                                                   # memcomm
from fashion_data import FashionMNIST, SmallCNN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="micro-batch per rank")
    parser.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--trace", default="ddp_fashion_mnist.mct")
    parser.add_argument("--live", default=None)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if use_cuda else "cpu")
    memcomm.use_allocator(device.type)                          # memcomm
    torch.manual_seed(0)
    model = DDP(SmallCNN().to(device), device_ids=[device.index] if use_cuda else None)
    model.register_comm_hook(None, memcomm.comm_hook())         # memcomm: records each bucket's all-reduce
    dataset = FashionMNIST(train=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=DistributedSampler(dataset),
                        num_workers=args.workers, pin_memory=use_cuda)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    with memcomm.profile(trace=args.trace, live=args.live):      # memcomm
        step = 0
        optimizer.zero_grad()
        for i, (inputs, targets) in enumerate(memcomm.loader(loader)):  # memcomm
            inputs, targets = inputs.to(device), targets.to(device)
            last_micro = (i + 1) % args.accum == 0
            with contextlib.nullcontext() if last_micro else model.no_sync():  # all-reduce on the last one only
                loss = criterion(model(inputs), targets) / args.accum
                loss.backward()
            if not last_micro:
                continue
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if rank == 0 and step % args.log_every == 0:
                print(f"step {step}, loss {loss.item() * args.accum:.4f}", flush=True)
            if step >= args.max_steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
