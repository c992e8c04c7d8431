"""What watching a model's forward costs per call, the two ways memcomm.profile has done it:
hooks on the module (register_forward_pre_hook + register_forward_hook, always_call) and a wrapper
of its class's __call__ (_CallWrap, Note [Forwards through the class] in
python/memcomm/_profiler/hooks.py), with and without the wrapper of its class's forward that passes
the call through inside the forward (Note [Forwards called directly]), against a call with none,
alternated in one run.

    PYTHONPATH=build/python .venv/bin/python bench/python/watch_overhead.py [--calls 100000 --rounds 5]

The module is nn.Identity on a one-element tensor, so the figures are the call machinery's alone;
the watch functions do nothing, so they show the mechanism's cost, not the recorder's. Prints the
median ns per call of each condition, and each one's extra over the plain call.
"""
import argparse
import statistics
import time

import torch

from memcomm._profiler.hooks import _CallWrap


def _pre(module, args):
    return None


def _post(module, args, output):
    return None


def _on_call(call, module, args, kwargs):
    _pre(module, args)
    try:
        return call(module, *args, **kwargs)
    finally:
        _post(module, args, None)


def _inside_forward(call, module, args, kwargs):
    return call(module, *args, **kwargs)


def per_call_ns(module, x, calls):
    start = time.perf_counter()
    for _ in range(calls):
        module(x)
    return (time.perf_counter() - start) / calls * 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per condition, alternated")
    args = ap.parse_args()
    if args.calls < 1 or args.rounds < 1:
        ap.error("--calls and --rounds must be at least 1")
    module, x = torch.nn.Identity(), torch.zeros(1)
    times = {"plain": [], "module hooks": [], "class wrapper": [], "+ forward": []}
    for _ in range(args.rounds):
        times["plain"].append(per_call_ns(module, x, args.calls))
        handles = [module.register_forward_pre_hook(_pre), module.register_forward_hook(_post, always_call=True)]
        times["module hooks"].append(per_call_ns(module, x, args.calls))
        for h in handles:
            h.remove()
        wrap = _CallWrap(torch.nn.Identity, _on_call)
        times["class wrapper"].append(per_call_ns(module, x, args.calls))
        forward = _CallWrap(torch.nn.Identity, _inside_forward, "forward")
        times["+ forward"].append(per_call_ns(module, x, args.calls))
        forward.remove()
        wrap.remove()
    plain = statistics.median(times["plain"])
    print(f"{'condition':<14} {'ns/call (median)':>17} {'extra ns':>9}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<14} {med:>17.0f} {med - plain:>9.0f}")


if __name__ == "__main__":
    main()
