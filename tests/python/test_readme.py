"""The README's "From Python" example runs as written."""
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list:
    text = README.read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_from_python_example_runs(tmp_path):
    blocks = python_blocks()
    assert blocks, "README has no python example under 'From Python'"
    for code in blocks:
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "run.rank0.mct").exists() and (tmp_path / "run.pickle").exists()
