"""Cost of profiling a CPU training step: the same memcomm-train binary with --trace (all host events:
phases, collectives, counters, every allocator event) against without, alternated in one run.

Usage: .venv/bin/python bench/trainer/profiling_overhead.py [--build build] [--rounds 5]
Prints the median step time of each and the overhead in percent (issue 4's target: <= 2 %).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(binary, a, trace):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [binary, "--nproc", str(a.nproc), "--model", a.model, "--threads", str(a.threads), "--batch-size",
               str(a.batch_size), "--steps", str(a.steps), "--workers", "1", "--log-interval", "100000",
               "--eval-batches", "1", "--summary-json", summary]
        if trace:
            cmd += ["--trace", os.path.join(d, "t.mct")]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            s = json.load(f)
        return s["step_ms"]["p50"], s.get("trace_events", 0), s.get("trace_drops", 0)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--model", default="cnn")
    a = p.parse_args()
    binary = os.path.join(a.build, "bin", "memcomm-train")
    off, on, events, drops = [], [], 0, 0
    for _ in range(a.rounds):
        off.append(run(binary, a, False)[0])
        ms, ev, dr = run(binary, a, True)
        on.append(ms)
        events, drops = ev, dr
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"model {a.model}, {a.nproc} ranks, {a.steps} steps x {a.rounds} rounds (alternated)")
    print(f"  profiling off: step p50 median {m_off:.3f} ms   runs: {', '.join(f'{x:.2f}' for x in off)}")
    print(f"  profiling on : step p50 median {m_on:.3f} ms   runs: {', '.join(f'{x:.2f}' for x in on)}")
    print(f"  overhead {100 * (m_on / m_off - 1):+.2f} %  ({events} events recorded on rank 0, {drops} dropped)")


if __name__ == "__main__":
    main()
