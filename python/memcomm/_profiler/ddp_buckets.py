"""DDP's bucket all-reduces recorded in a script that never calls memcomm.comm_hook() (python -m memcomm).

Note [DDP buckets of an unchanged script]
A DDP model's gradient all-reduces are recorded only through a communication hook, and a script run
by `python -m memcomm` registers none of memcomm's. While `recording_ddp_buckets()` is open, each
DistributedDataParallel built gets memcomm.comm_hook() over DDP's default all-reduce, on its own
process group, at its first forward: hooks must be in place before the first backward, and the
script may register one of its own between the constructor and that forward. A hook the script
registers itself is wrapped instead (register_comm_hook(state, memcomm.comm_hook(hook))), so its
buckets are recorded with the same bytes and timing. The hooks DDP's own constructor registers
(mixed precision's upcast, an optimizer run in backward) and a built-in C++ hook are left as they
are, unrecorded: wrapping them would change what DDP set up for itself.
"""
import contextlib
import weakref
from typing import Any, Callable, Iterator, List

from torch.nn.parallel import DistributedDataParallel as DDP

from memcomm._profiler.collectives import comm_hook


@contextlib.contextmanager
def recording_ddp_buckets() -> Iterator[None]:
    init, register, builtin = DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook
    hooked: "weakref.WeakSet[DDP]" = weakref.WeakSet()  # models with a hook: memcomm's, the script's or DDP's
    constructing: List[DDP] = []                        # models inside DDP.__init__

    def register_default_at_first_forward(model: DDP) -> None:
        def first_forward(module: DDP, inputs: Any) -> None:
            handle.remove()
            if module not in hooked:
                hooked.add(module)
                register(module, module.process_group, comm_hook())
        handle = model.register_forward_pre_hook(first_forward)

    def ddp_init(self: DDP, *args: Any, **kwargs: Any) -> None:
        constructing.append(self)
        try:
            init(self, *args, **kwargs)
        finally:
            constructing.pop()
        register_default_at_first_forward(self)

    def register_comm_hook(self: DDP, state: Any, hook: Callable[..., Any]) -> None:
        ddp_own = any(m is self for m in constructing)
        hooked.add(self)
        return register(self, state, hook if ddp_own else comm_hook(hook))

    def register_builtin_comm_hook(self: DDP, comm_hook_type: Any) -> None:
        hooked.add(self)
        return builtin(self, comm_hook_type)

    DDP.__init__ = ddp_init
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = register_builtin_comm_hook
    try:
        yield
    finally:
        DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook = init, register, builtin
