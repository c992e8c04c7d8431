"""Hooks that need a module the script may never load (torch._dynamo, torch.distributed.optim), set
once the script has loaded it, never before.

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
torch.distributed.optim (DistributedOptimizer, some 3 s to import) waits the same way.
"""
import importlib.abc
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from memcomm._caller import warn

DYNAMO = "torch._dynamo"
_lock = threading.Lock()
_waiting: Dict[str, List["WhenLoaded"]] = {}    # by the module each waits for


class WhenLoaded:
    """Runs `callback` once `module` is loaded: now if it is, else when the script loads it;
    remove() drops it while it waits. `purpose` names, in a warning if the callback fails, what the
    profile would miss."""

    def __init__(self, callback: Callable[[], None], module: str = DYNAMO, purpose: str = "compiled code"):
        self._callback, self._purpose = callback, purpose
        with _lock:
            if module not in sys.modules:
                _waiting.setdefault(module, []).append(self)
                _watch()
                return
        callback()

    def remove(self) -> None:
        with _lock:
            for waiting in _waiting.values():
                if self in waiting:
                    waiting.remove(self)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds a module something waits for as the finders after it do, and runs the waiting callbacks
    after it runs."""

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        with _lock:
            if not _waiting.get(name):
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
            _loaded(name)

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


def _loaded(name: str) -> None:
    with _lock:
        ready = _waiting.pop(name, [])
        if not any(_waiting.values()) and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for w in ready:
        try:
            w._callback()
        except Exception as e:  # noqa: BLE001 (the script's import must not fail for a profile)
            warn(f"memcomm: preparing the profile for {w._purpose} failed ({type(e).__name__}: {e}); "
                 f"{w._purpose} may not be recorded", RuntimeWarning)
