"""memcomm.tune: memcomm-tune's search with a Python train step as the probe.

The distributed test launches tune_ranks.py under torch.distributed.run (2 ranks on the CPU, Gloo,
each a fresh process under memcomm's capped CPU allocator) with a timeout, so a deadlock fails the
test instead of hanging it.
"""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import memcomm
from memcomm import _memcomm
from conftest import run_python

HERE = Path(__file__).resolve().parent


def run_ok(code: str, timeout: int) -> None:
    """Runs `code` in a fresh interpreter, which must print "ok" and exit 0."""
    r = run_python(code, timeout=timeout)
    assert r.returncode == 0 and "ok" in r.stdout, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both ranks' decisions from tune_ranks.py (its scenarios, one launch)."""
    out = tmp_path_factory.mktemp("tune_ranks")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "tune_ranks.py"), str(out)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=HERE,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the ranks did not finish in {e.timeout} s (a deadlock?)\n{e.stdout}\n{e.stderr}")
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return [json.loads((out / f"rank{i}.json").read_text()) for i in range(2)]


def test_only_rank_1_out_of_memory_in_backward_is_agreed_and_matches_the_grid(two_ranks):
    r0, r1 = (r["rank1-backward"] for r in two_ranks)
    assert r0 == r1, "the ranks decided differently"
    ours, grid = r0["memcomm"], r0["grid"]
    for result in (ours, grid):
        ooms = [t for t in result["trials"] if t[3]]
        assert ooms, "rank 1's backward never ran out of memory: the test's limit is off"
        assert all(t[4] == "rank 1 backward" for t in ooms), ooms
    per_rank = 512 // 2
    assert 1 < grid["largest_feasible"] < per_rank
    assert ours["largest_feasible"] == grid["largest_feasible"]
    candidates = 9  # 1, 2, 4, ... 256
    assert ours["boundary_probes"] <= math.ceil(math.log2(candidates)) + 3
    rec = ours["recommendation"]
    assert rec is not None and rec["micro_batch"] * rec["accum"] * rec["world"] == 512
    assert rec["micro_batch"] <= ours["largest_feasible"]
    assert r0["state_restored"] and r1["state_restored"], "model or optimizer differ from before tuning"
    assert r0["grads_none"] and r1["grads_none"]


def test_an_exception_in_one_ranks_step_is_that_exception_there_and_stops_the_other(two_ranks):
    r0, r1 = (r["rank1-raises"] for r in two_ranks)
    assert r1["raised"] == "ValueError" and r1["message"] == "rank 1's own step failed", r1
    assert r1["raised_in"] == "loss_fn", r1   # the user's own traceback, not a wrapper's
    assert r0["raised"] == "TuneError" and "rank 1 forward" in r0["message"], r0


def test_ranks_with_different_or_bad_arguments_all_stop_instead_of_hanging(two_ranks):
    for r in two_ranks:
        assert r["other-batch"]["raised"] == "ValueError", r["other-batch"]
        assert "different arguments" in r["other-batch"]["message"]
    r0, r1 = (r["rank1-bad-arg"] for r in two_ranks)
    assert r1["raised"] == "ValueError" and "search must be" in r1["message"], r1
    assert r0["raised"] == "TuneError" and "rank 1 refused" in r0["message"], r0


