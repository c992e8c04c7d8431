"""The hooks a profiler installs to see the training loop's phases, and each thread's open ranges.

Note [Phases from hooks]: what each hook records, on the thread that runs the training loop.
- A Step range opens at the step's first event (its data-loader wait, forward, backward or
  optimizer step) and ends when the last parameter update of the iteration returns, or at
  memcomm.step() for a loop that updates its parameters by hand (pytorch/examples'
  word_language_model); a session with backward passes and neither warns at stop(), since its one
  step spans the whole run. Ids count from 1 in each session, as the trainer's.
  Note [The step's last update]: an iteration may update more than once (a recommender's SparseAdam
  and Adam, one after the other) or not at all (torch.amp.GradScaler skips
  optimizer.step() when the gradients overflowed, as it does in fp16 training's first iterations).
  So an update (an optimizer's step() through torch's global optimizer step hooks, or a
  GradScaler's step(), which is wrapped for the profile's length because a skipped update calls no
  optimizer) leaves the step ending rather than ended: the next training event (a forward with
  gradients on and the model training, a backward, a memcomm.loader wait with gradients on) closes it,
  dated when the update returned; an update with no training forward since the last one joins the
  same step (an LBFGS step(closure) never does: it runs its iteration's forward itself; nor does the
  same optimizer's next update: evolution strategies' and zeroth-order loops run their forwards
  without gradients, and ten updates were one step). The next step
  opens at a backward, an update or such a wait, beginning at the first training forward since the
  last update: a forward only marks where it begins, so a loop that logs the updated model's loss
  after each update, gradients on, no longer ends with a step of that forward alone, nor begins the
  next one with it once the logged output is dropped (Note [A forward that opens no step]). A step is the
  outermost phase: one that an update inside the model's forward opens (Lightning's manual
  optimisation) goes below that forward, and an update that returns inside a forward or backward (an
  optimizer stepped from a gradient hook) ends its step when that phase ends, so a Lightning GAN's
  two updates inside one forward make one step (under DDP, whose forward runs training_step; on one
  device Lightning calls training_step itself, and it is a GAN loop: Note [A second model's update]).
  Closing at each optimizer made two steps of each iteration of the first loop, and a skipped update
  merged iterations. The cost is that a step's end is written one iteration late (the live view sees
  it then); stop() writes the last. An update is one step() call from the loop: a step() inside it (a subclass's
  super().step(), GradScaler's optimizer.step()) is part of it, and one that raised (a NaN guard the
  loop catches) ends when the next hook finds its call gone from the stack.
  Note [A second model's update]: a GAN's iteration (pytorch/examples' dcgan) updates the
  discriminator, then runs the generator's forward and backward and updates it; other loops update
  the generator first, CycleGAN three optimizers. The forward after the first update looks like
  the next iteration's first, so each iteration was two steps (half an iteration's figures). Only the
  next update tells them apart: an optimizer that already updated in the step means a new iteration,
  another one the same iteration. So when a step ends at its update and a training forward follows,
  the end is held: the step is written as going on, and the next update either leaves it going on
  (an optimizer new to the step) or splits it where it would have ended and the next step where that
  would have begun (the same optimizer again; memcomm.step() and stop() split too). A loop may also
  make its optimizers as it goes: a new one over the same model every iteration (some RL and
  evolution code) or per task (Reptile's clone and its inner Adam). So an optimizer splits the held
  step too when it began the step before (the iteration's first again: WGAN's critic after the
  generator's first update), when an optimizer of the step is gone (the script dropped it for a new
  one), and when it was first seen after the step began and updates the very parameters another of
  the step updated (a new optimizer over the same model; a shared trunk's task optimizers, an
  actor-critic's, each over part of it, stay one step) or, past the thread's first step, no watched
  module's parameter (a model new to the profile: Reptile's clone). An update that follows another's
  with no training event between splits only when it is the same one again or one of the step's is
  gone (evolution strategies with a new optimizer each iteration were one step for the run; two
  optimizers over one model stepped one after the other stay one step). A step's end is also held
  when its last optimizer is new in it (a GAN's optimizers made anew each epoch).
  Optimizers are told apart by a number of their own, not id(), which a new optimizer takes over
  from the one dropped (steps of 1 to 5 iterations at random, or one step for the run when kept).
  The end is held
  only where the step may go on: in a thread's first step, and where the step's last optimizer has
  been followed by another's update before; so a one-optimizer loop writes its ends as before past
  step 1, and a model trained after another (k-fold: each optimizer done before the next begins)
  starts steps of its own, as held ends joined a fold's last step to the next fold's first. A held
  end is written at the next update, an iteration later; readers sort by time, and the split step
  begins 1 ns before the batch waits already written (Note [Batches from any DataLoader]). A loop
  that updates one model several times per update of the other (WGAN's n_critic) records a step per
  update of the first, the other model's update joining the last of them (in its first iteration,
  a step of its own).
- Forward is the outermost call of a module that has parameters (so the loss function's module is
  not one). Which modules those are is found as Note [Finding the model] says; from then on they are
  watched on their own (the model; both of a GAN's), and the rest of the run pays nothing for the
  submodules' calls. profile(model=...) names the modules from the start.
  Note [Forwards through the class]: a module is watched by wrapping its class's __call__ for the
  profile's length (_CallWrap), not by hooks on the module. Hooks live in the module's own dicts, so
  torch.save(model) and copy.deepcopy(model) (a best-model copy, an EMA) would carry them, and with
  them this profiler, which cannot be pickled: both raised TypeError mid-run (pytorch/examples'
  word_language_model saves its model with torch.save after each epoch). A class is pickled by
  reference, so nothing of memcomm travels with the module. cloudpickle (joblib's default backend,
  Ray, Dask) copies a class defined in __main__ by value, its __call__ with it: the wrapper reaches
  the profiler only through a registry that pickles as an empty one (_Registry), so the copy pickles,
  loads where memcomm is importable, and its wrapper calls straight through (it raised TypeError for
  the profiler). The wrapper passes every other instance
  of the class (a Sequential inside the model, a deepcopy) straight through, to the __call__ the class
  inherits as it is at that call: torch.fx's symbolic_trace (and so FX quantization, and export's
  module stacks) patches nn.Module.__call__ while it traces to keep a leaf module one call_module
  node, and a wrapper that called the __call__ it had found at start() traced through an nn.Linear
  of any model while a model with nn.Linear's class was profiled. It is also cheaper than
  the hooks, which send every call of the module down torch's slow call path: 1.1-1.5 us per call
  against 4.0-7.8 us (bench/python/watch_overhead.py, bench/results/python-cpu.md).
  Note [Forwards called directly]: a script may call `model.forward(x)` (tutorials do, and
  RemoteModule), which no __call__ wrapper or module hook sees. Each watched class's own forward is
  wrapped as its __call__ is, so such a call is the forward and its calls inside it are part of it,
  as they are under __call__. Before the model is found, the global hooks see the first module with
  parameters that such a forward calls: it used to be taken as the forward, so a two-layer model
  recorded two forwards an iteration, and its layers, not the model, were watched from then on. The
  hook looks at the Python frame calling that module: a `forward` whose first argument (`self`, or
  whatever the script names it) is another module with parameters, or a method of that module called
  from its `forward` (torchvision's _forward_impl), is a forward called directly, so that module is
  the one found, and its forward range is
  open until the frame returns, which the first hook after it notices (it ends there, a loss
  module's call or the backward, late by the loss's computation, once).
- Backward is a call of torch.autograd.backward (what Tensor.backward calls) or torch.autograd.grad
  (a hand-written update, MAML, WGAN-GP's penalty, torch.func.grad): start() wraps the function both
  call into the engine with (torch.autograd's _engine_run_backward, where torch has it; else those
  two entry points), so a `from torch.autograd import grad` made before start() is seen too, and
  stop() puts it back. RPC's distributed autograd (torch.distributed.autograd.backward, which
  pytorch/examples' ddp_rpc trains with) has an engine of its own, and its entry point is wrapped too;
  its DistributedOptimizer is no torch.optim optimizer, so such a loop gets the advice to mark its
  steps with memcomm.step(). The wrapper is one Python call around the whole backward, on
  the thread that asked for it, and it ends after autograd's final callbacks (DDP's, which wait for
  the last bucket and write the gradients). A tensor hook on the forward's output and a final
  callback would also find it, but cost about 100 us a step between them on this project's 2-core
  machine, against some 20 us for the wrapper (bench/results/python-cpu.md). With gradient accumulation every backward is its own range;
  one inside another (a backward during a backward) is part of the outer one.
  Note [The wait at backward's end]: DDP's reducer waits for its buckets' all-reduces in a final
  callback of autograd's engine, inside the backward range, so on a CPU run (where the phases are
  the compute: Note [Breakdown definitions] in memcomm/trace/analysis.hpp) every Gloo DDP script
  read 100 % overlap and no exposed communication, its step being mostly that wait. The reducer
  queues its callback once the last bucket's hook has been called, and a graph task's callbacks run
  in the order queued, so the first bucket of a graph task that memcomm's hook (RecordedHook) sends
  queues one that notes when the graph is done and queues a second, which runs after the reducer's
  and notes when its wait is over; the backward records each such wait as a comm phase, which the
  analysis takes out of compute. Per graph task: a reentrant checkpoint's inner backward is a task
  of its own, whose end is no wait (its pair spans microseconds), and the outer task's wait is
  noted by the first bucket sent in it. The callbacks run on the thread that ends the graph (a GPU's
  autograd thread), so the waits go through a list the backward takes its own from, those that began
  after it did. Missed: static_graph's first iteration, whose buckets go out from DDP's own final
  callback, which waits itself (the second callback runs after the wait). Only runs whose buckets
  memcomm records pay for it (two callbacks a graph task).
- Nothing here may be traced by torch.compile (Note [Hooks under torch.compile]).
- Note [A forward that opens no step]: no forward opens a step. A step opens at a training event (a
  backward, an update, a memcomm.loader wait with gradients on) and begins where the forwards before
  it marked. A forward that can train (grad enabled, the module in training mode) marks where the
  next step begins while no step is open; one that cannot is remembered too, since a backward may
  follow it: a model kept in eval mode to freeze BatchNorm, or activation checkpointing's forward
  under no_grad, was training after all, so a backward's step starts at the first such forward since
  the last step (validation that calls model.eval() without no_grad() is no step), or at the first
  with gradients on since it where there is one: an evaluation under no_grad before a loop that left
  its model in eval mode (pytorch/tutorials' quickstart, model.eval() in test() and no model.train())
  was the next step's first half. The mark moves to
  a later training forward when the output of the forward that set it, every tensor of it, is gone by
  then: the script dropped it, so no loss and no backward uses it (a dry run that materialises nn.LazyLinear, Keras
  building its model, a loss logged after an update), or when it returned none (it raised: a batch-size
  finder's try that ran out of memory). A forward opened step 1 at once before: setup
  between such a forward and the first iteration (4.9 s in one script) was step 1's, and a run that
  never trains (inference with gradients on, the forwards an RPC worker serves for another) recorded
  one step that never ended.
- Note [Batches from any DataLoader]: the wait for each batch of any torch DataLoader is a
  data_wait span (its iterator's __next__ is wrapped), so an unchanged script's report and advice
  see a data-bound run (they read 0 before, and the loader rule could not fire); memcomm.loader's
  wait, for any iterable, is recorded alike. A wait opens no step: an evaluation loop iterates its
  DataLoader with gradients on and runs no_grad() inside, and its batches would each have made a
  step. Waits outside an open step mark where the next step begins instead: the step that a training
  event opens next starts at the first of them, so it holds the waits for all its batches (Trainer
  fetches a step's accumulation batches before their forwards); a forward without gradients first
  says they were an evaluation's, and they stay outside any step (a frozen teacher's on the step's
  own batch: Note [A frozen model's forward on the step's batch]). memcomm.loader's wait opened a
  step itself once, so a loop that broke after fetching a batch (the seed sample's --max-batches)
  ended on a step of that wait alone. A batch taken from an iterator the script has dropped by the
  time a step opens (`len(next(iter(loader))[0])`, the DDP tutorial's look at its batch size each
  epoch) begins no step: its wait is written outside any, where it made the epoch's first step's
  data wait twice the others'. A script that marks its iterations with memcomm.step() and no
  training event (forwards without gradients) still gets each as a step, from its first wait. Such
  waits are written after the step's begin (a reader meets the earlier of two events at one time
  first, and would nest the step in the wait).
- A range still open when the next phase begins (a backward or step() that raised) is closed
  first, so ranges always nest.
Allocations are labelled while a phase runs (Note [Memory categories] in trainer/src/profiling.cpp):
input in the loader wait, activation in forward and backward (autograd allocates parameters'
gradients in the same kernels as the activations' gradients, so the two cannot be told apart when
they are allocated), optimizer state in step(), communication buffer inside collectives; memcomm.category() labels the script's own code (its model building).

Note [Hooks under torch.compile]: when Dynamo compiles a region it traces the Python it calls,
and memcomm's wrappers and hooks are Python. Traced, a call into _memcomm is a graph break, and the
wrappers' own state (this thread's open ranges) would be read when the graph is built, not when it
runs: a compiled training step recorded one step out of six. Two rules:
- The forward's wrappers and hooks run at every module call, so they must cost the compiled graph
  nothing: they first ask torch.compiler.is_compiling(), which Dynamo treats as the constant True,
  and pass the call straight through. The graph holds nothing of memcomm, and no guard reads
  memcomm's state; a forward inside a compiled region is not recorded.
- The backward wrapper and the optimizer hooks run once per phase, so they are
  torch.compiler.disable'd as soon as the script loads Dynamo (Note [Dynamo left to the script] in
  when_loaded.py): Dynamo runs them eagerly, at a break it would have anyway (a backward) or at the edge
  of a compiled optimizer step. The backward wrapper's frame only, since what it calls is autograd's
  (compiled autograd compiles it); the optimizer hooks with all they call, which is memcomm's alone:
  frame-only, Dynamo compiled a list comprehension they ran while holding the hooks' lock, and a
  compile's start callback (_OnCompileStart) waited for that lock, so a compiled training step that
  stepped its optimizer hung. The lock is reentrant as well, for any other callback that comes back.
  A backward asked for while a fake tensor mode is active is the compiler's own (AOTAutograd tracing
  the backward of the forward it compiles, inside that forward), not the training's: it passes
  through unrecorded.
So a model compiled on its own (torch.compile(model), model.compile()) is called from eager code and
recorded as any other, with no recompile (model.compile(): Note [Module hooks as frames]). A training step compiled as one function (the model, its
loss and backward) records its backward and optimizer step and so its steps, not its forward; once
stop() takes the class wrapper away, Dynamo compiles that function once more (it guards on the
model class's __call__). A compiled optimizer step is compiled once more at start() and at stop(),
as Dynamo guards it on the number of torch's global optimizer hooks.
"""
import dataclasses
import functools
import inspect
import itertools
import sys
import threading
import types
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch
from torch._guards import detect_fake_mode

