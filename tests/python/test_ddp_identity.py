"""Training with memcomm's allocator is bitwise identical to training without it (DDP, 2 ranks, Gloo)."""
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def train(out: Path, *extra: str) -> None:
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(HERE / "ddp_train.py"), str(out), *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_ddp_with_memcomm_allocator_is_bitwise_identical(tmp_path):
    train(tmp_path / "torch.pt")
    train(tmp_path / "memcomm.pt", "--memcomm")
    ref, got = torch.load(tmp_path / "torch.pt"), torch.load(tmp_path / "memcomm.pt")
    assert ref.keys() == got.keys()
    for name in ref:
        assert torch.equal(ref[name], got[name]), name
    assert any(not torch.equal(v, torch.zeros_like(v)) for v in got.values())
