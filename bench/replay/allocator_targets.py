#!/usr/bin/env python3
"""Issue 15's allocator targets, trace by trace, over the shared PyTorch snapshots.

Runs memcomm-replay (--json) with memcomm, pytorch and pytorch-expandable on every device trace of the
given sets, and prints one row per device trace with:
  - memcomm's peak reserved / peak live                       (target <= 1.03)
  - memcomm's reserved / min(pytorch, pytorch-expandable)     (target <= 1.005)
  - memcomm's source calls (allocs + frees, maps + unmaps) against
    max(2 x bound, calls of the PyTorch mode that reserves less) + 8, where the bound is the ideal
    online call bound at 1.03 (memcomm-replay's `call_bound`, Note [Ideal online call bound])
  - the fragmentation reduction 1 - (memcomm reserved - live) / (P reserved - live) against
    P = pytorch and P = pytorch-expandable (target: mean against pytorch >= 80 %)
for each memcomm policy asked for (--policy; the default, memcomm). A trace is in the design half or
the check half by a fixed rule (within each set, sorted by name: even positions design, odd positions
check), so that a policy tuned on one half is judged on the other. Exit status: 0 when every trace
meets every target and the mean reduction is met, 1 when one misses, 2 for a bad argument or a replay
that fails.

  bench/replay/allocator_targets.py [--build DIR] [--policy memcomm] [--markdown] [--compare] [SET_DIR...]

SET_DIR defaults to both shared sets; any folder of snapshot pickles works, such as the synthetic
workloads that bench/replay/synthetic_snapshots.py writes.
A row names its trace by the part of the file name before "__" (the project, in the shared sets), or by
the whole file name without its extension where two files share that part.

With --compare it first prints every policy side by side, `recorded` (what the traced allocator did)
included: per device trace, peak live, each policy's peak reserved / peak live and source calls, and
the ideal call bound at 1.03. `recorded` counts the segments the trace saw allocated; a snapshot
taken with a warm cache may show none, and a trace without segment events (synthetic ones) shows "-".
"""
import argparse
import collections
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_SETS = [os.path.join(ROOT, "..", "shared", "traces", d) for d in ("pytorch-snapshots", "pytorch-snapshots-2")]

RATIO_TARGET = 1.03
PAGE = 2 << 20  # the granularity of PyTorch's segments and of memcomm's pages
VS_BEST_TARGET = 1.005
CALL_SLACK = 8
MEAN_REDUCTION_TARGET = 0.80
SNAPSHOT_EXTENSIONS = (".pickle", ".pkl")  # torch.cuda.memory._dump_snapshot's files go by either


def halves(sets):
    """(path, half) for every snapshot pickle: within a set sorted by name, even positions design, odd check."""
    out = []
    for d in sets:
        names = sorted(n for n in os.listdir(d) if n.endswith(SNAPSHOT_EXTENSIONS))
        out += [(os.path.join(d, n), "design" if i % 2 == 0 else "check") for i, n in enumerate(names)]
    return out


def replay(build, files, policies):
    cmd = [os.path.join(build, "bin", "memcomm-replay"), "--quiet", "--json", "-", "--policy", ",".join(policies)]
    res = subprocess.run(cmd + files, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"memcomm-replay exited with {res.returncode}: {res.stderr.strip()}")
    return json.loads(res.stdout)


def display_names(names):
    """A short name per trace file: the part before "__" (the project, in the shared sets' naming), or
    the file name without its extension where two files share that part."""
    def stem(n):
        for ext in SNAPSHOT_EXTENSIONS + (".json.gz", ".json", ".mct"):
            if n.endswith(ext):
                return n[:-len(ext)]
        return n
    short = {n: stem(n).split("__")[0] for n in names}
    taken = collections.Counter(short.values())
    return {n: short[n] if taken[short[n]] == 1 else stem(n) for n in names}


def reduction(ours, theirs, live):
    waste = theirs - live
    return None if waste <= 0 else 1.0 - (ours - live) / waste


def evaluate(rows, policy):
    by_key = {}
    for r in rows:
        by_key.setdefault((os.path.basename(r["file"]), r["device"]), {})[r["policy"]] = r
    out = []
    for (name, dev), pol in sorted(by_key.items()):
        if policy not in pol:
            continue
        m, pt, px = pol[policy], pol["pytorch"], pol["pytorch-expandable"]
        live = m["peak_live"]
        if m["traced_allocs"] == 0 or live == 0:  # an end state alone: no order of allocations to replay
            print(f"{name} device {dev}: skipped, its trace allocates nothing (an end state only)", file=sys.stderr)
            continue
        best = pt if pt["peak_reserved"] <= px["peak_reserved"] else px
        bound = m["call_bound"]
        calls = m["source_allocs"] + m["source_frees"]
        allowed = max(2 * bound, best["source_allocs"] + best["source_frees"]) + CALL_SLACK
        out.append({
            "name": name, "device": dev, "live": live, "ratio": m["peak_reserved"] / live,
            "vs_best": m["peak_reserved"] / best["peak_reserved"], "calls": calls, "allowed": allowed,
            "bound": bound, "red_pt": reduction(m["peak_reserved"], pt["peak_reserved"], live),
            "red_px": reduction(m["peak_reserved"], px["peak_reserved"], live),
            "waste": (m["peak_reserved"] - live, pt["peak_reserved"] - live, px["peak_reserved"] - live),
        })
    return out


COMPARED = ["recorded", "pytorch", "pytorch-expandable"]


