#!/usr/bin/env python3
"""Side by side in one run: memcomm vs HolisticTraceAnalysis on torch.profiler traces.

For each HTA trace directory (default: every set in ../shared/traces/kineto):
  HTA:     TraceAnalysis(trace_dir) + get_temporal_breakdown() + get_comm_comp_overlap()
           (bench/kineto/hta_time.py, in a fresh process, so its imports are not counted)
  memcomm: memcomm-trace report --hta --json FILES (the whole command: load, analysis, JSON)
and the ratio of the two, plus whether the figures agree. Then memcomm's load speed
(bench_kineto_load: MB/s of uncompressed JSON) on each --big trace, as .json and as .json.gz
when one exists beside it; --hta-big also times HTA's load of each big trace's directory (slow:
minutes per GB). Writes Markdown to --out (default: stdout).

  .venv/bin/python bench/kineto/run.py [--sets DIR...] [--big FILE...] [--hta-big] [--out FILE]
HTA must be installed in the venv (pip install HolisticTraceAnalysis).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def trace_files(d):
    return sorted(glob.glob(os.path.join(d, "*.json")) + glob.glob(os.path.join(d, "*.json.gz")))


def best_of(n, fn):
    best, out = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def memcomm_report(bin_dir, files):
    cmd = [os.path.join(bin_dir, "memcomm-trace"), "report", "--hta", "--json", *files]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def hta(d, extra=()):
    cmd = [sys.executable, os.path.join(HERE, "hta_time.py"), d, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1, 2):
        raise SystemExit(f"hta_time.py failed on {d}:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def agreement(hta_result, report):
    """Largest |memcomm - HTA| over ranks and the three temporal percentages; None when HTA gave no
    temporal breakdown (it raised: its errors say why), which is no agreement."""
    if hta_result.get("errors", {}).get("temporal_breakdown") or not hta_result.get("temporal_breakdown"):
        return None
    worst = 0.0
    ours = {r["rank"]: r.get("hta") for r in report["ranks"]}
    for row in hta_result["temporal_breakdown"]:
        mine = ours.get(row["rank"]) or {}
        for key, ref in (("idle_pct", "idle_time_pctg"), ("compute_pct", "compute_time_pctg"),
                         ("non_compute_pct", "non_compute_time_pctg")):
            if mine.get(key) is None:
                return None
            worst = max(worst, abs(mine[key] - row[ref]))
    return worst


def compare_sets(sets, bin_dir, repeat):
    rows = []
    for d in sets:
        files = trace_files(d)
        h = hta(d)
        t, report = best_of(repeat, lambda: memcomm_report(bin_dir, files))
        rows.append({"set": os.path.basename(d.rstrip("/")), "bytes": sum(os.path.getsize(f) for f in files),
                     "hta_s": h["total_s"], "hta_load_s": h["load_s"], "memcomm_s": t,
                     "speedup": h["total_s"] / t, "max_diff_pp": agreement(h, report)})
        print(f"kineto bench: {rows[-1]}", file=sys.stderr)
    return rows


def load_speed(bigs, bin_dir, hta_big):
    rows = []
    for f in bigs:
        for variant in [f, f + ".gz"] if os.path.exists(f + ".gz") else [f]:
            cmd = [os.path.join(bin_dir, "bench_kineto_load"), variant, "--repeat", "2"]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["files"][0]
            row = {"file": os.path.basename(variant), "json_mb": r["json_bytes"] / 1e6, "seconds": r["seconds"],
                   "mb_per_s": r["mb_per_s"], "trace_events": r["trace_events"]}
            if hta_big and variant == f:
                row["hta_load_s"] = hta(os.path.dirname(f), ["--no-overlap"])["load_s"]
            rows.append(row)
            print(f"kineto bench: {row}", file=sys.stderr)
    return rows


def markdown(set_rows, load_rows):
    out = ["| set | input bytes | HTA s | memcomm s | memcomm / HTA speed | max diff (pp) |",
           "|---|---|---|---|---|---|"]
    for r in set_rows:
        diff = "n/a (HTA gave none)" if r["max_diff_pp"] is None else f"{r['max_diff_pp']:.2f}"
        out.append(f"| {r['set']} | {r['bytes']:,} | {r['hta_s']:.2f} | {r['memcomm_s']:.3f} | "
                   f"{r['speedup']:.0f}x | {diff} |")
    if load_rows:
        out += ["", "| trace | JSON MB | traceEvents | memcomm load s | MB/s | HTA load s |", "|---|---|---|---|---|---|"]
        for r in load_rows:
            hta_s = f"{r['hta_load_s']:.1f}" if "hta_load_s" in r else "-"
            out.append(f"| {r['file']} | {r['json_mb']:.0f} | {r['trace_events']:,} | {r['seconds']:.2f} | "
                       f"{r['mb_per_s']:.0f} | {hta_s} |")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shared = os.path.join(ROOT, "..", "shared", "traces", "kineto")
    p.add_argument("--sets", nargs="*", default=sorted(glob.glob(os.path.join(shared, "*", ""))))
    p.add_argument("--big", nargs="*", default=[], help="large .json traces for the load-speed table")
    p.add_argument("--hta-big", action="store_true", help="also time HTA's load of each --big trace's directory")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    text = markdown(compare_sets(a.sets, a.bin, a.repeat), load_speed(a.big, a.bin, a.hta_big))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
