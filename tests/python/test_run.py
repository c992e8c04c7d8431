"""python -m memcomm: an unchanged script under the profiler (and the allocator), as python would run it."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import free_port

TRAIN = """
import sys, torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print("argv", sys.argv[1:], "name", __name__, "path0", sys.path[0])
for _ in range(int(sys.argv[1])):
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
if sys.argv[2] == "raise":
    raise ValueError("the script's own error")
if sys.argv[2] == "wrong-shape":  # an error inside a module memcomm watches, chained to another
    try:
        raise KeyError("the script's first error")
    except KeyError:
        model(torch.randn(2, 5))
if sys.argv[2] == "interrupt":  # as Ctrl-C in the loop would
    raise KeyboardInterrupt
if sys.argv[2] == "os._exit":
    sys.stdout.flush()
    import os; os._exit(5)
sys.exit(int(sys.argv[2]))
"""


def run_memcomm(cwd: Path, *args: str, launcher: tuple = ()) -> subprocess.CompletedProcess:
    cmd = [*launcher, "-m", "memcomm", *args] if launcher else [sys.executable, "-m", "memcomm", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def report(tool, *files: Path) -> dict:
    out = subprocess.run([tool("memcomm-trace"), "report", "--json", *map(str, files)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_script_runs_as_python_runs_it_and_its_steps_are_recorded(tmp_path, tool):
    write(tmp_path / "job", "train.py", TRAIN)
    r = run_memcomm(tmp_path, "job/train.py", "4", "3")
    assert r.returncode == 3, r.stderr  # the script's sys.exit status
    assert f"argv ['4', '3'] name __main__ path0 {tmp_path / 'job'}" in r.stdout, r.stdout
    assert "memcomm: train.rank0.mct:" in r.stderr, r.stderr  # named after the script, in the working folder
    assert len(report(tool, tmp_path / "train.rank0.mct")["steps"]) == 4


def test_the_allocator_the_limit_and_the_snapshot(tmp_path, tool):
    write(tmp_path, "train.py", TRAIN)
    r = run_memcomm(tmp_path, "--allocator", "cpu", "--memory-limit", "64MiB", "--history", "1000",
                    "--snapshot", "mem.pickle", "--trace", "out.mct", "train.py", "3", "0")
    assert r.returncode == 0, r.stderr
    trace = report(tool, tmp_path / "out.rank0.mct")
    assert len(trace["steps"]) == 3 and trace["ranks"][0]["peak_reserved"] > 0, trace["ranks"]
    replay = subprocess.run([tool("memcomm-replay"), "--policy", "memcomm", "--json", "-", str(tmp_path / "mem.pickle")],
                            capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)[0]["requests"] > 0  # the history's allocations, in PyTorch's format


def test_a_script_that_raises_or_leaves_by_os_exit_still_closes_its_trace(tmp_path, tool):
    write(tmp_path, "train.py", TRAIN)
    r = run_memcomm(tmp_path, "--trace", "raised.mct", "train.py", "2", "raise")
    assert r.returncode == 1 and "ValueError: the script's own error" in r.stderr, r.stderr
    # The traceback starts at the script, as python's does, and the trace's line follows it.
    traceback = r.stderr[r.stderr.index("Traceback"):]
    assert "memcomm" not in traceback.split("ValueError")[0] and 'train.py", line' in traceback, r.stderr
    assert traceback.index("ValueError") < traceback.index("memcomm: raised.rank0.mct:"), r.stderr
    assert len(report(tool, tmp_path / "raised.rank0.mct")["steps"]) == 2
    # An error inside a watched module: no memcomm frame between the script's and torch's, in the chain too.
    r = run_memcomm(tmp_path, "--trace", "shape.mct", "train.py", "1", "wrong-shape")
    plain = subprocess.run([sys.executable, "train.py", "1", "wrong-shape"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
    assert r.returncode == plain.returncode == 1 and "memcomm" not in r.stderr.split("memcomm: shape.rank0.mct")[0], r.stderr
    assert r.stderr.split("memcomm: shape.rank0.mct")[0].strip() == plain.stderr.strip(), (r.stderr, plain.stderr)
    r = run_memcomm(tmp_path, "--trace", "early.mct", "train.py", "0", "raise")  # no advice on what it missed
    assert r.returncode == 1 and "ValueError" in r.stderr and "recorded no" not in r.stderr, r.stderr
    r = run_memcomm(tmp_path, "--trace", "stopped.mct", "train.py", "2", "interrupt")
    assert r.returncode == -signal.SIGINT, r.stderr  # ended as python ends an interrupted script
    traceback = r.stderr[r.stderr.index("Traceback"):]
    assert r.stderr.count("Traceback") == 1 and "memcomm" not in traceback.split("KeyboardInterrupt")[0], r.stderr
    assert traceback.index("KeyboardInterrupt") < traceback.index("memcomm: stopped.rank0.mct:"), r.stderr
    assert len(report(tool, tmp_path / "stopped.rank0.mct")["steps"]) == 2
    r = run_memcomm(tmp_path, "--trace", "exited.mct", "train.py", "2", "os._exit")
    assert r.returncode == 5 and "memcomm: exited.rank0.mct:" in r.stderr, r.stderr
    assert len(report(tool, tmp_path / "exited.rank0.mct")["steps"]) == 2
    # A script that restarts itself with os.execv: its trace had no step (nothing flushed), no word.
    write(tmp_path, "again.py", """
        import os, sys, torch
        model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
        if not os.environ.get("AGAIN"):
            os.environ["AGAIN"] = "1"
            os.execv(sys.executable, [sys.executable, *sys.argv])
        print("second run done")
    """)
    r = run_memcomm(tmp_path, "--trace", "again.mct", "again.py")
    assert r.returncode == 0 and "second run done" in r.stdout, r.stderr
    assert "replaced itself with" in r.stderr and "runs without memcomm" in r.stderr, r.stderr
    assert len(report(tool, tmp_path / "again.rank0.mct")["steps"]) == 2
    # An exec that fails (os.execvp tries each folder of PATH) closes nothing, and says nothing.
    write(tmp_path, "fallback.py", """
        import os, torch
        os.environ["PATH"] = "/nonexistent1:/nonexistent2"
        try:
            os.execvp("no-such-program-memcomm", ["no-such-program-memcomm"])
        except FileNotFoundError:
            pass
        model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(2, 4)).sum().backward(); opt.step()
    """)
    r = run_memcomm(tmp_path, "--trace", "fallback.mct", "fallback.py")
    assert r.returncode == 0 and "replaced itself" not in r.stderr, r.stderr
    assert len(report(tool, tmp_path / "fallback.rank0.mct")["steps"]) == 1
    # A script that sends its stderr to a log and closes it, or closes descriptor 2: its own status (it
    # was 1, "lost sys.stderr", where memcomm wrote its closing line).
    write(tmp_path, "quiet.py", """
        import os, sys, torch
        sys.stderr = open("errors.log", "w")
        loss = torch.nn.Linear(4, 1)(torch.randn(2, 4)).sum(); loss.backward()
        sys.stderr.close()
        if sys.argv[1:] == ["fd2"]:
            os.close(2)
        print("done")
    """)
    for args in ((), ("fd2",)):
        r = run_memcomm(tmp_path, "--trace", "quiet.mct", "quiet.py", *args)
        assert r.returncode == 0 and "done" in r.stdout and "lost sys.stderr" not in r.stderr, (args, r.stderr)


TERMINATED = """
import ctypes, os, signal, sys, torch
from torch import nn
if sys.argv[1] == "own-handler":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
model = nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
while True:
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    steps += 1
    if steps == 50:
        if sys.argv[1] != "own-handler":
            child = os.fork()  # as a DataLoader worker: a SIGTERM ends it at once, as it would without memcomm
            if child == 0:
                signal.pause()
            os.kill(child, signal.SIGTERM)
            assert os.waitpid(child, 0)[1] == signal.SIGTERM
        # A call that keeps the GIL (and is restarted after a signal), made ready before the line is out
        read, fd, byte = ctypes.PyDLL(None).read, os.pipe()[0], ctypes.create_string_buffer(1)
        print("steps", steps, flush=True)
        if sys.argv[1] == "blocked":  # in a call that lets go of the GIL and never returns
            os.read(fd, 1)
        if sys.argv[1] == "holds-gil":
            read(fd, byte, 1)