def print_comparison(rows, half_of, policies, markdown):
    """Every policy side by side: reserved / live and source calls per device trace."""
    by_key = {}
    for r in rows:
        by_key.setdefault((os.path.basename(r["file"]), r["device"]), {})[r["policy"]] = r
    cols = COMPARED + policies
    shown = display_names({name for name, _ in by_key})
    print("\n## all policies: peak reserved / peak live, source calls\n")
    head = ["trace", "dev", "half", "live MiB"] + cols + ["bound@1.03"]
    print("| " + " | ".join(head) + " |" if markdown else "  ".join(head))
    if markdown:
        print("|" + "---|" * len(head))
    for (name, dev), pol in sorted(by_key.items()):
        any_row = next(iter(pol.values()))
        live = any_row["peak_live"]
        cells = [shown[name], str(dev), half_of[name], f"{live / 2**20:.1f}"]
        for c in cols:
            r = pol.get(c)  # a trace without segment events has no recorded reserved bytes
            cells.append("-" if r is None or r["peak_reserved"] == 0 else
                         f"{r['peak_reserved'] / live:.3f}, {r['source_allocs'] + r['source_frees']}")
        cells.append(str(any_row["call_bound"]))
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))


def fmt_red(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def print_table(results, half_of, policy, markdown):
    print(f"\n## {policy}\n")
    head = ["trace", "dev", "half", "res/live", "vs best PyTorch", "calls", "allowed", "bound@1.03",
            "reduction vs pytorch", "vs expandable", "misses"]
    print("| " + " | ".join(head) + " |" if markdown else "  ".join(head))
    if markdown:
        print("|" + "---|" * len(head))
    shown = display_names({r["name"] for r in results})
    for r in results:
        misses = []
        if r["ratio"] > RATIO_TARGET:
            # Below a few dozen MiB even perfect packing in 2 MiB pages passes the target: say by how much.
            floor = -(-r["live"] // PAGE) * PAGE / r["live"]
            misses.append(f"ratio (2 MiB pages: >= {floor:.3f})" if floor > RATIO_TARGET else "ratio")
        if r["vs_best"] > VS_BEST_TARGET:
            misses.append("vs-best")
        if r["calls"] > r["allowed"]:
            misses.append("calls")
        r["misses"] = misses
        cells = [shown[r["name"]], str(r["device"]), half_of[r["name"]], f"{r['ratio']:.3f}",
                 f"{r['vs_best']:.3f}", str(r["calls"]), str(r["allowed"]), str(r["bound"]), fmt_red(r["red_pt"]),
                 fmt_red(r["red_px"]), ",".join(misses) or "ok"]
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    if not results:
        print("no device of the inputs has allocations to judge")
        return False
    all_reds = [r["red_pt"] for r in results if r["red_pt"] is not None]
    mean_ok = sum(all_reds) >= MEAN_REDUCTION_TARGET * len(all_reds)
    for half in ("design", "check"):
        sel = [r for r in results if half_of[r["name"]] == half]
        if not sel:
            continue
        reds = [r["red_pt"] for r in sel if r["red_pt"] is not None]
        redx = [r["red_px"] for r in sel if r["red_px"] is not None]
        met = sum(1 for r in sel if not r["misses"])
        print(f"{half}: {met}/{len(sel)} traces meet every target; worst res/live "
              f"{max(r['ratio'] for r in sel):.3f}; mean reduction vs pytorch "
              f"{100 * sum(reds) / max(1, len(reds)):.1f}%, vs expandable {100 * sum(redx) / max(1, len(redx)):.1f}%")
    print(f"mean reduction vs pytorch over both halves: {100 * sum(all_reds) / max(1, len(all_reds)):.1f}% "
          f"(target {100 * MEAN_REDUCTION_TARGET:.0f}%: {'met' if mean_ok else 'missed'})")
    # The mean gives each trace one vote, so a trace where PyTorch wastes a few MiB (-800% for a MiB
    # more) can outweigh the rest; the pooled figure weighs each trace by the bytes PyTorch wastes.
    ours, pt, px = (sum(r["waste"][k] for r in results) for k in range(3))
    print(f"pooled reduction (1 - total waste / PyTorch's total waste): vs pytorch {fmt_red(1 - ours / pt if pt > 0 else None)}, "
          f"vs expandable {fmt_red(1 - ours / px if px > 0 else None)}")
    return mean_ok and all(not r["misses"] for r in results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with bin/memcomm-replay")
    ap.add_argument("--policy", default="memcomm", help="memcomm policies to judge, comma-separated")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    ap.add_argument("--compare", action="store_true",
                    help="first a table of every policy side by side, recorded included")
    ap.add_argument("sets", nargs="*", default=DEFAULT_SETS, help="folders of snapshot pickles")
    args = ap.parse_args()
    for d in args.sets:
        if not os.path.isdir(d):
            print(f"allocator_targets: {d} is not a folder", file=sys.stderr)
            return 2
    if not os.access(os.path.join(args.build, "bin", "memcomm-replay"), os.X_OK):
        print(f"allocator_targets: {args.build}/bin/memcomm-replay is missing: build it first", file=sys.stderr)
        return 2
    pairs = halves(args.sets)
    files = [p for p, _ in pairs]
    half_of = {os.path.basename(p): h for p, h in pairs}
    policies = args.policy.split(",")
    try:
        rows = replay(args.build, files, (["recorded"] if args.compare else []) + policies +
                      ["pytorch", "pytorch-expandable"])
    except RuntimeError as e:
        print(f"allocator_targets: {e}", file=sys.stderr)
        return 2
    replayed = {os.path.basename(r["file"]) for r in rows}
    for f in files:
        if os.path.basename(f) not in replayed:  # no segment and no event on any device
            print(f"{os.path.basename(f)}: skipped, it holds no memory on any device", file=sys.stderr)
    if args.compare:
        print_comparison(rows, half_of, policies, args.markdown)
    ok = True
    for p in policies:
        ok &= print_table(evaluate(rows, p), half_of, p, args.markdown)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