def test_single_rank_step_exception_propagates_and_state_is_restored():
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=32 << 20)
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = torch.optim.Adam(model.parameters())
        before = [p.detach().clone() for p in model.parameters()]
        class Mine(Exception):
            pass
        def make_batch(b):
            if b >= 4:
                raise Mine(b)
            return torch.randn(b, 64), torch.randint(0, 4, (b,))
        try:
            memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]), make_batch, 64,
                         probe_seconds=0.0, verbose=False)
        except Mine as e:
            assert e.args == (8,), e.args   # the fit probe at 8 x b0
        else:
            raise AssertionError("no exception")
        assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
        assert not opt.state and all(p.grad is None for p in model.parameters())
        r = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                         lambda b: (torch.randn(b, 64), torch.randint(0, 4, (b,))), 64, search="grid",
                         probe_seconds=0.0, verify_steps=3, verbose=False)
        assert r["largest_feasible"] == 64 and r["recommendation"] and len(r["verifications"]) == 1, r
        # A batch of another size would be measured as b: said once (sequence-first layouts pass quietly).
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                         lambda b: (torch.randn(b + 1, 64), torch.randint(0, 4, (b + 1,))), 64,
                         probe_seconds=0.0, verify_steps=1, verbose=False)
        said = [str(w.message) for w in seen if "no dimension of" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in seen]
        seq_first = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]).mean(0), xy[1]),
                                 lambda b: (torch.randn(3, b, 64), torch.randint(0, 4, (b,))), 64, search="grid",
                                 probe_seconds=0.0, verify_steps=1, verbose=False)
        assert seq_first["recommendation"], seq_first
        # Sequences of random length: a probe fits the lengths it drew, so training's longest may not fit.
        lengths = iter(range(2, 10**6))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]).mean(0), xy[1]),
                         lambda b: (torch.randn(next(lengths) % 7 + 1, b, 64), torch.randint(0, 4, (b,))), 64,
                         probe_seconds=0.0, verify_steps=2, verbose=False)
        said = [str(w.message) for w in seen if "batches of different shapes" in str(w.message)]
        assert len(said) == 1 and "make_batch should return training's largest batch" in said[0], said
        for bad in (True, 16.0, torch.tensor(16), "16"):
            try:
                memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                             lambda b: (torch.randn(b, 64), torch.randint(0, 4, (b,))), bad, verbose=False)
            except TypeError as e:
                assert "global_batch must be an int" in str(e), e
            else:
                raise AssertionError(f"global_batch={bad!r} was taken")
        print("ok")
    """, timeout=120)


def test_every_tensor_the_optimizer_updates_and_the_random_state_come_back():
    # See Note [State copies outside the cap]: a channels_last conv net wrote its restore into a copy; a
    # loss head the optimizer trains beside the model stayed trained; the probes moved the RNG.
    run_ok("""
        import random, numpy as np, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten()).to(memory_format=torch.channels_last)
        head = nn.Linear(8, 4)  # in the loss, not the model
        opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.5, momentum=0.9)
        assert not model[0].weight.is_contiguous()
        tensors = list(model.parameters()) + list(head.parameters())
        before = [t.detach().clone() for t in tensors]
        strides = [t.stride() for t in tensors]
        rng = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
        make = lambda b: (torch.randn(b, 3, 8, 8).to(memory_format=torch.channels_last), torch.randint(0, 4, (b,)))
        r = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(head(m(xy[0])), xy[1]), make, 16,
                         probe_seconds=0.0, verify_steps=2, verbose=False)
        assert r["recommendation"], r
        assert [torch.equal(a, t) for a, t in zip(before, tensors)] == [True] * len(tensors)
        assert [t.stride() for t in tensors] == strides and not opt.state
        assert torch.equal(rng[0], torch.get_rng_state()) and rng[1] == random.getstate()
        assert (rng[2] == np.random.get_state()[1]).all()
        print("ok")
    """, timeout=120)


def test_training_flags_gradients_step_hooks_and_peaks_are_the_scripts_after_tune():
    # See Note [What the probes leave as it was]: an evaluate() that calls model.eval() left the model in
    # eval mode; gradients the script held came back None; an EMA in a step hook took in the probes'
    # weights; the probes' peak stayed the allocator's peak.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=256 << 20)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        hooked = []
        opt.register_step_post_hook(lambda o, args, kwargs: hooked.append(1))
        X, Y = torch.randn(64, 16), torch.randint(0, 4, (64,))
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        loss = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        def evaluate(m):
            m.eval()
            out = m(X)
            return (out.argmax(1) == Y).float().mean().item(), F.cross_entropy(out, Y).item()
        loss(model, make(8)).backward()  # an accumulation in progress: the script holds gradients
        grads = [p.grad.clone() for p in model.parameters()]
        model[3].eval()                  # one module's own mode, kept as it was
        r = memcomm.tune(model, opt, loss, make, 32, evaluate=evaluate, probe_seconds=0.0, verify_steps=2,
                         verbose=False, max_trials=3)
        assert r["recommendation"], r
        assert [m.training for m in model.modules()] == [True, True, True, True, False, True]
        assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
        assert hooked == [] and len(opt._optimizer_step_post_hooks) == 1
        stats = memcomm.allocator.memory_stats("cpu")
        assert stats["allocated_bytes.all.peak"] == stats["allocated_bytes.all.current"], stats
        opt.step()
        assert hooked == [1]
        print("ok")
    """, timeout=120)


