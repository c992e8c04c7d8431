"""memcomm's CUDA allocator from Python (label gpu): torch.cuda's own memory calls keep working.

Runs under pytest, or as a plain script (the GPU machine may lack pytest): it then runs every test_
function in a fresh interpreter each and exits 77 (skipped) without a GPU.
"""
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap

import gpu_script

pytestmark = gpu_script.skip_marks()


def run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_torch_cuda_memory_calls_work_with_memcomm():
    run("""
        import torch, memcomm
        memcomm.use_allocator("cuda")
        x = torch.randn(1 << 22, device="cuda")
        y = (x * 2).sum()
        s = torch.cuda.memory_stats()
        assert s["allocated_bytes.all.current"] >= x.nbytes, s
        assert torch.cuda.max_memory_allocated() >= x.nbytes
        assert memcomm.memory_stats("cuda")["allocated_bytes.all.current"] == s["allocated_bytes.all.current"]
        del x
        torch.cuda.empty_cache()
        snap = torch.cuda.memory._snapshot()
        assert "segments" in snap
        float(y)
    """)


def test_cuda_snapshot_opens_in_memory_viz():
    path = os.path.join(tempfile.mkdtemp(), "cuda.pickle")
    run(f"""
        import torch, memcomm
        memcomm.use_allocator("cuda", history=10_000)
        for _ in range(3):
            xs = [torch.empty(1000 * (i + 1), device="cuda") for i in range(40)]
            del xs[::2]
        memcomm.dump_snapshot({path!r}, "cuda")
    """)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    from torch.cuda import _memory_viz
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert any(e["action"] == "alloc" for e in snap["device_traces"][0])


def test_installing_after_the_first_cuda_allocation_is_an_error():
    out = run("""
        import torch, memcomm
        x = torch.ones(10, device="cuda")
        try:
            memcomm.use_allocator("cuda")
        except RuntimeError as e:
            print("RuntimeError", e)
        print(float(x.sum()))
    """)
    assert out.startswith("RuntimeError") and "first CUDA allocation" in out and "10.0" in out, out


if __name__ == "__main__":
    gpu_script.run_as_script(globals())