"""


@pytest.mark.parametrize("how", ["running", "blocked", "holds-gil", "own-handler"])
def test_sigterm_closes_the_trace_and_ends_the_process_as_terminated(tmp_path, tool, how):
    """See Note [Closing on SIGTERM]: torchrun, torch's spawn and Slurm end the ranks left so."""
    write(tmp_path, "train.py", TERMINATED)
    p = subprocess.Popen([sys.executable, "-m", "memcomm", "--allocator", "cpu", "--snapshot", "mem.pickle", "train.py",
                          how], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        assert p.stdout.readline() == "steps 50\n"
        time.sleep(0.5)  # into its last call (or its next steps)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    if how == "own-handler":  # the script's handler ran: its exit, the trace closed as at any exit
        assert p.returncode == 7 and "SIGTERM" not in err, err
    else:
        assert p.returncode == -signal.SIGTERM, err
    if how == "holds-gil":  # ended by the deadline, with what the recorder had flushed
        assert "closing the trace" in err and "not closed within 10 s" in err and "train.rank0.mct:" not in err, err
        return
    assert "memcomm: train.rank0.mct:" in err, err
    assert len(report(tool, tmp_path / "train.rank0.mct")["steps"]) >= 50
    assert (tmp_path / "mem.pickle").stat().st_size > 0


def test_a_run_ended_by_sigterm_before_training_gets_no_advice_to_move_the_profile(tmp_path):
    """torchrun ends the other ranks by SIGTERM when one fails: each was cut off, not profiled in
    the wrong process."""
    write(tmp_path, "waits.py", "import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-m", "memcomm", "waits.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == -signal.SIGTERM, err
    assert "closing the trace" in err and "start the profile in them" not in err and "NothingRecorded" not in err, err


def test_an_error_in_backward_reads_as_without_memcomm_once_dynamo_is_loaded(tmp_path):
    # Dynamo's disable wrapper around memcomm's backward hook is memcomm's frame too.
    # See Note [Hooks under torch.compile].
    write(tmp_path, "hook.py", """
        import torch, torch._dynamo
        from torch import nn
        model = nn.Linear(4, 4)
        def fails(grad):
            raise ValueError("the script's hook fails")
        model.weight.register_hook(fails)
        model(torch.randn(2, 4)).sum().backward()
        """)
    r = run_memcomm(tmp_path, "hook.py")
    plain = subprocess.run([sys.executable, "hook.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == plain.returncode == 1, r.stderr
    assert r.stderr.split("memcomm: hook.rank0.mct")[0].strip() == plain.stderr.strip(), (r.stderr, plain.stderr)


def test_a_groups_snapshot_never_replaces_a_ranks_trace(tmp_path, tool):
    # In a group each rank writes SNAPSHOT.rankR: --snapshot run.mct named run.rank0.mct, the trace.
    write(tmp_path, "train.py", TRAIN)
    env = dict(os.environ, OMP_NUM_THREADS="1", RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2")
    r = subprocess.run([sys.executable, "-m", "memcomm", "--allocator", "cpu", "--trace", "run.mct", "--snapshot", "run.mct",
                        "train.py", "1", "0"], capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert "is this rank's trace" in r.stderr, r.stderr
    assert (tmp_path / "run.rank0.mct").read_bytes()[:8] == b"MEMCTRC\x1a"
    assert len(report(tool, tmp_path / "run.rank0.mct")["steps"]) == 1


def test_usage_errors_exit_2_and_the_scripts_own_options_reach_it(tmp_path):
    script = write(tmp_path, "train.py", TRAIN).read_text()
    cases = {
        (): "name a script to run",
        ("missing.py",): "no such script: missing.py",
        ("--allocator", "cpu", "--memory-limit", "3XB", "train.py"): "unknown unit",
        ("--snapshot", "m.pickle", "train.py"): "need --allocator",
        ("--trace", "nowhere/t.mct", "train.py"): "does not exist",
        ("--live", "no-port", "train.py"): "--live",
        ("--allocator", "gpu", "train.py"): "invalid choice",
        ("--allocator", "cpu", "--history", "99999999999999999999", "train.py"): "--history must be from 0",
        ("--trace", ".", "train.py"): "is a folder",
        ("-",): "not code from standard input; save it to a file",  # python - < script.py
        ("-c", "print(1)"): "not code from the command line; save it to a file",
        ("-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"): "put memcomm after the launcher: torchrun",
        ("-m", "composer.cli.launcher", "-n", "2", "train.py"): "put memcomm after the launcher: composer -n 2 -m memcomm",
        (shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun"), "train.py"):
            "starts each rank as a process of its own",
        # Outputs that would destroy data or vanish (the snapshot replaced the script or the trace, exit 0).
        ("--allocator", "cpu", "--snapshot", "train.py", "train.py"): "is the script train.py; it would be overwritten",
        ("--allocator", "cpu", "--trace", "run.mct", "--snapshot", "run.rank0.mct", "train.py"): "would overwrite the trace",
        ("--allocator", "cpu", "--trace", "run", "--snapshot", "run.spawn1.rank1.mct", "train.py"): "would overwrite the trace",
        ("--trace", "", "train.py"): "--trace needs a file name, got an empty one",
        ("--allocator", "cpu", "--snapshot", "", "train.py"): "--snapshot needs a file name",
        ("--live", "", "train.py"): "--live needs a HOST:PORT",
    }
    for args, message in cases.items():
        r = run_memcomm(tmp_path, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert not list(tmp_path.glob("*.mct")), args  # nothing ran
        assert (tmp_path / "train.py").read_text() == script, args
    # A help that standard output did not take is no success (it exited 0, the text lost).
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "memcomm", "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=60, cwd=tmp_path)
        assert r.returncode == 1 and "the help is lost" in r.stderr, r.stderr
    # Options after the script are the script's, even -h and memcomm's own names.
    r = run_memcomm(tmp_path, "train.py", "1", "0", "--help", "--trace")
    assert r.returncode == 0 and "argv ['1', '0', '--help', '--trace']" in r.stdout, r.stdout + r.stderr
    r = run_memcomm(tmp_path, "-m", "json.tool", "--help")
    assert r.returncode == 0 and "usage: python -m json.tool" in r.stdout, r.stdout + r.stderr
    # A script's own usage error or --help: its output and status, and no advice on a training that never ran.
    write(tmp_path, "cli.py", "import argparse; p = argparse.ArgumentParser(); p.add_argument('--epochs', type=int); "
                              "p.parse_args()")
    for args, code in ((("--epochs", "x"), 2), (("-h",), 0)):
        r = run_memcomm(tmp_path, "cli.py", *args)
        assert r.returncode == code and "usage: cli.py" in r.stdout + r.stderr, (args, r.stdout, r.stderr)
        assert "recorded no forward" not in r.stderr, (args, r.stderr)
    # A script that ends with sys.exit(0) of its own after work memcomm did not see still hears about it.
    write(tmp_path, "done.py", "import sys; sys.exit(0)")
    r = run_memcomm(tmp_path, "done.py")
    assert r.returncode == 0 and "recorded no forward" in r.stderr, r.stderr
    # torch.distributed.launch puts --local-rank=N right after -m memcomm: it is the script's first option.
    write(tmp_path, "echo.py", "import sys; print('argv', sys.argv[1:])")
    r = run_memcomm(tmp_path, "--local-rank=3", "--trace", "run.mct", "echo.py", "1", "0")
    assert r.returncode == 0 and "argv ['--local-rank=3', '1', '0']" in r.stdout, r.stdout + r.stderr
    # A script that starts its own profile, or its own allocator with other options: the error says why.
    write(tmp_path, "own.py", """
        import sys, memcomm
        if sys.argv[1] == "profile":
            with memcomm.profile(trace="own.mct"):
                pass
        else:
            memcomm.use_allocator("cpu", memory_limit=1 << 30)
    """)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "own.py", "profile")
    assert r.returncode == 1 and "python -m memcomm started it and profiles the whole script" in r.stderr, r.stderr
    r = run_memcomm(tmp_path, "--allocator", "cpu", "--trace", "run.mct", "own.py", "allocator")
    assert r.returncode == 1 and "by python -m memcomm --allocator cpu" in r.stderr, r.stderr


def test_a_child_the_script_forks_leaves_as_python_leaves_it(tmp_path, tool):
    write(tmp_path, "fork.py", """
        import os, sys, torch
        from torch import nn
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        pid = os.fork()
        if pid == 0:
            raise ValueError("the child's own error")
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        pid = os.fork()
        if pid == 0:  # a child that leaves by sys.exit with a file it never closed and an atexit handler
            import atexit
            out = open("child.txt", "w")
            out.write("child data")
            atexit.register(lambda: open("atexit.txt", "w").write("ran"))
            sys.exit(3)
        _, status = os.waitpid(pid, 0)
        print("second child exit", os.waitstatus_to_exitcode(status))
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    """)
    r = run_memcomm(tmp_path, "fork.py")
    assert r.returncode == 0 and "child exit 1" in r.stdout and "second child exit 3" in r.stdout, (r.stdout, r.stderr)
    assert (tmp_path / "child.txt").read_text() == "child data" and (tmp_path / "atexit.txt").read_text() == "ran"
    assert "ValueError: the child's own error" in r.stderr and r.stderr.count("memcomm: fork.rank0.mct") == 1, r.stderr
    assert len(report(tool, tmp_path / "fork.rank0.mct")["steps"]) == 1


SPAWN = """
import hashlib, os, sys, torch, torch.multiprocessing as mp
from torch import nn
from torch.distributed import init_process_group, destroy_process_group  # bound before memcomm's child starts

def train(index, world, port, run):
    print("before the group", flush=True)
    init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=world)
    torch.manual_seed(index)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
    with open(f"{run}.weights{index}", "w") as f:
        f.write(hashlib.sha256(weights).hexdigest())
    destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # skips every finally: the child's trace is closed before it

def idle(index):
    pass

if __name__ == "__main__":
    port, run = int(sys.argv[1]), sys.argv[2]
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")  # the children start in the script's working folder, not memcomm's
    mp.spawn(train, args=(2, port, run), nprocs=2)
    mp.start_processes(idle, nprocs=1, start_method="spawn")
"""


def test_a_spawned_childs_error_reads_as_without_memcomm(tmp_path):
    write(tmp_path, "fails.py", """
        import torch.multiprocessing as mp
        def train(rank):
            raise ValueError(f"boom {rank}")
        if __name__ == "__main__":
            mp.spawn(train, nprocs=1)
        """)
    r = run_memcomm(tmp_path, "fails.py")
    plain = subprocess.run([sys.executable, "fails.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)

    def childs_traceback(err: str) -> str:
        return err[err.index("-- Process 0 terminated"):].split("\n\n")[0]

    assert r.returncode == plain.returncode == 1, r.stderr
    assert childs_traceback(r.stderr) == childs_traceback(plain.stderr), r.stderr


def test_processes_the_script_spawns_are_profiled_by_rank(tmp_path, tool):
    # See Note [Profiles of spawned processes]: mp.spawn's children write NAME.spawnK.rankR.mct from their
    # init_process_group on, however the script imported it; a child without a group says it is not
    # profiled; training is unchanged; the files go where python -m memcomm started, named in full once the
    # script has left that folder.
    write(tmp_path, "spawn_ddp.py", SPAWN)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    plain = subprocess.run([sys.executable, "spawn_ddp.py", str(free_port()), "plain"], capture_output=True,
                           text=True, timeout=180, cwd=tmp_path, env=env)
    assert plain.returncode == 0, plain.stderr
    r = run_memcomm(tmp_path, "--trace", "run.mct", "spawn_ddp.py", str(free_port()), "memcomm")
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / "elsewhere" / f"memcomm.weights{i}").read_text() for i in range(2)] == \
        [(tmp_path / "elsewhere" / f"plain.weights{i}").read_text() for i in range(2)]
    for rank in range(2):
        assert f"memcomm: {tmp_path / f'run.spawn1.rank{rank}.mct'}:" in r.stderr, r.stderr
    assert "started by torch.multiprocessing, set up no process group nor RPC: not profiled" in r.stderr, r.stderr
    assert "recorded no forward" not in r.stderr, r.stderr  # the parent's own profile: not a mistake here
    trace = report(tool, *(tmp_path / f"run.spawn1.rank{rank}.mct" for rank in range(2)))
    assert sorted((s["rank"], s["step"]) for s in trace["steps"]) == [(r, s) for r in range(2) for s in (1, 2, 3)]
    colls = trace["collectives"]
    assert colls and all(c["op"] == "all_reduce" and c["ranks_seen"] == 2 for c in colls), colls


# Three steps of the trainer, w0, on `first`, a module that w1 holds as an RPC parameter server would.
RPC_TRAIN = """
import torch, torch.distributed.rpc as rpc
import torch.distributed.autograd as dist_autograd
from torch.distributed.optim import DistributedOptimizer

def parameters(module):
    return [rpc.RRef(p) for p in module.local_value().parameters()]

def train(first):
    last = torch.nn.Linear(4, 1)
    opt = DistributedOptimizer(torch.optim.SGD, rpc.rpc_sync("w1", parameters, args=(first,)) +
                               [rpc.RRef(p) for p in last.parameters()], lr=0.05)
    for _ in range(3):
        with dist_autograd.context() as ctx:
            loss = last(first.rpc_sync().forward(torch.randn(16, 8))).pow(2).mean()
            dist_autograd.backward(ctx, [loss])
            opt.step(ctx)
"""

RPC_SPAWN = RPC_TRAIN + """
import os, sys, torch.multiprocessing as mp

def run(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
    if rank == 0:
        torch.manual_seed(0)
        train(rpc.remote("w1", torch.nn.Linear, args=(8, 4)))
    rpc.shutdown()

if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]),), nprocs=2)
"""


def test_rpc_workers_the_script_spawns_are_profiled_by_rank(tmp_path, tool):
    # See Note [Profiles of spawned processes]: an RPC worker that sets up no process group is profiled
    # from init_rpc, by its RPC rank (Note [Ranks of RPC workers]); DistributedOptimizer's steps end the
    # trainer's steps.
    write(tmp_path, "rpc_ps.py", RPC_SPAWN)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "rpc_ps.py", str(free_port()))
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        assert f"memcomm: run.spawn1.rpc.rank{rank}.mct:" in r.stderr, r.stderr
    assert "set up no process group nor RPC" not in r.stderr, r.stderr
    trace = report(tool, tmp_path / "run.spawn1.rpc.rank0.mct")
    assert [(s["rank"], s["step"]) for s in trace["steps"]] == [(0, 1), (0, 2), (0, 3)], trace["steps"]


# pytorch/examples' ddp_rpc with the RPC ids the other way round: a master (RPC 0) with no process
# group, and two DDP trainers, ranks 0 and 1 of their group and RPC workers 1 and 2.
DDP_RPC_SPAWN = """
import os, sys, torch, torch.distributed as dist, torch.distributed.rpc as rpc, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def run(rank, rpc_port, group_port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rpc_port))
    if rank > 0:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{group_port}", rank=rank - 1, world_size=2)
    rpc.init_rpc("master" if rank == 0 else f"trainer{rank - 1}", rank=rank, world_size=3)
    if rank > 0:
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    rpc.shutdown()

if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]), int(sys.argv[2])), nprocs=3)
"""


def test_rpc_workers_beside_a_process_group_write_files_of_their_own(tmp_path, tool):
    # See Note [Ranks of RPC workers]: the master's RPC id 0 named the file of the trainers' group rank 0,
    # and whichever came second was not profiled.
    write(tmp_path, "ddp_rpc.py", DDP_RPC_SPAWN)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "ddp_rpc.py", str(free_port()), str(free_port()))
    assert r.returncode == 0, r.stderr
    assert "not profiled" not in r.stderr, r.stderr
    assert (tmp_path / "run.spawn1.rpc.rank0.mct").exists(), r.stderr
    assert "it ran none of its own (an RPC master" in r.stderr, r.stderr  # the master's, not the advice to the runner
    assert "start the profile in them" not in r.stderr, r.stderr
    trace = report(tool, tmp_path / "run.spawn1.rank0.mct", tmp_path / "run.spawn1.rank1.mct")
    assert sorted((s["rank"], s["step"]) for s in trace["steps"]) == [(r, s) for r in range(2) for s in (1, 2)]


RPC_TORCHRUN = RPC_TRAIN + """
import os

class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))

rank = int(os.environ["RANK"])
rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
if rank == 0:
    train(rpc.remote("w1", Embed))
rpc.shutdown()
"""


def test_forwards_an_rpc_worker_serves_open_no_step_of_its_own(tmp_path, tool):
    # w1 runs the forwards w0 asks for on its RPC threads: parts of w0's steps, not steps of w1's,
    # which would never end there. See Note [A forward that opens no step].
    write(tmp_path, "rpc_ps.py", RPC_TORCHRUN)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
    r = run_memcomm(tmp_path, "--trace", "run.mct", "rpc_ps.py", launcher=torchrun)
    assert r.returncode == 0, r.stderr
    assert len(report(tool, tmp_path / "run.rank0.mct")["steps"]) == 3
    assert report(tool, tmp_path / "run.rank1.mct")["steps"] == []


RELAUNCH = """
import os, subprocess, sys, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
if sys.argv[-1] == "prep":  # the script run again for other work: left alone
    print("prep child", "memcomm" in sys.modules)
    sys.exit(0)
if "LOCAL_RANK" not in os.environ:  # the launcher's part, as Lightning's strategy="ddp" under python does it
    subprocess.run([sys.executable, os.path.abspath(sys.argv[0]), "prep"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], NODE_RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    child = subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:],
                             env=dict(os.environ, LOCAL_RANK="1"), cwd=os.path.dirname(sys.executable))
    other = subprocess.run([sys.executable, "-c", "import sys; print('other child', 'memcomm' in sys.modules)"],
                           capture_output=True, text=True).stdout
    print(other.strip())
rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
if sys.argv[-1] == "fail":
    raise SystemExit(f"rank {rank} failed before its first collective")
torch.manual_seed(0)
model = DDP(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.randn(8, 4)).sum().backward(); opt.step()
print("rank", rank, "weights", [round(x, 6) for x in model.module.weight.flatten().tolist()])
dist.destroy_process_group()
if rank == 0:
    sys.exit(child.wait())
"""


def test_ranks_the_script_starts_by_running_itself_again_are_profiled(tmp_path, tool):
    # See Note [A script that starts itself again]: Lightning's strategy="ddp" under plain python starts the
    # other ranks as `python SCRIPT ARGS` (from another folder here); rank 1 ran outside memcomm, and rank 0's
    # file said world size 1. A command that runs anything else is left as it is.
    write(tmp_path / "job", "relaunch.py", RELAUNCH)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "job/relaunch.py", str(free_port()))
    assert r.returncode == 0, r.stderr
    assert "other child False" in r.stdout and "prep child False" in r.stdout, r.stdout
    assert r.stdout.count("weights") == 2, r.stdout
    for rank in range(2):
        assert f"memcomm: {tmp_path / f'run.rank{rank}.mct'}:" in r.stderr or f"run.rank{rank}.mct:" in r.stderr, r.stderr
    out = subprocess.run([tool("memcomm-trace"), "report", "--json", *(str(tmp_path / f"run.rank{k}.mct") for k in range(2))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "different runs" not in out.stderr, out.stderr  # one world of two
    trace = json.loads(out.stdout)
    assert sorted((s["rank"], s["step"]) for s in trace["steps"]) == [(r, s) for r in range(2) for s in (1, 2, 3)]
    colls = trace["collectives"]
    assert len(colls) == 3 and all(c["op"] == "all_reduce" and c["ranks_seen"] == 2 for c in colls), colls
    assert world_size(tool, tmp_path / "run.rank0.mct") == 2
    # A run that formed its group and failed before any collective says its world size all the same.
    r = run_memcomm(tmp_path, "--trace", "failed.mct", "job/relaunch.py", str(free_port()), "fail")
    assert r.returncode != 0 and "rank 0 failed before its first collective" in r.stderr, r.stderr
    assert world_size(tool, tmp_path / "failed.rank0.mct") == 2


def world_size(tool, trace: Path) -> int:
    info = subprocess.run([tool("memcomm-trace"), "info", "--json", str(trace)], capture_output=True, text=True,
                          timeout=60)
    assert info.returncode == 0, info.stderr
    return json.loads(info.stdout)[0]["world_size"]


def test_the_script_keeps_its_module_file_and_folder_and_memcomm_does_not_fail_it(tmp_path, tool):
    # python SCRIPT's __main__: __file__ absolute, the real folder (through a symlink) on sys.path, the
    # module still there for atexit handlers that pickle the script's classes; a -W error run is not
    # failed by memcomm's own warnings at its end; a torchrun restart writes files of its own.
    write(tmp_path / "real", "helper.py", "VALUE = 7\n")
    write(tmp_path / "real", "s.py", """
        import atexit, os, torch
        import helper

        class Box:
            value = helper.VALUE

        atexit.register(lambda: torch.save(Box(), os.path.join(os.path.dirname(__file__), "box.pt")))
        print("file", os.path.isabs(__file__), helper.VALUE)
    """)
    (tmp_path / "lnk").mkdir()
    (tmp_path / "lnk" / "s.py").symlink_to(tmp_path / "real" / "s.py")
    r = subprocess.run([sys.executable, "-W", "error", "-m", "memcomm", "lnk/s.py"], capture_output=True, text=True,
                       timeout=180, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1", TORCHELASTIC_RESTART_COUNT="1"))
    assert r.returncode == 0 and "file True 7" in r.stdout, (r.stdout, r.stderr)
    assert (tmp_path / "lnk" / "box.pt").exists(), r.stderr  # __file__ is the path as run, made absolute
    assert "memcomm: s.restart1.rank0.mct:" in r.stderr, r.stderr


def test_memcomms_warnings_never_fail_a_script_it_runs(capsys):
    # A script's warnings.simplefilter("error") (or -W error) makes memcomm's warnings errors, and one
    # raised inside a DDP communication hook failed the script's backward: under the runner they print.
    import warnings
    from memcomm._caller import RunnerWarnings, warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warn("memcomm: raised")
            raise AssertionError("the filter did not apply")
        except UserWarning:
            pass
        RunnerWarnings.on = True
        try:
            warn("memcomm: printed")
        finally:
            RunnerWarnings.on = False
    assert "UserWarning: memcomm: printed" in capsys.readouterr().err


def test_the_profile_keeps_no_model_alive_that_the_script_dropped(tmp_path, tool):
    # A sweep builds each trial's model in a function and drops it; a model the profile watched was kept
    # to the end of the run (parameters and gradients: a sweep that fits plain ran out of memory).
    write(tmp_path, "sweep.py", """
        import gc, weakref, torch
        refs = []

        def trial(lr):
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            for _ in range(2):
                opt.zero_grad(); model(torch.randn(8, 16)).square().mean().backward(); opt.step()
            refs.append(weakref.ref(model))

        for lr in (0.1, 0.05, 0.02):
            trial(lr)
            gc.collect()
            print("alive", sum(r() is not None for r in refs))
        """)
    r = run_memcomm(tmp_path, "--trace", "sweep.mct", "sweep.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["alive", "0"] * 3, r.stdout
    assert len(report(tool, tmp_path / "sweep.rank0.mct")["steps"]) == 6


def test_a_module_runs_as_python_m_runs_it(tmp_path, tool):
    # python -m MODULE's __main__: the module's spec and file, its package, and the module still there
    # for atexit handlers that pickle its classes; a package runs its __main__, one without is refused.
    module = """
        import atexit, pickle, sys

        class Box:
            pass

        atexit.register(lambda: pickle.dump(Box(), open("box.pkl", "wb")))
        print("argv0", sys.argv[0], "spec", __spec__.name, "package", __package__, "args", sys.argv[1:])
    """
    write(tmp_path / "pkg", "__init__.py", "")
    write(tmp_path / "pkg", "train.py", module)
    write(tmp_path / "pkg", "__main__.py", module)
    r = run_memcomm(tmp_path, "-m", "pkg.train", "--epochs", "1")
    assert r.returncode == 0, r.stderr
    assert f"argv0 {tmp_path / 'pkg' / 'train.py'} spec pkg.train package pkg args ['--epochs', '1']" in r.stdout, r.stdout
    assert (tmp_path / "box.pkl").exists() and "Error" not in r.stderr, r.stderr
    r = run_memcomm(tmp_path, "--local_rank=1", "-m", "pkg.train", "--epochs", "1")
    assert r.returncode == 0 and "args ['--local_rank=1', '--epochs', '1']" in r.stdout, r.stdout + r.stderr
    r = run_memcomm(tmp_path, "-m", "pkg")
    assert r.returncode == 0 and "spec pkg.__main__" in r.stdout, r.stdout + r.stderr
    r = run_memcomm(tmp_path, "-m", "json")
    assert r.returncode == 2 and "json is a package and cannot be run directly" in r.stderr, r.stderr
    # A folder or zip file with a __main__.py runs it as python runs them: its atexit handlers still pickle.
    write(tmp_path / "app", "__main__.py", module)
    shutil.make_archive(str(tmp_path / "app"), "zip", tmp_path / "app")
    for target in ("app", "app.zip"):
        (tmp_path / "box.pkl").unlink()
        r = run_memcomm(tmp_path, target, "1")
        assert r.returncode == 0 and f"argv0 {target} spec __main__ package  args ['1']" in r.stdout, r.stdout + r.stderr
        assert (tmp_path / "box.pkl").exists() and "Error" not in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = run_memcomm(tmp_path, "empty")
    assert r.returncode == 2 and "no __main__.py in empty" in r.stderr, r.stderr


def test_a_loop_left_running_in_a_thread_is_part_of_the_trace(tmp_path, tool):
    # python waits for a script's non-daemon threads before it ends; the runner closed the trace first.
    write(tmp_path, "thread.py", """
        import threading, torch
        from torch import nn

        def train():
            model = nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(2, 4)).sum().backward()
                opt.step()

        threading.Thread(target=train).start()
        from concurrent.futures import ThreadPoolExecutor  # its idle workers end at exit, as python ends them
        ThreadPoolExecutor(2).submit(print, "pool")
    """)
    r = run_memcomm(tmp_path, "thread.py")
    assert r.returncode == 0, r.stderr
    assert len(report(tool, tmp_path / "thread.rank0.mct")["steps"]) == 3


DIST_TUTO = """
import hashlib, os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn


def run(rank, size):  # dist_tuto's all_reduce example, then a small DDP training loop
    t = torch.ones(4) * (rank + 1)
    for _ in range(3):
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    torch.manual_seed(rank)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 2, (8,))).backward()
        opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
    with open(f"{os.environ['RUN']}.rank{rank}", "w") as f:  # the ranks' stdout lines may interleave
        f.write(f"all_reduce {t[0].item()} weights {hashlib.sha256(weights).hexdigest()}")


def init_process(rank, size, fn, port, backend="gloo"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    dist.destroy_process_group()
    os._exit(0)  # Note [Exiting two-rank scripts] (conftest.py)


def helper(queue):  # a process of the script's own that sets up no group
    queue.put("helper ran")


def start_and_join(processes):
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    assert [p.exitcode for p in processes] == [0] * len(processes), [p.exitcode for p in processes]


if __name__ == "__main__":
    os.environ["RUN"], method, ports = sys.argv[1], sys.argv[2], sys.argv[3:]
    mp.set_start_method(method)
    queue = mp.Queue()
    for port in ports:  # one batch per loop; the first with the helper in it
        ranks = [mp.Process(target=init_process, args=(rank, 2, run, port)) for rank in range(2)]
        start_and_join(ranks + ([mp.Process(target=helper, args=(queue,))] if port == ports[0] else []))
    print(queue.get(timeout=30))
    try:  # a target that does not pickle fails as it fails without memcomm
        mp.Process(target=lambda: None).start()
    except Exception as e:
        print("unpicklable:", type(e).__name__, str(e).split(" at 0x")[0])
"""


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_processes_the_script_starts_with_multiprocessing_are_profiled_by_batch_and_rank(tmp_path, tool, method):
    # See Note [Profiles of spawned processes]: PyTorch's dist_tuto pattern (mp.Process(target=init_process)),
    # by a fresh interpreter or by Linux's default fork, where the child lets go of the profile it inherited
    # (Note [Recording across fork]). Each loop that starts processes and joins them is one batch,
    # NAME.spawnK.rankR.mct; a process that sets up no group gets nothing and says nothing; the ranks train as
    # without memcomm; an unpicklable target fails as it would.
    write(tmp_path, "tuto.py", DIST_TUTO)
    ports = [str(free_port()), str(free_port())]
    plain = subprocess.run([sys.executable, "tuto.py", "plain", method, *ports], capture_output=True, text=True,
                           timeout=180, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert plain.returncode == 0, plain.stderr
    r = run_memcomm(tmp_path, "--trace", "run.mct", "tuto.py", "out", method, str(free_port()), str(free_port()))
    assert r.returncode == 0, r.stderr
    assert "helper ran" in r.stdout, r.stdout
    for rank in range(2):  # 1+2, twice doubled; the same weights
        assert (tmp_path / f"out.rank{rank}").read_text() == (tmp_path / f"plain.rank{rank}").read_text()
        assert (tmp_path / f"out.rank{rank}").read_text().startswith("all_reduce 12.0")
    files = sorted(f.name for f in tmp_path.glob("*.mct"))
    assert files == ["run.rank0.mct"] + [f"run.spawn{k}.rank{rank}.mct" for k in (1, 2) for rank in (0, 1)], files
    said = r"memcomm: (\S+\.mct): \d+ events\n"  # one line per trace, nothing else (the helper says nothing)
    assert sorted(re.findall(said, r.stderr)) == files and not re.sub(said, "", r.stderr), r.stderr
    for k in (1, 2):
        trace = report(tool, *(tmp_path / f"run.spawn{k}.rank{rank}.mct" for rank in range(2)))
        assert sorted((s["rank"], s["step"]) for s in trace["steps"]) == [(r, s) for r in range(2) for s in (1, 2, 3)]
        colls = trace["collectives"]  # DDP's bucket all-reduces, each seen by both ranks
        assert colls and all(c["op"] == "all_reduce" and c["ranks_seen"] == 2 for c in colls), colls
    assert report(tool, tmp_path / "run.rank0.mct")["steps"] == []  # the children's training is theirs alone
    if method == "spawn":
        unpicklable = "unpicklable: PicklingError Can't pickle <function <lambda>\n"
        assert unpicklable in plain.stdout and unpicklable in r.stdout, (plain.stdout, r.stdout)


NESTED = """
import os, socket, torch, torch.distributed as dist, multiprocessing as mp
from torch import nn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank, world, port, steps):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    dist.destroy_process_group()


def rank_main(rank, port):
    grand = []
    if rank == 0:  # a rank that starts a job of its own: two processes in a group of their own
        grand_port = free_port()
        grand = [mp.Process(target=train, args=(r, 2, grand_port, 4)) for r in range(2)]
    for g in grand:
        g.start()
    train(rank, 2, port, 3)
    for g in grand:
        g.join()
    assert all(g.exitcode == 0 for g in grand)


if __name__ == "__main__":
    mp.set_start_method("fork")
    port = free_port()
    ranks = [mp.Process(target=rank_main, args=(r, port)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    print("exit codes", [p.exitcode for p in ranks])
"""


def test_a_job_that_a_forked_rank_starts_is_left_alone(tmp_path, tool):
    # See Note [Profiles of spawned processes]: only the script's own children get entries. A forked rank's
    # children inherit the rank's patched init_process_group; theirs must not start the rank's profile again
    # (they took over the rank's files, and the rank went unprofiled).
    write(tmp_path, "nested.py", NESTED)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "nested.py")
    assert r.returncode == 0 and r.stdout == "exit codes [0, 0]\n", (r.stdout, r.stderr)
    assert "not profiled" not in r.stderr, r.stderr
    assert sorted(f.name for f in tmp_path.glob("*.mct")) == ["run.rank0.mct", "run.spawn1.rank0.mct",
                                                             "run.spawn1.rank1.mct"]
    trace = report(tool, tmp_path / "run.spawn1.rank0.mct", tmp_path / "run.spawn1.rank1.mct")
    assert sorted((s["rank"], s["step"]) for s in trace["steps"]) == [(r, s) for r in range(2) for s in (1, 2, 3)]


HOGWILD = """
import contextlib, sys, torch, torch.multiprocessing as mp
from torch import nn


def train(rank, model, own_profile):
    import memcomm
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memcomm.profile(trace=f"hog{rank}.mct", model=model) if own_profile else contextlib.nullcontext():
        for _ in range(3):
            opt.zero_grad()
            nn.functional.mse_loss(model(torch.randn(4, 8)), torch.zeros(4, 2)).backward()
            opt.step()


if __name__ == "__main__":
    model = nn.Linear(8, 2)
    model.share_memory()  # pytorch/examples' mnist_hogwild: the processes update one model, with no group
    processes = [mp.Process(target=train, args=(rank, model, sys.argv[1] == "own")) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    print("exit codes", [p.exitcode for p in processes])
"""


def test_a_process_that_trains_without_a_group_says_it_was_not_profiled_and_may_profile_itself(tmp_path, tool):
    # See Note [Profiles of spawned processes]: a Process is profiled from its process group, and only one names a
    # rank. Hogwild's forked processes train without one: each says so, and a profile started inside one records
    # it (the profile it inherited by the fork is let go of: Note [Recording across fork]).
    write(tmp_path, "hog.py", HOGWILD)
    r = run_memcomm(tmp_path, "--trace", "run.mct", "hog.py", "none")
    assert r.returncode == 0 and r.stdout == "exit codes [0, 0]\n", (r.stdout, r.stderr)
    said = re.findall(r"memcomm: process \d+, started by the script, ran 3 optimizer step\(s\) without setting up "
                      r"a process group or RPC: not profiled", r.stderr)
    assert len(said) == 2, r.stderr
    assert [f.name for f in tmp_path.glob("*.mct")] == ["run.rank0.mct"]
    r = run_memcomm(tmp_path, "--trace", "run.mct", "hog.py", "own")
    assert r.returncode == 0 and "not profiled" not in r.stderr, r.stderr
    for rank in range(2):
        assert len(report(tool, tmp_path / f"hog{rank}.rank0.mct")["steps"]) == 3


DATA_LOADER = """
import sys, torch, multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def untouched(worker):  # a worker of a fresh interpreter never imports memcomm
    assert "memcomm" not in sys.modules or mp.get_start_method() == "fork", "memcomm in a worker"


if __name__ == "__main__":
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for method in ("fork", "spawn"):
        for x, y in DataLoader(data, batch_size=16, num_workers=2, multiprocessing_context=method,
                               worker_init_fn=untouched):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    with mp.get_context("spawn").Pool(2) as pool:
        print("pool", pool.map(abs, [-1, -2]))
"""


def test_data_loader_workers_and_pools_are_left_alone(tmp_path, tool):
    # See Note [Profiles of spawned processes]: DataLoader workers (fork and spawn) and Pool workers are
    # multiprocessing Processes that set up no group: no wrapper, no line, no file.
    write(tmp_path, "loader.py", DATA_LOADER)
    r = run_memcomm(tmp_path, "--allocator", "cpu", "--trace", "run.mct", "loader.py")
    assert r.returncode == 0 and r.stdout == "pool [1, 2]\n", (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("memcomm: run.rank0.mct: "), r.stderr
    assert [f.name for f in tmp_path.glob("*.mct")] == ["run.rank0.mct"]
    assert len(report(tool, tmp_path / "run.rank0.mct")["steps"]) == 8


class _Unstarted:  # what ChildProcesses reads of a multiprocessing Process
    def __init__(self, target, start_method="spawn"):
        self._target, self._start_method, self.exitcode = target, start_method, None


def test_children_are_numbered_by_batch_in_the_order_they_start():
    # See Note [Profiles of spawned processes]: one counter for start_processes calls and Process batches; a
    # Process batch ends when one of its processes has; library workers get no entry; entries pickle.
    import argparse
    import pickle
    from torch.utils.data._utils.worker import _worker_loop
    from memcomm._spawned import ChildProcesses, ProcessEntry, SpawnedEntry

    children = ChildProcesses(argparse.Namespace(trace="out/run.mct", snapshot="mem.pickle"))
    first = [_Unstarted(write) for _ in range(3)]
    names = [children.target_entry(p).options.trace for p in first]
    assert names == ["out/run.spawn1.mct"] * 3
    spawned = children.function_entry(write, "spawn")
    assert isinstance(spawned, SpawnedEntry) and spawned.options.trace == "out/run.spawn2.mct"
    assert spawned.options.snapshot == "mem.spawn2.pickle"
    later = [_Unstarted(write), _Unstarted(write)]
    assert [children.target_entry(p).options.trace for p in later] == ["out/run.spawn3.mct"] * 2
    later[0].exitcode = 0  # joined: the next process opens a batch
    entry = children.target_entry(_Unstarted(write))
    assert isinstance(entry, ProcessEntry) and entry.options.trace == "out/run.spawn4.mct"
    assert pickle.loads(pickle.dumps(entry)).fn is write  # by reference, as the target alone
    for worker in (_Unstarted(_worker_loop), _Unstarted(None), _Unstarted(write, "nosuch")):
        assert children.target_entry(worker) is None
    forked = children.target_entry(_Unstarted(write, "fork"))  # the batch's first process still runs: batch 4
    assert isinstance(forked, ProcessEntry) and forked.forked and forked.options.trace == "out/run.spawn4.mct"
    assert not entry.forked and not spawned.forked and children.function_entry(write, "fork").forked
    given_up = _Unstarted(write)  # batch 6: start_processes' batch 5 above ended the Process batch
    assert children.target_entry(given_up).options.trace == "out/run.spawn6.mct"
    assert children.target_entry(_Unstarted(write)).options.trace == "out/run.spawn6.mct"
    children.stopped(given_up)  # killed, its exit not seen yet: the next process opens a batch
    assert children.target_entry(_Unstarted(write)).options.trace == "out/run.spawn7.mct"
