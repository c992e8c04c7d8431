"""python -m memcomm on DDP scripts under torch.distributed.run (Gloo, three ranks): bucket all-reduces
recorded with training unchanged, and ranks that tear their group down right after training. Split
from test_run.py (its helpers) so that ctest runs the two files side by side."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from test_run import free_port, report, run_memcomm, write


DDP = """
import copy, hashlib, os, sys, warnings, torch, torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
mode, run = sys.argv[1], sys.argv[2]


class SparseNet(nn.Module):  # a sparse gradient: DDP's reducer divides it where it multiplies dense ones
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(50, 32, sparse=True), nn.Linear(32, 4)

    def forward(self, x):
        return self.out(self.emb(x).mean(1))


class StepInForward(nn.Module):  # Lightning's manual optimisation: the backward inside the DDP model's forward
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y)
        model.reducer._rebuild_buckets()  # what Lightning's prepare_for_backward does before its backward
        model.reducer.prepare_for_backward([loss])
        loss.backward()
        return loss.detach()


net = {"sparse": SparseNet, "step-in-forward": StepInForward}.get(
    mode, lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))()
model = nn.parallel.DistributedDataParallel(net, find_unused_parameters=mode == "step-in-forward")
if mode == "deepcopy":  # a copy trained in the model's place: a reducer of its own
    model = copy.deepcopy(model)
try:  # a hook DDP refuses (no parameter named bucket) is refused as DDP refuses it
    model.register_comm_hook(None, lambda state, grads: None)
    raise SystemExit("a hook without a bucket parameter was taken")
except KeyError:
    pass
if mode == "eval-then-fp16":  # a forward without gradients before the script registers its hook
    with torch.no_grad():
        model(torch.randn(2, 32))
if mode in ("fp16", "eval-then-fp16"):
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
if mode == "memcomm-hook":  # a script that records its buckets itself: recorded once, not twice
    import memcomm
    model.register_comm_hook(None, memcomm.comm_hook())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.save(model, f"{run}.early{dist.get_rank()}.pt")  # before memcomm's hook is in place


def train(steps):
    for step in range(steps):
        if mode == "late-fp16" and step == 1:  # after a step with DDP's own all-reduce
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        if mode == "late-builtin" and step == 1:
            model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
        x = torch.randint(0, 50, (16, 5)) if mode == "sparse" else torch.randn(16, 32)
        y = torch.randint(0, 4, (16,))
        opt.zero_grad()
        if mode == "step-in-forward":
            model(x, y)
        else:
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if mode == "join":  # uneven inputs, divided by the ranks not yet joined; warnings are errors
    warnings.simplefilter("error")
    with Join([model], divide_by_initial_world_size=False):
        train(3 + dist.get_rank())
else:
    train(3)
weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
with open(f"{run}.weights{dist.get_rank()}", "w") as f:  # the ranks' stdout lines may interleave
    f.write(hashlib.sha256(weights).hexdigest())
torch.save(model, f"{run}.model{dist.get_rank()}.pt")  # a whole DDP model pickles its hooks
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
"""


def weights(folder: Path, run: str) -> list:
    return [(folder / f"{run}.weights{rank}").read_text() for rank in range(3)]


def test_ddp_buckets_of_an_unchanged_script_are_recorded_and_training_is_unchanged(tmp_path, tool):
    # See Note [DDP buckets of an unchanged script]: DDP's own arithmetic (three ranks: 1/3 is where dividing
    # and multiplying differ), a hook the script registers before training, after a forward without
    # gradients, and after a first step; a deepcopy of the model; a hook DDP refuses; Join dividing by the
    # ranks not joined (DDP's own all-reduce, unrecorded); a whole DDP model still saves.
    script = write(tmp_path, "ddp.py", DDP)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3")
    cases = {"default": ["f32"] * 3, "fp16": ["f16"] * 3, "eval-then-fp16": ["f16"] * 3,
             "late-fp16": ["f32", "f16", "f16"], "late-builtin": ["f32"] * 3, "memcomm-hook": ["f32"] * 3,
             "deepcopy": ["f32"] * 3, "join": [], "step-in-forward": ["f32"] * 3,
             "sparse": None}
    for mode, dtypes in cases.items():
        plain = subprocess.run([*torchrun, str(script), mode, f"plain-{mode}"], capture_output=True, text=True,
                               timeout=180, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert plain.returncode == 0, plain.stderr
        r = run_memcomm(tmp_path, "--trace", f"{mode}.mct", "ddp.py", mode, f"memcomm-{mode}", launcher=torchrun)
        assert r.returncode == 0, (mode, r.stderr)
        assert weights(tmp_path, f"memcomm-{mode}") == weights(tmp_path, f"plain-{mode}"), mode
        trace = report(tool, *(tmp_path / f"{mode}.rank{rank}.mct" for rank in range(3)))
        colls = sorted(trace["collectives"], key=lambda c: c["seq"])
        assert dtypes is None or [c["dtype"] for c in colls] == dtypes, (mode, colls)
        assert all(c["op"] == "all_reduce" and c["ranks_seen"] == 3 for c in colls), (mode, colls)
        assert not colls or len({c["comm"] for c in colls}) == 1, (mode, colls)  # the world group, one communicator
    # The saved models hold what they would without memcomm: they load where memcomm cannot be imported.
    loaded = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys; sys.modules["memcomm"] = None
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        for f in sys.argv[1:]:
            hooks = torch.load(f, weights_only=False)._comm_hooks
            print(type(hooks[0][0]).__name__ if hooks else "none")
        """), *(str(tmp_path / f) for f in ("memcomm-default.early0.pt", "memcomm-default.model0.pt",
                                            "memcomm-fp16.model0.pt"))],
        capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["none", "none", "function"], loaded.stdout


