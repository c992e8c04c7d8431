"""memcomm.use_allocator and what it reads back: the CPU allocator from Python."""
import json
import os
import pickle
import stat
import subprocess
import sys

import pytest
import torch

import memcomm
from conftest import raised_by, run_python


def check(code: str, *args: str) -> str:
    r = run_python(code, *args)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_import_checks_the_torch_version(monkeypatch):
    from memcomm import _build_info
    monkeypatch.setattr(_build_info, "TORCH_VERSION", "1.0.0")
    with pytest.raises(ImportError) as e:
        memcomm._check_torch_version()
    assert "1.0.0" in str(e.value) and torch.__version__ in str(e.value)


def test_the_extension_loads_the_shared_cxx_runtime_torch_loads():
    # See Note [One C++ runtime beside LibTorch]: a module carrying its own copy of libstdc++ crashed on a
    # GPU machine the first time it streamed a number (an OutOfMemoryError's message). Its dependency
    # on the shared library is a name in its dynamic string table.
    from pathlib import Path
    assert b"libstdc++.so.6" in Path(memcomm._memcomm.__file__).read_bytes()


def test_cpu_tensors_live_in_memcomm_and_earlier_ones_stay_valid():
    check("""
        import torch, memcomm
        before = torch.arange(1000, dtype=torch.float32)
        memcomm.use_allocator("cpu")
        memcomm.use_allocator("cpu")  # same options: nothing happens
        after = torch.ones(1 << 20)
        s = memcomm.memory_stats("cpu")
        assert s["allocated_bytes.all.current"] >= after.nbytes, s
        assert s["reserved_bytes.all.peak"] >= s["allocated_bytes.all.peak"] > 0, s
        assert 0 <= s["memcomm.fragmentation"] < 1, s
        import numpy
        assert memcomm.memory_stats(numpy.int64(-1)) == memcomm.memory_stats(-1) == s  # -1 is the CPU
        total = float((before * 2).sum())   # the old tensor works with new ones
        del before                          # and frees through its own deleter
        assert total == 999 * 1000, total
        del after
        assert memcomm.memory_stats()["allocated_bytes.all.current"] < 1 << 20
    """)


def test_a_cpu_scalar_takes_a_cache_line_not_a_device_block():
    # 64 B on the host, as LibTorch's CPU alignment (see Note [Rounding follows the memory]).
    check("""
        import torch, memcomm
        memcomm.use_allocator("cpu")
        base = memcomm.memory_stats()["allocated_bytes.all.current"]
        scalars = [torch.tensor(float(i)) for i in range(10000)]
        held = memcomm.memory_stats()["allocated_bytes.all.current"] - base
        assert 64 * len(scalars) <= held < 65 * len(scalars), held  # 512 B each before
        assert sum(float(t) for t in scalars) == 9999 * 10000 / 2
    """)


def test_empty_cache_gives_memory_back_and_peaks_reset():
    check("""
        import torch, memcomm
        memcomm.use_allocator("cpu", expandable=False)
        xs = [torch.empty(3 << 20, dtype=torch.uint8) for _ in range(4)]
        del xs
        held = memcomm.memory_stats()["reserved_bytes.all.current"]
        memcomm.empty_cache()
        s = memcomm.memory_stats()
        assert s["reserved_bytes.all.current"] < held, (held, s)
        memcomm.reset_peak_memory_stats()
        assert memcomm.memory_stats()["allocated_bytes.all.peak"] == memcomm.memory_stats()["allocated_bytes.all.current"]
    """)


def test_a_limit_under_an_address_space_ulimit_works():
    # See Note [Address space for a segment]: a 48 GiB cap under `ulimit -v` 80 GiB (as Slurm sets) once
    # made every CPU allocation fail, where no cap worked.
    check("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (80 << 30, 80 << 30))
        import torch, memcomm
        memcomm.use_allocator("cpu", memory_limit=48 << 30)
        assert torch.ones(1000).sum().item() == 1000
    """)


def test_an_address_space_ulimit_leaves_room_for_the_rest_of_the_process():
    # See Note [Address space for a segment]: each pool reserved half or more of what `ulimit -v` left, so
    # under 16 GiB the first 1 GiB tensors ran out of memory and numpy's arrays failed beside them.
    check("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))
        import numpy as np, torch, memcomm
        memcomm.use_allocator("cpu")
        small = torch.ones(10)
        held = [torch.empty(1 << 30, dtype=torch.uint8) for _ in range(6)]  # untouched: address space alone
        array = np.empty(2 << 30, dtype=np.uint8)
        assert memcomm.memory_stats()["reserved_bytes.all.current"] >= 6 << 30
    """)