def test_resized_buffers_module_attributes_held_gradients_and_step_hooks_are_the_scripts_after_tune():
    # See Note [What the probes leave as it was]: a quantization observer's empty buffer, resized by its
    # first forward, could not be resized after tune's copy (t.numpy() fixes a storage's size), and came
    # back with the probe's shape; a cache's length kept in an int beside its buffer (rotary-embedding-
    # torch) said "cached" over the buffer's restored zeros; a metric's tensor and list states kept the
    # probes' samples; an attribute a probe set to None, or a head it added, stayed so; a frozen
    # parameter's gradient was dropped, and the probes' gradients piled up on a loss's own temperature; an optimizer's own step_hook (Opacus's privacy accountant) and
    # torch's global step hooks (an EMA) ran on every probe step.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=256 << 20)
        class Observer(nn.Module):  # torch.ao.quantization's per-channel observers' pattern
            def __init__(self):
                super().__init__()
                self.register_buffer("max_val", torch.tensor([]))
            def forward(self, x):
                with torch.no_grad():
                    m = x.amax(0)
                    if self.max_val.numel() == 0:
                        self.max_val.resize_(m.shape)
                        self.max_val.copy_(m)
                    else:
                        torch.maximum(self.max_val, m, out=self.max_val)
                return x
        class Cached(nn.Module):  # a table cached in a buffer, its length in an int; a metric's sums and list
            def __init__(self):
                super().__init__()
                self.register_buffer("table", torch.zeros(64), persistent=False)
                self.cached_len = 0
                self.total, self.seen = torch.zeros(()), []
                self.merged = torch.ones(2)  # an evaluation's cache, which a training forward drops
            def forward(self, x):
                if self.cached_len < x.shape[1]:
                    self.table[: x.shape[1]] = torch.arange(x.shape[1]) + 1.0
                    self.cached_len = x.shape[1]
                self.total += x.detach().sum()
                self.seen.append(x.shape[0])
                self.merged = None
                if not hasattr(self, "extra"):  # a head a forward adds
                    self.extra = nn.Linear(1, 1)
                return x * self.table[: x.shape[1]]
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), Observer(), Cached(), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        averaged = []  # an EMA on torch's global step hook
        from torch.optim.optimizer import register_optimizer_step_post_hook
        handle = register_optimizer_step_post_hook(lambda o, args, kwargs: averaged.append(1))
        charged = []
        opt.step_hook = lambda o: charged.append(1)
        real_step = opt.step
        def step(*args, **kwargs):  # as Opacus's DPOptimizer calls its hook
            if opt.step_hook:
                opt.step_hook(opt)
            return real_step(*args, **kwargs)
        opt.step = step
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        temperature = torch.ones((), requires_grad=True)  # a loss's own, trained by another optimizer
        temperature.grad = torch.full((), 2.0)
        extra = torch.zeros(1, requires_grad=True)
        def loss(m, xy):  # a loss that unfreezes a layer and adds a param group on its own
            m[0].bias.requires_grad_(True)
            if len(opt.param_groups) < 2:
                opt.add_param_group({"params": [extra]})
            return F.cross_entropy(m(xy[0]) / temperature, xy[1]) + 0 * extra.sum()
        model[0].bias.requires_grad_(False)
        model[4].bias.requires_grad_(False)  # frozen, with a gradient the script set
        model[4].bias.grad = torch.full((4,), 0.5)
        r = memcomm.tune(model, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
        assert r["recommendation"], r
        assert torch.equal(model[4].bias.grad, torch.full((4,), 0.5))
        assert not model[0].bias.requires_grad and len(opt.param_groups) == 1
        assert torch.equal(temperature.grad, torch.full((), 2.0))  # the probes' gradients did not pile up
        assert model[1].max_val.shape == (0,) and model[1].max_val.untyped_storage().resizable()
        assert model[2].cached_len == 0 and model[2].table.abs().sum() == 0
        assert model[2].total == 0 and model[2].seen == [] and torch.equal(model[2].merged, torch.ones(2))
        assert not hasattr(model[2], "extra") and len(list(model.parameters())) == 4
        assert charged == [] and callable(opt.step_hook)
        loss(model, make(8)).backward()
        opt.step()
        assert model[1].max_val.shape == (32,) and model[2].cached_len == 32 and charged == [1] and averaged == [1]
        handle.remove()
        print("ok")
    """, timeout=120)


def test_an_optimizer_that_wraps_another_has_both_states_back_after_tune():
    # See Note [What the probes leave as it was]: timm's Lookahead keeps Adam's moments in its inner
    # optimizer, and its own state dict stays empty: the probes' steps stayed in Adam's.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        class Lookahead(torch.optim.Optimizer):
            def __init__(self, base):
                self._base_optimizer, self.param_groups, self.defaults = base, base.param_groups, base.defaults
                self.state, self.steps = {}, 0
                self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
            def step(self, closure=None):
                self._base_optimizer.step()
                for g in self.param_groups:
                    g["lookahead_step"] = g.get("lookahead_step", 0) + 1
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = Lookahead(torch.optim.AdamW(model.parameters(), lr=1e-3))
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        loss = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        loss(model, make(8)).backward()
        opt.step()
        inner = opt._base_optimizer
        before = {id(p): {k: v.clone() for k, v in s.items()} for p, s in inner.state.items()}
        groups = [dict(g, params=None) for g in opt.param_groups]
        inner.register_step_post_hook(lambda o, args, kwargs: 1 / 0)  # an inner hook must not run either
        r = memcomm.tune(model, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
        assert r["recommendation"], r
        after = {id(p): s for p, s in inner.state.items()}
        assert after.keys() == before.keys()
        assert all(torch.equal(v, after[i][k]) for i, s in before.items() for k, v in s.items())
        assert [dict(g, params=None) for g in opt.param_groups] == groups
        assert len(inner._optimizer_step_post_hooks) == 1
        print("ok")
    """, timeout=120)


