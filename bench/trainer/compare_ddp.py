"""memcomm-train against PyTorch's Python DDP, side by side in one run (issue 5's target).

Same model, data (Fashion-MNIST, or synthetic rows where it is not installed), per-rank batch,
threads per rank, ranks and steps; Gloo on CPU, and with --device cuda NCCL (or Gloo when ranks share
a GPU). Each configuration alternates the two several times and reports medians, since these
machines are noisy. Usage: .venv/bin/python bench/trainer/compare_ddp.py [--build build] [--rounds 3]
[--device cuda]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_memcomm(binary, model, a):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [binary, "--nproc", str(a.nproc), "--model", model, "--dataset", a.dataset, "--device", a.device,
               "--threads",
               str(a.threads), "--batch-size", str(a.batch_size), "--steps", str(a.steps), "--workers", str(a.workers),
               "--log-interval", "100000", "--eval-batches", "1", "--allocator", a.allocator,
               "--summary-json", summary]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            return json.load(f)["step_ms"]["p50"]


def run_torch(model, a):
    cmd = [sys.executable, os.path.join(HERE, "ddp_baseline.py"), "--model", model, "--nproc", str(a.nproc),
           "--threads", str(a.threads), "--batch-size", str(a.batch_size), "--steps", str(a.steps),
           "--dataset", a.dataset, "--device", a.device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["step_ms_p50"]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--allocator", default="memcomm")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--workers", type=int, default=1,
                   help="memcomm-train's loader threads per rank (0: batches are made on the training thread, "
                        "inside the timed step; the baseline slices its batch before its clock starts)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: NCCL with a GPU per rank, else Gloo with ranks sharing the GPU (both sides)")
    p.add_argument("--dataset", choices=["fashion-mnist", "tabular"], default=None,
                   help="default: fashion-mnist when Debian's package is installed, else synthetic rows")
    a = p.parse_args()
    if a.dataset is None:
        have = os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
        a.dataset = "fashion-mnist" if have else "tabular"
    binary = os.path.join(a.build, "bin", "memcomm-train")
    print(f"{'model':6} {'memcomm p50 ms':>15} {'torch DDP p50 ms':>17} {'speed-up':>9}")
    for model in a.models.split(","):
        ours, theirs = [], []
        for _ in range(a.rounds):
            ours.append(run_memcomm(binary, model, a))
            theirs.append(run_torch(model, a))
        m, t = statistics.median(ours), statistics.median(theirs)
        print(f"{model:6} {m:15.3f} {t:17.3f} {t / m:8.2f}x", flush=True)


if __name__ == "__main__":
    main()
