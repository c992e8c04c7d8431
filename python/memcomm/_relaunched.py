"""Ranks a script under python -m memcomm starts by running itself again, run under memcomm too.

Note [A script that starts itself again]: Lightning's launcher for strategy="ddp" under plain
python (Fabric's too, and Hydra's variant of it) starts ranks 1..N-1 as
`sys.executable SCRIPT ARGS` (or `-m MODULE ARGS`) with subprocess.Popen, each with its LOCAL_RANK
in the environment; some scripts relaunch themselves the same way. Those processes would run outside
memcomm: the run wrote rank 0's file alone, and its collectives showed one rank of two, with no word.
While python -m memcomm runs a script, Popen puts `-m memcomm` and the runner's own options (the
trace as a full path, since the child may start in another folder) in front of a command that runs
this Python on the same script or module; every other command is left as it is. Each child names its
file by the rank its launcher's environment gives it (Note [A profile started before the process
group] in memcomm/profiler.py); the script's own process learns its world at its first collective
(Profiler._group_formed). Only a rank is such a child: its environment names a rank (RANK or
LOCAL_RANK) of a world of more than one (WORLD_SIZE), and the script's own process was started by no
launcher (no RANK or LOCAL_RANK of its own). A script that runs itself again for other work (to
prepare data) is left alone, and so is every child of a rank torchrun started, whose environment
names that rank already and whose trace would claim the rank's file.
"""
import argparse
import os
import site
import subprocess
from typing import Any, List, Optional, Sequence

# Interpreter options that may stand between the interpreter and the script; those that take a value.
_FLAGS = {"-u", "-O", "-OO", "-B", "-s", "-E", "-I", "-q", "-b", "-bb", "-d", "-v"}
_FLAGS_WITH_VALUE = {"-X", "-W"}


def runner_options(args: argparse.Namespace) -> List[str]:
    """The options python -m memcomm ran with, as a child started in any folder needs them."""
    options = ["--trace", os.path.join(args.start_dir, args.trace), "--cupti", args.cupti]
    for device in args.allocator:
        options += ["--allocator", device]
    if args.memory_limit is not None:
        options += ["--memory-limit", str(args.memory_limit)]
    if args.history:
        options += ["--history", str(args.history)]
    if args.snapshot:
        options += ["--snapshot", args.snapshot]
    if args.live:
        options += ["--live", args.live]
    if args.no_ddp_buckets:
        options.append("--no-ddp-buckets")
    return options


def _has_rank(env: Any) -> bool:
    """Whether a process environment gives a launcher's rank (torchrun's RANK, Lightning's LOCAL_RANK)."""
    return "RANK" in env or "LOCAL_RANK" in env


def _names_a_rank(env: Any) -> bool:
    """Whether a process environment names a rank of a world of more than one."""
    try:
        return int(env.get("WORLD_SIZE", "1")) > 1 and _has_rank(env)
    except ValueError:
        return False


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (False when either is not there)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class _Target:
    """What the runner runs: a script (its real path) or a module's name."""

    def __init__(self, args: argparse.Namespace):
        self.module: Optional[str] = args.module
        self.script = None if args.module else os.path.realpath(os.path.join(args.start_dir, args.target[0]))

    def starts_at(self, command: Sequence[str], at: int, cwd: str) -> Optional[int]:
        """Where the target's own part of `command` begins, when `command[at:]` runs it, else None."""
        if self.module is not None:
            return at if command[at:at + 2] == ["-m", self.module] else None
        if at < len(command) and not command[at].startswith("-"):
            path = os.path.realpath(os.path.join(cwd, command[at]))
            return at if path == self.script else None
        return None


def _interpreter_options_end(command: Sequence[str]) -> int:
    """The index after the interpreter's own options (command[0] being the interpreter)."""
    i = 1
    while i < len(command):
        word = command[i]
        if word in _FLAGS:
            i += 1
        elif word in _FLAGS_WITH_VALUE:
            i += 2
        elif word[:2] in _FLAGS_WITH_VALUE and len(word) > 2:  # -Xdev, -Werror
            i += 1
        else:
            break
    return i


def _with_package_on_path(env: Optional[dict]) -> Optional[dict]:
    """The child's environment, with memcomm's folder on PYTHONPATH when this Python found memcomm
    outside its site-packages (a build tree): -m memcomm must import there too."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = {os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if os.path.realpath(folder) in installed:
        return env
    env = dict(os.environ if env is None else env)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not any(same_file(p, folder) for p in paths):
        env["PYTHONPATH"] = os.pathsep.join([folder] + paths)
    return env


class RelaunchesProfiled:
    """Patches subprocess.Popen while the script runs (Note [A script that starts itself again])."""

    def __init__(self, args: argparse.Namespace, python: str):
        self._target = _Target(args)
        self._options = runner_options(args)
        self._python = python
        self._launched = _has_rank(os.environ)  # this process is a launcher's rank

    def rewritten(self, command: Any, kwargs: dict) -> Optional[List[str]]:
        """`command` with -m memcomm and the runner's options in it, when it runs the target again."""
        if kwargs.get("shell") or kwargs.get("executable") is not None or not isinstance(command, (list, tuple)):
            return None
        env = kwargs.get("env")
        if self._launched or not _names_a_rank(os.environ if env is None else env):
            return None
        command = [os.fspath(c) for c in command] if all(isinstance(c, (str, os.PathLike)) for c in command) else None
        if not command or not same_file(command[0], self._python):
            return None
        options_end = _interpreter_options_end(command)
        at = self._target.starts_at(command, options_end, os.fspath(kwargs.get("cwd") or os.getcwd()))
        if at is None:
            return None
        return command[:at] + ["-m", "memcomm"] + self._options + command[at:]

    def __enter__(self) -> "RelaunchesProfiled":
        original = subprocess.Popen.__init__
        relaunch = self

        def __init__(popen: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            command = relaunch.rewritten(args, kwargs) if not rest else None  # positional bufsize etc.: as given
            if command is not None:
                kwargs["env"] = _with_package_on_path(kwargs.get("env"))
                args = command
            original(popen, args, *rest, **kwargs)

        self._original, self._wrapper = original, __init__
        subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        if subprocess.Popen.__init__ is self._wrapper:
            subprocess.Popen.__init__ = self._original  # type: ignore[method-assign]
