"""PyTorch's Python DDP on the same model, data, batch, threads and steps as memcomm-train.

Run by bench/trainer/compare_ddp.py; prints one JSON line with the step-time statistics of rank 0.
The models mirror trainer/src/models.cpp layer for layer.
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def load_fashion_mnist(folder):
    with gzip.open(os.path.join(folder, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(folder, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.copy()).float() / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


class Mlp(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1, self.fc2, self.out = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)

    def forward(self, x):
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1)
        self.fc1, self.out = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.out(F.relu(self.fc1(h.flatten(1))))


def synthetic_rows(n=60000):
    # Stands in for Fashion-MNIST where the dataset is not installed (memcomm-train --dataset tabular).
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def worker(rank, args, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    # NCCL needs one GPU per rank; ranks sharing one GPU use Gloo, as memcomm-train's --backend auto.
    backend = "nccl" if cuda and args.nproc <= torch.cuda.device_count() else "gloo"
    dev = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=args.nproc)
    x, y = synthetic_rows() if args.dataset == "tabular" else load_fashion_mnist(args.data_dir)
    torch.manual_seed(0)
    model = (Mlp(args.hidden) if args.model == "mlp" else Cnn()).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g)[rank::args.nproc]
    times = []
    for step in range(args.steps):
        idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
        # The batch is ready before the clock starts, as with memcomm's prefetch.
        xb, yb = x[idx].to(dev, non_blocking=True), y[idx].to(dev, non_blocking=True)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()
        opt.step()
        loss.item()  # one host sync per step, as memcomm-train's loss logging
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        t = sorted(times[args.warmup:])
        # memcomm-train's rule (Note [Nearest-rank percentile]): the ceil(n/2)-th smallest.
        out.put({"step_ms_p50": 1e3 * t[max(math.ceil(len(t) / 2), 1) - 1], "step_ms_mean": 1e3 * sum(t) / len(t)})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--port", type=int, default=29731)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--dataset", choices=["fashion-mnist", "tabular"], default="fashion-mnist")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(args, args.port, q), nprocs=args.nproc, join=True)
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
