"""DDP's bucket all-reduces recorded in a script that never calls memcomm.comm_hook() (python -m memcomm).

Note [DDP buckets of an unchanged script]
A DDP model's gradient all-reduces are recorded only through a communication hook, and a script run
by `python -m memcomm` registers none of memcomm's. While `recording_ddp_buckets()` is open:
- A hook the script registers itself before training is wrapped: register_comm_hook(state,
  memcomm.comm_hook(hook)), the same bytes and timing, recorded.
- A model with no hook of its own gets BucketDispatch as its first forward with gradients on
  begins: after DDP's lazy initialisation (which may register a hook of DDP's own: an optimizer run
  in backward; memcomm runs it then, as that forward would) and before the first backward, where
  hooks must be in place. Not after that forward: Lightning's manual optimisation runs the whole
  training step, backward and all, inside the DDP model's forward, and the first step's all-reduces
  went unrecorded. Where that forward would not run the lazy initialisation (Dynamo traces it, or
  DDP's Python reducer) the hook goes in after it. Evaluation forwards under no_grad that come first
  leave it waiting.
- DDP's reducer takes one hook per model, so a hook the script registers once BucketDispatch is in
  place takes its place inside it instead of going to the reducer ("can only be called once").
- The hooks DDP registers for itself (in its constructor and lazy initialisation) and a built-in
  C++ hook registered before training are left as they are, unrecorded; a built-in hook registered
  once BucketDispatch is in place runs inside it as torch's Python hook of the same arithmetic
  (allreduce_hook, fp16_compress_hook), recorded. A reducer that refuses BucketDispatch (a hook
  registered behind DDP's back) leaves the model unrecorded, never the script failing. A hook DDP
  would refuse (not callable, a parameter not named bucket, a wrong annotation) is refused as DDP
  refuses it, before memcomm wraps it.
- A saved or copied model (torch.save, copy.deepcopy: DDP's __getstate__) holds what it would hold
  without memcomm: the script's own hooks, not memcomm's objects, so it loads where memcomm is absent.
  The copy, or a model loaded in the run (DDP's __setstate__), has a reducer of its own with no
  hook, as in plain torch (DDP does not register the hooks it unpickles): it is a new model here too,
  and gets BucketDispatch at its first training forward (an EMA or "fast weights" copy trained
  beside the model).
Without a hook, DDP multiplies each gradient by 1 / world size as it fills the bucket (a sparse
gradient, its own bucket, it divides by the world size), then sums;
torch's allreduce_hook divides instead, which differs in the last bit for world sizes that are not
powers of two. reducer_allreduce does the reducer's arithmetic, so training is bit for bit the same
(tests/python/test_run.py, three ranks). Not followed: a gradient that already is its bucket's view
(gradient_as_bucket_view=True with zero_grad(set_to_none=False), or no_sync accumulation), which the
reducer divides in place (the last bit differs; a hook cannot tell which gradients those were), and
Join(divide_by_initial_world_size=False), which divides by the ranks not yet joined: a model already
under such a Join at its first training forward keeps DDP's own all-reduce, unrecorded, and one
joined later is warned at its next bucket (--no-ddp-buckets keeps DDP's arithmetic).
"""
import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from memcomm._caller import warn
from memcomm._profiler.collectives import RecordedHook, comm_hook, torch_hooks
from memcomm._profiler.future_callbacks import Tracked, wait_for_release


