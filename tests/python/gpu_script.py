"""What the test_gpu_*.py files share so that they run without pytest: the GPU machine may lack it,
so ctest runs them as plain scripts. Imports neither pytest (unless it is there) nor conftest."""
import sys
from typing import Any, Dict, List

import torch

SKIPPED = 77  # ctest's SKIP_RETURN_CODE (MEMCOMM_SKIP_RETURN_CODE)


def skip_marks() -> List[Any]:
    """The module's pytestmark: under pytest, skip rather than fail without a GPU ([] without pytest)."""
    try:
        import pytest
    except ImportError:
        return []
    return [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


def run_as_script(namespace: Dict[str, Any]) -> None:
    """Runs every test_ function of `namespace` (a module's globals()) in name order, or exits 77
    (skipped) without a GPU. A failing test raises, which fails the script."""
    if not torch.cuda.is_available():
        print("no GPU: skipped")
        sys.exit(SKIPPED)
    tests = [f for name, f in sorted(namespace.items()) if name.startswith("test_") and callable(f)]
    for test in tests:
        test()
        print(f"{test.__name__}: passed")
