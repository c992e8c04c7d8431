"""`pip install .` (scikit-build-core, pyproject.toml) builds the package into a fresh virtualenv."""
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_pip_install_builds_a_working_package(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    # The fresh venv gets this process's torch (and the build backend) without downloading them again:
    # "any venv that has the same torch".
    Path(site, "torch-from-test.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = dict(os.environ, CCACHE_BASEDIR=str(REPO))
    env.pop("PYTHONPATH", None)  # the build tree's copy must not be what gets imported
    build = subprocess.run(
        [python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q", str(REPO),
         "--config-settings=cmake.define.MEMCOMM_WERROR=ON", "--config-settings=cmake.define.MEMCOMM_WITH_CUDA=OFF"],
        capture_output=True, text=True, timeout=1500, env=env)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    run = subprocess.run(
        [python, "-c", "import memcomm, torch; memcomm.use_allocator('cpu'); t = torch.ones(1000);"
                       "print(memcomm.__file__); print(memcomm.memory_stats()['allocated_bytes.all.current'])"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    where, allocated = run.stdout.split()
    assert where.startswith(str(env_dir)), where
    assert int(allocated) >= 4000
    assert sys.executable != str(python)