def test_an_optimizers_own_counter_and_the_private_generators_it_and_the_model_hold_come_back():
    # See Note [What the probes leave as it was]: timm's Kron draws when to precondition from a
    # random.Random of its own and counts its updates in an attribute; both moved with the probes' steps.
    # A module's own torch.Generator (a noise layer) and numpy Generator moved with the probes' forwards.
    run_ok("""
        import random, numpy as np, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        class Noisy(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen, self.np_gen = torch.Generator().manual_seed(1), np.random.default_rng(2)
            def forward(self, x):
                scale = float(self.np_gen.uniform(0.9, 1.1))
                return x * scale + 0.01 * torch.randn(x.shape, generator=self.gen)
        class Counting(torch.optim.SGD):
            def __init__(self, params):
                super().__init__(params, lr=0.1)
                self.rng, self.updates, self.history = random.Random(3), 0, []
            def step(self, closure=None):
                self.updates += 1
                self.history.append(self.rng.random())
                return super().step(closure)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), Noisy(), nn.ReLU(), nn.Linear(32, 4))
        opt = Counting(model.parameters())
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        loss = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        loss(model, make(8)).backward()
        opt.step()
        noisy = model[1]
        before = (opt.rng.getstate(), opt.updates, list(opt.history), noisy.gen.get_state().clone(),
                  noisy.np_gen.bit_generator.state)
        r = memcomm.tune(model, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
        assert r["recommendation"], r
        assert opt.rng.getstate() == before[0], "the optimizer's generator moved"
        assert (opt.updates, opt.history) == (before[1], before[2]), (opt.updates, len(opt.history))
        assert torch.equal(noisy.gen.get_state(), before[3]), "the module's torch.Generator moved"
        assert noisy.np_gen.bit_generator.state == before[4], "the module's numpy Generator moved"
        print("ok")
    """, timeout=120)


def test_modules_the_loss_runs_through_beside_the_model_keep_their_statistics():
    # See Note [What the probes leave as it was] (in_reach): tuning a GAN's generator, whose loss runs
    # through the discriminator, moved the discriminator's BatchNorm statistics (num_batches_tracked
    # 18 -> 70 in pytorch/examples' dcgan). Named by a closure, by a bound method's object, inside a
    # container that holds the model too, by a loss module, through a trainer's self.
    run_ok("""
        import random, torch, torch.nn as nn, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        torch.manual_seed(0)
        class GAN(nn.Module):
            def __init__(self):
                super().__init__()
                self.G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
                self.D = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
        class Trainer:
            def __init__(self, D):
                self.D = D
            def loss(self, m, z):
                return -self.D(m(z)).mean()
            def lambda_loss(self):
                return lambda m, z: -self.D(m(z)).mean()  # D reached through self
        class Critic(nn.Module):  # a loss that is a module holding D
            def __init__(self, D):
                super().__init__()
                self.D = D
            def forward(self, m, z):
                return -self.D(m(z)).mean()
        make = lambda b: torch.randn(b, 8)
        for how in ("closure", "method", "container", "module", "self"):
            gan = GAN()
            G, D = gan.G, gan.D
            G.rng = random.SystemRandom()  # no state to take: skipped, not a failure
            opt = torch.optim.Adam(G.parameters(), lr=1e-3)
            D(torch.randn(4, 16))  # the script's own steps moved the statistics once
            loss = {"closure": lambda m, z: -D(m(z)).mean(), "method": Trainer(D).loss,
                    "container": lambda m, z: -gan.D(m(z)).mean(), "module": Critic(D),
                    "self": Trainer(D).lambda_loss()}[how]
            bn = D[1]
            before = (bn.running_mean.clone(), bn.running_var.clone(), int(bn.num_batches_tracked))
            r = memcomm.tune(G, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
            assert r["recommendation"], (how, r)
            after = (bn.running_mean, bn.running_var, int(bn.num_batches_tracked))
            assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]), how
            assert before[2] == after[2], (how, before[2], after[2])
            assert D.training and all(p.grad is None for p in D.parameters()), how
        def unassigned():  # loss_fn's closure holds a variable assigned after tune(): an empty cell
            def loss(m, z):
                return -D(m(z)).mean() if z is not None else late
            r = memcomm.tune(G, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
            late = 0
            return r
        assert unassigned()["recommendation"]
        print("ok")
    """, timeout=180)


