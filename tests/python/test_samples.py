"""samples/python/ run as CI runs them: the tutorial loop, and its DDP version on 2 Gloo ranks, whose
traces open in memcomm-view (both ranks with collectives and memory) and in memcomm-trace."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build_dir

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "python"
FASHION = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")

pytestmark = pytest.mark.skipif(not FASHION.exists(), reason="needs Debian's dataset-fashion-mnist")


def run(args, cwd, timeout=400):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_tutorial_loop_logs_and_writes_its_trace_and_snapshot(tmp_path):
    out = run([sys.executable, SAMPLES / "fashion_mnist.py", "--max-batches", "60", "--log-every", "20",
               "--trace", "run.mct", "--snapshot", "run.pickle"], tmp_path)
    assert "Batch [60/" in out and "peak reserved" in out
    report = json.loads(run([build_dir() / "bin" / "memcomm-trace", "report", "--json", "run.rank0.mct"], tmp_path))
    assert report, report
    run([build_dir() / "bin" / "memcomm-replay", "--quiet", "run.pickle"], tmp_path)


@pytest.fixture(scope="module")
def ddp_traces(tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp")
    out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               SAMPLES / "ddp_fashion_mnist.py", "--max-steps", "12", "--log-every", "4", "--trace", "ddp.mct"], work)
    assert "step 12" in out
    traces = sorted(work.glob("ddp*.mct"))
    assert len(traces) == 2, traces
    return work, traces


def test_ddp_sample_traces_report_and_advise(ddp_traces):
    work, traces = ddp_traces
    tool = build_dir() / "bin" / "memcomm-trace"
    report = run([tool, "report", "--json", *traces], work)
    assert json.loads(report)
    run([tool, "advise", *traces], work)


@pytest.mark.skipif(not os.environ.get("DISPLAY"),
                    reason="needs an X display (scripts/test.sh runs ctest under xvfb-run)")
def test_ddp_sample_traces_show_both_ranks_in_the_viewer(ddp_traces):
    work, traces = ddp_traces
    run([build_dir() / "bin" / "memcomm-view", "--screenshot", "view.png", "--frames", "5",
         "--report-json", "view.json", *traces], work)
    assert (work / "view.png").stat().st_size > 10_000
    ranks = json.loads((work / "view.json").read_text())["ranks"]
    assert len(ranks) == 2, ranks
    for r in ranks:
        assert r["collectives"] > 0 and r["alloc_events"] > 0, ranks