def test_a_forked_data_loader_worker_can_grow_the_heap():
    # See Note [Allocator locks across fork]: a worker forked by a DataLoader (fork is Linux's default) whose
    # samples need pages the parent never mapped must get them; a lock left shut in the child once hung
    # every such worker at its first source call.
    check("""
        import torch, memcomm
        memcomm.use_allocator("cpu")
        torch.ones(1000)  # the parent has used the allocator

        class Big(torch.utils.data.Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return torch.full((16 << 20,), float(i))  # 64 MiB a sample: a growth in the worker

        loader = torch.utils.data.DataLoader(Big(), batch_size=1, num_workers=2,
                                             multiprocessing_context="fork", timeout=60)
        assert [int(b[0, 0]) for b in loader] == [0, 1, 2, 3]
    """)


def test_over_the_limit_is_torch_out_of_memory():
    check("""
        import torch, memcomm
        memcomm.use_allocator("cpu", memory_limit=32 << 20)
        keep = torch.empty(16 << 20, dtype=torch.uint8)
        try:
            torch.empty(64 << 20, dtype=torch.uint8)
        except torch.OutOfMemoryError as e:
            # What accelerate's batch-size finder looks for (see Note [Out of memory as torch words it]).
            assert len(e.args) == 1 and e.args[0].startswith("CPU out of memory. "), e.args
            assert "DefaultCPUAllocator: can't allocate memory" in e.args[0], e.args  # Lightning's CPU test
        else:
            raise AssertionError("no OutOfMemoryError")
        assert memcomm.memory_stats()["num_ooms"] == 1
        keep += 1  # the process goes on
    """)


def test_torch_profiler_records_the_allocators_memory_events():
    # Under memcomm's allocator a profile recorded no memory (see Note [Memory events for torch.profiler]).
    check("""
        import torch, memcomm
        from torch.profiler import profile, ProfilerActivity
        memcomm.use_allocator("cpu")
        a = torch.randn(256, 256)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            b = a @ a
            del b
        mm = [e for e in prof.key_averages() if e.key == "aten::mm"]
        assert mm and mm[0].cpu_memory_usage >= 256 * 256 * 4, [(e.key, e.cpu_memory_usage) for e in prof.key_averages()]
        frees = [e for e in prof.events() if e.name == "[memory]" and e.cpu_memory_usage < 0]
        assert frees, "the free of b was not recorded"
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            c = torch.empty(7)  # the bytes asked for, as torch's CPU allocator reports them (not a 64 B block)
        sizes = {e.key: e.cpu_memory_usage for e in prof.key_averages()}
        assert sizes.get("aten::empty") == 28, sizes
    """)


def test_a_snapshot_after_an_out_of_memory_opens_in_memory_viz(tmp_path):
    # memory_viz's trace read an oom entry's device_free, and raised KeyError without it.
    path = tmp_path / "oom.pickle"
    check(f"""
        import torch, memcomm
        memcomm.use_allocator("cpu", memory_limit=64 << 20, history=1000)
        keep = torch.empty(16 << 20, dtype=torch.uint8)
        try:
            torch.empty(128 << 20, dtype=torch.uint8)
        except torch.OutOfMemoryError:
            pass
        memcomm.dump_snapshot({str(path)!r})
    """)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    ooms = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    assert len(ooms) == 1 and 0 < ooms[0]["device_free"] <= 64 << 20, ooms
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "OutOfMemoryError # 128.0MiB requested, 48.0MiB free" in r.stdout, r.stdout + r.stderr


