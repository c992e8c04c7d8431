#!/usr/bin/env python3
"""Generate a large, real torch.profiler (Kineto) Chrome trace on the CPU.

    /work/main/.venv/bin/python bench/kineto/make_trace.py \
        --target-mb 1024 --out /work/kineto-big/cpu_1g.json [--memory]

A small model (conv stem + LayerNorm/GELU MLP, AdamW, cross-entropy on random
data) is trained on the CPU under one torch.profiler.profile session with
record_shapes=True (and profile_memory=True with --memory, which adds
"[memory]" instant events) and a schedule(wait=0, warmup=1, active=N,
repeat=1), calling prof.step() after every training step, so the trace holds
N ProfilerStep#k annotations with forward/backward/optimizer inside
(--micro-steps K: K training iterations per ProfilerStep).

N is chosen from a calibration session (--calib-steps iterations, same settings,
exported to a temporary file next to --out) so that the exported trace is
about --target-mb MiB uncompressed; --steps N skips the calibration.  The
trace is written with the profiler's export_chrome_trace(); for a .gz --out
the JSON is exported next to it first, then gzip-compressed and removed.

Progress goes to stderr; a JSON summary (steps, seconds per phase, bytes,
events, bytes/event, peak RSS) goes to stdout and, with --summary, to a file.

Memory: the profiler keeps every event in memory until export; measured peak
RSS is about 8-9x the exported JSON size (about 9 GiB for a 1 GiB trace).

    make_trace.py --count FILE      # only count the events of an existing trace
"""

import argparse
import gzip
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter

MiB = 1024 * 1024


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rss_mib():
    """(current RSS, peak RSS) of this process in MiB, from /proc/self/status."""
    cur = peak = 0.0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) / 1024.0
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return round(cur, 1), round(peak, 1)


# --------------------------------------------------------------------------
# streaming event counter (no json.load of the whole file)

_WS = re.compile(r"[\s,]*")


def iter_trace_events(path, chunk=16 * MiB):
    """Yield the objects of the top-level "traceEvents" array one by one."""
    dec = json.JSONDecoder()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        buf = ""
        while True:  # find the start of the array
            data = f.read(chunk)
            if not data:
                raise ValueError(f"{path}: no traceEvents array")
            buf += data
            i = buf.find('"traceEvents"')
            if i >= 0:
                j = buf.find("[", i)
                if j >= 0:
                    buf = buf[j + 1:]
                    break
            else:
                buf = buf[-32:]
        pos = 0
        eof = False
        while True:
            pos = _WS.match(buf, pos).end()
            if pos >= len(buf) - 1 and not eof:
                data = f.read(chunk)
                eof = not data
                buf = buf[pos:] + data
                pos = 0
                continue
            if pos >= len(buf):
                raise ValueError(f"{path}: truncated traceEvents array")
            if buf[pos] == "]":
                return
            try:
                obj, end = dec.raw_decode(buf, pos)
            except json.JSONDecodeError:
                if eof:
                    raise
                data = f.read(chunk)
                eof = not data
                buf = buf[pos:] + data
                pos = 0
                continue
            yield obj
            pos = end


def count_events(path):
    t0 = time.perf_counter()
    n = 0
    ph = Counter()
    cat = Counter()
    steps = set()
    mem = 0
    for ev in iter_trace_events(path):
        n += 1
        ph[ev.get("ph", "<none>")] += 1
        cat[ev.get("cat", "<none>")] += 1
        name = ev.get("name", "")
        if name == "[memory]":
            mem += 1
        elif isinstance(name, str) and name.startswith("ProfilerStep#"):
            steps.add(name)
    return {
        "events": n,
        "ph": dict(ph.most_common()),
        "categories": dict(cat.most_common()),
        "profiler_steps": len(steps),
        "memory_instant_events": mem,
        "count_s": round(time.perf_counter() - t0, 2),
    }


# --------------------------------------------------------------------------
# the workload


def build(args):
    import torch
    import torch.nn as nn

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    class Net(nn.Module):
        def __init__(self, width, depth):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                nn.AdaptiveAvgPool2d(4),
            )
            layers = []
            for _ in range(depth):
                layers += [nn.Linear(width, width), nn.LayerNorm(width),
                           nn.GELU(), nn.Dropout(0.1)]
            self.mlp = nn.Sequential(nn.Linear(16 * 16, width), *layers,
                                     nn.Linear(width, 10))

        def forward(self, x):
            return self.mlp(torch.flatten(self.stem(x), 1))

    model = Net(args.width, args.depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 16, 16)
    y = torch.randint(0, 10, (args.batch,))
    rf = torch.profiler.record_function

    def step():
        opt.zero_grad(set_to_none=True)
        with rf("forward"):
            loss = lossf(model(x), y)
        with rf("backward"):
            loss.backward()
        with rf("optimizer"):
            opt.step()
        return loss

    return step


