"""Which modules are the model: the roots a profile watches, and where it looks for a model it has
not seen (memcomm/_profiler/hooks.py decides when).

Note [Finding the model]: start() looks for the modules alive at that moment that are no other
module's child and have parameters (the garbage collector's objects; some 50 ms for 150,000 of
them), and watches those. A torch.compile'd model is found as its OptimizedModule, which is outside
anything Dynamo traces, and its original module is watched with it, for the script that also calls
that one; so is a DDP (or DataParallel) model's module, which Hugging Face's Trainer evaluates
directly (its calls inside the DDP model's forward are that forward's). Only when start() finds
none (the script builds its model inside the profile) do torch's global module hooks find the
model as it is called: until the first update they count the nesting depth per thread, and a call
at depth 0 into a module with parameters is a forward. The first update (an optimizer's step or a
GradScaler's; a loop that updates by hand keeps them, and pays for them at every module call, 1.5 x
on the tutorials' manual SGD, since nothing would find a model it builds later) takes them off and
watches the modules they saw called, and the roots alive then that it never called, with their
parts: an EMA model (torch's AveragedModel) that a diffusion loop first calls to sample after an
epoch (200 of a DDPM loop's 324 forwards were lost). They are found by a scan of the heap, once per
run (some 80 ms for 160,000 objects, between steps 1 and 2), not in the frames that stepped as the
look below searches: on Python < 3.13 reading a function's f_locals stores a copy of them on its
frame, which kept the first iteration's tensors (its logits, its batch) alive until the training
function returned. Of a container
without a forward of its own (a ModuleDict of a GAN's nets, timm's ModelEmaV2) only its parts are
watched: it is never called, and watched, its parameters counted as watched for every fold a k-fold
loop added to it later. The parameters of such models, watched on a guess, count as watched as they
were then: a model that holds a ModuleList of folds grew with each fold, whose own optimizer then
never looked for it (11 of 31 forwards recorded). Either
way the first optimizer step that found no forward looks once more, and so does the first step of
each optimizer that updates parameters no watched module holds (a model compiled or built after
start(), a student built after start() beside the teacher it found, whose no_grad calls were the
only forwards, a model built after another was trained: k-fold, several Trainers in one script; or
the children of a root that was never called: a container such as a ModuleDict of a GAN's two
nets): its forward is lost, the later ones are not. That look searches the stepping frame and its
callers first (their locals and what those hold two steps down: lists, dicts, attributes, a
trainer's self.model) for modules that hold all of the optimizer's new parameters, and scans the
heap only where those do not: a loop that clones its model per task (Reptile, MAML) paid some 55 ms
a task. Of a holder it watches the module below any containers without a forward of their own (the
fold's model, not the ModuleList of folds, whose parameters then counted as watched for every fold
added later), never below a module with a forward (a compiled model's body runs compiled), and the
children of a root it finds, through such containers at any depth, since the root may never be
called (a LightningModule whose training_step calls self.net); a tensor that is no nn.Parameter (an
adversarial perturbation with an optimizer per batch) is never looked for: no module holds it as a
parameter. The global hooks are the fallback rather
than the rule because of torch.compile: Dynamo guards a compiled graph on the number of global hooks,
so removing them at the first step recompiled every compiled model (a second compile, seconds to
minutes), and torch.compile(model) warned about them at each call. So while the global hooks are
on, the class torch.compile(model) returns is watched too, and its first call, before it warns
or compiles, takes them off and watches what start() would have found by then (the roots alive,
so both of a GAN's), and the compiled model: one compile, no warning. Code Dynamo compiles
otherwise (a compiled loss function or training step that calls the model, model.compile(), which
compiles inside the module's own call) gets no call of memcomm's first, so the start of any
compile while the global hooks are on (torch._dynamo's compile callbacks, _OnCompileStart) takes
them off and watches the roots alive then, before Dynamo reads them: one compile there too (two
before). A model built after such a compile is found at the first optimizer step, as above; but
then a step without a forward does not watch the roots' children, whose classes compiled code may
call (their wrappers would recompile it): its forward ran compiled, not in a container never called.
"""
import gc
import inspect
import itertools
import sys
import types
from typing import Any, Iterator, List, Set

