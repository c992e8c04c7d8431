"""What the hooks need of torch._dynamo, done once the script has loaded it, never before.

Note [Dynamo left to the script]: importing torch._dynamo takes as long as importing torch (some
3-4 s on the project's 2-core machines), and the hooks need it only for a script that compiles: the
class torch.compile returns (OptimizedModule), Dynamo's compile-start callbacks, and
torch.compiler.disable around the hooks Dynamo must not trace (Note [Hooks under torch.compile] in
hooks.py). Done at start(), they made every profile pay for it, and python -m memcomm doubled the
run time of a short script that never compiles nor builds a torch.optim optimizer (which loads
Dynamo itself): pytorch/examples' word_language_model, an inference script, one that fails fast.
A script that compiles loads Dynamo before its first compile, so WhenLoaded runs each of them at
once when Dynamo is loaded, else right after the package torch._dynamo has run, whoever imports
it: a finder on sys.meta_path finds the package as the other finders do and runs the callbacks
after its loader's exec_module; it leaves the module, its spec and its loader as they were.
"""
import importlib.abc
import sys
import threading
from typing import Any, Callable, List, Optional, Sequence

from memcomm._caller import warn

_NAME = "torch._dynamo"
_lock = threading.Lock()
_waiting: List["WhenLoaded"] = []


class WhenLoaded:
    """Runs `callback` once torch._dynamo is loaded: now if it is, else when the script loads it;
    remove() drops it while it waits."""

    def __init__(self, callback: Callable[[], None]):
        self._callback = callback
        with _lock:
            if _NAME not in sys.modules:
                _waiting.append(self)
                _watch()
                return
        callback()

    def remove(self) -> None:
        with _lock:
            if self in _waiting:
                _waiting.remove(self)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds torch._dynamo as the finders after it do, and runs the waiting callbacks after it runs."""

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if name != _NAME:
            return None
        spec = _spec_from_others(self, name, path, target)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_run(module: Any) -> None:
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module  # the loader's own method again
                except AttributeError:
                    pass
            _loaded()

        loader.exec_module = exec_then_run
        return spec


_finder = _Finder()


def _spec_from_others(me: Any, name: str, path: Optional[Sequence[str]], target: Any) -> Any:
    for finder in list(sys.meta_path):
        find_spec = getattr(finder, "find_spec", None)
        if finder is me or find_spec is None:
            continue
        spec = find_spec(name, path, target)
        if spec is not None:
            return spec
    return None


def _watch() -> None:
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _loaded() -> None:
    with _lock:
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        ready = list(_waiting)
        _waiting.clear()
    for w in ready:
        try:
            w._callback()
        except Exception as e:  # noqa: BLE001 (the script's import must not fail for a profile)
            warn(f"memcomm: preparing the profile for torch.compile failed ({type(e).__name__}: {e}); "
                 "compiled code may not be recorded", RuntimeWarning)