def profile_run(step, n_steps, args, out_json, progress=True):
    """One profiler session over n_steps active steps; export to out_json."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(wait=0, warmup=1, active=n_steps, repeat=1)
    t = {}
    every = max(1, n_steps // 20)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 record_shapes=True, profile_memory=args.memory,
                 acc_events=False) as prof:
        for i in range(n_steps + 1):  # 1 warm-up step + n_steps active
            for _ in range(args.micro_steps):
                step()
            if i == n_steps:
                ts = time.perf_counter()
                t["steps_s"] = ts - t0
                if progress:
                    log(f"  {n_steps} steps in {t['steps_s']:.1f} s; stopping "
                        f"profiler (post-processing), rss={rss_mib()} MiB")
            prof.step()  # after the last active step this stops the trace
            if progress and i and i % every == 0 and i < n_steps:
                el = time.perf_counter() - t0
                log(f"  step {i}/{n_steps}  {el:.1f} s  "
                    f"eta {el / i * (n_steps - i):.0f} s  rss,peak={rss_mib()} MiB")
    t1 = time.perf_counter()
    t["stop_s"] = t1 - ts
    prof.export_chrome_trace(out_json)
    t["export_s"] = time.perf_counter() - t1
    del prof
    return {k: round(v, 2) for k, v in t.items()}


def gzip_file(src, dst, level):
    with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=level) as fout:
        shutil.copyfileobj(fin, fout, 16 * MiB)


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Generate a large real torch.profiler Chrome trace (CPU).")
    p.add_argument("--target-mb", type=float, default=100,
                   help="approximate uncompressed size in MiB (default 100)")
    p.add_argument("--out", default="kineto_cpu_trace.json",
                   help=".json, or .json.gz (exported, then gzip-compressed)")
    p.add_argument("--memory", action="store_true",
                   help="profile_memory=True ([memory] instant events)")
    p.add_argument("--steps", type=int,
                   help="number of active profiler steps (skips calibration)")
    p.add_argument("--calib-steps", type=int, default=20)
    p.add_argument("--micro-steps", type=int, default=1,
                   help="training iterations per ProfilerStep (default 1); "
                   "fewer, longer ProfilerSteps for the same size")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gzip-level", type=int, default=6)
    p.add_argument("--no-count", action="store_true",
                   help="do not count the events of the written trace")
    p.add_argument("--summary", metavar="JSON",
                   help="also write the summary to this file")
    p.add_argument("--count", metavar="TRACE",
                   help="only count the events of an existing trace and exit")
    args = p.parse_args(argv)

    if args.count:
        res = count_events(args.count)
        res["bytes"] = os.path.getsize(args.count)
        print(json.dumps(res, indent=1))
        return 0

    out = os.path.abspath(args.out)
    gz = out.endswith(".gz")
    out_json = out[:-3] if gz else out
    if gz and not out_json.endswith(".json"):
        out_json += ".json"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    target = int(args.target_mb * MiB)

    t_start = time.perf_counter()
    import torch

    log(f"torch {torch.__version__}, threads={args.threads}, "
        f"memory={args.memory}, target={args.target_mb} MiB -> {out}")
    step = build(args)
    for _ in range(3):  # unprofiled warm-up (AdamW state, allocator caches)
        step()

    summary = {"torch": torch.__version__, "out": out,
               "target_bytes": target, "memory": args.memory,
               "record_shapes": True, "threads": args.threads,
               "micro_steps": args.micro_steps,
               "model": {"batch": args.batch, "width": args.width,
                         "depth": args.depth}}
    if args.steps:
        n = args.steps
    else:
        cal_n = max(2, math.ceil(args.calib_steps / args.micro_steps))
        log(f"calibrating with {cal_n} steps ...")
        fd, cal = tempfile.mkstemp(suffix=".json", prefix=".calib_",
                                   dir=os.path.dirname(out))
        os.close(fd)
        try:
            ct = profile_run(step, cal_n, args, cal, progress=False)
            cal_bytes = os.path.getsize(cal)
        finally:
            os.unlink(cal)
        per_step = cal_bytes / cal_n
        n = max(1, math.ceil(target / per_step))
        s_per_step = ct["steps_s"] / cal_n
        log(f"  {cal_bytes} bytes in {cal_n} steps = "
            f"{per_step / 1024:.0f} KiB/step, {s_per_step * 1000:.0f} ms/step "
            f"-> {n} steps, about {n * s_per_step:.0f} s of steps")
        summary["calibration"] = {"steps": cal_n,
                                  "bytes": cal_bytes,
                                  "bytes_per_step": round(per_step),
                                  **ct}
    summary["steps"] = n

    log(f"profiling {n} steps ...")
    t = profile_run(step, n, args, out_json)
    json_bytes = os.path.getsize(out_json)
    log(f"  exported {json_bytes / MiB:.1f} MiB in {t['export_s']:.1f} s "
        f"(stop {t['stop_s']:.1f} s), peak rss {rss_mib()[1]} MiB")
    summary.update(t)
    summary["json_bytes"] = json_bytes
    summary["peak_rss_mib"] = rss_mib()[1]

    if not args.no_count:
        log("counting events (streaming) ...")
        c = count_events(out_json)
        summary.update(c)
        summary["bytes_per_event"] = round(json_bytes / max(1, c["events"]), 1)
        log(f"  {c['events']} events, {summary['bytes_per_event']} bytes/event, "
            f"{c['profiler_steps']} ProfilerSteps, "
            f"{c['memory_instant_events']} [memory] ({c['count_s']} s)")

    if gz:
        log(f"gzip -{args.gzip_level} ...")
        t1 = time.perf_counter()
        gzip_file(out_json, out, args.gzip_level)
        os.unlink(out_json)
        summary["gzip_s"] = round(time.perf_counter() - t1, 2)
        summary["gz_bytes"] = os.path.getsize(out)
        log(f"  {summary['gz_bytes'] / MiB:.1f} MiB in {summary['gzip_s']} s")

    summary["generate_s"] = round(t["steps_s"] + t["stop_s"] + t["export_s"], 2)
    summary["wall_s"] = round(time.perf_counter() - t_start, 2)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
