"""memcomm.profile from Python, the slower half: two ranks under torch.distributed.run (Gloo on the
CPU) and torch.compile'd models. Split from test_profiler.py (its helpers and MODEL) so that ctest
runs the two files side by side, each well inside its timeout."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import run_python
from test_profiler import MODEL, check, phase_counts, trace_json


DDP = """
import torch.distributed as dist
dist.init_process_group("gloo")
memcomm.use_allocator("cpu")
def ddp_run(hook, steps):
    ddp = nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.01)  # several buckets
    ddp.register_comm_hook(None, memcomm.comm_hook(hook))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loop(ddp, opt, batches(2 * steps), accumulate=2, ddp=True)
torch.manual_seed(dist.get_rank())
with memcomm.profile(trace=sys.argv[1]):
    ddp_run("allreduce", 3)
    ddp_run("fp16", 2)
    memcomm.dist.all_reduce(torch.ones(1000))
    memcomm.dist.broadcast(torch.ones(10), 0)
    out = [torch.zeros(3) for _ in range(2)]
    memcomm.dist.all_gather(out, torch.ones(3))
    memcomm.dist.all_reduce(torch.ones(10), async_op=True).wait()
    memcomm.dist.barrier()
dist.destroy_process_group()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
"""


def torchrun(tmp_path: Path, code: str, *args: str, env: dict = None) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(MODEL + textwrap.dedent(code))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


def test_two_ranks_record_matching_collectives(tmp_path, tool):
    # MEMCOMM_CLOCK_PROBE=1 measures the clock offset by round trips even though both ranks share a clock.
    r = torchrun(tmp_path, DDP, str(tmp_path / "ddp.mct"), env={"MEMCOMM_CLOCK_PROBE": "1"})
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    files = [tmp_path / "ddp.rank0.mct", tmp_path / "ddp.rank1.mct"]
    report = trace_json(tool, "report", *files)
    colls = report["collectives"]
    assert sorted(c["seq"] for c in colls) == list(range(len(colls))), colls
    assert all(c["ranks_seen"] == 2 and c["nranks"] == 2 for c in colls), colls
    buckets = [c for c in colls if c["bucket"] >= 0]
    assert all(c["op"] == "all_reduce" for c in buckets), buckets
    # 3 synchronised backwards with the default all-reduce, then 2 with fp16 compression: DDP's
    # first backward sends one bucket, then it rebuilds them by size.
    f32 = [c for c in buckets if c["dtype"] == "f32"]
    f16 = [c for c in buckets if c["dtype"] == "f16"]
    assert len(f32) >= 5 and len(f16) >= 3 and len(f32) + len(f16) == len(buckets), buckets
    assert {c["bucket"] for c in f32} >= {0, 1} and max(c["seq"] for c in f32) < min(c["seq"] for c in f16)
    assert f16[0]["bytes"] * 2 == f32[0]["bytes"], (f16[0], f32[0])
    others = [c for c in colls if c["bucket"] < 0]
    assert [c["op"] for c in others] == ["all_reduce", "broadcast", "all_gather", "all_reduce", "barrier"], others
    assert [len([s for s in report["steps"] if s["rank"] == rank]) for rank in (0, 1)] == [5, 5]
    assert all(rank["collectives"] == len(colls) for rank in report["ranks"]), report["ranks"]


def test_a_scripts_own_comm_hook_is_recorded_by_what_it_sends(tmp_path, tool):
    # See Note [What a script's own comm hook sends]: post-local SGD's hook all-reduces in a subgroup after
    # its warm-up; one that sends nothing was recorded as the bucket's all-reduce on the world.
    r = torchrun(tmp_path, """
        import torch.distributed as dist
        dist.init_process_group("gloo")
        alone = [dist.new_group([r]) for r in range(2)][dist.get_rank()]
        def local_then_none(state, bucket):
            if state["calls"] == 0:  # the first backward: the subgroup of this rank alone
                work = dist.all_reduce(bucket.buffer(), group=alone, async_op=True)
                state["calls"] += 1
                return work.get_future().then(lambda f: f.value()[0])
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp = nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=1000)  # one bucket
        ddp.register_comm_hook({"calls": 0}, memcomm.comm_hook(local_then_none))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with memcomm.profile(trace=sys.argv[1]):
            loop(ddp, opt, batches(3))
        dist.destroy_process_group()
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
    """, str(tmp_path / "own.mct"))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    colls = trace_json(tool, "report", tmp_path / "own.rank0.mct", tmp_path / "own.rank1.mct")["collectives"]
    assert [(c["op"], c["nranks"], c["ranks_seen"], c["bucket"]) for c in colls] == [("all_reduce", 1, 1, 0)] * 2, colls


def test_a_comm_hooks_collectives_in_its_futures_callbacks_are_recorded(tmp_path, tool):
    # See Note [What a script's own comm hook sends]: PowerSGD all-reduces in callbacks chained with then(),
    # which run on the thread that completes the future; those threads' calls were not recorded.
    r = run_python(MODEL + textwrap.dedent("""
        import threading
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        def later(state, bucket):
            ready = torch.futures.Future()
            threading.Timer(0.05, ready.set_result, (bucket.buffer(),)).start()  # completes on the timer's thread
            def reduce(f):
                assert threading.current_thread() is not threading.main_thread()
                return dist.all_reduce(f.value(), async_op=True).get_future().wait()[0]
            return ready.then(reduce)
        ddp = nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=1000)  # one bucket
        ddp.register_comm_hook(None, memcomm.comm_hook(later))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with memcomm.profile(trace=sys.argv[1]):
            loop(ddp, opt, batches(3))
        assert dist.all_reduce.__name__ == "all_reduce", "torch.distributed's function was not put back"
        assert "_chaining" not in repr(torch._C.Future.then), "Future.then was not put back"
        dist.destroy_process_group()
    """), str(tmp_path / "later.mct"), timeout=120)
    assert r.returncode == 0, r.stderr
    colls = trace_json(tool, "report", tmp_path / "later.rank0.mct")["collectives"]
    assert [(c["op"], c["bucket"], c["bytes"]) for c in colls] == [("all_reduce", 0, colls[0]["bytes"])] * 3, colls
    assert colls[0]["bytes"] > 0


def test_a_profile_on_rank_0_only_warns_instead_of_hanging_the_job(tmp_path, tool):
    # See Note [Ranks that do not profile]: rank 0's clock measurement met rank 1's DDP all-reduce.
    r = torchrun(tmp_path, """
        import warnings
        import torch.distributed as dist
        import memcomm._profiler.clock as clock
        clock.ARRIVAL_TIMEOUT_S = 2.0
        dist.init_process_group("gloo")
        ddp = nn.parallel.DistributedDataParallel(make_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        profiling = memcomm.profile(trace=sys.argv[1]) if dist.get_rank() == 0 else contextlib.nullcontext()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with profiling:
                loop(ddp, opt, batches(3))
        print("rank", dist.get_rank(), [str(w.message) for w in seen if "memcomm" in str(w.message)])
        dist.destroy_process_group()
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
    """, str(tmp_path / "zero.mct"))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "rank(s) [1] started no profiler within 2 s" in r.stdout, r.stdout
    assert len(trace_json(tool, "report", tmp_path / "zero.rank0.mct")["steps"]) == 3
    assert not (tmp_path / "zero.rank1.mct").exists()


def test_a_profile_started_before_the_process_group_writes_each_ranks_file(tmp_path, tool):
    # See Note [A profile started before the process group]: the rank comes from torchrun's environment.
    r = torchrun(tmp_path, """
        import torch.distributed as dist
        with memcomm.profile(trace=sys.argv[1]):
            dist.init_process_group("gloo")
            ddp = nn.parallel.DistributedDataParallel(make_model())
            loop(ddp, torch.optim.SGD(ddp.parameters(), lr=0.01), batches(2))
        dist.destroy_process_group()
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
    """, str(tmp_path / "late.mct"))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    report = trace_json(tool, "report", tmp_path / "late.rank0.mct", tmp_path / "late.rank1.mct")
    assert [len([s for s in report["steps"] if s["rank"] == rank]) for rank in (0, 1)] == [2, 2], report["steps"]


def test_data_loader_workers_forked_during_a_profile(tmp_path, tool):
    # Note [Recording across fork] (profiler/core/src/recorder.cpp): workers forked while the
    # collector drains used to wait forever on a copy of its lock (4 hangs in 6 runs of this loop).
    check("""
        from torch.utils.data import DataLoader, TensorDataset
        memcomm.use_allocator("cpu")
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = TensorDataset(torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)))
        with memcomm.profile(trace=sys.argv[1]):
            for epoch in range(4):  # new workers every epoch
                loop(model, opt, DataLoader(data, batch_size=16, num_workers=2))
    """, str(tmp_path / "workers.mct"))
    report = trace_json(tool, "report", tmp_path / "workers.rank0.mct")
    assert len(report["steps"]) == 16, report["steps"]


def test_a_compiled_model_is_profiled_without_a_recompile(tmp_path, tool):
    # Note [Finding the model], Note [Hooks under torch.compile]: torch.compile(model) before the
    # profile compiles once (error_on_recompile) and warns about nothing; a training step compiled as
    # one function records its backward and optimizer ranges (not its forward), also with no recompile.
    check("""
        import warnings
        import torch._dynamo
        warnings.filterwarnings("error", message=".*hooks")  # torch.compile warns of global module hooks
        model = make_model()
        compiled = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        def train_step(x, y):
            crit(model(x), y).backward()
        compiled_step = torch.compile(train_step)
        loop(compiled, opt, batches(1))               # the compile itself, outside the profile
        compiled_step(*batches(1)[0]); opt.step(); opt.zero_grad()
        torch._dynamo.config.error_on_recompile = True
        with memcomm.profile(trace=sys.argv[1]):
            loop(compiled, opt, batches(3))
        with memcomm.profile(trace=sys.argv[2]):
            for x, y in batches(3):
                compiled_step(x, y); opt.step(); opt.zero_grad()
    """, str(tmp_path / "model.mct"), str(tmp_path / "step.mct"))
    counts = phase_counts(tool, tmp_path, tmp_path / "model.rank0.mct")
    assert counts == {"step": 3, "data_wait": 3, "forward": 3, "backward": 3, "optimizer": 3}, counts
    counts = phase_counts(tool, tmp_path, tmp_path / "step.rank0.mct")
    assert counts == {"step": 3, "backward": 3, "optimizer": 3}, counts


def test_a_model_compiled_inside_the_profile_compiles_once(tmp_path, tool):
    # See Note [Finding the model]: a script that builds and compiles its model inside the profile (`with
    # profile(): main()`) starts with the global module hooks; the compiled model's first call takes them
    # off before torch.compile warns of them or compiles a graph that guards on them.
    check("""
        import warnings
        import torch._dynamo
        warnings.filterwarnings("error", message=".*hooks")
        torch._dynamo.config.error_on_recompile = True
        with memcomm.profile(trace=sys.argv[1]):
            model = make_model()
            compiled = torch.compile(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            loop(compiled, opt, batches(3))
    """, str(tmp_path / "inside.mct"))
    counts = phase_counts(tool, tmp_path, tmp_path / "inside.rank0.mct")
    assert counts == {"step": 3, "data_wait": 3, "forward": 3, "backward": 3, "optimizer": 3}, counts


def test_a_model_compiled_inside_a_wrapper_is_one_forward_and_its_compile_no_backward(tmp_path, tool):
    # See Note [Finding the model]: the wrapper's forward (DDP's, in llm.c's train_gpt2.py) is open when the compiled
    # model's first call takes the global hooks off; it ends as the wrapper returns, not there. And the compile's
    # own differentiation of the traced forward (AOTAutograd, with fake tensors; aot_eager keeps no cache) is no
    # backward of the training.
    check("""
        class Wrapper(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner
            def forward(self, x):
                return self.inner(x)
        with memcomm.profile(trace=sys.argv[1]):
            model = make_model()
            wrapped = Wrapper(torch.compile(model, backend="aot_eager"))
            loop(wrapped, torch.optim.SGD(model.parameters(), lr=0.01), batches(3))
    """, str(tmp_path / "wrapped.mct"))
    counts = phase_counts(tool, tmp_path, tmp_path / "wrapped.rank0.mct")
    assert counts == {"step": 3, "data_wait": 3, "forward": 3, "backward": 3, "optimizer": 3}, counts


def test_code_compiled_around_a_model_built_inside_the_profile_compiles_once(tmp_path, tool):
    # See Note [Finding the model]: a compiled loss function that calls the model, and model.compile(),
    # compile inside the model's call, where no call of memcomm's comes first: the compile's start
    # takes the global module hooks off before Dynamo guards on them. Note [Module hooks as frames]:
    # model.compile() compiled memcomm's hooks and class wrapper as frames of their own, and the first
    # step lost its forward (2 of 3); it compiles the frames plain torch does.
    script = """
        import contextlib
        import warnings
        import torch._dynamo
        from torch._dynamo.utils import counters
        torch._dynamo.config.error_on_recompile = True
        case = sys.argv[2]
        with memcomm.profile(trace=sys.argv[1]) if case != "plain" else contextlib.nullcontext():
            model = make_model()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            if case == "loss":
                loss = torch.compile(lambda x, y: crit(model(x), y), backend="eager")
            else:
                model.compile(backend="eager")
                loss = lambda x, y: crit(model(x), y)
            for x, y in memcomm.loader(batches(3)):
                loss(x, y).backward(); opt.step(); opt.zero_grad()
        print("frames", counters["frames"]["total"])
    """
    frames = {}
    for case, forwards in (("plain", None), ("loss", 0), ("module", 3)):
        r = run_python(MODEL + textwrap.dedent(script), str(tmp_path / f"{case}.mct"), case, timeout=120)
        assert r.returncode == 0, r.stderr
        frames[case] = r.stdout.split("frames ")[-1].strip()
        if forwards is None:
            continue
        counts = phase_counts(tool, tmp_path, tmp_path / f"{case}.rank0.mct")
        assert counts.get("forward", 0) == forwards and counts["backward"] == counts["step"] == 3, (case, counts)
        assert (forwards == 0) == ("the forward ran inside code torch.compile compiled" in r.stderr), r.stderr
    assert frames["module"] == frames["plain"], frames



def test_a_compiled_training_step_that_steps_its_optimizer_ends(tmp_path, tool):
    # See Note [Hooks under torch.compile]: the optimizer's hooks ran eagerly as a frame only, so Dynamo
    # compiled a frame they called (a list comprehension, holding the hooks' lock), and its compile-start
    # callback asked for that lock: the script hung at its first update. And the class wrapper read
    # memcomm's registry before asking whether Dynamo compiled it: a guard on the registry's size
    # recompiled the step once memcomm watched the model (3 graphs where plain torch makes 2).
    script = """
        import contextlib
        from torch._dynamo.utils import counters
        with memcomm.profile(trace=sys.argv[1]) if sys.argv[2] != "plain" else contextlib.nullcontext():
            model = make_model()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            @torch.compile(backend="eager")
            def train_step(x, y):
                opt.zero_grad()
                loss = crit(model(x), y)
                loss.backward()
                opt.step()
                return loss
            for x, y in batches(3):
                print(float(train_step(x, y)))
        print("graphs", counters["stats"]["unique_graphs"], "breaks", sum(counters["graph_break"].values()))
    """
    graphs = []
    for case in ("plain", "profiled"):
        r = run_python(MODEL + textwrap.dedent(script), str(tmp_path / "step.mct"), case, timeout=120)
        assert r.returncode == 0, r.stderr
        losses, _, counts = r.stdout.partition("graphs")
        assert len(losses.split()) == 3, r.stdout
        graphs.append(counts.strip())
    assert graphs[0] == graphs[1], graphs
    counts = phase_counts(tool, tmp_path, tmp_path / "step.rank0.mct")
    assert counts["backward"] == counts["optimizer"] == counts["step"] == 3, counts
