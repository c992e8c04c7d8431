"""Shared pytest setup for the memcomm Python package's tests.

Each file is one ctest test (tests/python/CMakeLists.txt), run with PYTHONPATH pointing at the
build tree's package and MEMCOMM_BUILD_DIR at the build (for memcomm-replay and friends).
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SKIPPED_EXIT_CODE = 77  # ctest's SKIP_RETURN_CODE for the gpu label


def build_dir() -> Path:
    return Path(os.environ.get("MEMCOMM_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))


def run_python(code: str, *args: str, timeout: float = 300, env: dict = None) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (installing an allocator is for a process's lifetime)."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (a rendezvous's MASTER_PORT)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raised_by(calls: list, prelude: str = "import memcomm", after_each: str = "pass") -> dict:
    """What each call (Python source) raises, as {call: (exception name, message)}: "no exception" when
    it returns. One fresh interpreter evaluates them one after another, so each must fail before it
    changes anything process-wide; `after_each` (one statement) checks that."""
    loop = textwrap.dedent(prelude) + textwrap.dedent("""
        import sys
        for call in sys.argv[1:]:
            try:
                eval(call)
            except Exception as e:
                print(type(e).__name__, "|", str(e).replace("\\n", " "))
            else:
                print("no exception |")
            """) + "    " + after_each + "\n"
    r = run_python(loop, *calls)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(calls), r.stdout
    return {call: tuple(part.strip() for part in line.split(" |", 1)) for call, line in zip(calls, lines)}


@pytest.fixture
def tool():
    """Path of a memcomm command-line tool in the build."""
    def find(name: str) -> Path:
        path = build_dir() / "bin" / name
        if not path.exists():
            pytest.fail(f"{path} is missing: build it first")
        return path
    return find


# Note [Exiting two-rank scripts]
# The scripts the tests start under torch.distributed.run end with os._exit(0) after
# destroy_process_group(). A Gloo worker thread may still be destroying its last finished work when
# the interpreter finalizes; that work's tensors then take the GIL from a finalizing interpreter and
# the thread's forced unwind aborts the rank ("terminate called without an active exception"; core
# dump: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> decref_pyobject -> take_gil ->
# pthread_exit). It is torch's teardown race (pytorch/pytorch#179291 describes it), seen in loaded
# test runs (three aborts of these two-rank scripts in this session's last four full runs). The
# scripts have written and closed everything they check by then, so they flush their output and leave
# without finalizing.


def pytest_sessionfinish(session, exitstatus):
    """A file whose every test was skipped (no GPU) reports itself skipped to ctest, never passed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    ran = len(reporter.stats.get("passed", [])) + len(reporter.stats.get("failed", []))
    if ran == 0 and reporter.stats.get("skipped"):
        session.exitstatus = SKIPPED_EXIT_CODE
