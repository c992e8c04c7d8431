"""Cost of profiling a CPU training step: the same memcomm-train binary with --trace (all host events:
phases, collectives, counters, every allocator event) against without, alternated in one run.

Usage: .venv/bin/python bench/trainer/profiling_overhead.py [--build build [build-other ...]] [--rounds 5]
Prints, per build, the median step time with profiling off and on, and the overhead (issue 4's
target: <= 2 %) two ways:
  - "step": median over rounds of (step p50 on / step p50 off) of adjacent runs, which cancels
    most of the drift of a machine shared with other jobs (the ratio of the medians is shown too);
  - "cpu": the same for the CPU time (user + sys) the whole run used, all ranks together: what
    profiling costs in CPU even when the step time hides it in idle cores.
Given several builds, every round runs each build off and on, so they are compared side by side.
When the summary has "trace_collector_cpu_ms" (RunProfiler::collector_cpu_ns(), summed over ranks),
the profiler threads' share of the run's CPU is printed too.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(binary, a, trace):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [binary, "--nproc", str(a.nproc), "--model", a.model, "--threads", str(a.threads), "--batch-size",
               str(a.batch_size), "--steps", str(a.steps), "--workers", "1", "--log-interval", "100000",
               "--eval-batches", "1", "--summary-json", summary]
        if trace:
            cmd += ["--trace", os.path.join(d, "t.mct")]
        cpu0 = children_cpu_s()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        cpu = children_cpu_s() - cpu0
        with open(summary) as f:
            s = json.load(f)
        return {"step": s["step_ms"]["p50"], "cpu": cpu, "events": s.get("trace_events", 0),
                "drops": s.get("trace_drops", 0), "collector_ms": s.get("trace_collector_cpu_ms")}


def pct(x):
    return f"{100 * (x - 1):+.2f} %"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", nargs="+", default=["build"], help="build dir(s) holding bin/memcomm-train")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--model", default="cnn")
    a = p.parse_args()
    for b in a.build:
        if not os.access(os.path.join(b, "bin", "memcomm-train"), os.X_OK):
            p.error(f"--build {b}: no executable {b}/bin/memcomm-train")
    runs = {b: {"off": [], "on": []} for b in a.build}
    for _ in range(a.rounds):
        for b in a.build:
            binary = os.path.join(b, "bin", "memcomm-train")
            runs[b]["off"].append(run(binary, a, False))
            runs[b]["on"].append(run(binary, a, True))
    print(f"model {a.model}, {a.nproc} ranks, {a.steps} steps x {a.rounds} rounds (alternated)")
    for b in a.build:
        off, on = runs[b]["off"], runs[b]["on"]
        step_off = [r["step"] for r in off]
        step_on = [r["step"] for r in on]
        m_off, m_on = statistics.median(step_off), statistics.median(step_on)
        step_ratio = statistics.median(n["step"] / f["step"] for f, n in zip(off, on))
        cpu_ratio = statistics.median(n["cpu"] / f["cpu"] for f, n in zip(off, on))
        print(f"[{b}]")
        print(f"  profiling off: step p50 median {m_off:.3f} ms   runs: {', '.join(f'{x:.2f}' for x in step_off)}")
        print(f"  profiling on : step p50 median {m_on:.3f} ms   runs: {', '.join(f'{x:.2f}' for x in step_on)}")
        cpu_off = ", ".join(f"{r['cpu']:.2f}" for r in off)
        cpu_on = ", ".join(f"{r['cpu']:.2f}" for r in on)
        print(f"  cpu s off: {cpu_off}   on: {cpu_on}")
        print(f"  overhead: step {pct(step_ratio)} (median of paired ratios; ratio of medians {pct(m_on / m_off)}),"
              f" cpu {pct(cpu_ratio)}  ({on[-1]['events']} events recorded (all ranks), {on[-1]['drops']} dropped)")
        # The profiler's own threads, from the summary (summed over ranks): robust to a busy machine.
        coll = [r["collector_ms"] for r in on if r["collector_ms"] is not None]
        if coll:
            share = statistics.median(c / 1e3 / r["cpu"] for c, r in zip(coll, on))
            print(f"  collector threads (all ranks): median {statistics.median(coll):.1f} ms CPU per run,"
                  f" {100 * share:.2f} % of the run's CPU")


if __name__ == "__main__":
    main()
