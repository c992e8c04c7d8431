"""What the wait at each step's end costs a DDP step (Note [Python callables released on torch's
threads] in python/memcomm/_profiler/future_callbacks.py): the same run with the wait and without it,
side by side.

    PYTHONPATH=build/python .venv/bin/python bench/python/step_end_wait.py [--steps 40 --rounds 8]

Two ranks on the CPU (torch.distributed.run, Gloo) train a small MLP (the case where the wait is the
largest share of a step) under memcomm.profile, DDP's bucket all-reduces through
memcomm.comm_hook(), so each step hands Python callables to Gloo's futures. Both ranks alternate
blocks of `steps` steps with the step-end wait as it is and with the hooks' wait replaced by a no-op
(same process, same schedule: blocks next to each other share the machine's drift). Rank 0 reports
each condition's median step time, the median of the paired ratios (each waiting block over the mean
of the two non-waiting blocks around it), and the wait's own time per step (mean and largest).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List


def _timed(wait: Callable[..., None], spent: List[float]) -> Callable[..., None]:
    def timed(*args: Any, **kwargs: Any) -> None:
        t = time.perf_counter()
        wait(*args, **kwargs)
        spent.append(time.perf_counter() - t)
    return timed


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    import memcomm
    from memcomm._profiler import hooks

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())], nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)  # several buckets a step
    ddp.register_comm_hook(None, memcomm.comm_hook())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    spent: List[float] = []
    waits = {"wait": _timed(hooks.wait_for_release, spent), "no wait": lambda *a, **k: None}
    steps: Dict[str, List[float]] = {name: [] for name in waits}
    blocks: List[tuple] = []
    with memcomm.profile(trace=os.path.join(args.folder, "wait.mct")):
        for r in range(2 * args.rounds + 1):
            name = "no wait" if r % 2 == 0 else "wait"
            hooks.wait_for_release = waits[name]
            dist.barrier()
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                opt.zero_grad()
                nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
                times.append(time.perf_counter() - t)
            steps[name] += times
            blocks.append((name, statistics.median(times)))
        hooks.wait_for_release = waits["wait"]
    if rank == 0:
        paired = [blocks[i][1] / ((blocks[i - 1][1] + blocks[i + 1][1]) / 2) for i in range(1, len(blocks) - 1, 2)]
        out = {"median_ms": {k: 1e3 * statistics.median(v) for k, v in steps.items()},
               "paired_ratio": statistics.median(paired),
               "wait_ms": {"mean": 1e3 * statistics.mean(spent), "max": 1e3 * max(spent), "calls": len(spent)}}
        with open(os.path.join(args.folder, "result.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="steps a block (default 40)")
    p.add_argument("--rounds", type=int, default=8, help="blocks with the wait, each between two without (default 8)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds must be at least 1")
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
               "--worker", "--folder", folder, "--steps", str(args.steps), "--rounds", str(args.rounds)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return 1
        with open(os.path.join(folder, "result.json")) as f:
            out = json.load(f)
    med = out["median_ms"]
    print(f"step median: wait {med['wait']:.3f} ms, no wait {med['no wait']:.3f} ms; "
          f"paired ratio (wait / no wait) {out['paired_ratio']:.3f}")
    w = out["wait_ms"]
    print(f"the wait itself: mean {w['mean']:.3f} ms, largest {w['max']:.3f} ms over {w['calls']} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
