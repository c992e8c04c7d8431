"""memcomm.tune (Python probes) against memcomm-tune (LibTorch probes) on the same model and limit.

    .venv/bin/python bench/python/tune_compare.py [--build build] [--results bench/results/python-cpu.md]

For each configuration it runs `memcomm-tune --json` and memcomm.tune with the same architecture
(memcomm-train's MLP or CNN, trainer/src/models.cpp, written again in Python), the same data shape
(Fashion-MNIST held as a uint8 tensor under the cap, as memcomm-tune holds it, or synthetic rows),
SGD with momentum 0.9, one intra-op thread per rank, batches made on demand (memcomm-tune with
--workers 0, so neither has a loader ring), and the same limit, global batch, ranks and
--verify-steps. It prints the probe counts, the boundaries and the recommendations side by side and
checks the issue's target: the probe counts agree within ceil(log2 max) + 3, max being the
largest candidate micro-batch (the per-rank batch). With --results it writes the table under the
"## Tuner from Python" heading of that file (replacing that section, keeping the others).

Run as `tune_compare.py --worker CONFIG_JSON OUT_JSON` (directly, or under torch.distributed.run for
several ranks) it is one rank of the Python side.
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist")
VERIFY_STEPS = 5

CONFIGS: List[Dict[str, Any]] = [
    {"name": "MLP (hidden 512), Fashion-MNIST, 1 rank", "model": "mlp", "hidden": 512, "dataset": "fashion-mnist",
     "limit_mib": 72, "global_batch": 2048, "nproc": 1},
    {"name": "CNN, Fashion-MNIST, 1 rank", "model": "cnn", "hidden": 256, "dataset": "fashion-mnist",
     "limit_mib": 96, "global_batch": 512, "nproc": 1},
    {"name": "MLP (hidden 256), synthetic rows, 2 ranks (Gloo)", "model": "mlp", "hidden": 256,
     "dataset": "tabular", "limit_mib": 24, "global_batch": 4096, "nproc": 2},
]


# ---------------------------------------------------------------------------------------------
# The Python side (one rank)


def _model(cfg: Dict[str, Any]):
    """memcomm-train's models (trainer/src/models.cpp) in Python."""
    import torch.nn as nn
    if cfg["model"] == "mlp":
        h = cfg["hidden"]
        return nn.Sequential(nn.Flatten(), nn.Linear(784, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def _idx(path: Path, offset: int):
    import numpy as np
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def _batch_maker(cfg: Dict[str, Any]):
    """make_batch(b): Fashion-MNIST held as a uint8 tensor under the cap and normalised per batch (as
    memcomm-tune's loader does), or synthetic rows made per batch."""
    import torch
    if cfg["dataset"] == "tabular":
        return lambda b: (torch.randn(b, 784), torch.randint(0, 10, (b,)))
    images = torch.from_numpy(_idx(FMNIST / "train-images-idx3-ubyte.gz", 16).reshape(-1, 784).copy()).clone()
    labels = torch.from_numpy(_idx(FMNIST / "train-labels-idx1-ubyte.gz", 8).astype("int64")).clone()

    def make_batch(b: int):
        i = torch.randint(0, images.shape[0], (b,))
        x = images.index_select(0, i).to(torch.float32).div_(255.0).sub_(0.2860).div_(0.3530)
        return x, labels.index_select(0, i)
    return make_batch


def worker(cfg: Dict[str, Any], out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import memcomm
    torch.set_num_threads(1)
    memcomm.use_allocator("cpu", memory_limit=cfg["limit_mib"] << 20)
    if cfg["nproc"] > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = _model(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    make_batch = _batch_maker(cfg)
    result = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]), make_batch,
                          cfg["global_batch"], verify_steps=VERIFY_STEPS, verbose=False)
    if not dist.is_initialized() or dist.get_rank() == 0:
        Path(out).write_text(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# The comparison


def run_cli(cfg: Dict[str, Any], build: Path, tmp: Path) -> Tuple[Dict[str, Any], float]:
    out = tmp / "cli.json"
    cmd = [str(build / "bin" / "memcomm-tune"), "--model", cfg["model"], "--hidden", str(cfg["hidden"]),
           "--dataset", cfg["dataset"], "--workers", "0", "--threads", "1", "--memory-limit", f"{cfg['limit_mib']}MiB",
           "--global-batch", str(cfg["global_batch"]), "--nproc", str(cfg["nproc"]), "--verify-steps",
           str(VERIFY_STEPS), "--fresh", "--json", str(out)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900,
                   env=dict(os.environ, MEMCOMM_CACHE_DIR=str(tmp / "cache")))
    return json.loads(out.read_text()), time.perf_counter() - start


def run_python(cfg: Dict[str, Any], build: Path, tmp: Path) -> Tuple[Dict[str, Any], float]:
    out = tmp / "py.json"
    me = [str(Path(__file__).resolve()), "--worker", json.dumps(cfg), str(out)]
    launch = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                  str(cfg["nproc"])] if cfg["nproc"] > 1 else [])
    env = dict(os.environ, PYTHONPATH=str(build / "python"), OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run(launch + me, check=True, capture_output=True, text=True, timeout=900, env=env)
    return json.loads(out.read_text()), time.perf_counter() - start


def _rec(r: Dict[str, Any]) -> str:
    c = r["recommendation"]
    if c is None:
        return "none"
    bucket = f", {c['bucket_mb']:g} MiB" if c["world"] > 1 else ""
    return f"b={c['micro_batch']} K={c['accum']}{bucket}, {c['samples_per_s']:.0f}/s"


def _peak_ratio(cli: Dict[str, Any], py: Dict[str, Any]) -> str:
    """Python's peak allocated bytes over memcomm-tune's, at the micro-batches both probed and fit."""
    a = {t["micro_batch"]: t["peak_allocated"] for t in cli["trials"] if not t["oom"] and t["purpose"] != "bucket"}
    b = {t["micro_batch"]: t["peak_allocated"] for t in py["trials"] if not t["oom"] and t["purpose"] != "bucket"}
    ratios = [b[m] / a[m] for m in sorted(set(a) & set(b)) if a[m] > 0]
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"


def compare(cfg: Dict[str, Any], build: Path) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        cli, cli_s = run_cli(cfg, build, Path(d))
        py, py_s = run_python(cfg, build, Path(d))
    per_rank = cfg["global_batch"] // cfg["nproc"]
    bound = math.ceil(math.log2(per_rank)) + 3
    row = {"name": cfg["name"], "limit_mib": cfg["limit_mib"], "global_batch": cfg["global_batch"], "bound": bound,
           "cli": {"boundary_probes": cli["boundary_probes"], "probes": len(cli["trials"]),
                   "largest_feasible": cli["largest_feasible"], "recommendation": _rec(cli), "wall_s": cli_s},
           "python": {"boundary_probes": py["boundary_probes"], "probes": len(py["trials"]),
                      "largest_feasible": py["largest_feasible"], "recommendation": _rec(py), "wall_s": py_s},
           "peak_ratio": _peak_ratio(cli, py)}
    row["ok"] = (abs(row["cli"]["boundary_probes"] - row["python"]["boundary_probes"]) <= bound
                 and abs(row["cli"]["probes"] - row["python"]["probes"]) <= bound
                 and row["python"]["boundary_probes"] <= bound)
    return row


def markdown(rows: List[Dict[str, Any]], command: str) -> str:
    lines = ["## Tuner from Python", "",
             f"Command: `{command}` ({time.strftime('%Y-%m-%d')}; memcomm-tune --workers 0 --threads 1 "
             f"--verify-steps {VERIFY_STEPS}, memcomm.tune with the same model, optimizer, limit and ranks; "
             "2-core shared VM). Probes: boundary probes / all probes. Target: the counts agree within "
             "ceil(log2 max) + 3, max the per-rank batch.", "",
             "| configuration | limit | G | memcomm-tune probes | memcomm.tune probes | largest fit (tune / .tune) "
             "| memcomm-tune recommends | memcomm.tune recommends | peak alloc. ratio | bound | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, p = r["cli"], r["python"]
        lines.append(f"| {r['name']} | {r['limit_mib']} MiB | {r['global_batch']} | {c['boundary_probes']} / "
                     f"{c['probes']} | {p['boundary_probes']} / {p['probes']} | {c['largest_feasible']} / "
                     f"{p['largest_feasible']} | {c['recommendation']} | {p['recommendation']} | {r['peak_ratio']} "
                     f"| {r['bound']} | {'met' if r['ok'] else 'MISSED'} |")
    lines += ["", "Wall time of each whole run (launch, data, tuning, verification): " + "; ".join(
        f"{r['name']}: memcomm-tune {r['cli']['wall_s']:.1f} s, memcomm.tune {r['python']['wall_s']:.1f} s"
        for r in rows) + ".", "",
        "Reading it: the boundary probes are the search's own (one core, memcomm_tuner_core, in both), so they "
        "match whenever the peaks do; the peak ratio is memcomm.tune's peak allocated bytes over memcomm-tune's "
        "at the micro-batches both probed. With 2 ranks memcomm.tune holds DDP's default layout, gradients and "
        "a bucket copy of them (Note [Gradient buckets from Python]), where memcomm-tune's trainer keeps the "
        "gradients in its buckets: up to one gradient's size more. A largest fit one candidate apart comes "
        "from a boundary candidate within a few percent of the limit. The speed phase and the recommendation "
        "follow measured step times, so they vary from run to run on a shared machine, in each tool alike.", ""]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replaces the "## Tuner from Python" section of `path` (or appends it), keeping the rest."""
    text = path.read_text() if path.exists() else "# memcomm from Python (CPU)\n\n"
    head, sep, rest = text.partition("## Tuner from Python")
    tail = rest[rest.find("\n## "):] if sep and "\n## " in rest else ""
    path.write_text(head.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + tail)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]), sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--results", type=Path, help="write the table under '## Tuner from Python' in this file")
    args = ap.parse_args()
    if not (args.build / "bin" / "memcomm-tune").exists():
        sys.exit(f"tune_compare: {args.build / 'bin' / 'memcomm-tune'} is missing: build it first")
    if not FMNIST.exists():
        sys.exit(f"tune_compare: Fashion-MNIST is missing at {FMNIST} (apt-get install dataset-fashion-mnist)")
    rows = []
    for cfg in CONFIGS:
        rows.append(compare(cfg, args.build))
        print(json.dumps(rows[-1]), flush=True)
    command = ".venv/bin/python bench/python/tune_compare.py" + (f" --results {args.results}" if args.results else "")
    section = markdown(rows, command)
    print(section)
    if args.results:
        write_section(args.results, section)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
