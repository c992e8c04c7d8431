#!/usr/bin/env python3
"""memcomm-tune against its baselines, side by side in one run, on the CPU test model.

1. Boundary: probes until the largest feasible micro-batch is known, memcomm's search against
   Lightning's BatchSizeFinder binsearch (same model, same limit, candidates 1..G/N).
2. Speed: memcomm's recommendation against an exhaustive grid of every divisor, compared inside the
   grid's own measurements (one run, so machine noise does not enter the ratio).
3. Safety: the recommendation runs N steps with memcomm-train under the same --memory-limit.
4. Cost: tuning wall time against that run's wall time.

Usage: bench/tuner/tune_vs_baselines.py [--bin build/bin] [--limit 72MiB] [--global-batch 2048]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

# The CPU test model: the MLP on Fashion-MNIST (the dataset itself, 45 MiB, lives under the cap too).
MODEL = ["--model", "mlp", "--hidden", "512", "--threads", "2", "--workers", "2", "--eval-batches", "10"]


def run(cmd, env=None):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout, time.time() - t0


def tune(bin_dir, args, tmp, name, env):
    out = os.path.join(tmp, name + ".json")
    text, wall = run([os.path.join(bin_dir, "memcomm-tune")] + MODEL + args + ["--fresh", "--json", out], env)
    with open(out) as f:
        return json.load(f), wall, text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--limit", default="72MiB")
    ap.add_argument("--global-batch", type=int, default=2048)
    ap.add_argument("--long-steps", type=int, default=500)
    ap.add_argument("--out", default="", help="write the figures as JSON here")
    a = ap.parse_args()
    env = dict(os.environ)
    tmp = tempfile.mkdtemp(prefix="memcomm-tune-bench-")
    env["MEMCOMM_CACHE_DIR"] = tmp
    base = ["--memory-limit", a.limit, "--global-batch", str(a.global_batch)]

    fit = base + ["--fit-only", "--any-micro-batch", "--max-trials", "40", "--verify-steps", "5",
                  "--probe-seconds", "0.2"]
    ours_fit, _, _ = tune(a.bin, fit + ["--search", "memcomm"], tmp, "fit-memcomm", env)
    light_fit, _, _ = tune(a.bin, fit + ["--search", "lightning"], tmp, "fit-lightning", env)
    bound = math.ceil(math.log2(a.global_batch)) + 3
    print(f"boundary: memcomm {ours_fit['boundary_probes']} probes -> b={ours_fit['largest_feasible']}; "
          f"lightning binsearch {light_fit['boundary_probes']} probes -> b={light_fit['largest_feasible']}; "
          f"bound ceil(log2 {a.global_batch})+3 = {bound}")

    ours, ours_wall, ours_text = tune(a.bin, base, tmp, "memcomm", env)
    grid, grid_wall, _ = tune(a.bin, base + ["--search", "grid", "--max-trials", "64"], tmp, "grid", env)
    rec = ours["recommendation"]
    # The grid's best is its own recommendation: the fastest candidate that passes the same safety
    # rules and its verification run (the fastest raw probe may be one that runs out later).
    grid_speed = {t["micro_batch"]: t["samples_per_s"] for t in grid["trials"] if not t["oom"]}
    raw_b = max(grid_speed, key=grid_speed.get)
    best_b = grid["recommendation"]["micro_batch"]
    ratio = grid_speed.get(rec["micro_batch"], 0) / grid_speed[best_b]
    print(f"speed: memcomm picks b={rec['micro_batch']} K={rec['accum']} in {len(ours['trials'])} probes "
          f"({ours_wall:.1f} s); the grid recommends b={best_b} after {len(grid['trials'])} probes ({grid_wall:.1f} s); "
          f"memcomm's pick runs at {100 * ratio:.1f}% of it in the grid's own measurements "
          f"(fastest raw grid probe: b={raw_b}, {grid_speed[raw_b]:.0f} samples/s, verified: "
          f"{[v['micro_batch'] for v in grid['verifications']]}, OOM: {[v['oom'] for v in grid['verifications']]})")

    cmd = rec["command"].split()
    cmd[0] = os.path.join(a.bin, "memcomm-train")
    cmd += ["--steps", str(a.long_steps), "--log-interval", "100", "--summary-json", os.path.join(tmp, "long.json")]
    _, long_wall = run(cmd, env)
    with open(os.path.join(tmp, "long.json")) as f:
        long = json.load(f)
    print(f"long run: {a.long_steps} steps with the recommendation under --memory-limit {a.limit}: no OOM, "
          f"peak reserved {long['peak_reserved'] / 2**20:.1f} MiB, {long['samples_per_s']:.0f} samples/s, "
          f"{long_wall:.1f} s; tuning took {ours['tuning_wall_s']:.1f} s ({100 * ours['tuning_wall_s'] / long_wall:.0f}% of it)")
    figures = {
        "boundary_probes": {"memcomm": ours_fit["boundary_probes"], "lightning": light_fit["boundary_probes"],
                            "bound": bound, "largest": [ours_fit["largest_feasible"], light_fit["largest_feasible"]]},
        "speed": {"memcomm_b": rec["micro_batch"], "grid_best_b": best_b, "grid_raw_best_b": raw_b, "ratio": ratio,
                  "memcomm_probes": len(ours["trials"]), "grid_probes": len(grid["trials"])},
        "long_run": {"steps": a.long_steps, "peak_reserved": long["peak_reserved"], "wall_s": long_wall},
        "tuning_wall_s": ours["tuning_wall_s"],
        "verification_oom": rec["oom"],
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(figures, f, indent=1)
    print(ours_text[-2500:])


if __name__ == "__main__":
    main()