def test_state_in_containers_numpy_and_lazily_registered_hooks_comes_back():
    # See Note [What the probes leave as it was]: a teacher kept in a dict and peers in a list on a
    # trainer (in_reach looks into containers), a loss module's memory bank of tensors in a dict and a
    # list (their bytes), an optimizer's numpy statistics, and a hook BYOL registers at the first forward
    # behind a flag (each probe added one more) all kept the probes' changes.
    run_ok("""
        import numpy as np, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        torch.manual_seed(0)
        class Bank(nn.Module):
            def __init__(self):
                super().__init__()
                self.queue, self.seen = {"keys": torch.zeros(4)}, [torch.zeros(2)]
                self.hooked = False
            def forward(self, z):
                if not self.hooked:
                    self.register_forward_hook(lambda m, i, o: None)
                    self.hooked = True
                self.queue["keys"].add_(z.detach().mean())
                self.seen[0].add_(1)
                return z.square().mean()
        class Counting(torch.optim.SGD):
            def __init__(self, params):
                super().__init__(params, lr=0.1)
                self.hist = np.zeros(3)
            def step(self, closure=None):
                self.hist += 1
                return super().step(closure)
        class Trainer:
            def __init__(self, peers):
                self.peers = peers
        model = nn.Linear(8, 8)
        teachers = {"t": nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))}
        trainer = Trainer([nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))])
        bank = Bank()
        opt = Counting(model.parameters())
        def loss(m, x):
            y = m(x)
            return bank(y) + (teachers["t"](x) - y).square().mean() + trainer.peers[0](y).mean()
        bank(torch.randn(4, 8))  # the script's first step registered the hook
        stats = lambda: [teachers["t"][1].running_mean.clone(), trainer.peers[0][1].running_mean.clone(),
                         bank.queue["keys"].clone(), bank.seen[0].clone(), torch.from_numpy(opt.hist.copy())]
        before, hooks = stats(), len(bank._forward_hooks)
        r = memcomm.tune(model, opt, loss, lambda b: torch.randn(b, 8), 32, probe_seconds=0.0, verify_steps=2,
                         verbose=False, max_trials=3)
        assert r["recommendation"], r
        assert [torch.equal(a, b) for a, b in zip(before, stats())] == [True] * 5, (before, stats())
        assert len(bank._forward_hooks) == hooks == 1, len(bank._forward_hooks)
        print("ok")
    """, timeout=120)


def test_slots_filled_or_expanded_buffers_flat_gradients_and_new_group_keys_are_as_they_were():
    # See Note [State copies outside the cap] and Note [What the probes leave as it was]: a buffer registered as
    # None and filled at the first forward shifted BatchNorm's statistics onto its neighbours; an expanded buffer
    # (stride 0) could not be written back; gradients held as views of one flat buffer came back as new tensors,
    # the buffer holding a probe's; a key the optimizer's first step adds to its group (timm's Lamb) stayed.
    # tune() inside no_grad() still trains its probes.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        class Table(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("table", None, persistent=False)
                self.register_buffer("scale", torch.linspace(1, 2, 8).expand(4, 8), persistent=False)
            def forward(self, x):
                if self.table is None:
                    self.table = torch.ones(x.shape[1])
                    self.scale[0].mul_(3)  # every row: they share their bytes
                return x * self.scale[0] + self.table
        class CountingSGD(torch.optim.SGD):
            def step(self, closure=None):
                for g in self.param_groups:
                    g["step"] = g.get("step", 0) + 1
                return super().step(closure)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), Table(), nn.BatchNorm1d(8), nn.Linear(8, 2))
        opt = CountingSGD(model.parameters(), lr=0.1)
        flat = torch.zeros(sum(p.numel() for p in model.parameters()))
        views = list(torch.split(flat, [p.numel() for p in model.parameters()]))
        for p, v in zip(model.parameters(), views):
            p.grad = v.view_as(p)
        flat.normal_()
        grads, before = [p.grad for p in model.parameters()], flat.clone()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        scale = model[1].scale.clone()
        make = lambda b: (torch.randn(b, 8), torch.randint(0, 2, (b,)))
        with torch.no_grad():
            r = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]), make, 16,
                             probe_seconds=0.0, verify_steps=2, verbose=False, max_trials=3)
        assert r["recommendation"], r
        assert model[1].table is None and torch.equal(model[1].scale, scale) and model[1].scale.stride() == (0, 1)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
        assert all(g is p.grad for g, p in zip(grads, model.parameters())) and torch.equal(flat, before)
        assert "step" not in opt.param_groups[0]
        print("ok")
    """, timeout=120)


def test_a_model_that_cannot_step_on_one_sample_is_tuned_from_two():
    # See Note [A model that cannot step on one sample]: BatchNorm1d raised at the first step, at b = 1.
    run_ok("""
        import warnings, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            r = memcomm.tune(model, opt, step, make, 32, search="grid", probe_seconds=0.0, verify_steps=0,
                             verbose=False)
        assert any("micro-batch 1 raised ValueError" in str(w.message) for w in seen), [str(w.message) for w in seen]
        assert r["recommendation"] and min(t["micro_batch"] for t in r["trials"]) == 2, r["trials"]
        # A step that raises at b = 2 as well is the user's error, as it was.
        bad = lambda m, xy: (_ for _ in ()).throw(KeyError("mine"))
        try:
            memcomm.tune(model, opt, bad, make, 32, verbose=False)
        except KeyError as e:
            assert e.args == ("mine",), e
        else:
            raise AssertionError("no exception")
        print("ok")
    """, timeout=120)


def test_numpy_numbers_are_numbers_a_tensor_lr_stays_itself_and_a_bad_evaluate_result_is_named():
    # np.float32 is no Python float (np.float64 is): buckets=[np.float32(1)] was a TypeError; a tensor lr came back
    # as a copy, so a scheduler holding it no longer moved the optimizer's.
    run_ok("""
        import numpy as np, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=np.int64(32 << 20), gc_threshold=np.float32(0.5))
        model = nn.Linear(8, 2)
        opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
        lr = opt.param_groups[0]["lr"]
        loss = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        batch = lambda b: (torch.randn(b, 8), torch.randint(0, 2, (b,)))
        r = memcomm.tune(model, opt, loss, batch, np.int64(16), probe_seconds=0.0, verify_steps=2, verbose=False,
                         buckets=[np.float32(1.0), np.int32(5)])
        assert r["recommendation"]["micro_batch"] * r["recommendation"]["accum"] == 16, r
        assert opt.param_groups[0]["lr"] is lr and lr.item() == np.float32(0.1), opt.param_groups[0]
        assert [v["steps"] for v in r["verifications"]] == [2], r["verifications"]  # as asked, not 50
        try:
            memcomm.tune(model, opt, loss, batch, 16, probe_seconds=0.0, verify_steps=1, verbose=False,
                         evaluate=lambda m: None)
        except TypeError as e:
            assert "evaluate(model) must return (accuracy, loss)" in str(e), e
        else:
            raise AssertionError("evaluate returning None was taken")
        # An evaluation pass whose own batch does not fit: three long runs went down to smaller micro-batches
        # that cannot help, and the failure blamed the training (See Note [Verifying the winner]).
        r = memcomm.tune(model, opt, loss, batch, 16, probe_seconds=0.0, verify_steps=2, verbose=False,
                         evaluate=lambda m: (0.0, m(torch.randn(1 << 20, 8)).sum().item()))  # 32 MiB under 32
        assert r["recommendation"] is None and len(r["verifications"]) == 1, r
        assert "then the evaluation ran out of memory" in r["failure"], r["failure"]
        print("ok")
    """, timeout=120)


def test_a_global_batch_whose_step_would_take_days_is_a_value_error_not_a_silent_verification():
    # memcomm-tune's Note [A verification that would take hours]: the same plan, from the same code.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=32 << 20)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))  # ~1e5 samples/s here
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = lambda m, xy: F.cross_entropy(m(xy[0]), xy[1])
        batch = lambda b: (torch.randn(b, 64), torch.randint(0, 2, (b,)))
        try:  # a step of 2^40 samples: months
            memcomm.tune(model, opt, loss, batch, 1 << 40, probe_seconds=0.0, max_trials=6, verbose=False)
        except ValueError as e:
            assert "would take about" in str(e) and "smaller global_batch" in str(e), e
        else:
            raise AssertionError("a verification of days was started")
        print("ok")
    """, timeout=180)


