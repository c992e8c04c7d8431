"""The copy of the model's and optimizer's state a probe restores from.

Note [State copies outside the cap]: the copy a probe restores from lives in numpy memory, which
no torch allocator serves, as memcomm-tune keeps its copy in host bytes: under the cap it would
take room from the probe it protects. Restoring writes into the existing tensors, so recovering from
an out-of-memory allocates nothing; optimizer state that a probe created is dropped.
The bytes are those of the memory a tensor covers, in storage order, from its first element's to its
last's: a channels_last weight or a transposed parameter is written back where it lives (reshape(-1)
of such a tensor is a copy, and writing into the copy restored nothing), and an expanded buffer
(stride 0: a table broadcast over a batch dimension) is its few real bytes, where a copy_ of its
values is refused (several elements share one address). A slice's neighbours in its storage come
back with it, as they were when the copy was taken. Every tensor the optimizer updates is saved, not
only the model's: a loss with parameters of its own (a margin head, a learned temperature) trains
with it. Tensors are paired by identity, and each module's parameter and buffer slots are put back
as they were: a buffer registered as None and filled at the first forward, or one the forward
replaces, would otherwise shift every later tensor's bytes onto its neighbour. A tensor the forward
resized in place (a quantization observer's empty min/max, filled at the first forward) gets its
old shape back with its bytes, as a new tensor behind the same object (.data).

Note [What the probes leave as it was]: tune() promises the script's model and optimizer as they
were. Beyond the tensors (their requires_grad flags too: a loss_fn may unfreeze a layer) and the
optimizers' hyperparameters (State: a key a first step adds to a group, as timm's Lamb keeps its step
count there, is removed, and so is a group a loss_fn added), the modules' attributes of data (State:
numbers, strings, None, tuples of them, tensors, numpy arrays, lists, dicts and sets, such as the
length of a cache held in a buffer or a metric's running sums; a submodule or a hook a probe added
goes), all of it for the modules loss_fn names beside the model too (in_reach: a GAN's
discriminator, whose BatchNorm statistics the generator's probes moved), the optimizers' attributes
of data (State: a step counter of their own, a random generator a module or an optimizer holds) and
the global random generators (RandomState), a probe changes what ScriptState puts back: module training flags
(evaluate() may call model.eval()), gradients (the ones the script holds are taken off for the probes
and the same tensors put back: a script may keep them as views of one flat buffer; so are those of
leaves outside the model and the optimizer that the probes' backward reaches, found in its graph at
the first one: a loss's temperature that a second optimizer trains), and whatever the optimizer's own
step hooks update (they do not run during the probes, nor does an optimizer's `step_hook`, through
which Opacus charges its privacy accountant), for the optimizer and every optimizer it wraps
(optimizers_within: a Lookahead's real state is its inner optimizer's). The allocator's peak
counters are reset when tune() returns, so a peak read after it is the run's, not a probe's.
"""
import copy
import functools
import inspect
import random
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np
import torch


def _covered(t: torch.Tensor) -> torch.Tensor:
    """A 1-d byte view of the memory `t` covers, from its first element to its last (Note [State copies
    outside the cap])."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0
    return t.detach().as_strided((extent,), (1,)).view(torch.uint8)


def _host_bytes(t: torch.Tensor) -> np.ndarray:
    """A copy of the bytes `t` covers in numpy memory. Copied into the array, not through t.numpy(): that
    marks t's storage as one that cannot be resized, for good, and a quantization observer's buffer,
    filled by resize_ at its first forward, then raised at the probe's first step."""
    covered = _covered(t)
    out = np.empty(covered.numel(), dtype=np.uint8)
    torch.from_numpy(out).copy_(covered)
    return out


def _write_back(t: torch.Tensor, saved: np.ndarray) -> None:
    with torch.no_grad():
        _covered(t).copy_(torch.from_numpy(saved))


@dataclass
class _SavedTensor:
    data: np.ndarray
    shape: torch.Size
    stride: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> "_SavedTensor":
        return cls(_host_bytes(t), t.shape, t.stride(), t.dtype, t.device)

    def fits(self, t: Any) -> bool:
        return (isinstance(t, torch.Tensor) and t.shape == self.shape and t.stride() == self.stride
                and t.dtype == self.dtype and t.device == self.device)

    def restore_into(self, current: Any) -> torch.Tensor:
        """Into `current` when it has the same layout (nothing allocated), else a new tensor."""
        t = current if self.fits(current) else torch.empty_strided(self.shape, self.stride, dtype=self.dtype,
                                                                   device=self.device)
        _write_back(t, self.data)
        return t


