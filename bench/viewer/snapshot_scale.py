#!/usr/bin/env python3
"""Issue 18's scale bench: a PyTorch snapshot of ~1 M events, memcomm beside torch's memory_viz.

    bench/viewer/snapshot_scale.py [SOURCE.pickle] [--events N] [--out DIR] [--repeat R]

Builds the big snapshot from SOURCE by repetition (make_big_snapshot.py), then times, side by side
in one run, best of R:
  * Python's pickle.load of the file: the floor under any tool that reads it in Python;
  * torch.cuda._memory_viz.memory(snapshot, format_flamegraph=lambda s: s): memory_viz's end-state
    flame graph lines (pickle.load included);
  * torch.cuda._memory_viz.trace_plot(snapshot): the page memory_viz opens for the Active Memory
    Timeline (pickle.load included; the browser's own work on it comes after and is not timed);
  * memcomm-trace memory --at end and --at peak (process wall time, loading included);
  * memcomm-view --bench (under xvfb-run): its load time, frame build p95 and model bytes/event.
Prints a Markdown table with the ratios. Needs the build (build/bin) and the project's .venv.
"""
import argparse
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = ROOT.parent / "shared/traces/pytorch-snapshots/decomfl__memory.pickle"


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def view_bench(path):
    text = run(["xvfb-run", "-a", str(ROOT / "build/bin/memcomm-view"), "--bench", str(path)])
    load = float(re.search(r"load \(ingest \+ index\): ([\d.]+) s", text).group(1))
    p95 = float(re.search(r"frame build, CPU time.*?p95 ([\d.]+) ms", text).group(1))
    per_event = float(re.search(r"= ([\d.]+) B/event", text).group(1))
    return load, p95, per_event


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", nargs="?", default=str(DEFAULT_SOURCE))
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--out", default="/tmp/memcomm-snapshot-scale")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    big = out / f"big_{a.events}.pickle"
    if not big.exists():
        run([sys.executable, str(Path(__file__).with_name("make_big_snapshot.py")), a.source, str(big), "--events", str(a.events)])
    from torch.cuda import _memory_viz

    def load():
        with open(big, "rb") as f:
            return pickle.load(f)

    rows = []
    t_pickle = best_of(a.repeat, load)
    t_viz_memory = best_of(a.repeat, lambda: _memory_viz.memory(load(), format_flamegraph=lambda s: s))
    t_viz_trace = best_of(1, lambda: _memory_viz.trace_plot(load()))
    tool = ROOT / "build/bin/memcomm-trace"
    t_end = best_of(a.repeat, lambda: run([tool, "memory", big, "--at", "end", "--json"]))
    t_peak = best_of(a.repeat, lambda: run([tool, "memory", big, "--at", "peak", "--json"]))
    view = min((view_bench(big) for _ in range(a.repeat)), key=lambda r: r[0])
    events = sum(len(t) for t in load().get("device_traces", []))
    rows.append(("Python pickle.load (floor for Python tools)", t_pickle))
    rows.append(("torch _memory_viz.memory() (end state)", t_viz_memory))
    rows.append(("torch _memory_viz.trace_plot() (page for the browser)", t_viz_trace))
    rows.append(("memcomm-trace memory --at end --json", t_end))
    rows.append(("memcomm-trace memory --at peak --json", t_peak))
    rows.append(("memcomm-view open (load + indexes)", view[0]))
    print(f"{big.name}: {events} events, {big.stat().st_size / 1e6:.1f} MB\n")
    print("| what | seconds | vs memcomm-trace memory --at peak |")
    print("|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {t:.3f} | {t / t_peak:.2f}x |")
    print(f"\nmemcomm-view: frame build CPU p95 {view[1]:.2f} ms, model {view[2]:.1f} B/event")


if __name__ == "__main__":
    main()