from memcomm import _memcomm
from memcomm._profiler import running
from memcomm._profiler.codes import (ACTIVATION, BACKWARD, COMM, DATA_WAIT, FORWARD, INPUT, KEEP, OPT_STATE, OPTIMIZER,
                                    STEP, exchange, now)
from memcomm._profiler.future_callbacks import wait_for_release, without_our_wrappings
from memcomm._profiler.models import (callable_parts, called_parts, has_parameters, module_roots, modules_in_frames,
                                     parameters_of, wrapped_modules)
from memcomm._profiler.when_loaded import WhenLoaded
from memcomm._sharding import sharded_by


class _ThreadState:
    """What one training thread has open."""
    __slots__ = ("generation", "thread", "stack", "step_open", "step_end_ns", "update_frame", "updater", "ends_with",
                 "depth", "fwd_module", "in_backward", "stepless_forward_ns", "stepless_with_grad", "stepless_waits", "in_loader",
                 "unstepped_wait_ns", "marked_forward_ns", "marked_output", "marking", "fwd_frame", "end_held",
                 "held_end_ns", "held_begin_ns", "step_updaters", "step_keys_before", "switchers", "steps_closed",
                 "first_updater", "previous_first", "frozen_wait_ns", "frozen_modules", "fed_from", "chain_begin_ns")

    def __init__(self, generation: int):
        self.generation = generation
        self.thread = _memcomm.thread_index()            # what this thread's range events carry
        self.stack: List[Tuple[int, int, int]] = []   # open (phase, id, label to restore)
        self.step_open = False
        self.step_end_ns = 0                           # when the step's last update returned; 0: none yet
        self.update_frame: Any = None                  # the open update's step() call (_end_failed_update)
        self.updater = 0                               # the key (_UpdaterKeys) of the last update's optimizer (or scaler)
        self.ends_with: Optional[int] = None           # the open phase an update returned inside: the step ends with it
        self.depth = 0                                 # module call nesting (global hooks)
        self.fwd_module: Any = None
        self.fwd_frame: Any = None                     # a forward called directly that the global hooks opened
        self.in_backward = False
        self.stepless_forward_ns = 0                   # Note [A forward that opens no step]; 0: none
        self.stepless_with_grad = False                # ... and that forward ran with gradients on
        # (begin, end, the iterator weakly or None): see Note [Batches from any DataLoader]
        self.stepless_waits: List[Tuple[int, int, Any]] = []
        self.in_loader = False                         # inside memcomm.loader's next(): it records the wait
        self.unstepped_wait_ns = 0                     # the first wait since a step opened, for memcomm.step()
        # Where the next step begins, if one opens (Note [A forward that opens no step]); 0: no mark.
        self.marked_forward_ns = 0
        self.marked_output: Any = None                 # the marking forward's output tensors, weakly; None: none seen
        self.marking = False                           # the open forward set the mark
        # Outside a step, the outermost forwards' outputs weakly, each with where the chain of forwards
        # that fed it began (Note [Forwards that feed forwards]); the open forward's chain.
        self.fed_from: Dict[int, Tuple[int, weakref.ref]] = {}  # id(tensor) -> (chain's begin, the tensor weakly)
        self.chain_begin_ns = 0
        # The open step's end (Note [A second model's update]), held until the next update says whether
        # the work since it is the same iteration's. end_held: a training forward came after the update
        # (step_end_ns is the end); held_end_ns/held_begin_ns: a step opened after it too, written as
        # the held one going on, split at those times if the next update's optimizer already updated.
        self.end_held = False
        self.held_end_ns = 0
        # The last batch wait outside a step, when only forwards without gradients followed it, and
        # those forwards' modules (Note [A frozen model's forward on the step's batch]); 0: none.
        self.frozen_wait_ns = 0
        self.frozen_modules: Set[int] = set()
        self.held_begin_ns = 0
        # The key of each optimizer (or scaler) that updated in the open step, and it weakly (None: it
        # cannot be referred to weakly); the keys given out before the step opened.
        self.step_updaters: Dict[int, Optional[weakref.ref]] = {}
        self.step_keys_before = 0
        self.switchers: Set[int] = set()               # keys of those that another one's update has followed
        self.first_updater = 0                         # the key of the open step's first update's optimizer
        self.previous_first = 0                        # ... and of the step's before it
        self.steps_closed = 0                          # steps this thread ended


