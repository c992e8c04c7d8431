"""memcomm inside a PyTorch training script: its caching allocator, profiler and tuner.

    import memcomm
    memcomm.use_allocator("cpu")                     # or "cuda", before the first CUDA tensor
    print(memcomm.memory_stats("cpu")["reserved_bytes.all.peak"])
    memcomm.dump_snapshot("cpu.pickle", "cpu")       # opens in memcomm-view, memcomm-replay, memory_viz
    with memcomm.profile(trace="run.mct"):           # one NAME.rankR.mct per rank
        for x, y in memcomm.loader(train_loader): ...
    result = memcomm.tune(model, optimizer, loss_fn, make_batch, global_batch=256)  # memcomm-tune's search

The C++ core (memcomm._memcomm) is linked against the libtorch of one torch version; importing it
into another would fail with unresolved symbols or worse, so this module checks first.
"""
import torch as _torch

from memcomm import _build_info


def _check_torch_version() -> None:
    built, running = _build_info.TORCH_VERSION, _torch.__version__
    if built != running:
        raise ImportError(
            f"memcomm was built against torch {built}, but this Python runs torch {running}; "
            f"rebuild memcomm for this torch (scripts/build.sh, or pip install --no-build-isolation .)")


_check_torch_version()

from memcomm import _memcomm  # noqa: E402  (after the version check, on purpose)
from memcomm.allocator import (  # noqa: E402
    dump_snapshot, empty_cache, memory_stats, reset_peak_memory_stats, snapshot, use_allocator)
from memcomm.profiler import Profiler, category, comm_hook, loader, profile, step  # noqa: E402
from memcomm._caller import ProfileAdvice  # noqa: E402
from memcomm import dist  # noqa: E402
from memcomm.tuner import TuneError, tune  # noqa: E402

__version__ = _memcomm.__version__

__all__ = ["use_allocator", "memory_stats", "empty_cache", "reset_peak_memory_stats", "snapshot",
           "dump_snapshot", "profile", "Profiler", "ProfileAdvice", "step", "loader", "comm_hook", "category", "dist", "tune", "TuneError",
           "__version__"]
