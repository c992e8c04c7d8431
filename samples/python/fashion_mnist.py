"""The seed tutorial's training loop on Fashion-MNIST, with memcomm's lines added (marked "memcomm").

nn.DataParallel when several GPUs exist, a DataLoader with workers and pinned memory, SGD, a log line
every N batches: an ordinary PyTorch script. The memcomm lines put its allocator behind the tensors,
record a trace that memcomm-view opens, and dump an allocator snapshot at the end.

    .venv/bin/python samples/python/fashion_mnist.py --trace run.mct [--epochs 1] [--max-batches 200]
"""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader

import memcomm                                                   # memcomm
from fashion_data import FashionMNIST, SmallCNN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many (0: all)")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trace", default="fashion_mnist.mct", help="memcomm trace to write")
    parser.add_argument("--live", default=None, help="also stream to a memcomm-view at HOST:PORT")
    parser.add_argument("--snapshot", default=None, help="write the allocator's snapshot pickle here")
    args = parser.parse_args()

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    memcomm.use_allocator(device.type, history=100_000 if args.snapshot else 0)  # memcomm: before the first tensor
    model = SmallCNN().to(device)
    if torch.cuda.device_count() > 1:
        print(f"Using {torch.cuda.device_count()} GPUs")
        model = nn.DataParallel(model)
    train_loader = DataLoader(FashionMNIST(train=True), batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers, pin_memory=torch.cuda.is_available())
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    with memcomm.profile(trace=args.trace, live=args.live):      # memcomm
        for epoch in range(args.epochs):
            for batch_idx, (inputs, targets) in enumerate(memcomm.loader(train_loader)):  # memcomm: wait time
                if args.max_batches and batch_idx >= args.max_batches:
                    break
                inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
                optimizer.zero_grad()
                loss = criterion(model(inputs), targets)
                loss.backward()
                optimizer.step()
                if (batch_idx + 1) % args.log_every == 0:
                    print(f"Epoch [{epoch + 1}/{args.epochs}], Batch [{batch_idx + 1}/{len(train_loader)}], "
                          f"Loss: {loss.item():.4f}", flush=True)
    stats = memcomm.memory_stats(device.type)                    # memcomm
    print(f"peak allocated {stats['allocated_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"peak reserved {stats['reserved_bytes.all.peak'] / 2**20:.1f} MiB")
    if args.snapshot:
        memcomm.dump_snapshot(args.snapshot, device.type)       # memcomm


if __name__ == "__main__":
    main()