TEARDOWN = """
import os, sys, torch, torch.distributed as dist
from torch import nn
sys.setswitchinterval(100)  # the script keeps the interpreter lock unless it sleeps or waits
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)]),
                                            bucket_cap_mb=0.02)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(4):
    model(torch.randn(8, 64)).square().mean().backward()
    if sys.argv[1] == "step":
        opt.step()
if sys.argv[1] == "step":  # the tutorials' order
    dist.destroy_process_group()
    del model, opt
else:                      # a backward, then the model dropped first
    del model, opt
    dist.destroy_process_group()
print("ended", flush=True)
os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
"""


def test_a_rank_that_tears_down_right_after_its_last_backward_ends(tmp_path):
    # See Note [Python callables released on torch's threads]: without the waits, the second case hung every
    # rank in 4 runs of 4 (Gloo's worker queued for the lock while the reducer's group joined it).
    write(tmp_path, "teardown.py", TEARDOWN)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3")
    for order in ("step", "backward"):
        r = run_memcomm(tmp_path, "--trace", f"{order}.mct", "teardown.py", order, launcher=torchrun)
        assert r.returncode == 0 and r.stdout.count("ended") == 3, (order, r.stdout, r.stderr)


PEER_DIES = """
import os, re, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn


def rank_main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    for step in range(4):
        if rank == 1 and step == 2:
            os._exit(3)  # dies without a word to its peer
        try:
            model(torch.randn(4, 8)).sum().backward()
        except RuntimeError as e:  # the survivor's backward: Gloo's error, ports masked
            with open(out, "w") as f:
                f.write(re.sub(r"[0-9]+", "N", str(e)))
            os._exit(0)


if __name__ == "__main__":
    mp.set_start_method("fork")
    port, out = sys.argv[1], sys.argv[2]
    ranks = [mp.Process(target=rank_main, args=(r, port, out)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    print("exit codes", [p.exitcode for p in ranks])
"""


def test_a_dead_peer_reaches_the_survivor_as_gloos_own_error(tmp_path):
    # See Note [Errors through memcomm's callbacks]: the bucket's all-reduce passes through two of memcomm's
    # callables, and each wrapped the error in "Got the following error when running the callback" and
    # memcomm's frames.
    write(tmp_path, "peer.py", PEER_DIES)
    plain = subprocess.run([sys.executable, "peer.py", str(free_port()), "plain.err"], capture_output=True,
                           text=True, timeout=180, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    r = run_memcomm(tmp_path, "--trace", "peer.mct", "peer.py", str(free_port()), "memcomm.err")
    assert plain.stdout == r.stdout == "exit codes [0, 3]\n", (plain.stderr, r.stderr)
    gloos = re.compile(r"\[\S*gloo\S*\] [^\n]*")  # one line, as Gloo words it ("closed by" or "reset by peer")
    for run in ("plain", "memcomm"):
        said = (tmp_path / f"{run}.err").read_text()
        assert gloos.fullmatch(said), (run, said)


LATE_PEER = """
import os, sys, time, torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    loss = model(torch.randn(16, 32)).square().mean()
    if dist.get_rank() == 1:
        time.sleep(0.2)  # rank 0's backward waits this long for the all-reduce at its end
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
"""


def rank0_steps(tmp_path: Path, tool, script: str, ranks: int) -> list:
    """The report's steps of rank 0 for `script` run under torchrun -m memcomm with `ranks` ranks."""
    write(tmp_path, "script.py", script)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks))
    r = run_memcomm(tmp_path, "--trace", "t.mct", "script.py", launcher=torchrun)
    assert r.returncode == 0, r.stderr
    trace = report(tool, *(tmp_path / f"t.rank{rank}.mct" for rank in range(ranks)))
    return [s for s in trace["steps"] if s["rank"] == 0]


def test_ddps_wait_at_the_end_of_backward_is_exposed_communication(tmp_path, tool):
    # See Note [The wait at backward's end]: rank 0 waits ~200 ms a step inside loss.backward() for rank 1's
    # bucket; the report read 100 % overlap and no exposed communication (the backward range was all compute).
    rank0 = rank0_steps(tmp_path, tool, LATE_PEER, 2)
    assert len(rank0) == 4, rank0
    for s in rank0[1:]:  # the first step's wait also holds DDP's start-up
        assert s["breakdown"]["exposed_comm_ns"] > 150e6, s
        assert s["breakdown"]["overlap_pct"] < 25, s


CHECKPOINTED = """
import os, torch, torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint
dist.init_process_group("gloo")
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8))

    def forward(self, x):
        for b in self.blocks:  # each block's backward is a graph task of its own (reentrant)
            x = checkpoint(b, x, use_reentrant=True)
        return x


model = nn.parallel.DistributedDataParallel(Net(), static_graph=True, bucket_cap_mb=0.25)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    model(torch.randn(256, 256, requires_grad=True)).square().mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)
"""


def test_a_checkpointed_backward_keeps_its_compute(tmp_path, tool):
    # A bucket sent inside a reentrant checkpoint's inner backward noted that inner graph's end as the wait's
    # start: 60-67 % of each step read as communication on one rank, whose all-reduce takes no time.
    steps = rank0_steps(tmp_path, tool, CHECKPOINTED, 1)
    assert len(steps) == 5, steps
    for s in steps[2:]:  # after static_graph's first iterations
        assert s["breakdown"]["compute_ns"] > 0.8 * s["breakdown"]["window_ns"], s