def stray_leaves(loss: torch.Tensor, known: List[torch.Tensor]) -> List[torch.Tensor]:
    """The leaf tensors `loss`'s backward accumulates gradients into (its graph's AccumulateGrad nodes),
    those not in `known`."""
    ids = {id(t) for t in known}
    found: List[torch.Tensor] = []
    seen = set()
    todo = [loss.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        leaf = getattr(fn, "variable", None)
        if isinstance(leaf, torch.Tensor) and id(leaf) not in ids:
            ids.add(id(leaf))
            found.append(leaf)
        todo.extend(f for f, _ in fn.next_functions)
    return found


def trained_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    """The model's parameters and buffers, then the other parameters the optimizer updates."""
    tensors = list(model.parameters()) + list(model.buffers())
    seen = {id(t) for t in tensors}
    for g in optimizer.param_groups:
        for p in g["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                tensors.append(p)
    return tensors


@dataclass
class Reach:
    """The model and the other modules the loss function names (in_reach)."""
    model: torch.nn.Module
    extra: List[torch.nn.Module]

    def modules(self) -> List[torch.nn.Module]:
        return [*self.model.modules(), *self.extra]


def in_reach(model: torch.nn.Module, loss_fn: Any) -> Reach:
    """The model, with the other modules loss_fn names beside it, whose buffers, attributes and
    training flags the probes leave as they were (Note [What the probes leave as it was]): a GAN's
    discriminator that the generator's loss runs through, or a momentum teacher in training mode, whose
    BatchNorm statistics the probes' forwards moved. Named means: in its closure, among the globals its
    code reads, in its defaults, the object of a bound method and that object's attributes, a
    functools.partial's arguments, or a callable object's attributes. A module that holds the model
    (DistributedDataParallel, a compiled wrapper, a container of both GAN halves) is the script's
    wrapper, not state of its own: only its other submodules count, and so do a parallel or compiled
    wrapper's of another module (DistributedDataParallel keeps its communication's state in its
    attributes, and sets them up at its first forward). Their parameters are not copied:
    no optimizer of the probes steps them (the optimizer's are State's already), and their gradients
    are the stray leaves' (stray_leaves)."""
    own = {id(m) for m in model.modules()}
    extra: List[torch.nn.Module] = []
    for value in _named_by(loss_fn):
        if not isinstance(value, torch.nn.Module):
            continue
        tree = list(value.named_modules())
        holders = {prefix for name, m in tree if m is model for prefix in _prefixes(name)}
        for name, m in tree:
            if id(m) not in own and name not in holders and not _wraps(m):
                own.add(id(m))
                extra.append(m)
    return Reach(model, extra)


# Modules whose classes are torch's wrappers of a module (DistributedDataParallel, DataParallel, FSDP,
# torch.compile's OptimizedModule) come from these packages.
_WRAPPER_PACKAGES = ("torch.nn.parallel", "torch.distributed", "torch._dynamo")


def _wraps(m: torch.nn.Module) -> bool:
    return type(m).__module__.startswith(_WRAPPER_PACKAGES)


def _prefixes(name: str) -> List[str]:
    """The names of the modules above `name` in its tree: "", "a" and "a.b" for "a.b.c"."""
    parts = name.split(".") if name else []
    return [".".join(parts[:k]) for k in range(len(parts))]


def _named_by(fn: Any) -> List[Any]:
    """What `fn` names (in_reach), and the attributes of the objects among them that are no modules
    (a trainer's `self` in a lambda's closure, whose attribute holds the discriminator)."""
    named = _with_items(_named_directly(fn))
    return named + _with_items([v for o in named if not isinstance(o, (torch.nn.Module, type)) and not inspect.ismodule(o)
                                for v in _attributes_of(o)])


def _with_items(values: List[Any]) -> List[Any]:
    """`values`, and the items of the lists, tuples and dicts among them (peers kept in a list, a teacher
    in a dict)."""
    items = [x for v in values if isinstance(v, (list, tuple, dict)) for x in (v.values() if isinstance(v, dict) else v)]
    return values + items


def _attributes_of(o: Any) -> List[Any]:
    try:
        return list(vars(o).values())
    except TypeError:  # no __dict__ (a number, a tuple, a slotted object)
        return []


def _named_directly(fn: Any) -> List[Any]:
    if isinstance(fn, functools.partial):
        return [*fn.args, *fn.keywords.values(), *_named_directly(fn.func)]
    if isinstance(fn, torch.nn.Module):  # a loss that is a module: itself and its submodules
        return [fn]
    if inspect.ismethod(fn):
        return [fn.__self__, *_named_directly(fn.__func__)]
    if not inspect.isfunction(fn):
        return [fn] if callable(fn) else []  # a loss object: its attributes
    values: List[Any] = list(fn.__defaults__ or ())
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # a variable the enclosing function has not assigned yet
            pass
    values += [fn.__globals__[n] for n in fn.__code__.co_names if n in fn.__globals__]
    return values


def optimizers_within(optimizer: Any) -> List[torch.optim.Optimizer]:
    """`optimizer` and every optimizer it wraps, however deep (timm's Lookahead keeps its real state in
    `_base_optimizer`, SAM in `base_optimizer`, ZeroRedundancyOptimizer in `optim`): each keeps state
    and hyperparameters of its own that a probe's step changes."""
    found: List[torch.optim.Optimizer] = []
    todo = [optimizer]
    while todo:
        o = todo.pop()
        if any(o is f for f in found):
            continue
        found.append(o)
        todo.extend(v for v in vars(o).values() if isinstance(v, torch.optim.Optimizer))
    return found


class _OptimizerState:
    """One optimizer's per-parameter state and hyperparameters."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.state = {p: {k: _SavedTensor.of(v) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                          for k, v in s.items()} for p, s in optimizer.state.items()}
        self.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        self.params = [list(g["params"]) for g in optimizer.param_groups]  # a group a probe's loss_fn added goes

    def restore(self) -> None:
        state = self.optimizer.state
        for p in [p for p in state if p not in self.state]:
            del state[p]
        for p, saved in self.state.items():
            current = state[p]
            for k in [k for k in current if k not in saved]:
                del current[k]
            for k, v in saved.items():
                current[k] = v.restore_into(current.get(k)) if isinstance(v, _SavedTensor) else copy.deepcopy(v)
        del self.optimizer.param_groups[len(self.groups):]
        for g, params, saved in zip(self.optimizer.param_groups, self.params, self.groups):
            g["params"] = list(params)
            for k in [k for k in g if k not in saved and k != "params"]:
                del g[k]
            for k, v in saved.items():
                g[k] = _restored_value(g.get(k), v)


class _Slots:
    """Which tensor each module holds in each parameter and buffer slot, which submodule in each
    module slot, and which hooks it has (Note [State copies outside the cap]): put back by identity, a
    slot a probe filled or replaced holds what it held before, and a submodule or a hook a probe's
    forward added goes (BYOL registers its projection's hook at the first forward, behind a flag the
    attributes put back: each probe added one more)."""

    def __init__(self, modules: List[torch.nn.Module]):
        self.modules = [(m, [(held, dict(held)) for held in _slot_dicts(m)], set(m._non_persistent_buffers_set))
                        for m in modules]

    def restore(self) -> None:
        for m, slots, non_persistent in self.modules:
            for held, saved in slots:
                _refill(held, saved)
            _refill(m._non_persistent_buffers_set, non_persistent)


def _refill(held: Any, saved: Any) -> None:
    """A dict or a set holds `saved`'s items again, the same container (others hold it)."""
    held.clear()
    held.update(saved)


def _slot_dicts(m: torch.nn.Module) -> List[dict]:
    """The module's parameter, buffer and submodule slots, and its hook registries (every dict of
    nn.Module's own whose name says hooks: forward, backward, state_dict's, with their flag dicts)."""
    hooks = [v for k, v in vars(m).items() if "hooks" in k and k.startswith("_") and isinstance(v, dict)]
    return [m._parameters, m._buffers, m._modules, *hooks]


def _restored_value(current: Any, saved: Any) -> Any:
    """A hyperparameter as it was: a tensor one (a scheduler's tensor lr, which others may hold) keeps
    its identity and gets its values back; anything else is a fresh copy."""
    if isinstance(current, torch.Tensor) and isinstance(saved, torch.Tensor) and current.shape == saved.shape \
            and current.dtype == saved.dtype and current.device == saved.device:
        with torch.no_grad():
            return current.copy_(saved)
    return copy.deepcopy(saved)


# What nn.Module.__init__ sets: the slots (_Slots), the hooks and the training flag (ScriptState).
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


@functools.lru_cache(maxsize=None)
def _optimizer_internals() -> frozenset:
    """What Optimizer.__init__ sets: its state, groups and defaults (_OptimizerState) and its hooks
    (ScriptState). Found on a first use, not at import: a script may install an allocator after it."""
    return frozenset(vars(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))])))