import torch

def wrapped_modules(module: torch.nn.Module) -> List[torch.nn.Module]:
    """The modules `module` wraps, outermost first, which the script also calls itself: a compiled
    module's original, a DDP or DataParallel model's module (Hugging Face's Trainer evaluates it so)."""
    parallel = tuple(getattr(sys.modules.get(name), kind, None) for name, kind in
                     (("torch.nn.parallel.distributed", "DistributedDataParallel"),
                      ("torch.nn.parallel.data_parallel", "DataParallel")))
    parallel = tuple(k for k in parallel if k is not None)
    found: List[torch.nn.Module] = []
    while True:
        inner = getattr(module, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module) and parallel and isinstance(module, parallel):
            inner = module.module
        if not isinstance(inner, torch.nn.Module) or any(inner is f for f in found):
            return found
        found.append(inner)
        module = inner


def modules_in_frames(frame: Any, params: List[torch.Tensor]) -> List[torch.nn.Module]:
    """The outermost modules that hold every one of `params`, found in the locals of `frame` and its
    callers and what those hold (_values_in_frames), or [] when those do not hold them all.
    A loop that builds a model per task (Reptile's clone, MAML's, k-fold's folds) found each with a scan
    of the heap, some 55 ms a task that made the run 2.8 x slower (See Note [Finding the model])."""
    wanted = {id(p) for p in params}
    holders: List[torch.nn.Module] = []
    for value in _values_in_frames(frame):
        if type(value) is not type and issubclass(type(value), torch.nn.Module) and not any(value is h for h in holders):
            if not wanted.isdisjoint(id(p) for p in parameters_of(value)):
                holders.append(_smallest_holder(value, wanted))
    inner = {id(c) for h in holders for c in _descendants(h)}
    outermost = [h for h in holders if id(h) not in inner]
    held = {id(p) for h in outermost for p in parameters_of(h)}
    return outermost if wanted <= held else []


def callable_parts(module: torch.nn.Module) -> List[torch.nn.Module]:
    """What of a model never called a loop may call: the model and its parts, or a container's parts alone."""
    parts = called_parts(module)
    return parts if is_container(module) else [module] + parts


def is_container(module: torch.nn.Module) -> bool:
    """A module without a forward of its own (a ModuleList, a ModuleDict): it holds parts, never called."""
    return type(module).forward is torch.nn.Module.forward


def called_parts(module: torch.nn.Module) -> List[torch.nn.Module]:
    """The children of `module` with parameters, and in place of a container without a forward of its
    own (a ModuleList, a ModuleDict), the parts it holds, at any depth: what a loop may call."""
    parts: List[torch.nn.Module] = []
    for child in _children(module):
        if not has_parameters(child):
            continue
        parts.append(child)
        if is_container(child):
            parts += called_parts(child)
    return parts


def _smallest_holder(module: torch.nn.Module, wanted: Set[int]) -> torch.nn.Module:
    """The model under the containers the loop keeps it in (a k-fold's ModuleList, a ModuleDict of
    them: modules without a forward of their own) that holds all of `wanted` of their parameters.
    Watched, a container's parameters counted as watched for every model added to it later, none of
    whose calls is the container's; a module with a forward is not gone below (a compiled model's
    body runs compiled, where no call is seen)."""
    wanted = wanted & {id(p) for p in parameters_of(module)}
    while is_container(module):
        inner = [c for c in _children(module) if wanted <= {id(p) for p in parameters_of(c)}]
        if len(inner) != 1:
            break
        module = inner[0]
    return module


def _children(module: torch.nn.Module) -> List[torch.nn.Module]:
    """The modules `module` holds, read from its _modules: a RemoteModule refuses children() (_REFUSALS).
    A module whose __init__ has not reached Module.__init__ yet (another thread's, seen by a heap scan)
    has no _modules and holds nothing."""
    held = getattr(module, "_modules", None)
    return [c for c in dict.values(held) if c is not None] if isinstance(held, dict) else []


