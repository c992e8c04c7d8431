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


@pytest.fixture
def tool():
    """Path of a memcomm command-line tool in the build."""
    def find(name: str) -> Path:
        path = build_dir() / "bin" / name
        if not path.exists():
            pytest.fail(f"{path} is missing: build it first")
        return path
    return find


def pytest_sessionfinish(session, exitstatus):
    """A file whose every test was skipped (no GPU) reports itself skipped to ctest, never passed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    ran = len(reporter.stats.get("passed", [])) + len(reporter.stats.get("failed", []))
    if ran == 0 and reporter.stats.get("skipped"):
        session.exitstatus = SKIPPED_EXIT_CODE