def reducer_allreduce(process_group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's arithmetic without a hook: the bucket times 1 / world size (a sparse gradient divided by
    it, as the reducer does), then summed over the group."""
    group = process_group if process_group is not None else dist.group.WORLD
    buf = bucket.buffer()
    if buf.is_sparse:
        buf.div_(group.size())
    else:
        buf.mul_(1.0 / group.size())
    return dist.all_reduce(buf, group=group, async_op=True).get_future().then(Tracked(_the_tensor))


def _the_tensor(f: torch.futures.Future) -> torch.Tensor:
    return f.value()[0]


class BucketDispatch:
    """memcomm's one hook on a DDP model: DDP's default all-reduce on the model's current process
    group, recorded, until the script registers a hook, which then runs in its place, recorded."""

    def __init__(self, model: DDP):
        self._model = weakref.ref(model)
        self._default = RecordedHook(reducer_allreduce, None)
        self.inner: Optional[Tuple[Any, RecordedHook]] = None
        self.inner_is_builtin = False  # a built-in C++ hook's Python twin, which DDP does not pickle
        self.warned = False
        self.__name__ = self.__qualname__ = "memcomm_bucket_dispatch"  # DDP reads them as of a function

    def __call__(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if self.inner is not None:
            return self.inner[1](self.inner[0], bucket)
        model = self._model()
        if model is not None and not self.warned and _divides_by_ranks_not_joined(model):
            self.warned = True
            warn("memcomm: Join(divide_by_initial_world_size=False) divides a DDP model's gradients by the ranks "
                 "not yet joined, where memcomm's recording hook divides by the world size: run with "
                 "--no-ddp-buckets for DDP's own arithmetic")
        return self._default(model.process_group if model is not None else None, bucket)


def _divides_by_ranks_not_joined(model: DDP) -> bool:
    """Whether the model is under Join(divide_by_initial_world_size=False) (DDP's join hook sets it)."""
    return not getattr(model, "_divide_by_initial_world_size", True)


def _torch_hook_for(comm_hook_type: Any) -> Optional[Callable[..., Any]]:
    """torch's Python hook with a built-in C++ hook's arithmetic, or None for one it has none of."""
    name = {dist.BuiltinCommHookType.ALLREDUCE: "allreduce", dist.BuiltinCommHookType.FP16_COMPRESS: "fp16"}
    return torch_hooks().get(name.get(comm_hook_type, ""))


def _as_saved_without_memcomm(model: DDP, state: dict, handles: "weakref.WeakKeyDictionary[DDP, Tuple[Any, Any]]") -> dict:
    """DDP's pickled state as it would be without memcomm: the script's hooks unwrapped, memcomm's own
    dispatcher and forward hooks out (copies; the live model keeps them)."""
    hooks = []
    for hook, hook_state in state.get("_comm_hooks", []):
        if isinstance(hook, BucketDispatch):
            if hook.inner is not None and not hook.inner_is_builtin:
                hooks.append((hook.inner[1].inner, hook.inner[0]))
        else:
            hooks.append((hook.inner if isinstance(hook, RecordedHook) else hook, hook_state))
    if "_comm_hooks" in state:
        state["_comm_hooks"] = hooks
    ids = {handle.id for handle in handles.get(model, ())}
    for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
                 "_forward_hooks_always_called"):
        if ids and name in state:
            state[name] = type(state[name])((k, v) for k, v in state[name].items() if k not in ids)
    return state


def _lazy_init_run(model: DDP) -> bool:
    """Runs DDP's lazy initialisation (which may register DDP's own hook: an optimizer run in backward)
    ahead of the forward that would run it, as that forward would; False where the forward would not
    run it (Dynamo tracing, the Python reducer), which leaves the hook for after that forward."""
    if getattr(model, "_lazy_init_ran", True):
        return True
    if torch.compiler.is_compiling() or getattr(model, "_use_python_reducer", False):
        return False
    model._lazy_init()
    return True


