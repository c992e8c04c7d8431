"""python -m memcomm [OPTIONS] SCRIPT [ARGS...] | -m MODULE [ARGS...]: an unchanged training script
under memcomm's profiler, and under its allocator when asked.

The script runs as `python SCRIPT ARGS` would run it: its own sys.argv, its folder first on sys.path,
__name__ == "__main__" (so torch.multiprocessing's spawn finds its functions), and its exit status.
The profile starts before the script's first line and stops after its last, also when it raises
or calls sys.exit(); its model is found as profile() finds one built inside it (Note [Finding the
model] in _profiler/models.py). Under torchrun (`torchrun ... -m memcomm SCRIPT`) every rank writes its
own file, and DDP's bucket all-reduces are recorded (Note [DDP buckets of an unchanged script] in
_profiler/ddp_buckets.py). The profile starts before the script's init_process_group, so no clock
offsets are measured between ranks: exact on one host (Note [A profile started before the process
group] in profiler.py). Processes the script starts (torch.multiprocessing's spawn and
start_processes, multiprocessing's Process.start(), by any start method) are profiled from their
init_process_group on, each writing NAME.spawnK.rankR.mct for the K-th batch of processes the script
started; a Process that sets up no group (DataLoader and Pool workers among them) is left alone, and
says so if it trained (Note [Profiles of spawned processes] in _spawned.py). A rank the script starts by running this Python on the same
script or module again (Lightning's strategy="ddp" starts its other ranks so) runs under memcomm with
the same options (Note [A script that starts itself again] in _relaunched.py).
"""
import argparse
import builtins
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import re
import sys
import threading
import types
import warnings
import zipfile
from typing import Any, List, Optional, Tuple

import memcomm
from memcomm import _memcomm
from memcomm._caller import NothingRecorded, ProfileAdvice, RunnerWarnings, in_memcomm, say
from memcomm._ending import CloseOnce, close, closed_before_exec, closed_before_os_exit, closed_on_sigterm
from memcomm._profiler.ddp_buckets import recording_ddp_buckets
from memcomm._relaunched import RelaunchesProfiled, same_file
from memcomm._spawned import ChildProcesses, profiling_spawned_processes

_EPILOG = """\
examples:
  python -m memcomm train.py --epochs 1                  # writes train.rank0.mct
  python -m memcomm --allocator cpu --memory-limit 2GiB --snapshot mem.pickle train.py
  torchrun --nproc-per-node 2 -m memcomm --trace run.mct train.py   # run.rank0.mct, run.rank1.mct
  python -m memcomm --trace run.mct spawn_ddp.py   # torch.multiprocessing.spawn: run.spawn1.rankR.mct
  python -m memcomm --trace run.mct dist_tuto.py   # mp.Process(...).start() per rank: run.spawn1.rankR.mct
  python -m torch.distributed.launch --nproc-per-node 2 -m memcomm train.py  # --local-rank=N goes to train.py

processes the script starts (mp.spawn, start_processes, multiprocessing's Process.start(); spawn,
forkserver or fork) write NAME.spawnK.rankR.mct from their init_process_group on.
K counts batches of processes in the order they start: each spawn/start_processes call is one, and
Processes started one after another are one until one of them ends (a loop that starts N processes,
then joins them, is one K; the next loop is K+1). A Process that sets up no process group (DataLoader
and Pool workers too) is left alone; one that ran optimizer steps says it was not profiled.

memcomm goes after a launcher that starts the ranks (torchrun, accelerate launch, deepspeed --module
memcomm, composer -n N -m memcomm), never in front of one: that would profile the launcher alone (a usage
error).

then: memcomm-trace report train.rank0.mct, memcomm-view train.rank0.mct, memcomm-replay mem.pickle
exit status: the script's own; 2 for a usage error of these options (before the script starts)."""