class _Attributes:
    """Each module's and optimizer's other attributes of data, put back as they were, and data
    attributes a probe added removed: plain values (numbers, strings, None, tuples of them), tensors and
    numpy arrays (the same object, its bytes back), lists, dicts and sets (the same container, its
    items back, and the bytes of the tensors among a list's or a dict's items), and random generators
    (the same generator, its state back).
    A cache kept beside its buffer, as rotary-embedding-torch keeps the cached length in an int and
    transformers' dynamic RoPE in an int or a tensor, said "cached" over the buffer's restored bytes;
    torchmetrics' states (tensors and lists that add_state makes attributes) kept the probes' samples;
    an optimizer's own step counter (one that preconditions every k-th step) counted the probes'.
    Other objects (a config, a function) are left as they are."""

    def __init__(self, owners: List[Tuple[Any, frozenset]]):
        self.owners = [(o, set(vars(o)), {k: _saved_attribute(v) for k, v in vars(o).items()
                                          if k not in internals and _is_data(v)}) for o, internals in owners]

    @classmethod
    def of(cls, modules: List[torch.nn.Module], optimizer: torch.optim.Optimizer) -> "_Attributes":
        return cls([(m, _MODULE_INTERNALS) for m in modules] +
                   [(o, _optimizer_internals()) for o in optimizers_within(optimizer)])

    def restore(self) -> None:
        for o, names, saved in self.owners:
            held = vars(o)
            for k in [k for k, v in held.items() if k not in names and _is_data(v)]:  # added by a probe
                del held[k]
            for k, (value, copy_of) in saved.items():
                held[k] = _restored_attribute(value, copy_of)


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, complex, str, bytes)) or \
        (isinstance(v, tuple) and all(_plain(x) for x in v))


