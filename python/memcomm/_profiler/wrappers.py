"""What the script wraps its own code in: memcomm.loader (the data-loader wait) and
memcomm.category (a label for its allocations)."""
import contextlib
from typing import Any, Iterable, Iterator

from memcomm._profiler import running
from memcomm._profiler.codes import CATEGORY, exchange


class _Loader:
    """Iterates like the loader it wraps; while a profiler runs, each batch's wait is a DataWait."""

    def __init__(self, loader: Iterable[Any]):
        self._loader = loader

    def __iter__(self) -> Iterator[Any]:
        it = iter(self._loader)
        while True:
            p = running.profiler
            if p is None:
                try:
                    yield next(it)
                except StopIteration:
                    return
                continue
            try:
                batch = p._hooks.loader_next(it)
            except StopIteration:
                return
            yield batch

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Only names the wrapper lacks come here. A copy or an unpickled one has no _loader yet while
        # copy and pickle probe it for __setstate__ & co.: no forwarding then, or it recurses.
        if name == "_loader" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._loader, name)


def loader(data_loader: Iterable[Any]) -> Iterable[Any]:
    """Wraps a DataLoader (any iterable): `for x, y in memcomm.loader(train_loader):` records the time
    each batch took to arrive as the step's data_wait phase. Costs nothing while no profiler runs."""
    if not hasattr(data_loader, "__iter__"):
        raise TypeError(f"loader() takes an iterable such as a DataLoader, got {type(data_loader).__name__}")
    return _Loader(data_loader)


@contextlib.contextmanager
def category(name: str) -> Iterator[None]:
    """Labels this thread's allocations in the trace while the block runs, inside a running profile:
    `with memcomm.profile(...): with memcomm.category("parameter"): model = Net()`. A label is
    written with the allocation's event, so memory allocated before the profile started is in the
    trace unlabelled. Names: parameter, gradient, optimizer_state, activation, temporary,
    comm_buffer, input."""
    if name not in CATEGORY or name == "unknown":
        raise ValueError(f"category must be one of {sorted(k for k in CATEGORY if k != 'unknown')}, got {name!r}")
    prev = exchange(CATEGORY[name])
    try:
        yield
    finally:
        exchange(prev)
