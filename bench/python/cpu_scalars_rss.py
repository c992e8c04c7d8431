"""Resident memory a million scalar CPU tensors add, under torch's CPU allocator or memcomm's.

    .venv/bin/python bench/python/cpu_scalars_rss.py torch
    .venv/bin/python bench/python/cpu_scalars_rss.py memcomm

Run both in turn (each in its own process): the ratio is memcomm's rounding and bookkeeping per
small block against malloc's (bench/results/allocator-cpu.md, "Host memory rounds to 64 B")."""
import os
import sys

import torch


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("torch", "memcomm"):
        print("usage: cpu_scalars_rss.py torch|memcomm", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "memcomm":
        import memcomm
        memcomm.use_allocator("cpu")
    before = resident_bytes()
    scalars = [torch.tensor(float(i)) for i in range(1_000_000)]
    print(f"{sys.argv[1]}: {(resident_bytes() - before) / 1e6:.1f} MB for {len(scalars)} scalars")


if __name__ == "__main__":
    main()