def _is_data(v: Any) -> bool:
    return _plain(v) or isinstance(v, (torch.Tensor, np.ndarray, list, dict, set)) or _is_generator(v)


_GENERATORS = (random.Random, np.random.Generator, np.random.RandomState, torch.Generator)


def _is_generator(v: Any) -> bool:
    """A private random generator (timm's Kron draws when to precondition from its own random.Random);
    random.SystemRandom draws from the OS: no state to take or put back."""
    return isinstance(v, _GENERATORS) and not isinstance(v, random.SystemRandom)


def _generator_state(g: Any) -> Any:
    if isinstance(g, torch.Generator):
        return g.get_state().numpy().copy()
    if isinstance(g, np.random.Generator):
        return copy.deepcopy(g.bit_generator.state)
    return g.getstate() if isinstance(g, random.Random) else g.get_state()


def _set_generator_state(g: Any, saved: Any) -> None:
    if isinstance(g, torch.Generator):
        g.set_state(torch.from_numpy(saved))
    elif isinstance(g, np.random.Generator):
        g.bit_generator.state = saved
    elif isinstance(g, random.Random):
        g.setstate(saved)
    else:
        g.set_state(saved)


def _saved_attribute(v: Any) -> Tuple[Any, Any]:
    """(the value itself, what restores it): a tensor's bytes, a container's items, nothing for a plain
    value or a Parameter (a reference to one the slots and State put back)."""
    if isinstance(v, torch.Tensor):
        return v, _SavedTensor.of(v) if _has_own_bytes(v) else None
    if isinstance(v, (list, dict)):  # the items, and the bytes of the tensors among them (a memory bank)
        items = dict(v) if isinstance(v, dict) else list(v)
        tensors = [(t, _SavedTensor.of(t)) for t in (items.values() if isinstance(v, dict) else items)
                   if isinstance(t, torch.Tensor) and _has_own_bytes(t)]
        return v, (items, tensors)
    if isinstance(v, set):
        return v, copy.copy(v)
    if isinstance(v, np.ndarray):  # statistics kept in numpy
        return v, v.copy()
    if _is_generator(v):
        return v, _generator_state(v)
    return v, None