def test_sparse_gradients_cross_the_buckets_and_come_back_sparse():
    # 2-rank tuning of a model with nn.Embedding(sparse=True) failed in its first all-reduce: the
    # buckets reshaped the sparse gradient (Note [Gradient buckets from Python]).
    run_ok("""
        import tempfile, torch, torch.nn as nn, torch.distributed as dist
        from memcomm._tuner.buckets import Buckets
        from memcomm._tuner.agreement import Group
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
        emb, lin = nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1)
        lin(emb(torch.tensor([1, 3, 3]))).sum().backward()
        want_e, want_l = emb.weight.grad.to_dense().clone(), lin.weight.grad.clone()
        Buckets([emb.weight, lin.weight, lin.bias], 25.0).all_reduce(Group(None, torch.device("cpu")))
        assert emb.weight.grad.is_sparse and torch.equal(emb.weight.grad.to_dense(), want_e)
        assert torch.equal(lin.weight.grad, want_l)
        torch.optim.SparseAdam([emb.weight]).step()   # still a gradient SparseAdam takes
        dist.destroy_process_group()
        print("ok")
    """, timeout=120)


def test_an_allocator_installed_after_the_model_is_warned_about():
    # The parameters sat outside the cap and the peaks, and the recommendation changed, silently.
    run_ok("""
        import warnings, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        model = nn.Linear(1024, 1024)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                         lambda b: (torch.randn(b, 1024), torch.randint(0, 10, (b,))), 16, probe_seconds=0.0,
                         verify_steps=1, verbose=False)
        assert any("before building the model" in str(x.message) for x in w), [str(x.message) for x in w]
        print("ok")
    """, timeout=180)


