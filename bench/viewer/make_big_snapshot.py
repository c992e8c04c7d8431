#!/usr/bin/env python3
"""Builds a PyTorch memory snapshot of N events by repeating a real one (issue 18's scale target).

    make_big_snapshot.py SOURCE.pickle OUT.pickle [--events N (default 1000000)]

Each copy of SOURCE's device traces follows the previous one in time (shifted by the source's
duration plus 1 ms) and reuses its addresses, so the allocator state stays realistic:
  * a copy ends by freeing the blocks it allocated and the segments it created (free_requested +
    free_completed, segment_free / segment_unmap), except the last copy, which ends as SOURCE ends,
    so SOURCE's end state (its segments) stays true;
  * the frees of blocks allocated before SOURCE's trace are kept in the first copy only.
Frames are the source's own objects, so pickle memoizes them: the file grows with the events, not
with their stacks. Only the standard library is used (pickle.load of a snapshot runs no code).
"""
import argparse
import copy
import pickle
import sys


def closing_events(opened, segments, t_us):
    """Frees for what a copy left open, in reverse order of opening."""
    out = []
    for addr, e in reversed(list(opened.items())):
        for action in ("free_requested", "free_completed"):
            out.append(dict(e, action=action, time_us=t_us))
    for addr, e in reversed(list(segments.items())):
        out.append(dict(e, action="segment_unmap" if e["action"] == "segment_map" else "segment_free", time_us=t_us))
    return out


def one_copy(trace, shift_us, first, last):
    opened, segments, out = {}, {}, []
    allocated = set()
    for e in trace:
        a, addr = e["action"], e.get("addr")
        if a in ("free_requested", "free_completed") and addr not in allocated and not first:
            continue  # a block from before the trace: freed once, in the first copy
        e2 = dict(e)
        if "time_us" in e2:
            e2["time_us"] = e["time_us"] + shift_us
        out.append(e2)
        if a == "alloc":
            allocated.add(addr)
            opened[addr] = e
        elif a == "free_requested":
            opened.pop(addr, None)
        elif a in ("segment_alloc", "segment_map"):
            segments[addr] = e
        elif a in ("segment_free", "segment_unmap"):
            segments.pop(addr, None)
    if not last:
        end = out[-1].get("time_us", 0) if out else 0
        out += closing_events(opened, segments, end)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source")
    p.add_argument("out")
    p.add_argument("--events", type=int, default=1_000_000)
    args = p.parse_args()
    with open(args.source, "rb") as f:
        snap = pickle.load(f)
    traces = snap.get("device_traces") or []
    per_copy = sum(len(t) for t in traces)
    if per_copy == 0:
        sys.exit(f"{args.source}: no events to repeat")
    copies = max(1, -(-args.events // per_copy))
    big = copy.copy(snap)
    big["device_traces"] = []
    for trace in traces:
        times = [e["time_us"] for e in trace if "time_us" in e]
        span = (max(times) - min(times) if times else 0) + 1000
        out = []
        for k in range(copies):
            out += one_copy(trace, k * span, k == 0, k == copies - 1)
        big["device_traces"].append(out)
    with open(args.out, "wb") as f:
        pickle.dump(big, f, protocol=4)
    total = sum(len(t) for t in big["device_traces"])
    print(f"wrote {args.out}: {copies} copies of {per_copy} events, {total} events")


if __name__ == "__main__":
    main()
