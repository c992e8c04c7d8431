"""Side by side: a cached CPU alloc+free through a Python-created tensor, torch's default CPU allocator
against memcomm's (issue 16's target: memcomm no slower).

    .venv/bin/python bench/python/allocator_speed.py [--rounds 5] [--iters 200000] [--workload cached|holes]

Both workers import memcomm, and only one installs its allocator: the package's import (numpy,
torch.distributed) makes Python's heap larger, and so its garbage collections slower, which alone
showed as a 1.4x "slowdown" when only one side imported it.
Each measurement runs in a fresh process (installing memcomm's allocator lasts for the process), and the
allocators alternate round by round so that both see the same machine load. Sizes cycle through
64 B .. 1 MiB, so every size class is used; after the first pass every request is served from cache.
Three workers: torch's default, memcomm's with its defaults, and memcomm's keeping a history for
dump_snapshot (use_allocator(history=100_000)). Prints per round ns per alloc+free, then the medians
and the ratios to the default.

--workload holes measures growth beside many free blocks instead (Note [Counting releasable bytes]):
2 x iters 256-byte tensors, every other one freed (iters holes no later request fits), then iters
1 KiB tensors, which grow the heap; ns per tensor over the whole run, Python's list work included.
"""
import argparse
import statistics
import subprocess
import sys

SETUP = r"""
import sys, time, torch
import memcomm                                     # both: the same modules loaded, the same heap for Python's GC
if sys.argv[1] == "memcomm":
    memcomm.use_allocator("cpu")                   # its defaults (no history)
elif sys.argv[1] == "memcomm+history":
    memcomm.use_allocator("cpu", history=100_000)  # the last 100k events kept for dump_snapshot
iters = int(sys.argv[2])
"""

WORKER = SETUP + r"""
sizes = [64 << (i % 15) for i in range(64)]       # 64 B .. 1 MiB
for n in sizes * 10:                               # warm the cache
    torch.empty(n, dtype=torch.uint8)
empty, u8 = torch.empty, torch.uint8
start = time.perf_counter_ns()
for i in range(iters):
    empty(sizes[i & 63], dtype=u8)                 # allocated, then freed when the reference drops
print((time.perf_counter_ns() - start) / iters)
"""

HOLES_WORKER = SETUP + r"""
empty, u8 = torch.empty, torch.uint8
start = time.perf_counter_ns()
kept = [empty(256, dtype=u8) for _ in range(2 * iters)]
del kept[::2]                                      # iters holes of 256 B between live tensors
grown = [empty(1024, dtype=u8) for _ in range(iters)]  # no hole fits: each growth sees them all
print((time.perf_counter_ns() - start) / (3 * iters))
"""


def run(worker: str, kind: str, iters: int) -> float:
    out = subprocess.run([sys.executable, "-c", worker, kind, str(iters)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=200_000)
    parser.add_argument("--workload", choices=("cached", "holes"), default="cached")
    args = parser.parse_args()
    worker = WORKER if args.workload == "cached" else HOLES_WORKER
    results = {"default": [], "memcomm": [], "memcomm+history": []}
    for r in range(args.rounds):
        for kind in results:
            results[kind].append(run(worker, kind, args.iters))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f} ns" for k, v in results.items()))
    medians = {k: statistics.median(v) for k, v in results.items()}
    what = "torch.empty + free" if args.workload == "cached" else "tensor with holes"
    print(f"median ns per {what}: " + ", ".join(f"{k} {m:.0f}" for k, m in medians.items()))
    for k in ("memcomm", "memcomm+history"):
        print(f"{k} / default: {medians[k] / medians['default']:.3f}")


if __name__ == "__main__":
    main()
