"""memcomm.tune on a GPU (labels python and gpu): one rank, capped by torch's own CUDA allocator or by
memcomm's, where memcomm's search finds the grid's boundary and the model comes back unchanged.

Runs under pytest, or as a plain script (the GPU machine may lack pytest): it then runs every test_
function itself and exits 77 (skipped) without a GPU.
"""
import subprocess
import sys
import textwrap

import gpu_script

pytestmark = gpu_script.skip_marks()

SCRIPT = """
    import sys, torch, torch.nn as nn, torch.nn.functional as F, memcomm
    which = sys.argv[1]
    limit = 256 << 20
    if which == "memcomm":
        memcomm.use_allocator("cuda", memory_limit=limit)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    make_batch = lambda b: (torch.randn(b, 1024, device="cuda"), torch.randint(0, 10, (b,), device="cuda"))
    loss_fn = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
    before = [p.detach().clone() for p in model.parameters()]
    kw = dict(memory_limit=None if which == "memcomm" else limit, probe_seconds=0.0, verify_steps=3,
              verbose=False)
    ours = memcomm.tune(model, opt, loss_fn, make_batch, 8192, **kw)
    grid = memcomm.tune(model, opt, loss_fn, make_batch, 8192, search="grid", **kw)
    assert 1 < grid["largest_feasible"] < 8192, grid["largest_feasible"]
    assert ours["largest_feasible"] == grid["largest_feasible"], (ours["largest_feasible"], grid["largest_feasible"])
    assert any(t["oom"] for t in grid["trials"])
    assert ours["recommendation"] is not None
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())) and not opt.state
    if which == "torch":  # uncapped again afterwards
        big = torch.empty(2 * limit, dtype=torch.uint8, device="cuda")
    print("ok", ours["largest_feasible"], ours["boundary_probes"])
"""


def run(allocator: str) -> str:
    # faulthandler: a crash in native code (a signal, no Python error) still prints where it was.
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-u", "-c", textwrap.dedent(SCRIPT), allocator],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, \
        f"exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_cuda_boundary_matches_the_grid_under_torchs_capped_allocator():
    run("torch")


def test_cuda_boundary_matches_the_grid_under_memcomms_allocator():
    run("memcomm")


if __name__ == "__main__":
    gpu_script.run_as_script(globals())