def _has_own_bytes(t: torch.Tensor) -> bool:
    """A tensor whose bytes an attribute's copy keeps: not a Parameter (a reference to one the slots and
    State put back), nor sparse or meta."""
    return not isinstance(t, torch.nn.Parameter) and t.layout == torch.strided and not t.is_meta


def _restored_attribute(value: Any, copy_of: Any) -> Any:
    if isinstance(copy_of, _SavedTensor):
        _restore_tensor(value, copy_of)
    elif isinstance(value, (list, dict)):
        items, tensors = copy_of
        if isinstance(value, list):
            value[:] = items
        else:
            _refill(value, items)
        for t, saved in tensors:
            _restore_tensor(t, saved)
    elif isinstance(value, set):
        _refill(value, copy_of)
    elif isinstance(value, np.ndarray):
        if value.shape != copy_of.shape or value.dtype != copy_of.dtype or not value.flags.writeable:
            return copy_of  # resized or replaced in place: the copy, as it was
        np.copyto(value, copy_of)
    elif _is_generator(value):
        _set_generator_state(value, copy_of)
    return value


def _restore_tensor(t: torch.Tensor, saved: _SavedTensor) -> None:
    """`t` as it was: its bytes written back, or, resized in place since (a quantization observer's empty
    buffer, filled at the first forward), its old shape and bytes as a new tensor behind the same object."""
    if saved.fits(t):
        _write_back(t, saved.data)
    else:
        with torch.no_grad():
            t.data = saved.restore_into(None)