@contextlib.contextmanager
def recording_ddp_buckets() -> Iterator[None]:
    init, register, builtin = DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook
    getstate, setstate, lazy_init = DDP.__getstate__, DDP.__setstate__, getattr(DDP, "_lazy_init", None)
    hooked: "weakref.WeakSet[DDP]" = weakref.WeakSet()  # models with a hook: the script's or DDP's own
    dispatch: "weakref.WeakKeyDictionary[DDP, BucketDispatch]" = weakref.WeakKeyDictionary()
    handles: "weakref.WeakKeyDictionary[DDP, Tuple[Any, Any]]" = weakref.WeakKeyDictionary()  # first-forward hooks
    local = threading.local()                           # local.ddp_own: models inside DDP's own setup

    def ddp_own() -> List[DDP]:
        if not hasattr(local, "ddp_own"):
            local.ddp_own = []
        return local.ddp_own

    def as_ddp_own(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: DDP, *args: Any, **kwargs: Any) -> Any:
            ddp_own().append(self)
            try:
                return method(self, *args, **kwargs)
            finally:
                ddp_own().remove(self)
        return run

    def install_dispatch(module: DDP) -> None:
        for handle in handles.pop(module, ()):
            handle.remove()
        if module in hooked:
            return
        if _divides_by_ranks_not_joined(module):  # a Join that came first
            hooked.add(module)
            warn("memcomm: a DDP model under Join(divide_by_initial_world_size=False) keeps DDP's own all-reduce, "
                 "which divides its gradients by the ranks not yet joined: its buckets are not recorded")
            return
        d = BucketDispatch(module)
        try:
            register(module, None, d)
        except Exception:  # noqa: BLE001 (a hook registered behind DDP's back): the model goes unrecorded
            hooked.add(module)
            return
        dispatch[module] = d

    def dispatch_at_first_training_forward(model: DDP) -> None:
        def before_forward(module: DDP, inputs: Any) -> None:
            if torch.is_grad_enabled() and not torch.compiler.is_compiling() and _lazy_init_run(module):
                install_dispatch(module)

        def after_forward(module: DDP, inputs: Any, output: Any) -> None:
            if torch.is_grad_enabled():
                install_dispatch(module)
        handles[model] = (model.register_forward_pre_hook(before_forward), model.register_forward_hook(after_forward))

    def watch(model: DDP) -> None:
        dispatch_at_first_training_forward(model)
        # Before the reducer and its process group go: Note [Python callables released on torch's threads]
        weakref.finalize(model, wait_for_release).atexit = False

    def ddp_init(self: DDP, *args: Any, **kwargs: Any) -> None:
        as_ddp_own(init)(self, *args, **kwargs)
        watch(self)

    def ddp_setstate(self: DDP, state: dict) -> None:
        """A copy or a loaded model: a new reducer with no hook, as a new model's."""
        setstate(self, state)
        watch(self)

    def in_dispatch(self: DDP, state: Any, hook: Callable[..., Any], builtin_twin: bool = False) -> bool:
        """A hook the script registers once BucketDispatch is in place runs inside it."""
        d = dispatch.get(self)
        if d is None or d.inner is not None:
            return False
        d.inner, d.inner_is_builtin = (state, comm_hook(hook)), builtin_twin
        return True

    def register_comm_hook(self: DDP, state: Any, hook: Callable[..., Any]) -> None:
        if any(m is self for m in ddp_own()):
            hooked.add(self)
            return register(self, state, hook)
        if hasattr(self, "_check_comm_hook"):  # DDP's own check of the script's hook, which a wrapper would hide
            self._check_comm_hook(hook)
        if in_dispatch(self, state, hook):
            return None
        hooked.add(self)
        return register(self, state, comm_hook(hook))

    def register_builtin_comm_hook(self: DDP, comm_hook_type: Any) -> None:
        torch_hook = _torch_hook_for(comm_hook_type)
        if torch_hook is not None and in_dispatch(self, self.process_group, torch_hook, builtin_twin=True):
            return None
        hooked.add(self)
        return builtin(self, comm_hook_type)

    def ddp_getstate(self: DDP) -> dict:
        return _as_saved_without_memcomm(self, getstate(self), handles)

    DDP.__init__ = ddp_init
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = register_builtin_comm_hook
    DDP.__getstate__, DDP.__setstate__ = ddp_getstate, ddp_setstate
    if lazy_init is not None:
        DDP._lazy_init = as_ddp_own(lazy_init)
    try:
        yield
    finally:
        DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook = init, register, builtin
        DDP.__getstate__, DDP.__setstate__ = getstate, setstate
        if lazy_init is not None:
            DDP._lazy_init = lazy_init
