"""Collectives into the trace: memcomm.comm_hook (DDP's buckets) and record_collective (memcomm.dist)."""
import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
import torch.distributed as dist

from memcomm import _memcomm
from memcomm._profiler import running
from memcomm._profiler.codes import COMM_BUFFER, OP, dtype_code, exchange, now
from memcomm._profiler.future_callbacks import Tracked


def _issue(p: Any, op: str, dtype: int, nbytes: int, group: Any, bucket: int,
           call: Callable[[], Any]) -> Tuple[Any, Callable[..., None]]:
    """Runs `call` (a collective on `group`, its buffers labelled comm_buffer) as the profiler `p`'s
    next collective on that group. Returns what `call` returned, and `ended(*_)`, which records the
    collective as issued when called and ended at the moment `ended` runs (a future's callback)."""
    try:
        comm, seq = p.next_collective(group)
    except RuntimeError:  # past the 255 process groups a trace names: the collective runs unrecorded
        return call(), lambda *_: None
    code = OP[op]
    prev = exchange(COMM_BUFFER)
    begin = now()
    try:
        result = call()
    finally:
        exchange(prev)

    def ended(*_: Any) -> None:
        _memcomm.record_collective(code, dtype, nbytes, comm, seq, bucket, begin, now())
    return result, ended


def record_collective(p: Any, op: str, dtype: int, nbytes: int, group: Any, bucket: int,
                      call: Callable[[], Any], async_op: bool) -> Any:
    """Runs `call` (a collective on `group`) and records it on the profiler `p`: issued when called,
    ended when it returned or, with async_op, when its work completed (Note [Collectives that end
    after the script waited])."""
    work, ended = _issue(p, op, dtype, nbytes, group, bucket, call)
    if async_op and work is not None:
        fut = work.get_future()
        with _in_flight_lock:
            _in_flight[id(fut)] = fut

        def recorded(f: Any) -> None:
            try:
                ended()
            finally:
                with _in_flight_lock:
                    _in_flight.pop(id(f), None)
        fut.add_done_callback(Tracked(recorded))  # Note [Python callables released on torch's threads]
    else:
        ended()
    return work


# Note [Collectives that end after the script waited]: an async collective's end is recorded by a
# callback of its future, which torch runs on its own thread once the work completes, possibly just
# after the script's work.wait() returned. A script that stops the profiler right after waiting
# would lose that end. So stop() gives the callbacks of completed work a moment to run
# (settle_in_flight); work still running is left alone, so a hung collective cannot hang stop().
# DDP's comm hook needs none of this: its record is chained into the future DDP waits on.
_in_flight: Dict[int, Any] = {}
_in_flight_lock = threading.Lock()


def _none_in_flight_in_forked_child() -> None:
    """The parent's collectives are not the child's to wait for, and its lock may be held by a thread
    the child does not have."""
    global _in_flight_lock
    _in_flight_lock = threading.Lock()
    _in_flight.clear()


os.register_at_fork(after_in_child=_none_in_flight_in_forked_child)


def settle_in_flight(timeout_s: float = 1.0) -> None:
    """Waits up to `timeout_s` for the end records of collectives whose work has completed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with _in_flight_lock:
            if not any(f.done() for f in _in_flight.values()):
                return
        time.sleep(0.001)


_WIRE = {"allreduce": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def torch_hooks() -> Dict[str, Callable[..., Any]]:
    """torch's own DDP hooks by the names comm_hook() takes (imported when first asked for)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
            "bf16": default_hooks.bf16_compress_hook}