def test_verbose_probe_lines_say_what_is_probed_then_how_it_went():
    # A probe's line is printed as the probe starts (one was silent for many seconds), and ends with its outcome.
    out = run_python("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        model = nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                     lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,))), 16, probe_seconds=0.0, verify_steps=1,
                     max_trials=3, verbose=True)
    """, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.lstrip().startswith("probe")]
    assert lines and all(re.match(r"  probe +\d+: b=\d+ K=\d+ bucket=[\d.]+ MiB: (fits, peak reserved|out of memory in)", line)
                         for line in lines), out.stdout


def test_a_limit_below_the_model_is_a_value_error_before_any_probe():
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        memcomm.use_allocator("cpu", memory_limit=8 << 20)
        model = nn.Linear(1024, 1024)  # 4 MiB of parameters: with gradients and momentum, over 8 MiB
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        asked = []
        def make_batch(b):
            asked.append(b)
            return torch.randn(b, 1024)
        try:
            memcomm.tune(model, opt, lambda m, x: m(x).sum(), make_batch, 8, verbose=False)
        except ValueError as e:
            assert "below the model's own size" in str(e), e
            assert set(asked) <= {1}, asked  # at most the first step at b = 1: no probe ran
            print("ok")
    """, timeout=60)


def test_parameters_the_loss_never_reaches_do_not_refuse_a_model_whose_steps_fit():
    # A 16 MiB head the forward never calls, with momentum: 48 MiB of "state" by the estimate, under a
    # 32 MiB cap where every step fits (it has no gradient and no momentum). It was refused up front.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=32 << 20)
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body, self.unused_head = nn.Linear(64, 4), nn.Linear(2048, 2048)
            def forward(self, x):
                return self.body(x)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        r = memcomm.tune(model, opt, lambda m, xy: F.cross_entropy(m(xy[0]), xy[1]),
                         lambda b: (torch.randn(b, 64), torch.randint(0, 4, (b,))), 16, probe_seconds=0.0,
                         verify_steps=1, max_trials=3, verbose=False)
        assert r["recommendation"], r
        print("ok")
    """, timeout=120)


def test_a_loss_backward_cannot_take_or_data_that_runs_out_is_a_value_error_naming_the_argument():
    # torch's words ("grad can be implicitly created only for scalar outputs", "element 0 of tensors does
    # not require grad") named neither loss_fn nor the fix, and a loader that ran out escaped as a bare
    # StopIteration with no message.
    run_ok("""
        import torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        model = nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        xy = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        data = torch.utils.data.TensorDataset(*xy(100))
        loader = lambda b: next(iter(torch.utils.data.DataLoader(data, batch_size=b, drop_last=True)))
        cases = [(lambda m, b: F.cross_entropy(m(b[0]), b[1], reduction="none"), xy, "scalar loss, got a tensor of shape ("),
                 (lambda m, b: F.cross_entropy(m(b[0]).detach(), b[1]), xy, "does not require a gradient"),
                 (lambda m, b: F.cross_entropy(m(b[0]), b[1]), loader, "raised StopIteration: its data ran out")]
        for loss_fn, make_batch, said in cases:
            try:
                memcomm.tune(model, opt, loss_fn, make_batch, 128, probe_seconds=0.0, verify_steps=1, verbose=False)
                raise AssertionError("no error for " + said)
            except ValueError as e:
                assert said in str(e), e
        print("ok")
    """, timeout=120)


def test_a_model_left_in_eval_mode_is_probed_in_training_mode_and_left_in_eval_mode():
    # See Note [Probes step in training mode]: tune() after a validation pass probed without dropout
    # masks or BatchNorm's batch statistics, and recommended micro-batches that training could not run.
    run_ok("""
        import warnings, torch, torch.nn as nn, torch.nn.functional as F, memcomm
        torch.set_num_threads(1)
        memcomm.use_allocator("cpu", memory_limit=256 << 20)
        model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Dropout(0.5), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        modes = set()
        def loss(m, xy):
            modes.add((m.training, m[1].training, m[2].training))
            return F.cross_entropy(m(xy[0]), xy[1])
        make = lambda b: (torch.randn(b, 16), torch.randint(0, 4, (b,)))
        model.eval()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = memcomm.tune(model, opt, loss, make, 32, probe_seconds=0.0, verify_steps=2, verbose=False,
                             max_trials=3)
        assert r["recommendation"], r
        assert modes == {(True, True, True)}, modes
        said = [str(w.message) for w in caught if "eval mode" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
        assert not any(m.training for m in model.modules())
        print("ok")
    """, timeout=120)


def test_a_step_that_does_not_fit_beside_a_model_that_does_says_so():
    # 771 KiB of state under a 4 MiB cap, and a step whose batch alone takes 8 MiB at micro-batch 1:
    # "below the model's own size" named the wrong culprit.
    run_ok("""
        import torch, torch.nn as nn, memcomm
        memcomm.use_allocator("cpu", memory_limit=4 << 20)
        model = nn.Linear(256, 256)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        try:
            memcomm.tune(model, opt, lambda m, x: m(x).sum(), lambda b: torch.randn(b * 8192, 256), 8, verbose=False)
        except ValueError as e:
            assert "is too small for one step at micro-batch 1" in str(e), e
            assert "771.0 KiB of parameters, gradients and optimizer state" in str(e), e
            print("ok")
    """, timeout=60)


def test_the_cache_key_names_the_cpu_and_the_threads_a_step_runs_on():
    # It said "cpu" alone: a cache shared over machines reused speeds measured elsewhere.
    from memcomm._tuner.setup import _device_description
    d = _device_description(torch.device("cpu"))
    assert d.startswith("cpu") and d.endswith(f" x{torch.get_num_threads()} threads"), d
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    if names:
        assert d.startswith(f"cpu:{names[0]} x"), d


def _model_and_opt():
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _loss(m, x):
    return m(x).sum()


def _batch(b):
    return torch.randn(b, 4)


@pytest.mark.parametrize("change, error, words", [
    ({"model": "not a module"}, TypeError, "torch.nn.Module"),
    ({"optimizer": object()}, TypeError, "torch.optim.Optimizer"),
    ({"optimizer": torch.optim.LBFGS([nn.Parameter(torch.zeros(1))])}, TypeError, "LBFGS needs one"),
    ({"loss_fn": 3}, TypeError, "loss_fn must be callable"),
    ({"make_batch": None}, TypeError, "make_batch must be callable"),
    ({"global_batch": 0}, ValueError, "global_batch"),
    ({"global_batch": "64"}, TypeError, "global_batch must be an int"),
    ({"search": "bogus"}, ValueError, "search must be one of"),
    ({"any_micro_batch": True}, ValueError, "needs fit_only"),
    ({"max_trials": 0}, ValueError, "max_trials"),
    ({"measured_steps": 2}, ValueError, "measured_steps"),
    ({"probe_seconds": float("nan")}, ValueError, "probe_seconds"),
    ({"buckets": "1,5"}, TypeError, "buckets must be a sequence"),
    ({"buckets": [1, -5]}, ValueError, "buckets"),
    ({"bucket_mb": True}, TypeError, "bucket_mb"),
    ({"memory_limit": -1}, ValueError, "memory_limit"),
    ({"verbose": "yes"}, TypeError, "verbose"),
    ({"evaluate": 1}, TypeError, "evaluate"),
    ({"model": torch.nn.LazyLinear(4)}, ValueError, "its first forward has not made yet"),
    ({"optimizer": torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)}, ValueError,
     "updates none of the model's parameters"),
])
def test_bad_arguments_are_python_exceptions(change, error, words):
    model, opt = _model_and_opt()
    args = {"model": model, "optimizer": opt, "loss_fn": _loss, "make_batch": _batch, "global_batch": 64}
    args.update(change)
    with pytest.raises(error, match=words):
        memcomm.tune(**args)


def test_a_sharded_model_is_refused_with_the_reason():
    # FSDP2 and tensor parallelism failed inside torch ("as_strided not supported with DTensor"), and
    # FSDP1's probes added memcomm's all-reduce to FSDP's own communication.
    out = run_python("""
        import torch, torch.distributed as dist, memcomm
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        memcomm.use_allocator("cpu", memory_limit=64 << 20)
        blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        fully_shard(blocks[0])
        tp = parallelize_module(torch.nn.Sequential(torch.nn.Linear(4, 4)), init_device_mesh("cpu", (1,)),
                                {"0": ColwiseParallel()})
        for model in (blocks, tp):
            try:
                memcomm.tune(model, torch.optim.SGD(model.parameters(), lr=0.1), lambda m, x: m(x).sum(),
                             lambda b: torch.randn(b, 4), 8)
            except TypeError as e:
                print(e)
        dist.destroy_process_group()
    """)
    assert out.returncode == 0, out.stderr
    assert "the model is sharded by FSDP: memcomm.tune probes data-parallel steps" in out.stdout, out.stdout
    assert "the model is sharded by DTensor" in out.stdout, out.stdout


def test_without_memcomms_cpu_allocator_it_says_how_to_install_it():
    model, opt = _model_and_opt()
    with pytest.raises(RuntimeError, match=r"use_allocator\('cpu', memory_limit"):
        memcomm.tune(model, opt, _loss, _batch, 64)


def test_the_binding_returns_the_probes_own_exception_and_checks_results():
    config = {"global_batch": 64, "world": 1, "memory_limit": 1 << 30, "max_trials": 24, "search": "memcomm",
              "fit_only": False, "any_micro_batch": False, "bucket_mb": 25.0, "bucket_candidates": [],
              "measured_steps": 3}

    class Mine(Exception):
        pass

    def raising(q):
        raise Mine(q["micro_batch"])
    with pytest.raises(Mine) as e:
        _memcomm.tune_search(config, raising, None, {})
    assert e.value.args == (1,)
    with pytest.raises(TypeError, match="probe result"):
        _memcomm.tune_search(config, lambda q: {"oom": 1}, None, {})
    with pytest.raises(KeyError, match="step_s"):
        _memcomm.tune_search(config, lambda q: {"oom": False, "oom_where": "", "oom_rank": -1, "peak_allocated": 1,
                                                "peak_reserved": 1}, None, {})
    with pytest.raises(ValueError, match="search must be"):
        _memcomm.tune_search(dict(config, search="nope"), raising, None, {})