def _size(text: str) -> int:
    try:
        return _memcomm.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Parser(argparse.ArgumentParser):
    """argparse's parser, keeping the error of a help it could not print (argparse drops OSError)."""

    lost: Optional[BaseException] = None

    def _print_message(self, message: str, file: Any = None) -> None:
        if not message:
            return
        try:
            stream = file or sys.stderr
            stream.write(message)
            stream.flush()
        except (AttributeError, OSError, ValueError) as e:
            self.lost = e


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m memcomm", usage="python -m memcomm [OPTIONS] (SCRIPT | -m MODULE) [ARGS...]", description="Runs a PyTorch training script under memcomm's profiler "
        "(steps, forward/backward/optimizer phases, collectives, allocator events) and, with --allocator, "
        "memcomm's caching allocator.", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)
    p.add_argument("--trace", metavar="NAME.mct",
                   help="trace file; each rank writes NAME.rankR.mct (default: the script's name, SCRIPT.mct)")
    p.add_argument("--live", metavar="HOST:PORT", help="also stream to memcomm-view --listen at HOST:PORT")
    p.add_argument("--allocator", choices=["cpu", "cuda"], action="append", default=[],
                   help="memcomm's caching allocator serves this device's tensors (repeatable)")
    p.add_argument("--memory-limit", type=_size, metavar="SIZE",
                   help="with --allocator: bytes it may reserve per device, e.g. 8GiB (default: no limit)")
    p.add_argument("--history", type=int, default=0, metavar="N",
                   help="with --allocator: keep the last N allocator events for --snapshot's timeline")
    p.add_argument("--snapshot", metavar="FILE.pickle",
                   help="with --allocator: when the script ends, write the first --allocator device's "
                   "memory snapshot (PyTorch's format); each rank of a group writes FILE.rankR.pickle")
    p.add_argument("--cupti", choices=["auto", "on", "off"], default="auto",
                   help="GPU kernel and copy activity through CUPTI (default: auto, when CUDA is in use)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE")
    p.add_argument("--no-ddp-buckets", action="store_true",
                   help="leave DDP models without memcomm's communication hook (by default each gets one "
                   "at its first forward, or around the script's own hook, to record its bucket all-reduces)")
    return p


# What torch.distributed.launch (without --use-env) puts right after `-m memcomm` for each rank: the
# script's option, which python SCRIPT would have received first.
_LAUNCHER_OPTIONS = ("--local-rank=", "--local_rank=")


# Launchers that start each rank as a process of its own (by module, and by console script): memcomm in
# front of one would profile the launcher alone, so they are a usage error that says where memcomm goes.
_TORCHRUN = "torchrun --nproc-per-node 2 -m memcomm SCRIPT"
_ACCELERATE = "accelerate launch -m memcomm SCRIPT"
_DEEPSPEED = "deepspeed --module memcomm SCRIPT"
_COMPOSER = "composer -n 2 -m memcomm SCRIPT"
_LAUNCHER_MODULES = {"torch.distributed.run": _TORCHRUN, "torch.distributed.launch": _TORCHRUN,
                     "accelerate.commands.launch": _ACCELERATE, "deepspeed.launcher.runner": _DEEPSPEED,
                     "composer.cli.launcher": _COMPOSER}
_LAUNCHER_SCRIPTS = {"torchrun": _TORCHRUN, "accelerate": _ACCELERATE, "deepspeed": _DEEPSPEED, "composer": _COMPOSER}


def _launcher(args: argparse.Namespace) -> Optional[str]:
    """How to run memcomm under the rank launcher the target is, if it is one."""
    if args.module is not None:
        return _LAUNCHER_MODULES.get(args.module)
    return _LAUNCHER_SCRIPTS.get(os.path.basename(args.target[0]))