def _queue_callback(callback: Callable[[], None]) -> None:
    """Runs `callback` at the end of the running graph task, after the callbacks queued before it."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class _UpdaterKeys:
    """A number for each optimizer (or scaler) that updates, for the profile's length, in the order
    first seen. Not id(): a loop that makes a new optimizer each iteration got the id of the one it
    dropped, and so the steps of "the same optimizer again" at random (Note [A second model's update]).
    By identity (not the object's own __eq__), held weakly."""

    def __init__(self) -> None:
        self._by_id: Dict[int, Tuple[Any, int]] = {}  # id -> (the object weakly, its key)
        self.given = 0                                # keys given out so far
        self._lock = threading.Lock()

    def key(self, updater: Any) -> int:
        held = self._by_id.get(id(updater))
        if held is not None and held[0]() is updater:
            return held[1]
        try:
            ref = weakref.ref(updater, self._forget(id(updater)))
        except TypeError:  # no weak reference to it: its id, apart from the numbers given
            return -id(updater)
        with self._lock:  # training threads may each meet a new one
            self.given += 1
            self._by_id[id(updater)] = (ref, self.given)
            return self.given

    def _forget(self, ident: int) -> Callable[[Any], None]:
        def gone(ref: Any) -> None:
            held = self._by_id.get(ident)
            if held is not None and held[0] is ref:  # not a newer object's entry under the reused id
                del self._by_id[ident]
        return gone


class _WeakModules:
    """Modules by identity (a module's own __eq__ or __hash__ is not asked), held weakly: the profile
    keeps no model alive that the script dropped (a sweep's or a k-fold's models, one built in a
    function that returned), as it keeps no hook on one (Note [Nothing left after stop])."""

    def __init__(self) -> None:
        self._by_id: "weakref.WeakValueDictionary[int, torch.nn.Module]" = weakref.WeakValueDictionary()

    def add(self, module: torch.nn.Module) -> bool:
        """Adds `module`; False when it is here already."""
        if module in self:
            return False
        self._by_id[id(module)] = module
        return True

    def __contains__(self, module: object) -> bool:
        return self._by_id.get(id(module)) is module

    def __iter__(self) -> Iterator[torch.nn.Module]:
        # valuerefs() copies the references in one C call: another training thread may add a module
        # meanwhile (values() iterates in Python and would raise that the dictionary changed size).
        return iter([m for m in (ref() for ref in self._by_id.valuerefs()) if m is not None])


class PhaseHooks:
    """The module, optimizer and backward hooks of one profiler (`owner`); they record while it is
    the running one. `models`: the modules whose calls are forwards, or [] to find them."""

    def __init__(self, owner: Any, models: List[torch.nn.Module]):
        self._owner = owner
        self._models = [weakref.ref(m) for m in models]  # weak: Note [Nothing left after stop]
        self._roots = _WeakModules()                  # outermost modules the global hooks found
        self._watched = _WeakModules()                # modules whose calls are forwards (_hook_modules)
        self._guessed = _WeakModules()                # of them, models never called when watched (_watch_guessed)
        self._guessed_parameters: Set[int] = set()    # ... and the ids of their parameters then
        self._global_handles: List[Any] = []
        self._handles: List[Any] = []
        self._lock = threading.RLock()  # a compile callback may come while this thread holds it
        self._generation = 0                          # a new one at each install(): old thread states go
        self._steps = itertools.count(1)
        self._looked_again = False                    # the first step without a forward looked again
        self._optimizers_seen: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._updater_keys = _UpdaterKeys()
        self._unwatched_params: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()  # a look found no module for them
        self.forwards = 0                             # forward ranges opened
        self.backwards = 0                            # backward ranges opened (this session)
        self.step_ends = 0                            # steps ended by an optimizer or memcomm.step()
        self.ended_by_exception = False               # the profile ends as an exception propagates (this session)
        self.compiles = 0                             # frames Dynamo began compiling (this session)
        self.modules_found = False                    # whether any module was watched or called (this session)
        self.sharded: Optional[str] = None            # what shards a watched model (this session)
        self._tls = threading.local()
        self._threads: List[_ThreadState] = []        # every thread's state this session (stop() ends their steps)
        self._waits_lock = threading.Lock()
        self._waits: List[Tuple[int, int]] = []       # DDP's waits at a graph's end, ns (Note [The wait at backward's end])
        self._noted_task = -1                         # the last graph task whose end is noted

    # --- install and remove ---
    def install(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim
        self._generation += 1
        self._threads = []
        self._steps = itertools.count(1)              # each session's steps count from 1, in its own file
        self.backwards = self.step_ends = self.forwards = self.compiles = 0
        self.ended_by_exception = False
        self.modules_found, self.sharded = False, None
        add = self._handles.append
        self._roots, self._watched, self._guessed = _WeakModules(), _WeakModules(), _WeakModules()
        self._guessed_parameters = set()
        given = [m for m in (ref() for ref in self._models) if m is not None]
        self._looked_again = bool(given)
        self._optimizers_seen = weakref.WeakSet()
        self._updater_keys = _UpdaterKeys()
        self._unwatched_params = weakref.WeakSet()
        models = given or module_roots()
        if models:
            self._hook_modules(models)
        else:
            self._global_handles += [nn_module.register_module_forward_pre_hook(self._global_pre),
                                     nn_module.register_module_forward_hook(self._global_post, always_call=True)]
            # A model compiled inside the profile narrows the hooks at its first call, and any other
            # compile at its start (Note [Finding the model]), once Dynamo is loaded (Note [Dynamo left
            # to the script] in when_loaded.py).
            add(WhenLoaded(lambda: add(_CallWrap(_optimized_module_class(), self._enter, self._leave))))
        add(WhenLoaded(_module_hooks_never_compiled))
        add(_OnCompileStart(self._compile_starts))
        self._wrap_backward()
        self._wrap_scaler_step()
        self._wrap_distributed_optimizer_step()
        self._wrap_data_loader()
        add(_OptimizerHooks(optim, self._optimizer_pre, self._optimizer_post))

    def remove(self) -> None:
        """Removes every hook install() added (Note [Nothing left after stop] in memcomm/profiler.py)."""
        with self._lock:
            for h in self._handles + self._global_handles:
                h.remove()
            self._handles.clear()
            self._global_handles.clear()
            self._roots, self._watched, self._guessed = _WeakModules(), _WeakModules(), _WeakModules()
            self._guessed_parameters = set()

    def forget_in_forked_child(self) -> None:
        """In a process forked while these hooks ran, which profiles anew: removes every hook. The
        parent's other threads are not here, so their states go, and a lock one of them held at the
        fork is replaced."""
        self._lock = threading.RLock()
        self._threads = []
        self._tls = threading.local()
        self.remove()

    def close_this_thread(self) -> None:
        """Closes the ranges the calling thread has open, and the last step of every other training
        thread whose update returned (Note [The step's last update]); the hooks record no more."""
        st = getattr(self._tls, "state", None)
        if st is not None and st.generation == self._generation:
            self._close_all(st)
        with self._lock:
            others = [o for o in self._threads if o is not st]
            self._threads = []
        for o in others:
            ended = o.held_end_ns or o.step_end_ns  # a step opened after a held end is cut off
            if o.step_open and ended and o.stack and o.stack[0][0] == STEP:
                _memcomm.phase_end_on(o.thread, STEP, o.stack[0][1], ended)
                o.stack.clear()
                o.step_open, o.step_end_ns = False, 0
            o.update_frame = o.fwd_frame = None  # a frame keeps its callers' locals (the model) alive

    def _hook_modules(self, modules: List[torch.nn.Module]) -> None:
        """Watches `modules`' calls (Note [Forwards through the class]), and what each wraps (Note
        [Finding the model])."""
        originals = [inner for m in modules for inner in wrapped_modules(m)]
        self.modules_found = self.modules_found or bool(modules)
        self.sharded = self.sharded or next(filter(None, (_SHARDED_BY.get(sharded_by(m, parameters_of)) for m in modules)), None)
        for m in modules + originals:
            self._watched.add(m)
            cls = type(m)
            if any(isinstance(h, _CallWrap) and h.cls is cls for h in self._handles):
                continue
            try:
                self._handles.append(_CallWrap(cls, self._enter, self._leave))
            except TypeError:  # a class that takes no attributes (an extension type): the module's hooks
                self._handles.append(m.register_forward_pre_hook(self._model_pre))
                self._handles.append(m.register_forward_hook(self._model_post, always_call=True))
                continue
            if _own_forward(cls):
                self._handles.append(_CallWrap(cls, self._enter, self._leave, "forward"))  # Note [Forwards called directly]

    def _enter(self, module: torch.nn.Module, args: Any) -> bool:
        """One call of a watched module's class begins: whether it is a forward (a watched instance's call,
        not inside a forward), which then begins. _leave ends it."""
        if self._global_handles and running.profiler is self._owner and not _in_backward():
            self._narrow_hooks(also=[module])  # a compiled model's first call (Note [Finding the model])
        if running.profiler is not self._owner or module not in self._watched or _in_forward(self._state()):
            return False  # another instance of the class, or a call inside the forward
        self._model_pre(module, args)
        return True

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._model_post(module, args, output)

    def _compile_starts(self) -> None:
        """Dynamo begins compiling a frame: the global hooks go first (Note [Finding the model])."""
        if running.profiler is self._owner:
            self.compiles += 1
            self._narrow_hooks(also=[])

    def _narrow_hooks(self, also: Optional[List[torch.nn.Module]] = None) -> None:
        """From the first step on, only the modules found are hooked (Note [Phases from hooks]): those
        called so far, and at a compile's start the roots alive and `also` (a compiled model), at the
        first update the roots alive that were never called (Note [Finding the model])."""
        with self._lock:
            if not self._global_handles or running.profiler is not self._owner:
                return
            for h in self._global_handles:
                h.remove()
            self._global_handles.clear()
            self._hand_over_open_forward()
            called = list(self._roots)
            if also is not None:
                self._hook_modules(called + [m for m in module_roots() + also if not any(m is f for f in called)])
                return
            self._hook_modules(called)
            uncalled = [m for m in module_roots() if m not in self._watched]
            self._watch_guessed([part for m in uncalled for part in callable_parts(m)])

    def _watch_guessed(self, modules: List[torch.nn.Module]) -> None:
        """Watches models the loop has not called yet; their parameters count as watched as they are now
        (Note [Finding the model])."""
        fresh = [m for m in modules if m not in self._watched]
        self._hook_modules(fresh)
        for m in fresh:
            self._guessed.add(m)
            self._guessed_parameters.update(id(p) for p in parameters_of(m))

    def _look_again(self, trains_unwatched: bool = False, near: Optional[Tuple[Any, List[torch.Tensor]]] = None) -> None:
        """The first step that recorded no forward, or whose optimizer updates parameters no watched
        module holds, looks for the model once more (Note [Finding the model]). `near`: the frame
        that stepped that optimizer, and those parameters, whose modules are looked for there first."""
        self._looked_again = True
        if (self.forwards == 0 or trains_unwatched) and not self._global_handles and running.profiler is self._owner:
            with self._lock:
                # Roots that were never called hold the model: a ModuleDict of a GAN's two nets, a
                # task wrapper whose .model the loop calls. Their children with parameters are watched too,
                # unless Dynamo compiled something: then the roots' calls may have run in compiled code.
                # So are those of a root found now (a fold's model kept in a ModuleList, a LightningModule
                # whose training_step calls self.net): watched alone, every later forward was lost.
                roots = (near and modules_in_frames(*near)) or module_roots()
                holders = list(self._watched) + [m for m in roots if m not in self._watched]
                silent = [c for m in holders for c in called_parts(m)] if not self.compiles else []
                self._hook_modules(roots + silent)

    # --- this thread's ranges ---
    def _state(self) -> _ThreadState:
        st = getattr(self._tls, "state", None)
        if st is None or st.generation != self._generation:
            st = self._tls.state = _ThreadState(self._generation)
            with self._lock:
                self._threads.append(st)
        if st.update_frame is not None and not _on_stack(st.update_frame):
            self._end_failed_update(st)
        if st.fwd_module is not None and not self._global_handles:
            self._end_orphaned_forward(st)
        if st.fwd_frame is not None and not _on_stack(st.fwd_frame):
            self._end_direct_forward(st)
        return st

    def _hand_over_open_forward(self) -> None:
        """The global hooks go while this thread is inside a forward they opened (DDP's forward calling a
        model compiled inside the profile, or Dynamo starting to compile there): that module gets a post
        hook of its own, for this call, so the forward ends as the module returns. Ended at the next
        hook instead (_end_orphaned_forward), a compiled model's first forward was two forwards."""
        st = getattr(self._tls, "state", None)
        if st is None or st.generation != self._generation or st.fwd_module is None:
            return
        module, st.fwd_module, st.depth = st.fwd_module, None, 0
        _ForwardReturns(self, module)

    def _end_orphaned_forward(self, st: _ThreadState) -> None:
        """A forward the global hooks opened on this thread while another took them off (its first
        update narrowed them, Note [Finding the model]) gets no post hook: it ends now, or it would
        hold this thread's later forwards and updates inside it."""
        st.fwd_module, st.depth = None, 0
        self._close_phase(st, FORWARD)

    def _end_direct_forward(self, st: _ThreadState) -> None:
        """The forward called directly that the global hooks opened has returned: it ends now, at the first
        hook after it (Note [Forwards called directly])."""
        st.fwd_frame = None
        _forward_ends(st, None)
        self._close_phase(st, FORWARD)

    def _open(self, st: _ThreadState, phase: int, ident: int, category: int, ts: int = 0) -> None:
        st.stack.append((phase, ident, _memcomm.phase_begin(phase, ident, category, ts)))

    def _close(self, st: _ThreadState, phase: int, ts: int = 0) -> None:
        """Closes `phase` and whatever opened inside it and never closed (an exception), at `ts` (0: now)."""
        for i in range(len(st.stack) - 1, -1, -1):
            if st.stack[i][0] == phase:
                while len(st.stack) > i:
                    p, ident, restore = st.stack.pop()
                    _memcomm.phase_end(p, ident, restore, ts)
                return

    def _close_phase(self, st: _ThreadState, phase: int) -> None:
        """Closes a forward or backward; the step ends with it when an update returned inside it
        (Note [The step's last update])."""
        self._close(st, phase)
        if st.ends_with == phase:
            st.ends_with, st.step_end_ns = None, now()

    def _close_all(self, st: _ThreadState) -> None:
        self._settle_without_update(st)
        st.stepless_forward_ns, st.stepless_with_grad = 0, False
        st.fwd_frame = None
        _unmark(st)
        st.ends_with = None
        self._flush_wait(st)
        st.update_frame = None  # an update that raised last: its frame keeps its callers' locals alive
        if st.step_end_ns:
            self._close_step(st)
        # Note [A step without its update]: in a run whose steps end at updates, a step still open at
        # stop() never reached its update (Ctrl-C, or an exception, inside it): left open, readers
        # leave it out, as after a SIGTERM (Note [A step the trace cut off]). Closed, it counted as a
        # whole step: 66 steps for 65 updates. A run without updates is one step, closed, unless an
        # exception ends the profile: then it is cut too (a first backward that ran out of memory was
        # one whole step).
        if st.stack and st.step_open and (self.step_ends > 0 or self.ended_by_exception) and st.stack[0][0] == STEP:
            while len(st.stack) > 1:
                self._close(st, st.stack[-1][0])
            _memcomm.phase_cut(STEP)
            st.stack.clear()
        elif st.stack:
            self._close(st, st.stack[0][0])
        st.step_open = False

    def _close_step(self, st: _ThreadState) -> None:
        """Closes the step, at its last update when one returned (Note [The step's last update])."""
        if st.step_open:
            self._close(st, STEP, st.step_end_ns)
            st.step_open = False
            st.steps_closed += 1
            st.previous_first = st.first_updater
        st.step_end_ns = 0
        st.end_held = False

    @staticmethod
    def _may_join_next(st: _ThreadState) -> bool:
        """Whether the next update may belong to the step that ended at its update (Note [A second
        model's update]): the first step, one whose last optimizer another's update has followed, or
        one whose last optimizer is new in it (a GAN's optimizers made anew each epoch)."""
        return bool(st.step_updaters) and (st.steps_closed == 0 or st.updater in st.switchers
                                           or st.updater > st.step_keys_before)

    def _end_at_update(self, st: _ThreadState) -> None:
        """A training forward follows the step's update: the step ends, or its end is held."""
        if self._may_join_next(st):
            st.end_held = True
        else:
            self._close_step(st)

    def _hold_end(self, st: _ThreadState, ts: int, from_backward: bool) -> None:
        """A step opens after a held end: written as the held step going on (Note [A second model's update])."""
        st.held_end_ns, st.step_end_ns, st.end_held = st.step_end_ns, 0, False
        st.held_begin_ns = ts or _next_begin(st, from_backward) or now()
        st.unstepped_wait_ns = 0

    def _settle_held(self, st: _ThreadState, updater: Any, key: int) -> None:
        """The next update came: it begins a new step (_next_iteration) or joins the held one."""
        if self._next_iteration(st, updater, key):
            self._split_held(st)
        else:
            st.held_end_ns = st.held_begin_ns = 0

    def _next_iteration(self, st: _ThreadState, updater: Any, key: int, consecutive: bool = False) -> bool:
        """Whether an update after the step's is the next iteration's (Note [A second model's update]):
        the same optimizer again, any while an optimizer of the step is gone, or, after a training event
        (not `consecutive`), one first seen since the step began that updates the very parameters another
        of the step updated (a new optimizer over the same model) or, past the first step, no watched
        module's parameter (a model new to the profile)."""
        if key in st.step_updaters or (not consecutive and key == st.previous_first):  # (the iteration's first again)
            return True
        others = [ref() for ref in st.step_updaters.values() if ref is not None]
        if any(other is None for other in others):
            return True
        if consecutive or key <= st.step_keys_before:  # a second optimizer, or a second model's
            return False
        mine = _parameter_ids(updater)
        if any(theirs and theirs == mine for theirs in map(_parameter_ids, others)):
            return True
        return bool(st.steps_closed and mine) and self._trains_no_watched(mine)

    def _trains_no_watched(self, parameters: Set[int]) -> bool:
        return parameters.isdisjoint(self._watched_parameter_ids())

    def _watched_parameter_ids(self) -> Set[int]:
        found = {id(p) for m in self._watched if m not in self._guessed for p in parameters_of(m)}
        return found | self._guessed_parameters

    def _split_held(self, st: _ThreadState) -> None:
        """Ends the held step at its update and begins the next where it opened, as written unheld."""
        if st.stack and st.stack[0][0] == STEP:
            _, ident, restore = st.stack[0]
            _memcomm.phase_end(STEP, ident, restore, st.held_end_ns)
            new = next(self._steps)
            # Before the batch waits already written at its begin, which a reader meets at an equal time.
            begin = max(st.held_end_ns, st.held_begin_ns - 1)
            st.stack[0] = (STEP, new, _memcomm.phase_begin(STEP, new, KEEP, begin))
            st.steps_closed += 1
            st.previous_first = st.first_updater
        st.held_end_ns = st.held_begin_ns = 0
        st.step_updaters, st.step_keys_before = {}, self._updater_keys.given

    def _settle_without_update(self, st: _ThreadState) -> None:
        """A step ends with no update to settle a held end (memcomm.step(), stop()): the held step ended."""
        if st.end_held:
            self._close_step(st)
        elif st.held_end_ns:
            self._split_held(st)

    def _ensure_step(self, st: _ThreadState, ts: int = 0, from_backward: bool = False) -> None:
        """The next training event: ends a step whose update returned, and opens one if none is (a
        backward's at the forward that opened none before it: Note [A forward that opens no step])."""
        if st.step_end_ns:
            if st.end_held or self._may_join_next(st):
                self._hold_end(st, ts, from_backward)
            else:
                self._close_step(st)
        if not st.step_open:
            if not self._owner._observing:  # an allocator that began serving after the start
                self._owner._observe_allocator()
            st.step_open = True
            st.unstepped_wait_ns = 0
            st.step_updaters, st.step_keys_before = {}, self._updater_keys.given
            ident = next(self._steps)
            # The outermost phase, below a forward already open that marked its begin (a backward or update
            # inside the model's forward: Lightning's manual optimisation), so that forward ends inside it.
            st.stack.insert(0, (STEP, ident, _memcomm.phase_begin(STEP, ident, KEEP, ts or _next_begin(st, from_backward))))
        self._flush_wait(st)  # after the step's begin, which a reader meets first at an equal time
        st.stepless_forward_ns, st.stepless_with_grad = 0, False
        _unmark(st)

    def _forward_begins(self, st: _ThreadState, module: torch.nn.Module, args: Any) -> None:
        """Note [A forward that opens no step]; after the step's update, Note [The step's last update]."""
        chain = _chain_begin(st, module, args)
        if torch.is_grad_enabled() and module.training:
            if st.step_end_ns and not st.end_held:  # the step ends at its update; this forward begins the next one, or none
                self._end_at_update(st)
                _mark(st, _earliest(chain, _frozen_begin(st, module)))
            elif st.step_open and not st.step_end_ns:
                self._ensure_step(st)
            elif not st.marked_forward_ns or _dropped(st.marked_output):
                _mark(st, _earliest(chain, _frozen_begin(st, module)))
        elif not st.step_open or st.step_end_ns:
            if not torch.is_grad_enabled():
                _frozen_forward(st, module)
                self._flush_wait(st)  # the batches waited for were an evaluation's (Note [Batches from any DataLoader])
                st.stepless_forward_ns = st.stepless_forward_ns or now()
            elif not st.stepless_with_grad:  # forwards without gradients before it were an evaluation's
                st.stepless_forward_ns, st.stepless_with_grad = now(), True
                if id(module) in st.frozen_modules:  # of this model: an evaluation (Note [A frozen model's forward on the step's batch])
                    st.frozen_wait_ns = 0

    # Forward: one module (profile(model=...)).
    def _model_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling() or _in_backward() or running.profiler is not self._owner:
            return
        st = self._state()
        self._forward_begins(st, module, args)
        self.forwards += 1
        self._open(st, FORWARD, 0, ACTIVATION)

    def _model_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling() or _in_backward() or running.profiler is not self._owner:
            return
        st = self._state()
        _forward_ends(st, output)
        self._close_phase(st, FORWARD)

    # Forward: the outermost module call with parameters (global hooks).
    def _global_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling() or running.profiler is not self._owner:
            return
        st = self._state()
        st.depth += 1
        if st.depth == 1 and st.fwd_frame is None and has_parameters(module) and not _in_backward():
            frame, owner = _calling_forward(module)  # Note [Forwards called directly]
            if owner is None:
                st.fwd_module = module
            else:
                st.fwd_frame, module = frame, owner
            if self._roots.add(module):
                self.modules_found = True
            self._forward_begins(st, module, args)
            self.forwards += 1
            self._open(st, FORWARD, 0, ACTIVATION)

    def _global_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling() or running.profiler is not self._owner:
            return
        st = self._state()
        st.depth = max(st.depth - 1, 0)
        if st.depth == 0 and st.fwd_module is module:
            st.fwd_module = None
            _forward_ends(st, output)
            self._close_phase(st, FORWARD)

    # Backward: a call of torch.autograd.backward or grad (Note [Phases from hooks]).
    def _wrap_backward(self) -> None:
        names = ("_engine_run_backward",) if hasattr(torch.autograd, "_engine_run_backward") else ("backward", "grad")
        for name in names:
            self._wrap_autograd(torch.autograd, name)
        distributed = sys.modules.get("torch.distributed.autograd")  # loaded with torch where RPC is built
        if hasattr(distributed, "backward"):
            self._wrap_autograd(distributed, "backward")

    def _wrap_autograd(self, module: Any, name: str) -> None:
        original = getattr(module, name)

        @functools.wraps(original)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if running.profiler is not self._owner or _compiler_tracing():
                return original(*args, **kwargs)
            st = self._state()
            if st.in_backward or _in_backward():  # reentrant checkpointing's, on autograd's device thread too
                return original(*args, **kwargs)
            st.in_backward = True
            self.backwards += 1
            if not _in_forward(st):  # one inside a forward (forces from autograd.grad) is that forward's
                self._ensure_step(st, from_backward=True)
            self._open(st, BACKWARD, 0, ACTIVATION)
            began = now()
            try:
                return original(*args, **kwargs)
            except RuntimeError as e:  # a DDP bucket's, through memcomm's callbacks: a peer died
                without_our_wrappings(e)
                raise
            finally:
                st.in_backward = False
                for wait in self._waits_since(began):  # Note [The wait at backward's end]
                    _memcomm.phase_span(COMM, 0, *wait)
                self._close_phase(st, BACKWARD)

        setattr(module, name, recorded)
        restore = _Restore(module, name, original, recorded)
        self._handles += [restore, WhenLoaded(lambda: restore.replace(_eager(recorded)))]

    def bucket_issued(self) -> None:
        """A DDP bucket's all-reduce went out through memcomm's hook: the first of a graph task queues
        a callback at the task's end (Note [The wait at backward's end])."""
        task = torch._C._current_graph_task_id()
        if task < 0 or task == self._noted_task:  # outside autograd's engine (a hook called by hand), or noted
            return
        self._noted_task = task
        _queue_callback(self._graph_done)

    def _graph_done(self) -> None:
        done = now()
        _queue_callback(lambda: self._wait_over(done))  # after the reducer's callback, queued before this ran

    def _wait_over(self, done: int) -> None:
        with self._waits_lock:
            self._waits.append((done, now()))

    def _waits_since(self, began: int) -> List[Tuple[int, int]]:
        """The noted waits of graphs that ended after `began` (taken: each is recorded once)."""
        with self._waits_lock:
            mine = [w for w in self._waits if w[0] >= began]
            self._waits = [w for w in self._waits if w[0] < began]
        return mine

    # Updates: the step's last phase (Note [The step's last update]).
    def _optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if running.profiler is not self._owner:  # paused (running.paused)
            return
        frame = _frame_outside_memcomm()
        if _creates_state_only(frame):
            return
        st = self._state()
        if st.update_frame is None:  # else a step() inside the open update (GradScaler's, super().step())
            closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args[0] is the optimizer
            self._update_begins(st, frame, optimizer, joins=not callable(closure))

    def _optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if running.profiler is not self._owner:
            return
        frame = _frame_outside_memcomm()
        if _creates_state_only(frame):
            return
        unwatched: List[torch.Tensor] = []
        if not self._global_handles and optimizer not in self._optimizers_seen:
            self._optimizers_seen.add(optimizer)
            unwatched = self._updates_unwatched(optimizer)
            self._looked_again = self._looked_again or bool(unwatched)  # the look below, after the update's range
        st = self._state()
        if st.update_frame is not None and frame is st.update_frame:  # not an inner step()
            self._update_returned(st)
        if unwatched:  # memcomm's look, outside the update's range it would lengthen
            self._look_again(trains_unwatched=True, near=(frame, unwatched))

    def _updates_unwatched(self, optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
        """The parameters `optimizer` updates that no watched module holds, and no earlier look found
        unwatched: a student built after start() beside the teacher it found, or a model built after
        another was trained (k-fold, a fine-tuning after pretraining), whose calls would not be
        forwards. A parameter outside any module (a learned temperature) asks only once, and a tensor
        that is no nn.Parameter never: no module holds one as a parameter (an adversarial
        perturbation, SGD([delta]) made anew per batch, scanned the heap each time: 46 x slower)."""
        known = self._watched_parameter_ids() | {id(p) for p in self._unwatched_params}
        new = [p for group in optimizer.param_groups for p in group["params"]
               if id(p) not in known and isinstance(p, torch.nn.Parameter)]
        self._unwatched_params.update(new)
        return new

    def _update_begins(self, st: _ThreadState, frame: Any, updater: Any, joins: bool = True) -> None:
        """An update begins. One that follows another with no training event between joins its step
        (a second optimizer); one with a closure runs its iteration's forward and backward inside
        itself (LBFGS), so it begins the next step instead, as does the same optimizer stepping again
        (evolution strategies' and zeroth-order loops, whose forwards run without gradients)."""
        given_before = self._updater_keys.given
        key = self._updater_keys.key(updater)
        # (A training forward since the last update has closed its step already.)
        if joins and key != st.updater and st.step_end_ns and not self._next_iteration(st, updater, key, consecutive=True):
            st.step_end_ns, st.end_held = 0, False
        if st.updater and st.updater != key:
            st.switchers.add(st.updater)
        st.updater = key
        self._ensure_step(st)
        if st.held_end_ns:
            self._settle_held(st, updater, key)
        if not st.step_updaters:  # the step's first update: an optimizer first seen at it is new in the step
            st.step_keys_before = min(st.step_keys_before, given_before)
            st.first_updater = key
        st.step_updaters[key] = _weakly(updater)
        self._open(st, OPTIMIZER, 0, OPT_STATE)
        st.update_frame = frame

    def _update_returned(self, st: _ThreadState) -> None:
        st.update_frame = None
        self._close(st, OPTIMIZER)
        if _in_forward(st):  # stepped inside the model's forward (Lightning's manual optimisation)
            st.ends_with = FORWARD
        elif st.in_backward:  # stepped from a gradient hook
            st.ends_with = BACKWARD
        else:
            st.step_end_ns = now()
        self.step_ends += 1
        wait_for_release()  # Note [Python callables released on torch's threads]
        if self._global_handles:
            self._narrow_hooks()
        if not self._looked_again:  # at the first update, after narrowing: the next step's forward is seen
            self._look_again()

    def _wrap_scaler_step(self) -> None:
        """Wraps torch.amp.GradScaler.step, whose skipped update calls no optimizer."""
        self._wrap_update(torch.amp.GradScaler, "step")

    def _wrap_distributed_optimizer_step(self) -> None:
        """Wraps DistributedOptimizer.step once the script loads torch.distributed.optim: its workers
        step TorchScript functional optimizers over RPC, which run no torch.optim hook."""
        def wrap() -> None:
            cls = getattr(sys.modules["torch.distributed.optim"], "DistributedOptimizer", None)
            if cls is not None:  # a torch built without RPC has none
                self._wrap_update(cls, "step")
        self._handles.append(WhenLoaded(wrap, "torch.distributed.optim", "DistributedOptimizer's steps"))

    def _wrap_update(self, cls: Any, name: str) -> None:
        """Wraps `cls.name`, an update that runs no torch.optim hook, as one update of the step."""
        original = cls.__dict__[name]

        @functools.wraps(original)
        def update(owner: Any, *args: Any, **kwargs: Any) -> Any:
            st = self._state() if running.profiler is self._owner else None
            if st is None or st.update_frame is not None:
                return original(owner, *args, **kwargs)
            # GradScaler.step(optimizer): the optimizer is the updater, so that one scaler stepping two
            # optimizers in an iteration (AMP with two models) makes one step, as the optimizers would.
            given = args[0] if args else kwargs.get("optimizer")
            updater = given if isinstance(given, torch.optim.Optimizer) else owner
            self._update_begins(st, sys._getframe(), updater)
            try:
                return original(owner, *args, **kwargs)
            finally:
                self._update_returned(st)

        setattr(cls, name, update)
        restore = _Restore(cls, name, original, update)
        self._handles += [restore, WhenLoaded(lambda: restore.replace(_eager(update)))]

    def _end_failed_update(self, st: _ThreadState) -> None:
        """An update whose step() raised (and the script went on) runs no post hook, so its range would
        stay open and the next iteration nest inside it, two iterations in one step. The first hook to
        find that step() call gone from the stack closes it, as an update that returned."""
        st.update_frame = None
        self._close(st, OPTIMIZER)
        st.step_end_ns = now()

    def end_step(self) -> None:
        """Ends this thread's step now: the script called memcomm.step() (a loop that updates its
        parameters without torch.optim, or one that marks its iterations itself)."""
        st = self._state()
        self._settle_without_update(st)
        if st.unstepped_wait_ns and (not st.step_open or st.step_end_ns):  # an iteration nothing else opened:
            self._ensure_step(st, st.unstepped_wait_ns - 1)  # from its first batch (before the waits written)
        st.step_end_ns = 0
        _unmark(st)
        if st.step_open:
            self._close(st, STEP)
            st.step_open = False
        self.step_ends += 1
        wait_for_release()  # Note [Python callables released on torch's threads]

    # Data-loader wait (memcomm.loader; any DataLoader: Note [Batches from any DataLoader]).
    def _wrap_data_loader(self) -> None:
        from torch.utils.data import dataloader
        owner = dataloader._BaseDataLoaderIter
        original = owner.__dict__["__next__"]

        @functools.wraps(original)
        def __next__(it: Any) -> Any:
            if running.profiler is not self._owner or torch.compiler.is_compiling():
                return original(it)
            st = self._state()
            if st.in_loader:
                return original(it)
            batch, begin = _fetched(lambda: original(it))
            self._batch_arrived(st, begin, it)
            return batch

        owner.__next__ = __next__
        self._handles.append(_Restore(owner, "__next__", original, __next__))

    def _batch_arrived(self, st: _ThreadState, begin_ns: int, source: Any) -> None:
        """See Note [Batches from any DataLoader]: a wait inside the open step is recorded now; those outside
        wait to be recorded inside the step a training event opens next, or outside any."""
        end = now()
        if st.step_open and not st.step_end_ns:
            _memcomm.phase_span(DATA_WAIT, 0, begin_ns, end)
            return
        st.stepless_waits.append((begin_ns, end, _weakly(source)))
        st.unstepped_wait_ns = st.unstepped_wait_ns or begin_ns
        st.frozen_wait_ns = 0  # a new batch: forwards before it were on another

    @staticmethod
    def _flush_wait(st: _ThreadState) -> None:
        for begin_ns, end_ns, _ in st.stepless_waits:
            _memcomm.phase_span(DATA_WAIT, 0, begin_ns, end_ns)
        st.stepless_waits.clear()

    def loader_next(self, it: Iterator[Any]) -> Any:
        """memcomm.loader's next batch: its wait is recorded as a DataLoader's is (Note [Batches from
        any DataLoader]), for any iterable, and the DataLoader's own wrapper inside it records nothing
        more."""
        st = self._state()
        st.in_loader = True
        try:
            batch, begin = _fetched(lambda: next(it))
        finally:
            st.in_loader = False
        self._batch_arrived(st, begin, it)
        return batch


class _Registry(dict):
    """The (enter, leave) of each class _CallWrap wraps, by key. A wrapper reaches its profiler only through
    this module global, which pickles as an empty registry (Note [Forwards through the class]): a class
    copied by value (cloudpickle's copy of a __main__ class, with its __call__) calls straight through."""

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_Registry, ())


_CALL_HOOKS = _Registry()
_call_keys = itertools.count()


class _CallWrap:
    """Wraps `cls.<name>` (__call__, or forward: Note [Forwards called directly]) so that each call of an
    instance runs the function the class had (Note [Forwards through the class]) between
    `enter(module, args)` and, where enter returned True, `leave(module, args, output)`; remove() puts
    it back, unless something replaced the wrapper since (then it stays, and passes calls straight
    through). The class's function is called from the wrapper itself, not from memcomm's hooks, so
    that Dynamo may compile it while it never compiles them (Note [Module hooks as frames])."""

    def __init__(self, cls: type, enter: Callable[..., bool], leave: Callable[..., None], name: str = "__call__"):
        self.cls, self._name = cls, name
        self._own = cls.__dict__.get(name)          # None when the class inherits it
        own = self._own
        # The class it inherits from, looked up at each call: a tracer's patch of nn.Module.__call__
        # (torch.fx, export) still sees the calls (Note [Forwards through the class]).
        base = next(c for c in cls.__mro__[1:] if name in c.__dict__) if own is None else cls
        key = self._key = next(_call_keys)
        _CALL_HOOKS[key] = (enter, leave)

        def wrapper(module: Any, *args: Any, **kwargs: Any) -> Any:
            call = own or getattr(base, name)
            # Compiling first: Dynamo, which takes it as True, then reads no registry (Note [Hooks under
            # torch.compile]); read first, a guard on its size recompiled a compiled training step.
            hooks = None if torch.compiler.is_compiling() else _CALL_HOOKS.get(key)
            if hooks is None:
                return call(module, *args, **kwargs)
            if not hooks[0](module, args):
                return call(module, *args, **kwargs)
            output = None
            try:
                output = call(module, *args, **kwargs)
                return output
            finally:
                hooks[1](module, args, output)

        if name == "forward":  # inspect.signature(model.forward) sees the original's (Hugging Face's
            functools.update_wrapper(wrapper, own or getattr(base, name))  # Trainer keeps columns by it)
        self._wrapper = wrapper
        setattr(cls, name, wrapper)

    def remove(self) -> None:
        _CALL_HOOKS.pop(self._key, None)
        if self.cls.__dict__.get(self._name) is self._wrapper:
            if self._own is None:
                delattr(self.cls, self._name)
            else:
                setattr(self.cls, self._name, self._own)


def _mark(st: _ThreadState, begin_ns: int = 0) -> None:
    """A training forward while no step is open marks where the next one begins (Note [A forward that
    opens no step]), now or at `begin_ns`; forwards without gradients before it were evaluations."""
    st.marked_forward_ns, st.stepless_forward_ns, st.stepless_with_grad = begin_ns or now(), 0, False
    st.marked_output, st.marking, st.frozen_wait_ns = None, True, 0


def _unmark(st: _ThreadState) -> None:
    st.marked_forward_ns, st.marked_output, st.marking, st.frozen_wait_ns = 0, None, False, 0
    st.fed_from.clear()


# Note [Forwards that feed forwards]: activation checkpointing's checkpoint_sequential calls a
# Sequential's children one by one, never the Sequential, so each child's call is an outermost
# forward. Each step began at the third child of five: a checkpointed segment frees its first
# child's output, which moved the mark (a dropped output: Note [A forward that opens no step]),
# and a reentrant checkpoint runs its segment without gradients, so the first forward with
# gradients on marked. Half the iteration's forward time fell outside every step. A forward whose
# arguments hold an output of a forward since the last step is that forward's continuation, so a
# mark it sets goes where their chain began, or earlier where the step's batch was waited for
# (Note [A frozen model's forward on the step's batch]: a frozen backbone's features feeding the
# trained head). A dry run's output is dropped, not fed on. Only forwards of modules in training
# mode are kept (an evaluation's, in eval mode, costs nothing more), by their outputs' ids, weakly,
# at most 256 tensors: an iteration's chain is that of its outermost modules.
def _chain_begin(st: _ThreadState, module: torch.nn.Module, args: Any) -> int:
    """Where the chain of forwards that feeds `module`'s forward with `args` began; 0: none. Sets the
    open forward's chain, which _forward_ends records with its output."""
    st.chain_begin_ns = 0
    if not module.training or (st.step_open and not st.step_end_ns):
        return 0
    begin = 0
    if st.fed_from:
        for t in _tensors(args):
            fed = st.fed_from.get(id(t))
            if fed is not None and fed[1]() is t:
                begin = _earliest(begin, fed[0])
    st.chain_begin_ns = begin or now()
    return begin


# Note [A frozen model's forward on the step's batch]
# A distillation step (the PyTorch tutorial's, Hinton's) waits for its batch, runs the frozen teacher
# on it without gradients, then the student. The teacher's forward said the wait was an evaluation's
# (Note [Batches from any DataLoader]) and the step began at the student's forward: the wait and the
# teacher's forward were outside every step. So forwards without gradients that follow the thread's
# last batch wait outside a step, of modules other than the one whose training forward then marks the
# step, are the step's: it begins 1 ns before that wait (already written, and met first at an equal
# time). An evaluation stays outside: its last forward comes before the wait for the training batch
# after it, and an evaluation of the model that trains is that model's forward. Without a wait (data
# in memory) nothing says where the iteration began, and the teacher's forward stays outside. A step
# that a backward opens with no training forward seen (the student's forward unwatched, or a model
# kept in eval mode: Note [A forward that opens no step]) begins at that wait too, whatever the module.
def _frozen_forward(st: _ThreadState, module: torch.nn.Module) -> None:
    """A forward without gradients outside a step (Note [A frozen model's forward on the step's batch])."""
    if st.stepless_waits:
        st.frozen_wait_ns, st.frozen_modules = st.stepless_waits[-1][0], {id(module)}
    elif st.frozen_wait_ns:
        st.frozen_modules.add(id(module))


def _frozen_begin(st: _ThreadState, module: torch.nn.Module) -> int:
    """Where a step that `module`'s training forward marks begins when frozen forwards ran on its batch
    (Note [A frozen model's forward on the step's batch]); 0: at the forward."""
    return st.frozen_wait_ns - 1 if st.frozen_wait_ns and id(module) not in st.frozen_modules else 0


def _forward_ends(st: _ThreadState, output: Any) -> None:
    """The forward that set the mark keeps its output weakly: whether the script kept it tells a dry run
    from a training forward (Note [A forward that opens no step]); outside a step, a forward of a module
    in training mode keeps it for the next one's chain (Note [Forwards that feed forwards])."""
    tensors = _tensors(output) if st.marking or st.chain_begin_ns else []
    refs = tuple(weakref.ref(t) for t in tensors)
    if st.marking:
        st.marking = False
        st.marked_output = refs or None
    if st.chain_begin_ns:
        for t, ref in zip(tensors, refs):
            st.fed_from[id(t)] = (st.chain_begin_ns, ref)
        if len(st.fed_from) > 256:  # the oldest go first
            for stale in list(itertools.islice(st.fed_from, len(st.fed_from) - 256)):
                del st.fed_from[stale]
    st.chain_begin_ns = 0


def _tensors(output: Any, depth: int = 0, found: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
    """The first tensors (up to 16) of a forward's output: a tensor, or those in a tuple, list, mapping or
    dataclass (a Hugging Face ModelOutput is a mapping, an RNN's (output, hidden) a tuple)."""
    found = [] if found is None else found
    if isinstance(output, torch.Tensor):
        found.append(output)
    elif depth < 3:
        items = output.values() if isinstance(output, Mapping) else output if isinstance(output, (tuple, list)) else \
            [getattr(output, f.name, None) for f in dataclasses.fields(output)] if _is_dataclass(output) else ()
        for item in items:
            if len(found) >= 16:
                break
            _tensors(item, depth + 1, found)
    return found


def _is_dataclass(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _dropped(output: Any) -> bool:
    """The marked forward's output is gone, every tensor of it: nothing the script computes next (a loss, a
    backward) uses it. One tensor alone is not enough: a loop that calls an RNN once per time step drops
    each call's output and carries the graph on in its hidden state (seq2seq's encoder, char-RNN), and
    judged by the output alone, each step began at its last call, the others' forwards outside any step.
    A forward with no tensor to keep counts as dropped: one that raised (out of memory at a batch size
    that a finder then halves: Hugging Face's auto_find_batch_size) held the mark, and step 1 began at
    the first failed try, 15 s before the batch that trained."""
    return output is None or all(ref() is None for ref in output)


def _eager(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` as Dynamo runs it: eagerly, the frame only (Note [Hooks under torch.compile])."""
    return torch.compiler.disable(function, recursive=False)


class _ForwardReturns:
    """A post hook on `module` for its call in progress: the forward it handed over ends as the module
    returns (PhaseHooks._hand_over_open_forward); it removes itself."""

    def __init__(self, hooks: "PhaseHooks", module: torch.nn.Module):
        self._hooks = hooks
        self._handle = module.register_forward_hook(self, always_call=True)

    def __call__(self, *_: Any) -> None:
        self._handle.remove()
        hooks = self._hooks
        if running.profiler is hooks._owner:
            hooks._close_phase(hooks._state(), FORWARD)


def _wrapper_code() -> types.CodeType:
    """The code of every wrapper _CallWrap makes (one inner function, so one code object)."""
    return next(c for c in _CallWrap.__init__.__code__.co_consts
                if isinstance(c, types.CodeType) and c.co_name == "wrapper")


def _module_hooks_never_compiled() -> None:
    """Note [Module hooks as frames]: a model compiled with model.compile() has its _call_impl compiled,
    and Dynamo skips that frame (torch.nn's own code) yet still compiles the frames it calls: the
    module hooks, memcomm's wrapper of the model's class, and the model's forward. Compiled,
    memcomm's hooks ask is_compiling(), which is True there, and pass through: the first step lost its
    forward, and each hook frame was a compile the script never had (3 frames, 2 graphs, where plain
    torch compiled 1 frame); the class wrapper installed after the first step was compiled once more,
    the model's forward inlined into it: a second compile of the whole model (with inductor, the
    longest part of a first step). So once Dynamo is loaded, no frame of the hooks, nor any they call,
    is compiled: they run eagerly, as they do beside a model compiled with torch.compile(model). The
    wrapper's own frame is not compiled either, but the frames it calls are: it calls the class's
    function itself (_CallWrap), so the model's forward is compiled once, as without memcomm, and found
    in Dynamo's cache by its code. Inside a region Dynamo traces the hooks are inlined as before, and
    pass through (Note [Hooks under torch.compile]). The switch is Dynamo's own per-code frame
    strategy (what torch._dynamo.skip sets), private: a torch without it compiles the hooks as before."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        return
    never = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for hook in (PhaseHooks._global_pre, PhaseHooks._global_post, PhaseHooks._model_pre, PhaseHooks._model_post,
                 PhaseHooks._enter, PhaseHooks._leave, _ForwardReturns.__call__):
        set_code_exec_strategy(hook.__code__, never)
    set_code_exec_strategy(_wrapper_code(), FrameExecStrategy(FrameAction.SKIP, FrameAction.DEFAULT))


def _all_eager(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` and all it calls, eagerly: for hooks that call memcomm's own code alone (Note [Hooks
    under torch.compile]). The optimizer hooks' frame alone was not enough: Dynamo compiled the frames they
    call (a list comprehension, its own frame in Python 3.11), and a compile's start callback then asked
    for the lock the hook held: a compiled training step that stepped its optimizer hung."""
    return torch.compiler.disable(function, recursive=True)


class _OptimizerHooks:
    """torch's global optimizer step pre and post hooks, `_all_eager` from the moment Dynamo is loaded
    (Note [Dynamo left to the script] in when_loaded.py); remove() takes them off."""

    def __init__(self, optim: Any, pre: Callable[..., None], post: Callable[..., None]):
        self._optim = optim
        self._handles = self._register(pre, post)
        self._later = WhenLoaded(lambda: self._swap(_all_eager(pre), _all_eager(post)))

    def _register(self, pre: Callable[..., None], post: Callable[..., None]) -> List[Any]:
        return [self._optim.register_optimizer_step_pre_hook(pre), self._optim.register_optimizer_step_post_hook(post)]

    def _swap(self, pre: Callable[..., None], post: Callable[..., None]) -> None:
        for h in self._handles:
            h.remove()
        self._handles = self._register(pre, post)

    def remove(self) -> None:
        self._later.remove()
        for h in self._handles:
            h.remove()
        self._handles = []


class _OnCompileStart:
    """Runs `callback` as Dynamo begins compiling a frame, before it traces (torch._dynamo's compile
    start callbacks, torch 2.6 and later; nothing on a torch without them), from the moment Dynamo is
    loaded; remove() takes it off."""

    def __init__(self, callback: Callable[[], None]):
        self._handler: Any = None
        self._callback = lambda compile_args: callback()
        self._later = WhenLoaded(self._register)

    def _register(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:
            return
        self._handler = callback_handler
        callback_handler.register_start_callback(self._callback)

    def remove(self) -> None:
        self._later.remove()
        if self._handler is not None and self._callback in self._handler.start_callbacks:
            self._handler.remove_start_callback(self._callback)


class _Restore:
    """Puts `owner.name` (torch.autograd.backward, GradScaler.step) back at stop(), unless something
    replaced the wrapper since; then the wrapper stays and passes calls straight through."""

    def __init__(self, owner: Any, name: str, original: Callable[..., Any], wrapper: Callable[..., Any]):
        self._owner, self._name, self._original, self._wrapper = owner, name, original, wrapper

    def remove(self) -> None:
        if getattr(self._owner, self._name) is self._wrapper:
            setattr(self._owner, self._name, self._original)

    def replace(self, wrapper: Callable[..., Any]) -> None:
        """Puts `wrapper` in the first one's place (the same, made `_eager`), unless something replaced it."""
        if getattr(self._owner, self._name) is self._wrapper:
            setattr(self._owner, self._name, wrapper)
            self._wrapper = wrapper


def _compiler_tracing() -> bool:
    """Whether autograd is called by a compiler tracing a graph, not by the training: while torch.compile
    compiles a model, AOTAutograd differentiates the forward it traced, with fake tensors, inside that
    forward (a cold compile recorded a backward there). About 4 us, once per backward."""
    return detect_fake_mode() is not None


# What memcomm's warning says of each kind of sharding (memcomm/_sharding.py).
_SHARDED_BY = {"FSDP": "FSDP, whose all-gathers and reduce-scatters",
               "DTensor": "DTensor (tensor or sequence parallelism), whose collectives"}


def _optimized_module_class() -> type:
    """The class torch.compile(module) returns."""
    from torch._dynamo.eval_frame import OptimizedModule
    return OptimizedModule


def _fetched(next_batch: Callable[[], Any]) -> Tuple[Any, int]:
    """The next batch, its allocations labelled input, and when the wait for it began."""
    prev, begin = exchange(INPUT), now()
    try:
        return next_batch(), begin
    finally:
        exchange(prev)


def _earliest(*ns: int) -> int:
    """The earliest of the times given that are set (0: none)."""
    return min((t for t in ns if t), default=0)


def _next_begin(st: _ThreadState, from_backward: bool) -> int:
    """Where a step opening now begins: the first training forward since the last update, or the first
    batch waited for (a backward's at the forward that opened none before it: Note [A forward that
    opens no step]); 0: now."""
    stepless = _earliest(st.stepless_forward_ns, st.frozen_wait_ns - 1 if st.frozen_wait_ns else 0) if from_backward else 0
    return _earliest(stepless, st.marked_forward_ns, _first_kept_wait(st))


def _first_kept_wait(st: _ThreadState) -> int:
    """The first batch waited for since the last step from an iterator the script still holds (Note
    [Batches from any DataLoader]); 0: none."""
    return next((begin for begin, _, source in st.stepless_waits if source is None or source() is not None), 0)


def _parameter_ids(updater: Any) -> Set[int]:
    """The ids of the parameters an optimizer updates; none for an updater without param_groups (an
    RPC DistributedOptimizer, a scaler) or with groups of another shape."""
    try:
        return {id(p) for group in getattr(updater, "param_groups", ()) for p in group["params"]}
    except (TypeError, KeyError, IndexError):
        return set()


def _weakly(obj: Any) -> Any:
    """A weak reference to `obj`, or None for an object that takes none (a list's iterator)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _frame_outside_memcomm() -> Any:
    """The frame that called the optimizer's pre hook: the first outside memcomm's hooks and the
    torch.compiler.disable wrapper around them (torch's step() wrapper, alive until step() ends)."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "").startswith(("memcomm.", "torch._dynamo")):
        f = f.f_back
    return f


# Note [A step that only creates optimizer state]
# torch.distributed.checkpoint's get_state_dict and set_state_dict (the resume of torchtitan and of the
# DCP tutorial) create an optimizer's state by calling its step() with zero gradients and lr 0
# (_init_optim_state). Recorded as an update, it was a phantom first step with no forward, and it
# took the global module hooks off before the model's first forward, which then went unrecorded. So
# a step() called from there is no update: no range, no step, no look for the model.
def _creates_state_only(frame: Any) -> bool:
    """Whether the step() whose hook runs, called at `frame` (torch's step wrapper), is
    torch.distributed.checkpoint's state creation (a few frames up)."""
    f = frame
    for _ in range(4):
        if f is None:
            return False
        if f.f_code.co_name == "_init_optim_state" and f.f_globals.get("__name__") == "torch.distributed.checkpoint.state_dict":
            return True
        f = f.f_back
    return False


def _own_forward(cls: type) -> bool:
    """The class has a forward of its own to wrap: a plain function (not ModuleDict's unimplemented one,
    nor a staticmethod or another callable, which a wrapper passing the module first would call wrongly)."""
    forward = inspect.getattr_static(cls, "forward", None)
    return isinstance(forward, types.FunctionType) and forward is not torch.nn.Module.forward


_PASSED_THROUGH = (torch.nn.modules.module.__file__, __file__)  # torch's module calls, and this file's wrappers


def _calling_forward(module: torch.nn.Module) -> Tuple[Any, Optional[torch.nn.Module]]:
    """From the global pre hook: the frame and the module of a forward that the script called directly
    (model.forward(x)) and that calls `module`, with parameters of its own; (None, None) when `module`
    is called from anything else (Note [Forwards called directly])."""
    f, helpers = _caller(sys._getframe(2)), []
    while f is not None and f.f_code.co_name != "forward" and len(helpers) < 3:  # helpers of the forward's
        helpers.append(f.f_code)
        f = _caller(f.f_back)
    if f is None or f.f_code.co_name != "forward":
        return None, None
    owner = _first_argument(f)
    if owner is module or not isinstance(owner, torch.nn.Module) or not has_parameters(owner):
        return None, None
    if not all(_method_of(type(owner), code) for code in helpers):  # torchvision's _forward_impl, not another's
        return None, None
    return f, owner


def _caller(f: Any) -> Any:
    while f is not None and f.f_code.co_filename in _PASSED_THROUGH:
        f = f.f_back
    return f


def _first_argument(f: Any) -> Any:
    """A forward frame's first argument, whatever its name (`self`, or `s` in some scripts); None for
    none. Only a forward's frame: on Python < 3.13 reading f_locals stores a copy of them on the frame,
    which would keep a training function's batch alive until it returns (a forward returns soon)."""
    if not f.f_code.co_argcount:
        return None
    return f.f_locals.get(f.f_code.co_varnames[0])


def _method_of(cls: type, code: Any) -> bool:
    """Whether `code` is the body of a method of `cls` (read from the class, not the frame's locals)."""
    return getattr(getattr(cls, code.co_name, None), "__code__", None) is code


def _on_stack(frame: Any) -> bool:
    f = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _in_forward(st: _ThreadState) -> bool:
    return any(phase == FORWARD for phase, _, _ in st.stack)


def _in_backward() -> bool:
    """True inside autograd's backward: a module called there is activation checkpointing's
    recomputation, part of the backward rather than a forward of its own."""
    return torch._C._current_graph_task_id() != -1