def _descendants(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The modules below `module` at any depth (modules() but itself, and asking none to list them)."""
    todo = _children(module)
    while todo:
        m = todo.pop()
        yield m
        todo += _children(m)


# Note [Locals read without keeping them]: before Python 3.13 (PEP 667), reading a function frame's
# f_locals copies its variables into a dict the frame keeps until it returns (the next read refreshes
# it): a look for the model at an update kept that moment's tensors (an iteration's output, its batch)
# alive for the rest of the training function. So the copy is emptied once read. The function's own
# variables are not in it, and a tracer (a debugger) refreshes it before writing it back. A module's
# frame has its namespace as f_locals, no copy, and is left as it is.
_LOCALS_COPIED = sys.version_info < (3, 13)


def _frame_locals(frame: Any) -> List[Any]:
    """The values of `frame`'s local variables (Note [Locals read without keeping them])."""
    names = frame.f_locals
    values = list(names.values())
    if _LOCALS_COPIED and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        names.clear()
    return values


def _values_in_frames(frame: Any, depth: int = 64, reach: int = 2, most: int = 20_000) -> Iterator[Any]:
    """The local variables of `frame` and of up to `depth` callers, and what they hold up to `reach`
    steps down (an object's attributes, a list's, tuple's or dict's first items: models kept per task
    in a list, self.trainer.model), `most` values in all: a model found there spares a scan of the heap."""
    seen: Set[int] = set()
    level: List[Any] = []
    while frame is not None and depth > 0:
        level += _frame_locals(frame)
        frame, depth = frame.f_back, depth - 1
    for _ in range(reach + 1):
        below: List[Any] = []
        for value in level:
            if id(value) in seen or len(seen) >= most:
                continue
            seen.add(id(value))
            yield value
            below += _held_by(value)
        level = below


def _held_by(value: Any, items: int = 64) -> List[Any]:
    """What `value` holds: a list's, tuple's or dict's first `items` items, or an object's attributes
    (not a module's or a class's). type(), not isinstance(): a proxy's __class__ or __getattr__ may
    raise anything."""
    kind = type(value)
    if kind in (list, tuple):
        return list(value[:items])
    if kind is dict:
        return list(itertools.islice(value.values(), items))
    if issubclass(kind, (type, types.ModuleType, torch.nn.Module, torch.Tensor)):
        return []
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except Exception:  # noqa: BLE001 (no __dict__: slots, an extension type)
        return []
    return list(itertools.islice(attributes.values(), items)) if type(attributes) is dict else []


def _module_classes() -> Set[type]:
    """torch.nn.Module and every subclass defined so far (classes made at run time included)."""
    found, todo = {torch.nn.Module}, [torch.nn.Module]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def module_roots() -> List[torch.nn.Module]:
    """The modules alive now that are no other module's child and have parameters (Note [Finding
    the model])."""
    objects = gc.get_objects()
    # By type(), not o.__class__ (a proxy's lie), and in C: a set lookup per object, no Python frame
    # (a heap of 3M objects, a tokenised corpus held as lists, took 0.2 s with issubclass() per object).
    # By the class's id: a class whose metaclass defines __eq__ without __hash__ cannot be hashed.
    class_ids = {id(c) for c in _module_classes()}
    modules = list(itertools.compress(objects, map(class_ids.__contains__, map(id, map(type, objects)))))
    del objects
    children = {id(c) for m in modules for c in _children(m)}
    return [m for m in modules if id(m) not in children and has_parameters(m)]


# A module may refuse to list its parameters: torch.distributed.nn's RemoteModule (a module on another
# RPC worker, held inside a local model as pytorch/examples' ddp_rpc does) raises ValueError for
# parameters(), named_modules() and children(), and so does parameters() of any module holding one.
# Such a module holds no parameter here; the rest of the tree is asked module by module.
_REFUSALS = (ValueError, NotImplementedError, RuntimeError)


def has_parameters(module: torch.nn.Module) -> bool:
    try:
        return next(module.parameters(), None) is not None
    except _REFUSALS:
        return next(_parameters_module_by_module(module), None) is not None


def parameters_of(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    try:
        return list(module.parameters())
    except _REFUSALS:
        return list(_parameters_module_by_module(module))


def _parameters_module_by_module(module: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        try:
            yield from m.parameters(recurse=False)
        except _REFUSALS:
            continue
        todo += _children(m)