class State:
    """The model's parameters and buffers, the other parameters the optimizer updates, the buffers of
    the other modules the loss function names, the state and hyperparameters of the optimizer and of
    every optimizer it wraps, and the modules' and optimizers' attributes of data."""

    def __init__(self, reach: Reach, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = reach.model, optimizer
        self.slots = _Slots(reach.modules())
        self.attributes = _Attributes.of(reach.modules(), optimizer)
        tensors = trained_tensors(reach.model, optimizer)
        seen = {id(t) for t in tensors}
        for b in (b for m in reach.extra for b in m.buffers(recurse=False)):
            if id(b) not in seen:
                seen.add(id(b))
                tensors.append(b)
        self.tensors = [(t, _SavedTensor.of(t)) for t in tensors]
        self.requires_grad = [(t, t.requires_grad) for t, _ in self.tensors if t.is_leaf]  # a probe may unfreeze
        self.optimizers = [_OptimizerState(o) for o in optimizers_within(optimizer)]

    def restore(self) -> None:
        self.slots.restore()
        self.attributes.restore()
        for t, saved in self.tensors:
            _restore_tensor(t, saved)
        for t, flag in self.requires_grad:
            if t.requires_grad != flag:
                t.requires_grad_(flag)
        self.model.zero_grad(set_to_none=True)
        self.optimizer.zero_grad(set_to_none=True)
        for o in self.optimizers:
            o.restore()


class ScriptState:
    """What tune() touches beyond the weights and the optimizer's state, put back when it returns
    (Note [What the probes leave as it was]): each module's training flag (an evaluate() that calls
    model.eval()), the model's and those of the modules loss_fn names (in_reach), the gradients the
    script held (taken off while the probes run), and the optimizer's
    own step hooks, which are taken out while the probes step (an EMA or a counter that
    register_step_post_hook updates is the script's training state, not the probes'; so is a privacy
    accountant that an optimizer's own `step_hook` attribute charges, as Opacus's)."""

    def __init__(self, reach: Reach, optimizer: torch.optim.Optimizer):
        self.reach = reach  # also what State saves before each probe
        self.modes = [(m, m.training) for m in reach.modules()]
        self.grads = _TakenGradients(trained_tensors(reach.model, optimizer))  # a frozen one's held gradient too
        self.hooks = [(o, name, getattr(o, name).copy()) for o in optimizers_within(optimizer) for name in _STEP_HOOKS
                      if hasattr(o, name)]
        for o, name, _ in self.hooks:
            getattr(o, name).clear()
        self.attached = [(o, o.step_hook) for o in optimizers_within(optimizer) if callable(getattr(o, "step_hook", None))]
        for o, _ in self.attached:
            o.step_hook = None
        self.strays: List[_TakenGradients] = []
        self.global_hooks = [(hooks, hooks.copy()) for hooks in _global_step_hooks()]
        for hooks, _ in self.global_hooks:
            hooks.clear()
        self.restored = False

    def take_stray_gradients(self, leaves: List[torch.Tensor]) -> None:
        """Leaves the probes' backward reaches that are neither the model's nor the optimizer's (a loss's
        temperature that a second optimizer trains): their gradients are taken off for the probes and
        put back at the end, as the model's are; the probes' own are cleared after each (Runner)."""
        self.strays.append(_TakenGradients(leaves))

    def restore(self) -> None:
        """Once it has succeeded, later calls do nothing."""
        if self.restored:
            return
        for taken in self.strays:
            taken.restore()
        for o, name, hooks in self.hooks:
            getattr(o, name).update(hooks)
        for o, hook in self.attached:
            o.step_hook = hook
        for hooks, saved in self.global_hooks:
            hooks.update(saved)
        for m, training in self.modes:
            m.training = training
        self.grads.restore()
        self.restored = True


class _TakenGradients:
    """The gradients the script holds, taken off their parameters while the probes run, so that none
    accumulates into them, and put back as the same tensors (Note [What the probes leave as it was]).
    A strided one's memory goes to host bytes meanwhile and its storage is emptied, so that it takes
    no room under the cap (Note [State copies outside the cap]); restore() refills the same storage,
    which the gradients that are views of one flat buffer share. A storage that cannot be resized
    (one torch did not allocate) stays as it is."""

    def __init__(self, params: List[torch.Tensor]):
        self.grads = [(p, p.grad) for p in params if p.grad is not None]
        self.storages: List[Tuple[torch.UntypedStorage, np.ndarray]] = []
        seen = set()
        for p, grad in self.grads:
            p.grad = None
            if grad.layout != torch.strided:  # a sparse one has no storage to empty: it is held as it is
                continue
            storage = grad.untyped_storage()
            if storage.nbytes() == 0 or storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            saved = _host_bytes(_whole(storage, grad.device))
            try:
                storage.resize_(0)
            except RuntimeError:  # not resizable: it keeps its bytes, and nothing writes into it
                continue
            self.storages.append((storage, saved))

    def restore(self) -> None:
        for storage, saved in self.storages:
            storage.resize_(saved.size)
            _write_back(_whole(storage, storage.device), saved)
        for p, grad in self.grads:
            p.grad = grad


def _whole(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


# The optimizer's own step hooks (torch.optim.Optimizer.register_step_pre_hook / _post_hook). An
# optimizer may also hold one callable as `step_hook`: Opacus's DPOptimizer charges each step to its
# privacy accountant through it (a probe's steps raised the run's epsilon from 3.6 to 172).
_STEP_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")


def _global_step_hooks() -> List[Any]:
    """The hooks every optimizer's step runs (torch.optim.register_optimizer_step_pre_hook / _post_hook:
    an EMA updated there took in the probes' weights); memcomm's profile, paused during tune(), keeps
    its own there too, and gets them back with the script's."""
    import torch.optim.optimizer as optimizer_module
    return [getattr(optimizer_module, name) for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
            if hasattr(optimizer_module, name)]


class RandomState:
    """The global random generators a probe's dropout and make_batch draw from (torch's, CUDA's,
    Python's and numpy's; a module's or an optimizer's own are attributes of data, State's), put back
    when tune() returns: a seeded script trains the same with and without tune()."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state().numpy().copy()  # outside the allocator, as State's copies
        self.cuda: Optional[List[torch.Tensor]] = (torch.cuda.get_rng_state_all()
                                                   if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        self.python = random.getstate()
        self.numpy = np.random.get_state()

    def restore(self) -> None:
        torch.set_rng_state(torch.from_numpy(self.torch))
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)