def _split(p: argparse.ArgumentParser, argv: List[str]) -> Tuple[List[str], List[str], List[str]]:
    """memcomm's options; the script or -m MODULE with everything after it: the target's own options
    (-h, --help, even ones named like memcomm's) never reach memcomm's parser; and the launcher's
    --local-rank=N, which goes to the target."""
    takes_value = {flag for a in p._actions if a.nargs is None and a.const is None for flag in a.option_strings}
    own: List[str] = []
    launcher: List[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "-m" or (word.startswith("-m") and not word.startswith("--")):  # -m MODULE, -mMODULE
            cut = i + 2 if word == "-m" else i + 1
            return own + argv[i:cut], argv[cut:], launcher
        if word == "--":
            return own, argv[i + 1:], launcher
        if word == "-" or (word.startswith("-c") and word not in takes_value):  # python's stdin and -c CODE
            p.error(f"{word if word == '-' else '-c'}: python -m memcomm runs a script file or -m MODULE, not code "
                    f"from {'standard input' if word == '-' else 'the command line'}; save it to a file and name that")
        if not word.startswith("-"):
            return own, argv[i:], launcher
        step = 2 if word in takes_value else 1
        (launcher if word.startswith(_LAUNCHER_OPTIONS) else own).extend(argv[i:i + step])
        i += step
    return own, [], launcher


def _parse(argv: List[str]) -> argparse.Namespace:
    p = _parser()
    own, target, launcher = _split(p, argv)
    try:
        args = p.parse_args(own)
    except SystemExit as e:
        if e.code in (None, 0) and p.lost is not None:  # --help: a success only if standard output took it
            _help_lost(p.lost)
        raise
    if args.module is None and not target:
        p.error("name a script to run (or -m MODULE)")
    at = 0 if args.module is not None else 1  # as python SCRIPT --local-rank=N ARGS would see it
    args.target = target[:at] + launcher + target[at:]
    if args.module is None and not _runnable(args.target[0]):
        missing = "no __main__.py in" if os.path.exists(args.target[0]) else "no such script:"
        p.error(f"{missing} {args.target[0]}")
    under = _launcher(args)
    if under is not None:
        p.error(f"{args.module or args.target[0]} starts each rank as a process of its own, which memcomm in front "
                f"of it would not profile; put memcomm after the launcher: {under}")
    if args.module is not None:
        args.module_spec = _module_spec(args.module)
        if args.module_spec is None:
            p.error(_no_module_message(args.module))
    if not args.allocator and (args.memory_limit is not None or args.history or args.snapshot):
        p.error("--memory-limit, --history and --snapshot need --allocator")
    if not 0 <= args.history < 2**31:
        p.error(f"--history must be from 0 to {2**31 - 1}, got {args.history}")
    if args.trace is None:
        stem = args.module.rsplit(".", 1)[-1] if args.module else os.path.splitext(os.path.basename(args.target[0]))[0]
        args.trace = stem + ".mct"
    for name, path in (("--trace", args.trace), ("--snapshot", args.snapshot), ("--live", args.live)):
        if path == "":  # '--trace ""' failed as the trace opened, '--snapshot ""' wrote nothing
            p.error(f"{name} needs a {'HOST:PORT' if name == '--live' else 'file name'}, got an empty one")
    for name, path in (("--trace", args.trace), ("--snapshot", args.snapshot)):
        folder = os.path.dirname(os.path.abspath(path)) if path else ""
        if folder and not os.path.isdir(folder):
            p.error(f"{name} {path}: the folder {folder} does not exist")
        if path and os.path.isdir(path):
            p.error(f"{name} {path} is a folder; name a file in it")
    if args.snapshot:  # written at the end: where the working folder was at the start, not after a chdir
        args.snapshot = os.path.abspath(args.snapshot)
        conflict = _snapshot_conflict(args.snapshot, args.trace, None if args.module else args.target[0])
        if conflict:
            p.error(conflict)
    args.start_dir = os.getcwd()  # spawned children's traces go there too, whatever the script's chdir
    if args.live:
        try:
            _memcomm.check_live_address(args.live)
        except ValueError as e:
            p.error(f"--{e}")
    return args


def _help_lost(error: BaseException) -> None:
    """--help whose text standard output did not take (a full disk): said, and exit 1, as memcomm's tools
    do (Note [Output that was not written] in common/include/memcomm/common/standard_output.hpp)."""
    say(f"python -m memcomm: standard output could not be written ({getattr(error, 'strerror', None) or error}): "
        f"the help is lost\n")
    with contextlib.suppress(OSError, ValueError):  # the interpreter's own flush at exit would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stdout.flush()
    raise SystemExit(1)


def _snapshot_conflict(snapshot: str, trace: str, script: Optional[str]) -> str:
    """Why --snapshot would overwrite the script or a rank's trace (it replaced them, exit 0), or ""."""
    if script and same_file(script, snapshot):
        return f"--snapshot {snapshot} is the script {script}; it would be overwritten"
    stem = trace[:-4] if trace.endswith(".mct") and len(trace) > 4 else trace
    folder, name = os.path.split(os.path.abspath(stem))
    pattern = re.escape(name) + r"(\.spawn\d+)?\.rank\d+\.mct"  # rank_trace_path's names, spawned processes' too
    if os.path.dirname(snapshot) == folder and re.fullmatch(pattern, os.path.basename(snapshot)):
        return f"--snapshot {snapshot} is a name a rank's trace takes (--trace {trace}); it would overwrite the trace"
    return ""


def _runnable(path: str) -> bool:
    """A file, or a folder or zip file with a __main__.py (what python PATH runs)."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, "__main__.py"))
    if os.path.isfile(path) and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return any(name in ("__main__.py", "__main__.pyc") for name in z.namelist())
    return os.path.isfile(path)


def _module_spec(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    """What python -m NAME runs: the module NAME, or a package's NAME.__main__; None when neither is."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
    except (ImportError, ValueError):  # a parent package that is missing, or an empty name
        return None
    return spec if spec is not None and spec.loader is not None else None


def _no_module_message(name: str) -> str:
    try:
        package = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        package = None
    if package is not None and package.submodule_search_locations is not None:
        return f"no module named {name}.__main__: {name} is a package and cannot be run directly"
    return f"no such module: {name}"


def _run_target(args: argparse.Namespace) -> None:
    if args.module is not None:  # sys.path[0] stays the working folder, as under python -m
        sys.argv = [args.module] + args.target
        _run_module(args.module_spec)
    else:
        sys.argv = list(args.target)
        _run_script(args.target[0])


def _as_main(code: types.CodeType, **attributes: object) -> None:
    """Runs `code` in a __main__ module of its own that stays in sys.modules after it returns, so the
    script's atexit handlers and pickles of its classes still find it (as python leaves its own)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, **attributes)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)  # noqa: S102 (the script the user named, as python would run it)


def _run_module(spec: importlib.machinery.ModuleSpec) -> None:
    """The module as python -m runs it: its spec (spawn's children import it by that name), its file as
    sys.argv[0], its package, in a __main__ module of its own (_as_main)."""
    code = spec.loader.get_code(spec.name)  # type: ignore[union-attr]
    if code is None:  # no Python code behind it (an extension module)
        raise ImportError(f"no code object available for {spec.name}")
    sys.argv[0] = spec.origin or spec.name
    _as_main(code, __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader, __package__=spec.parent,
             __spec__=spec)


def _run_script(path: str) -> None:
    """The script as python SCRIPT runs it: in a __main__ module of its own (_as_main) whose __file__ is
    absolute, with its real folder (symlinks resolved) at sys.path[0]. A folder or zip file runs its
    __main__.py as python runs it: that path at sys.path[0], the module's spec named __main__, in the
    same kind of module (runpy.run_path's would be gone when the script's atexit handlers pickle)."""
    full = os.path.abspath(path)
    if os.path.isdir(full) or zipfile.is_zipfile(full):
        sys.path[0] = full
        spec = importlib.machinery.PathFinder.find_spec("__main__", [full])
        if spec is None or spec.loader is None:  # _runnable() saw a __main__.py: only if it went since
            raise ImportError(f"can't find '__main__' module in {path!r}")
        code = spec.loader.get_code("__main__")  # type: ignore[attr-defined]
        _as_main(code, __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader, __package__="",
                 __spec__=spec)
        return
    sys.path[0] = os.path.dirname(os.path.realpath(full))
    with io.open_code(full) as f:
        code = compile(f.read(), full, "exec")
    _as_main(code, __file__=full, __cached__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", full))


def _from_the_script(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """A traceback without the memcomm frames that python SCRIPT would not show: the runner's above the
    script's, and the wrappers between the script's and torch's (a DDP constructor's error, a module
    call). An error raised in memcomm's own code keeps its wrappers' frames, only the runner's go (all
    of it when no frame is the script's)."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    ours = [in_memcomm(f.tb_frame.f_code.co_filename) for f in frames]
    for i in reversed(range(len(frames) - 1)):  # torch.compiler.disable's wrapper around memcomm's hooks is
        if ours[i + 1] and frames[i].tb_frame.f_globals.get("__name__", "").startswith("torch._dynamo"):
            ours[i] = True                        # theirs (Note [Hooks under torch.compile] in hooks.py)
    if not frames or ours[-1]:
        return next((f for f, o in zip(frames, ours) if not o), frames[0] if frames else None)
    out = None
    for f in reversed([f for f, o in zip(frames, ours) if not o]):
        out = types.TracebackType(out, f.tb_frame, f.tb_lasti, f.tb_lineno)
    return out


def _print_as_python_does(error: BaseException) -> None:
    """The script's uncaught error as python SCRIPT prints it: its traceback, and those of the errors
    it was raised from or during, without memcomm's frames (_from_the_script), through sys.excepthook
    as python's own printing goes."""
    seen, chained = set(), [error]
    while chained:
        e = chained.pop()
        if id(e) not in seen:
            seen.add(id(e))
            e.with_traceback(_from_the_script(e.__traceback__))
            chained += [c for c in (e.__cause__, e.__context__) if c is not None]
    sys.excepthook(type(error), error, error.__traceback__)  # python's hook prints error's own traceback


def _not_printed_again(interrupt: KeyboardInterrupt) -> None:
    """An interrupt must leave main() for python to end the process as interrupted (killed by SIGINT,
    after the atexit handlers), which prints it again with memcomm's frames; printed already, it is
    skipped once by sys.excepthook, and anything else raised on the way out is printed."""
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Optional[types.TracebackType]) -> None:
        sys.excepthook = previous
        if value is not interrupt:
            previous(kind, value, tb)

    sys.excepthook = hook


