"""The probe and the verification that memcomm._memcomm.tune_search calls, run on the user's step."""
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from memcomm import _memcomm
from memcomm._tuner.agreement import failure
from memcomm._tuner.options import Options
from memcomm._tuner.runner import Plan, Runner, StepTiming


def _step_seconds(timed: List[StepTiming], measured_accum: int, accum: int) -> float:
    """memcomm-tune's Note [Probing long accumulations]: early micro-steps averaged over every timed
    step, the synchronising last one by its median, scaled to the K asked for (the C++ function)."""
    return _memcomm.probe_step_time(sum(t.early_s for t in timed), [t.last_s for t in timed], accum, measured_accum)


class Prober:
    """What tune_search calls: probe(query) measures one candidate, verify(recommendation) runs the winner."""

    def __init__(self, runner: Runner, o: Options, verbose: bool, evaluate: Optional[Callable]):
        self.r, self.o, self.verbose, self.evaluate, self.n = runner, o, verbose, evaluate, 0

    def probe(self, q: Dict[str, Any]) -> Dict[str, Any]:
        """What is probed is said as the probe starts (one can take many seconds), its outcome when it
        ends, as memcomm-tune prints them; a probe that raises ends its line."""
        self.n += 1
        printing = self.verbose and self.r.group.rank == 0
        if printing:
            print(f"  probe {self.n:>2}: b={q['micro_batch']} K={q['accum']} bucket={q['bucket_mb']:g} MiB: ", end="",
                  flush=True)
        start = time.perf_counter()
        try:
            x = self._measure(q)
        except BaseException:
            if printing:
                print("failed", flush=True)
            raise
        x["wall_s"] = time.perf_counter() - start
        if printing:
            self._print_outcome(x)
        return x

    def _measure(self, q: Dict[str, Any]) -> Dict[str, Any]:
        r, b = self.r, q["micro_batch"]
        x = {"oom": False, "oom_where": "", "oom_rank": -1, "peak_allocated": -1, "peak_reserved": -1, "step_s": 0.0,
             "step_noise": 0.0, "exposed_comm_s": 0.0, "measured_accum": 0, "wall_s": 0.0, "loader_allowance": 0}
        failed = r.set_buckets(q["bucket_mb"])
        if failed is not None:
            x.update(oom=True, oom_where=r.group.where(failed), oom_rank=failed[0])
            return x
        state = r.save()
        r.memory.release_cache()
        r.memory.reset_peaks()
        accum = min(q["accum"], self.o.accum_cap)
        plan = Plan(max(accum, 2), q["measured_steps"], self.o.probe_seconds, max(q["measured_steps"], 200))
        out = r.run_steps(b, accum, plan)
        x["measured_accum"] = accum
        if out.oom_where:
            x.update(oom=True, oom_where=out.oom_where, oom_rank=out.oom_rank)
        else:
            alloc, resv = r.memory.peaks()
            exposed = sum(t.comm_s for t in out.timed) / max(1, len(out.timed))
            agreed = r.group.max([_step_seconds(out.timed, accum, q["accum"]), exposed, alloc, resv,
                                  _memcomm.step_noise([t.early_s + t.last_s for t in out.timed])])
            x.update(step_s=agreed[0], exposed_comm_s=agreed[1], peak_allocated=int(agreed[2]),
                     peak_reserved=int(agreed[3]), step_noise=agreed[4])
        r.recover(state)
        return x

    @staticmethod
    def _print_outcome(x: Dict[str, Any]) -> None:
        if x["oom"]:
            print(f"out of memory in {x['oom_where']} ({x['wall_s']:.1f} s)", flush=True)
        else:
            print(f"fits, peak reserved {x['peak_reserved'] / 2**20:.1f} MiB, step {x['step_s'] * 1e3:.1f} ms "
                  f"({x['wall_s']:.1f} s)", flush=True)

    def verify(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        """The winner's long run: rec["verify_steps"] full steps (all K micro-steps; verify_steps cut to a
        time budget, memcomm-tune's Note [A verification that would take hours]), then `evaluate`."""
        r, b, k, steps = self.r, rec["micro_batch"], rec["accum"], rec["verify_steps"]
        if self.verbose and r.group.rank == 0:
            print(f"  verifying b={b} K={k}: {steps} steps{rec['cut_note']}"
                  f"{' and an evaluation pass' if self.evaluate else ''}{rec['time_note']}", flush=True)
        v = {"steps": 0, "oom": False, "oom_where": "", "samples_per_s": 0.0, "peak_reserved": -1,
             "peak_allocated": -1, "eval_accuracy": 0.0, "eval_loss": 0.0,
             "evaluated": self.evaluate is not None}
        failed = r.set_buckets(rec["bucket_mb"])
        if failed is not None:
            return dict(v, oom=True, oom_where=r.group.where(failed))
        state = r.save()
        r.memory.release_cache()
        r.memory.reset_peaks()
        start = r.memory.clock()
        out = r.run_steps(b, k, Plan(0, steps, 0.0, steps))
        wall = r.memory.clock() - start
        v.update(steps=len(out.timed), oom=bool(out.oom_where), oom_where=out.oom_where)
        if not out.oom_where:
            v["samples_per_s"] = steps * b * k * r.group.world / r.group.max([wall])[0]
            self._evaluate(v)
            alloc, resv = r.memory.peaks()
            v["peak_allocated"], v["peak_reserved"] = (int(x) for x in r.group.max([alloc, resv]))
        r.recover(state)
        return v

    def _evaluate(self, v: Dict[str, Any]) -> None:
        """The user's evaluation, its out-of-memory agreed like a step's."""
        if self.evaluate is None:
            return
        failed = None
        try:
            with torch.no_grad():
                result = self.evaluate(self.r.model)
            try:
                acc, loss = result
            except (TypeError, ValueError):
                raise TypeError(f"evaluate(model) must return (accuracy, loss), got {result!r:.80}") from None
            v["eval_accuracy"], v["eval_loss"] = float(acc), float(loss)
        except Exception as e:  # noqa: BLE001
            failed = failure("evaluation", e)
        a = self.r.agree(failed, False)
        if a.oom is not None:
            v.update(oom=True, oom_where=self.r.group.where(a.oom))
