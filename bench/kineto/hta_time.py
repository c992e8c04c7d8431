#!/usr/bin/env python3
"""Time Holistic Trace Analysis (HTA) on one Kineto trace directory.

    python bench/kineto/hta_time.py DIR [--include-last-profiler-step]
        [--copy] [--no-overlap] [--reference hta-reference.json [--set NAME]]

DIR is an HTA trace_dir (one .json / .json.gz file per rank).  The script
runs, in one process:

    a = TraceAnalysis(trace_dir=DIR)          # "load"
    a.get_temporal_breakdown(visualize=False) # "temporal"
    a.get_comm_comp_overlap(visualize=False)  # "overlap"

and prints exactly one JSON object on stdout (HTA's own log output goes to
stderr):

    {"hta_version", "trace_dir", "files", "bytes",
     "import_s", "load_s", "temporal_s", "overlap_s", "analysis_s", "total_s",
     "peak_rss_mib", "temporal_breakdown": [...], "comm_comp_overlap": [...],
     "errors": {call: "Type: message"},
     "reference": {...}}            # only with --reference

total_s = load_s + analysis_s (import time of hta/pandas is reported apart).
peak_rss_mib is max(self, children) ru_maxrss: HTA forks one worker per rank
when a directory has several ranks.

With --reference, the temporal breakdown and overlap are compared with the
`hta_default` (or, with --include-last-profiler-step,
`hta_include_last_profiler_step`) figures of set NAME (default: DIR's
basename) in the given hta-reference.json; the exit status is 1 on a
mismatch.  An HTA call that raises is recorded in "errors" (its figures are
null) and the exit status is 2; load and timings are still reported.

Meant to be called once per trace directory from a benchmark driver
(subprocess, parse stdout), or imported: run_hta(trace_dir) returns the dict.
"""

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time


def _records(df):
    """DataFrame -> list of dicts with plain Python numbers (NaN -> None)."""
    out = []
    for rec in df.to_dict(orient="records"):
        clean = {}
        for k, v in rec.items():
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and math.isnan(v):
                v = None
            clean[str(k)] = v
        out.append(clean)
    return out


def _err(e):
    return f"{type(e).__name__}: {e}"


def _peak_rss_mib():
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(self_kb, child_kb) / 1024.0, 1)


def run_hta(trace_dir, include_last_profiler_step=False, overlap=True):
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        from importlib.metadata import version

        from hta.trace_analysis import TraceAnalysis

        t1 = time.perf_counter()
        a = TraceAnalysis(
            trace_dir=trace_dir,
            include_last_profiler_step=include_last_profiler_step,
        )
        t2 = time.perf_counter()
        errors = {}
        try:
            temporal = _records(a.get_temporal_breakdown(visualize=False))
        except Exception as e:  # e.g. no GPU rows at all (CPU-only trace)
            temporal, errors["temporal_breakdown"] = None, _err(e)
        t3 = time.perf_counter()
        ovl = None
        if overlap:
            try:
                ovl = _records(a.get_comm_comp_overlap(visualize=False))
            except Exception as e:
                errors["comm_comp_overlap"] = _err(e)
        t4 = time.perf_counter()

    files = sorted(
        f for f in os.listdir(trace_dir) if f.endswith(".json") or f.endswith(".gz")
    )
    return {
        "hta_version": version("HolisticTraceAnalysis"),
        "trace_dir": os.path.abspath(trace_dir),
        "include_last_profiler_step": bool(include_last_profiler_step),
        "files": files,
        "bytes": sum(os.path.getsize(os.path.join(trace_dir, f)) for f in files),
        "import_s": round(t1 - t0, 3),
        "load_s": round(t2 - t1, 3),
        "temporal_s": round(t3 - t2, 3),
        "overlap_s": round(t4 - t3, 3) if overlap else None,
        "analysis_s": round(t4 - t2, 3),
        "total_s": round(t4 - t1, 3),
        "peak_rss_mib": _peak_rss_mib(),
        "temporal_breakdown": temporal,
        "comm_comp_overlap": ovl,
        "errors": errors,
    }


def _close(a, b, tol=1e-6):
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


def compare_reference(result, ref_path, set_name):
    """Compare result with hta-reference.json; returns (ok, mismatches)."""
    with open(ref_path) as f:
        ref = json.load(f)
    key = (
        "hta_include_last_profiler_step"
        if result["include_last_profiler_step"]
        else "hta_default"
    )
    sets = ref.get("sets", {})
    if set_name not in sets:
        return False, [f"set {set_name!r} not in {ref_path}"]
    want = sets[set_name][key]
    bad = []

    def by_rank(rows):
        return {int(r["rank"]): r for r in rows}

    if result["temporal_breakdown"] is None:
        return False, ["temporal_breakdown failed: " + str(result["errors"])]
    got_t, want_t = by_rank(result["temporal_breakdown"]), by_rank(
        want["temporal_breakdown"]
    )
    if set(got_t) != set(want_t):
        bad.append(f"temporal ranks {sorted(got_t)} != {sorted(want_t)}")
    for r in sorted(set(got_t) & set(want_t)):
        for col, v in want_t[r].items():
            if not _close(got_t[r].get(col), v):
                bad.append(f"temporal rank {r} {col}: {got_t[r].get(col)} != {v}")
    if result["comm_comp_overlap"] is not None:
        got_o, want_o = by_rank(result["comm_comp_overlap"]), by_rank(
            want["comm_comp_overlap"]
        )
        if set(got_o) != set(want_o):
            bad.append(f"overlap ranks {sorted(got_o)} != {sorted(want_o)}")
        for r in sorted(set(got_o) & set(want_o)):
            g = got_o[r].get("comp_comm_overlap_pctg")
            w = want_o[r].get("comp_comm_overlap_pctg")
            if not _close(g, w):
                bad.append(f"overlap rank {r}: {g} != {w}")
    return not bad, bad


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace_dir")
    p.add_argument("--include-last-profiler-step", action="store_true")
    p.add_argument("--no-overlap", action="store_true",
                   help="skip get_comm_comp_overlap")
    p.add_argument("--copy", action="store_true",
                   help="copy DIR to a temporary directory first (not timed)")
    p.add_argument("--reference", metavar="JSON",
                   help="hta-reference.json to check the figures against")
    p.add_argument("--set", dest="set_name",
                   help="set name in --reference (default: basename of DIR)")
    args = p.parse_args(argv)

    src = os.path.abspath(args.trace_dir)
    tmp = None
    trace_dir = src
    if args.copy:
        tmp = tempfile.mkdtemp(prefix="hta_time_")
        trace_dir = os.path.join(tmp, os.path.basename(src.rstrip("/")))
        shutil.copytree(src, trace_dir)
    try:
        result = run_hta(trace_dir, args.include_last_profiler_step,
                         overlap=not args.no_overlap)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result["trace_dir"] = src
    rc = 2 if result["errors"] else 0
    if args.reference:
        name = args.set_name or os.path.basename(src.rstrip("/"))
        ok, bad = compare_reference(result, args.reference, name)
        result["reference"] = {"set": name, "match": ok, "mismatches": bad}
        rc = rc or (0 if ok else 1)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