def _inner_hook(hook: Union[str, Callable[..., Any]], wire_dtype: Optional[torch.dtype]
                ) -> Tuple[Callable[..., Any], Optional[torch.dtype], bool]:
    """The hook comm_hook() calls, the element type it sends (None: the bucket's), and whether it
    sends the bucket's one all-reduce: torch's own hooks, or one whose wire type the caller names."""
    by_name = torch_hooks()
    # torch's own hook passed as a function sends what its name says (a script's, wrapped by python -m memcomm)
    hook = next((name for name, f in by_name.items() if hook is f), hook)
    if isinstance(hook, str):
        if hook not in _WIRE:
            raise ValueError(f"comm_hook: hook must be 'allreduce', 'fp16', 'bf16' or a callable, got {hook!r}")
        wire_dtype = wire_dtype or _WIRE[hook]
        inner = by_name[hook]
    elif callable(hook):
        inner = hook
    else:
        raise TypeError(f"comm_hook: hook must be a name or a callable, got {type(hook).__name__}")
    if wire_dtype is not None and not isinstance(wire_dtype, torch.dtype):
        raise TypeError(f"comm_hook: wire_dtype must be a torch.dtype, got {type(wire_dtype).__name__}")
    return inner, wire_dtype, isinstance(hook, str) or wire_dtype is not None


# Note [What a script's own comm hook sends]
# DDP's default all-reduce and torch's compress hooks send one all-reduce of the bucket on the hook's
# process group, and are recorded as that. A script's own hook may send anything: post-local SGD
# all-reduces inside a subgroup after its warm-up, or nothing at all; PowerSGD sends two smaller
# matrices. Recorded as the bucket's all-reduce on the world, such a run showed collectives that
# never crossed ranks, or never ran. So while a hook of unknown arithmetic runs, the collectives its
# thread calls through torch.distributed (looked up at call time, as torch's own hooks do) are
# recorded as memcomm.dist records them, on the group they ran on, with the bucket's index; other
# threads' calls pass straight through, and torch's functions are put back when no such hook runs.
# A hook may go on in its future's callbacks: PowerSGD all-reduces its P and Q matrices in functions
# chained with then(), which run on the thread that completes the work before them (a Gloo worker),
# after the hook returned. Only its first, 0-byte all-reduce was recorded, and its P and Q ones when a
# callback happened to run on the hook's thread, differently on each rank: the ranks' records paired
# the wrong collectives. So a callback that such a hook chains runs with the hook's bucket on its
# thread, and torch's functions stay wrapped until it has run.
_RECORDED = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
             "all_to_all_single", "barrier")
_hook_thread = threading.local()   # .bucket: the bucket whose hook runs on this thread, while it runs
_patch_lock = threading.Lock()
_patch_users = 0                   # hooks running and callbacks they chained that have yet to run
_originals: Dict[str, Callable[..., Any]] = {}
_original_then: Any = None


def _patch_used() -> None:
    global _patch_users, _original_then
    with _patch_lock:
        if _patch_users == 0:
            for name in _RECORDED:
                _originals[name] = getattr(dist, name)
                setattr(dist, name, _recording(name, _originals[name]))
            _original_then = torch._C.Future.then
            torch._C.Future.then = _chaining
        _patch_users += 1


def _patch_unused() -> None:
    global _patch_users
    with _patch_lock:
        _patch_users -= 1
        if _patch_users == 0:
            for name in _RECORDED:
                if getattr(getattr(dist, name), "__wrapped__", None) is _originals[name]:
                    setattr(dist, name, _originals[name])  # unless someone replaced it since
            if torch._C.Future.then is _chaining:
                torch._C.Future.then = _original_then


def _chaining(future: Any, callback: Callable[..., Any]) -> Any:
    """Future.then while a script's hook runs: a callback chained on the hook's thread runs with its bucket."""
    bucket = getattr(_hook_thread, "bucket", None)
    if bucket is None:
        return _original_then(future, callback)
    _patch_used()

    def in_the_hooks_bucket(f: Any) -> Any:
        outer = getattr(_hook_thread, "bucket", None)
        _hook_thread.bucket = bucket
        try:
            return callback(f)
        finally:
            _hook_thread.bucket = outer
            _patch_unused()
    return _original_then(future, Tracked(in_the_hooks_bucket))  # Note [Python callables released on torch's threads]


def hook_bucket() -> int:
    """The index of the bucket whose script hook issues the collective being recorded, else -1."""
    return getattr(_hook_thread, "record_bucket", -1)


