"""What profiling costs a DDP training step from Python: no profiler, memcomm.profile, torch.profiler
(CPU activity, profile_memory=True), and each after it stopped, side by side in one run.

    PYTHONPATH=build/python .venv/bin/python bench/python/profile_overhead.py [--steps 30 --rounds 4]

The setting is the DDP sample's: 2 ranks on the CPU (torch.distributed.run, Gloo), a small CNN,
Fashion-MNIST-shaped random data through a DataLoader wrapped in memcomm.loader, DDP's bucket
all-reduces through memcomm.comm_hook(), SGD. It runs two jobs, one per CPU allocator:
- memcomm's (memcomm.use_allocator("cpu")): memcomm.profile records every allocator event;
  torch.profiler sees no CPU memory there (memcomm's allocator does not report to it);
- torch's default: torch.profiler's profile_memory records every allocation; memcomm records phases
  and collectives but no allocator events (it observes only its own allocator).
So each profiler is timed where it records the most: memcomm's figures come from the first job,
torch.profiler's from the second, and the tables show both.

Note [Timing profilers side by side]: the machine is shared, so its speed drifts within a run. A
job first times `rounds` blocks of `steps` steps with nothing installed (the baseline), then
alternates a block under memcomm with a block after its stop(), then a block under torch.profiler
with a block after its stop (last, since a profiler that leaves a cost behind would spoil what
follows). "vs baseline" is a condition's median step over the baseline's. "vs neighbours (paired)"
divides each profiled block's median by the mean of the two unprofiled blocks around it and takes
the median of those ratios: blocks a few steps apart share the machine's drift, so this is the
figure to read when the machine is busy. Rank 0's steps are timed (DDP's all-reduce makes
the ranks wait for each other every step), in wall time and in the training thread's CPU time: the
second leaves out waiting (for the other rank, for a core the machine's other work holds), so it
shows the hooks' own cost with less noise; the recorder thread's CPU time is given beside it. The
profilers' start and stop are outside the blocks.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Tuple

CONDITIONS = ["baseline", "memcomm", "after memcomm stop", "torch.profiler", "after torch.profiler stop"]


def worker(args: argparse.Namespace) -> None:
    """One rank of a job: trains and times blocks of steps; rank 0 writes the times to args.out."""
    import torch
    import torch.distributed as dist
    from torch import nn
    import memcomm

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.allocator == "memcomm":
        memcomm.use_allocator("cpu")
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(None, memcomm.comm_hook())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    data = torch.utils.data.TensorDataset(torch.randn(args.batch * 64, 1, 28, 28), torch.randint(0, 10, (args.batch * 64,)))
    loader = memcomm.loader(torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True))
    batches = iter(())

    def block(condition: str) -> None:
        nonlocal batches
        n = 0
        blocks[condition].append(len(wall[condition]))
        while n < args.steps:
            t, c = time.perf_counter(), time.thread_time()
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                continue
            crit(ddp(x), y).backward()
            opt.step()
            opt.zero_grad()
            wall[condition].append(time.perf_counter() - t)
            cpu[condition].append(time.thread_time() - c)
            n += 1

    trace_dir = tempfile.mkdtemp(prefix="memcomm-bench-")
    wall: Dict[str, List[float]] = {c: [] for c in CONDITIONS + ["warm-up"]}
    cpu: Dict[str, List[float]] = {c: [] for c in CONDITIONS + ["warm-up"]}
    blocks: Dict[str, List[int]] = {c: [] for c in CONDITIONS + ["warm-up"]}  # where each block starts
    extra: Dict[str, float] = {"collector_cpu_s": 0.0}
    block("warm-up")
    for _ in range(args.rounds):
        block("baseline")
    for _ in range(args.rounds):  # Note [Timing profilers side by side]
        p = memcomm.profile(trace=os.path.join(trace_dir, "run.mct")).start()
        block("memcomm")
        p.stop()
        extra["collector_cpu_s"] += p.collector_cpu_ns() / 1e9
        block("after memcomm stop")
    from torch.profiler import ProfilerActivity, profile
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    for _ in range(args.rounds):  # last: a profiler that leaves a cost behind would spoil what follows
        tp = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        tp.start()
        block("torch.profiler")
        tp.stop()
        block("after torch.profiler stop")
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"wall": wall, "cpu": cpu, "blocks": blocks, "extra": extra}, f)
    dist.destroy_process_group()


def fixed_cost(args: argparse.Namespace) -> None:
    """Note [A profiler's fixed cost per step]: at a few percent, a profiler's cost on the sample's step
    is below this machine's noise, but the cost of hooks and records does not grow with the model:
    it is the same few calls per step on a model so small that a step takes well under a
    millisecond, where it is measurable. One process, alternating blocks of `steps` steps with and
    without the profiler (paired as in Note [Timing profilers side by side]), training-thread CPU
    time; then the same for torch.profiler. Prints {"off_us", "on_us", "paired_us", "torch_on_us",
    "torch_paired_us"}: per step."""
    import torch
    from torch import nn
    import memcomm
    torch.set_num_threads(1)
    if args.allocator == "memcomm":
        memcomm.use_allocator("cpu")
    model = nn.Sequential(nn.Conv2d(1, 2, 5, stride=4), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 6 * 6, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    data = [(torch.randn(1, 1, 28, 28), torch.randint(0, 10, (1,))) for _ in range(args.steps)]

    def block() -> float:
        c = time.thread_time()
        for x, y in memcomm.loader(data):
            crit(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        return (time.thread_time() - c) / len(data) * 1e6

    def alternate(start: Callable[[], Any], stop: Callable[[Any], Any]) -> Tuple[List[float], List[float]]:
        off, on = [block()], []
        for _ in range(args.rounds):
            handle = start()
            on.append(block())
            stop(handle)
            off.append(block())
        return off, on

    def paired(off: List[float], on: List[float]) -> float:
        return statistics.median(m - (a + b) / 2 for m, a, b in zip(on, off, off[1:]))

    trace = os.path.join(tempfile.mkdtemp(prefix="memcomm-bench-"), "tiny.mct")
    block()
    off, on = alternate(lambda: memcomm.profile(trace=trace).start(), lambda p: p.stop())
    from torch.profiler import ProfilerActivity, profile
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

    def torch_start() -> Any:
        tp = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        tp.start()
        return tp

    t_off, t_on = alternate(torch_start, lambda tp: tp.stop())
    print(json.dumps({"off_us": statistics.median(off), "on_us": statistics.median(on), "paired_us": paired(off, on),
                      "torch_on_us": statistics.median(t_on), "torch_paired_us": paired(t_off, t_on)}))


def run_fixed_cost(allocator: str) -> Dict:
    cmd = [sys.executable, __file__, "--fixed-cost", "--allocator", allocator, "--steps", "10", "--rounds", "100"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_job(allocator: str, args: argparse.Namespace) -> Dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", __file__,
           "--worker", "--allocator", allocator, "--out", out, "--steps", str(args.steps), "--rounds",
           str(args.rounds), "--batch", str(args.batch)]
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(out) as f:
        result = json.load(f)
    os.remove(out)
    return result


def block_medians(result: Dict, kind: str, condition: str) -> List[float]:
    times, starts = result[kind][condition], result["blocks"][condition] + [len(result[kind][condition])]
    return [statistics.median(times[a:b]) for a, b in zip(starts, starts[1:])]


def paired_overhead(result: Dict, kind: str, profiled: str, after: str) -> float:
    """See Note [Timing profilers side by side]: each profiled block against the mean of the unprofiled
    blocks just before and after it; the median of those ratios."""
    on = block_medians(result, kind, profiled)
    before = "baseline" if profiled == "memcomm" else "after memcomm stop"
    off = [block_medians(result, kind, before)[-1]] + block_medians(result, kind, after)
    return statistics.median(m / ((a + b) / 2) for m, a, b in zip(on, off, off[1:])) - 1


def table(allocator: str, result: Dict) -> str:
    lines = [f"### CPU allocator: {allocator}", "",
             "| condition | median step ms | vs baseline | vs neighbours (paired) | training-thread CPU ms | vs baseline | "
             "vs neighbours (paired) | steps |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    med = {kind: {c: statistics.median(result[kind][c]) * 1e3 for c in CONDITIONS} for kind in ("wall", "cpu")}
    neighbour = {"memcomm": "after memcomm stop", "torch.profiler": "after torch.profiler stop"}
    for c in CONDITIONS:
        row = [c]
        for kind in ("wall", "cpu"):
            m, base = med[kind][c], med[kind]["baseline"]
            row += [f"{m:.2f}", f"{(m / base - 1) * 100:+.1f} %" if c != "baseline" else "",
                    f"{paired_overhead(result, kind, c, neighbour[c]) * 100:+.1f} %" if c in neighbour else ""]
        row.append(str(len(result["wall"][c])))
        lines.append("| " + " | ".join(row) + " |")
    steps = len(result["wall"]["memcomm"])
    per_step = result["extra"]["collector_cpu_s"] * 1e3 / steps
    lines += ["", f"memcomm's recorder thread (rank 0) used {result['extra']['collector_cpu_s'] * 1e3:.1f} ms of CPU over "
              f"its {steps} steps: {per_step:.3f} ms per step, {per_step / med['wall']['baseline'] * 100:.2f} % of a "
              f"baseline step.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per timed block")
    ap.add_argument("--rounds", type=int, default=12, help="blocks per condition")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--allocators", default="memcomm,torch", help="jobs to run (comma-separated)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", default="memcomm", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--fixed-cost", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.fixed_cost:
        fixed_cost(args)
        return
    for allocator in args.allocators.split(","):
        result = run_job(allocator, args)
        fixed = run_fixed_cost(allocator)
        base_ms = statistics.median(result["wall"]["baseline"]) * 1e3
        print(table(allocator, result), flush=True)
        print(f"Fixed cost (Note [A profiler's fixed cost per step]): a tiny model's step takes {fixed['off_us']:.0f} us "
              f"without a profiler, {fixed['on_us']:.0f} us under memcomm and {fixed['torch_on_us']:.0f} us under "
              f"torch.profiler; paired, memcomm adds {fixed['paired_us']:.1f} us per step "
              f"({fixed['paired_us'] / 1e3 / base_ms * 100:.2f} % of the sample's {base_ms:.1f} ms step) and torch.profiler "
              f"{fixed['torch_paired_us']:.1f} us: memcomm costs {fixed['paired_us'] / fixed['torch_paired_us']:.2f} of "
              f"torch.profiler's overhead.\n", flush=True)


if __name__ == "__main__":
    main()
