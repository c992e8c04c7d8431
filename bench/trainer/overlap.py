"""Exposed communication with overlap on against off (issue 5's target: exposed <= 15 % of backward).

memcomm-train with 2 ranks (Gloo, CPU), the same model, batch and steps, once with bucket all-reduces
launched from autograd hooks during backward and once with --no-overlap (all-reduce after backward).
Runs alternate for several rounds since these machines are noisy; medians are reported. "Exposed" is
the time the trainer waited for gradients after backward, "comm" the time any bucket's all-reduce was
in flight (Note [Communication time] in trainer/src/grad_sync.cpp).

Usage: python3 bench/trainer/overlap.py [--build build] [--rounds 3] [--steps 80] [--models mlp,cnn,transformer]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODEL_ARGS = {
    "mlp": ["--model", "mlp", "--hidden", "1024"],
    "cnn": ["--model", "cnn"],
    "transformer": ["--model", "transformer", "--layers", "4", "--width", "256", "--seq-len", "64",
                    "--synthetic-size", "20000"],
}
BATCH = {"mlp": 64, "cnn": 64, "transformer": 8}  # per rank, unless --batch-size says otherwise


def run(binary, model, overlap, a):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [binary, "--nproc", "2", "--threads", "1", "--workers", "1", "--batch-size", str(a.batch_size or BATCH[model]),
               "--steps", str(a.steps), "--bucket-mb", str(a.bucket_mb), "--log-interval", "100000",
               "--eval-batches", "1", "--summary-json", summary] + MODEL_ARGS[model]
        if not overlap:
            cmd.append("--no-overlap")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            s = json.load(f)
    steps = s["steps"]
    return {"exposed_ms": s["exposed_comm_ms"] / steps, "backward_ms": s["backward_ms"] / steps,
            "comm_ms": s["comm_ms"] / steps, "step_ms": s["step_ms"]["p50"], "buckets": s["buckets"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--batch-size", type=int, default=0, help="per-rank batch (default: 64, transformer 8)")
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--models", default="mlp,cnn,transformer")
    a = p.parse_args()
    binary = os.path.join(a.build, "bin", "memcomm-train")
    if not os.access(binary, os.X_OK):
        p.error(f"{binary} is missing: build it first (scripts/build.sh)")
    models = a.models.split(",")
    for m in models:
        if m not in MODEL_ARGS:
            p.error(f"--models: unknown model '{m}' (choose from {', '.join(MODEL_ARGS)})")

    print(f"2 ranks, Gloo on CPU, 1 thread each, batch {a.batch_size or 'per model'}, {a.steps} steps, --bucket-mb {a.bucket_mb}, "
          f"{a.rounds} alternating rounds, medians per step\n")
    print("| model | buckets | overlap | backward ms | comm ms | exposed ms | exposed / backward | step p50 ms |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for m in models:
        runs = {True: [], False: []}
        for r in range(a.rounds):
            for ov in (True, False) if r % 2 == 0 else (False, True):
                runs[ov].append(run(binary, m, ov, a))
        for ov in (True, False):
            med = {k: statistics.median(x[k] for x in runs[ov]) for k in runs[ov][0]}
            share = statistics.median(x["exposed_ms"] / x["backward_ms"] for x in runs[ov])
            print(f"| {m} | {med['buckets']:.0f} | {'on' if ov else 'off'} | {med['backward_ms']:.2f} | "
                  f"{med['comm_ms']:.2f} | {med['exposed_ms']:.2f} | {100 * share:.1f} % | {med['step_ms']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