def _recording(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def collective(*args: Any, **kwargs: Any) -> Any:
        bucket = getattr(_hook_thread, "bucket", None)
        if bucket is None or running.profiler is None:
            return original(*args, **kwargs)
        from memcomm import dist as recorded  # memcomm.dist calls torch.distributed's name: back here, passed through
        _hook_thread.bucket, _hook_thread.record_bucket = None, bucket
        try:
            return getattr(recorded, name)(*args, **kwargs)
        finally:
            _hook_thread.bucket, _hook_thread.record_bucket = bucket, -1
    collective.__wrapped__ = original  # type: ignore[attr-defined]
    return collective


class _HookCollectivesRecorded:
    """While open on a thread: the collectives it calls through torch.distributed are recorded for
    `bucket` (Note [What a script's own comm hook sends])."""

    def __init__(self, bucket: int):
        self.bucket = bucket

    def __enter__(self) -> None:
        _patch_used()
        _hook_thread.bucket = self.bucket

    def __exit__(self, *_: Any) -> None:
        _hook_thread.bucket = None
        _patch_unused()


class RecordedHook:
    """What comm_hook() returns: a module-level class, not a closure, so that torch.save of a whole
    DDP model (which pickles its hooks) works as it does without memcomm when the inner hook pickles.
    `one_all_reduce`: the hook sends the bucket's all-reduce and nothing else (Note [What a script's own
    comm hook sends])."""

    def __init__(self, inner: Callable[..., Any], wire_dtype: Optional[torch.dtype], one_all_reduce: bool = True):
        self.inner, self.wire_dtype, self.one_all_reduce = inner, wire_dtype, one_all_reduce
        # DDP reads a hook's __name__ and __qualname__ (its logger, its bf16 checks), as of a function.
        self.__name__ = "memcomm_comm_hook"
        self.__qualname__ = "memcomm.comm_hook(" + getattr(inner, "__qualname__", type(inner).__name__) + ")"

    # DDP checks these two annotations (GradBucket in, Future[Tensor] out) when the hook is registered.
    def __call__(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        p = running.profiler
        if p is None:
            return self.inner(state, bucket)
        p.bucket_issued()  # DDP waits for it at the backward's end (see Note [The wait at backward's end])
        if not self.one_all_reduce:
            with _HookCollectivesRecorded(bucket.index()):
                return self.inner(state, bucket)
        buf = bucket.buffer()
        wire = self.wire_dtype or buf.dtype
        group = state if isinstance(state, dist.ProcessGroup) else None
        fut, ended = _issue(p, "all_reduce", dtype_code(wire), buf.numel() * wire.itemsize, group, bucket.index(),
                            lambda: self.inner(state, bucket))

        def recorded(f: Any) -> Any:  # chained, so DDP's wait at the end of backward includes the record:
            ended()                   # a done-callback could run after stop() and lose the last bucket
            return f.value()
        return fut.then(Tracked(recorded))  # Note [Python callables released on torch's threads]


def comm_hook(hook: Union[str, Callable[..., Any]] = "allreduce", *, wire_dtype: Optional[torch.dtype] = None
              ) -> Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]:
    """A DDP communication hook that records each bucket's communication (issue, end, bytes on the wire,
    bucket index, wire type) and then does what `hook` does:

        ddp.register_comm_hook(None, memcomm.comm_hook())          # DDP's default all-reduce
        ddp.register_comm_hook(None, memcomm.comm_hook("fp16"))    # torch's fp16_compress_hook
        ddp.register_comm_hook(state, memcomm.comm_hook(my_hook, wire_dtype=torch.float16))

    `hook` is "allreduce", "fp16", "bf16" or any hook(state, bucket) -> Future. torch's hooks, and a
    hook given a `wire_dtype` (the element type it sends), are recorded as the bucket's all-reduce;
    any other hook's collectives are recorded as it calls them through torch.distributed, on their
    own groups (Note [What a script's own comm hook sends]). A hook comm_hook() made
    already is not wrapped again (each bucket would be recorded twice: python -m memcomm wraps the
    hooks a script registers, memcomm's own among them): it is returned, or with another wire_dtype
    its inner hook is wrapped."""
    if isinstance(hook, RecordedHook):
        return hook if wire_dtype is None else RecordedHook(*_inner_hook(hook.inner, wire_dtype))
    return RecordedHook(*_inner_hook(hook, wire_dtype))