def _wait_for_script_threads() -> None:
    """A script that returns (or calls sys.exit) ends, as under python, when its last non-daemon
    thread does: a loop it left running in one is part of the run and of the trace. As python does
    at exit, the callbacks threading runs first go first (they stop an idle executor's workers)."""
    for callback in reversed(getattr(threading, "_threading_atexits", [])):
        callback()
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon and thread.is_alive():
            thread.join()


def _start(args: argparse.Namespace) -> memcomm.Profiler:
    """memcomm's allocator where asked, then the profile; a failure is one line and exit status 1."""
    try:
        for device in args.allocator:
            memcomm.use_allocator(device, memory_limit=args.memory_limit, history=args.history)
            memcomm.allocator.installed_by[device] = f"python -m memcomm --allocator {device}"
        profiler = memcomm.Profiler(args.trace, args.live, cupti=args.cupti)
        profiler.started_by_runner = True
        return profiler.start()
    except (OSError, RuntimeError, ValueError) as e:
        sys.exit(f"python -m memcomm: cannot start: {e}")


def _raised_by_argument_parser(e: SystemExit) -> bool:
    """Whether the standard library's argument parser ended the script (--help, a usage error): then
    nothing of the training ran. Other libraries' sys.exit() also ends finished runs (click's, absl's)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals.get("__name__") in ("argparse", "optparse")


def _exit_code(status: object) -> int:
    """sys.exit()'s argument as Python turns it into the process's status: a message is printed, 1."""
    if status is None or isinstance(status, int):
        return status or 0
    print(status, file=sys.stderr)
    return 1


def _finish(args: argparse.Namespace, profiler: memcomm.Profiler, children: ChildProcesses, raised: bool,
            parsed_out: bool) -> bool:
    """The run's end in the script's process (close()); memcomm's warnings there never fail a script
    run with -W error. After the script's own uncaught error or a sys.exit() with a failing status, the
    profile's advice on what it did not see (no step, no forward) is beside the point; after its
    argument parser ended it (--help, or a usage error), so is the note that nothing was recorded."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        if children.any_started or parsed_out:  # the training may have run in children with profiles of their own
            warnings.filterwarnings("ignore", category=NothingRecorded)
        if raised:
            warnings.filterwarnings("ignore", category=ProfileAdvice)
            profiler._ends_by_exception()  # the runner owns the profile
        return close(args, profiler)


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    RunnerWarnings.on = True
    profiler = _start(args)
    pid, status, whole, raised, parsed_out = os.getpid(), 0, True, False, False
    children = ChildProcesses(args)
    ending = CloseOnce(lambda: _finish(args, profiler, children, raised, parsed_out))

    def terminated() -> object:
        """A SIGTERM ends the script mid-run (torchrun stops the other ranks when one fails): cut off,
        as by an error, not a run the profile saw nothing of ("start the profile in them" misled)."""
        nonlocal raised
        raised = True
        return ending()

    with closed_on_sigterm(terminated):
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(closed_before_os_exit(ending))
                stack.enter_context(closed_before_exec(ending))
                if not args.no_ddp_buckets:
                    stack.enter_context(recording_ddp_buckets())
                stack.enter_context(profiling_spawned_processes(children))
                stack.enter_context(RelaunchesProfiled(args, sys.executable))  # Note [A script that starts itself again]
                try:
                    _run_target(args)
                except SystemExit as e:  # the script's sys.exit(): its status, once the trace is closed
                    status, parsed_out = e.code, _raised_by_argument_parser(e)
                    raised = e.code not in (None, 0)  # a failing status: a usage error, a caught failure
                except Exception as e:  # noqa: BLE001 (the script's uncaught error, printed as python prints it)
                    _print_as_python_does(e)
                    status, raised = 1, True
                except KeyboardInterrupt as e:  # printed now; python ends the process as interrupted (SIGINT) at exit
                    _print_as_python_does(e)
                    _not_printed_again(e)
                    raised = True
                    raise
                except BaseException:  # the trace closed first, then python prints it and sets the status
                    raised = True
                    raise
                _wait_for_script_threads()  # after the traceback, as python waits
        finally:
            # A child the script forked (os.fork) that got back here leaves as Python would leave it
            # (its files flushed, its atexit handlers run), without touching the parent's trace: its
            # recorder is off (Note [Recording across fork] in profiler/core/src/recorder.cpp).
            if os.getpid() == pid:
                whole = ending()
    if not whole:  # a full disk
        status = status or 1
    return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main())