def test_snapshot_opens_in_memory_viz_and_memcomm_replay(tmp_path, tool):
    path = tmp_path / "cpu.pickle"
    check("""
        import sys, torch, memcomm
        memcomm.use_allocator("cpu", history=10_000)
        for step in range(3):
            acts = [torch.ones(1000 * (i + 1)) for i in range(50)]
            del acts[::2]
            grads = [torch.zeros(300 * i + 1) for i in range(20)]
            del acts, grads
        keep = torch.ones(12345)
        memcomm.dump_snapshot(sys.argv[1])
    """, str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    trace = snap["device_traces"][0]
    actions = {e["action"] for e in trace}
    assert {"alloc", "free_requested", "segment_map"} <= actions, actions
    assert sum(b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"]) >= 1
    # PyTorch's own reader of snapshots (memory_viz) takes it whole.
    from torch.cuda import _memory_viz
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert "<html" in _memory_viz.trace_plot(snap).lower()

    # memcomm-replay replays it through the policies.
    out = subprocess.run([tool("memcomm-replay"), "--quiet", "--json", "-", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"memcomm"' in out.stdout
    # Re-saved with pickle's older protocols: protocol 1 reads the same; protocol 0 (text strings) is
    # refused with what to do; an event without its size is refused, not read as 0 bytes.
    old = tmp_path / "p1.pickle"
    with open(old, "wb") as f:
        pickle.dump(snap, f, protocol=1)
    again = subprocess.run([tool("memcomm-replay"), "--quiet", "--json", "-", str(old)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    def figures(doc):  # what the replay measured, without its own timings and the file's name
        if isinstance(doc, dict):
            return {k: figures(v) for k, v in doc.items() if "seconds" not in k and "per_s" not in k and k != "file"}
        return [figures(v) for v in doc] if isinstance(doc, list) else doc
    assert figures(json.loads(again.stdout)) == figures(json.loads(out.stdout))
    with open(old, "wb") as f:
        pickle.dump(snap, f, protocol=0)
    text = subprocess.run([tool("memcomm-replay"), str(old)], capture_output=True, text=True, timeout=120)
    assert text.returncode == 2 and "protocol 2 or later" in text.stderr, text.stderr
    del trace[0]["size"]
    with open(old, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    sizeless = subprocess.run([tool("memcomm-replay"), str(old)], capture_output=True, text=True, timeout=120)
    assert sizeless.returncode == 2 and "device_traces[0][0]: event has no 'size'" in sizeless.stderr, sizeless.stderr


def test_a_snapshots_block_entries_carry_the_bytes_asked_for(tmp_path, tool):
    # PyTorch's history writes a block's requested bytes; memcomm wrote the rounded block (128 B for 100),
    # so 100,000 four-byte tensors read as 12.2 MiB live where 781 KiB were.
    path = tmp_path / "sizes.pickle"
    out = check("""
        import sys, torch, memcomm
        memcomm.use_allocator("cpu", history=1000)
        kept = torch.empty(100, dtype=torch.uint8)
        gone = torch.empty(4, dtype=torch.uint8)
        addr = gone.data_ptr()
        del gone
        memcomm.dump_snapshot(sys.argv[1])
        print(kept.data_ptr(), addr)
    """, str(path))
    kept, gone = map(int, out.split())
    with open(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    sizes = {(e["action"], e["addr"]): e["size"] for e in trace if e["action"] in ("alloc", "free_requested", "free_completed")}
    assert sizes[("alloc", kept)] == 100, sizes
    assert sizes[("alloc", gone)] == sizes[("free_requested", gone)] == sizes[("free_completed", gone)] == 4, sizes
    mem = subprocess.run([tool("memcomm-trace"), "memory", "--json", str(path)], capture_output=True, text=True, timeout=60)
    assert mem.returncode == 0, mem.stderr
    assert json.loads(mem.stdout)["live_bytes"] <= 100 + 1024, mem.stdout  # the kept tensor and little else


def test_a_snapshot_to_a_device_is_written_in_place(tmp_path):
    # A rename replaced the device with a regular file, and /dev/full's ENOSPC went unreported.
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("mknod needs root")
    check(f"""
        import memcomm
        memcomm.use_allocator("cpu")
        try:
            memcomm.dump_snapshot({str(node)!r})
            raise AssertionError("a full device took the snapshot")
        except OSError as e:
            assert e.errno == 28, e
    """)
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_a_limit_past_the_address_space_still_allocates():
    # See Note [Address space for a segment]: the reservation halves below a cap no process can reserve.
    check("""
        import torch, memcomm
        memcomm.use_allocator("cpu", memory_limit=1 << 50)
        assert float(torch.ones(1 << 20).sum()) == 1 << 20
        try:
            torch.empty(1 << 48, dtype=torch.uint8)
            raise AssertionError("256 TiB allocated")
        except torch.OutOfMemoryError as e:
            assert "of address space, all the process could reserve" in str(e), e
    """)


BAD_CALLS = [
    ("memcomm.use_allocator('tpu')", ValueError),
    ("memcomm.use_allocator('cpu', memory_limit=-1)", ValueError),
    ("memcomm.use_allocator('cpu', memory_limit=1 << 64)", ValueError),
    ("memcomm.use_allocator('cpu', memory_limit='1G')", TypeError),
    ("memcomm.use_allocator('cpu', gc_threshold=0.5)", ValueError),
    ("memcomm.use_allocator('cpu', expandable='yes')", TypeError),
    ("memcomm.memory_stats('meta')", ValueError),
    ("memcomm.memory_stats(3.5)", TypeError),
    ("memcomm.dump_snapshot('/no/such/dir/x.pickle')", FileNotFoundError),
    ("memcomm.use_allocator('cpu', memory_limit=(1 << 64) - 1)", ValueError),  # failed at the first tensor
    ("memcomm.use_allocator('cpu', history=1 << 64)", ValueError),  # pybind's "incompatible function arguments"
    ("memcomm.memory_stats(1 << 70)", ValueError),
]


@pytest.fixture(scope="module")
def bad_call_results() -> dict:
    return raised_by([call for call, _ in BAD_CALLS])


@pytest.mark.parametrize("call, error", BAD_CALLS)
def test_bad_arguments_are_python_exceptions(call, error, bad_call_results):
    name, message = bad_call_results[call]
    assert name == error.__name__, (call, name, message)
    assert message, (call, "the exception says nothing")


def test_a_wrapped_history_still_replays_the_blocks_held_from_before_it(tmp_path, tool):
    # The segments name the device their trace is listed under, so the blocks the end state holds that
    # were allocated before the kept window count as live from the start.
    path = tmp_path / "wrapped.pickle"
    check("""
        import sys, torch, memcomm
        memcomm.use_allocator("cpu", history=100)
        keep = [torch.ones(1 << 20) for _ in range(3)]    # 12 MiB, allocated long before the window
        for _ in range(200):
            torch.ones(64)
        memcomm.dump_snapshot(sys.argv[1])
    """, str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert {s["device"] for s in snap["segments"]} == {0}
    out = subprocess.run([tool("memcomm-replay"), "-q", "--policy", "memcomm", "--json", "-", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert json.loads(out)[0]["peak_live"] >= 3 * (4 << 20), out


def test_reading_before_installing_and_reinstalling_otherwise_are_errors():
    out = check("""
        import memcomm
        for call in (lambda: memcomm.memory_stats("cpu"),
                     lambda: (memcomm.use_allocator("cpu"), memcomm.use_allocator("cpu", expandable=False))):
            try:
                call()
            except RuntimeError as e:
                print("RuntimeError", e)
    """)
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("RuntimeError") for line in lines), out
    assert "use_allocator" in lines[0] and "already installed" in lines[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cuda_allocator_without_a_gpu_is_a_clear_error():
    out = check("""
        import torch, memcomm
        memcomm.use_allocator("cpu", history=1000)
        try:
            memcomm.use_allocator("cuda")
        except RuntimeError as e:
            print("RuntimeError", e)
        # the failed CUDA install left the CPU allocator's history as it was
        x = torch.ones(1 << 16)
        assert any(e["action"] == "alloc" for e in memcomm.snapshot("cpu")["device_traces"][0])
    """)
    assert out.startswith("RuntimeError") and ("GPU" in out or "CUDA" in out or "cuda" in out), out


def test_threads_allocate_and_read_stats_safely():
    check("""
        import threading, torch, memcomm
        memcomm.use_allocator("cpu")
        errors = []
        def work(seed):
            try:
                g = torch.Generator().manual_seed(seed)
                for _ in range(200):
                    n = int(torch.randint(1, 1 << 16, (1,), generator=g))
                    t = torch.empty(n, dtype=torch.uint8)
                    t.fill_(seed % 251)
                    assert int(t[-1]) == seed % 251
                    memcomm.memory_stats()
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        memcomm.empty_cache()
    """)
