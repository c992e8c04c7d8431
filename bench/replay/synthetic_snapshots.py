#!/usr/bin/env python3
"""Writes synthetic PyTorch memory snapshots of three training and inference workloads, for checking
allocator policies on inputs that no policy was tuned on.

The shared snapshots (../shared/traces/pytorch-snapshots*) are real, but few. Each of them has a fixed
shape. A rule fitted to them can fail on the patterns they lack. These workloads are built from
how PyTorch programs allocate, with their shapes drawn from a seed:

  transformer  training with a sequence length drawn per iteration (dynamic shapes): parameters,
               gradients (kept, or set to None after each step), Adam states created at the first
               step, saved activations freed in reverse during backward, temporaries, and the
               foreach optimizer's temporaries
  cnn          training with fixed shapes: a pyramid of convolution stages (channels double while the
               image shrinks), batch norm statistics, and a smaller last batch
  decode       inference with a KV cache that grows one token at a time by concatenation (a new,
               larger tensor and the old one freed), over prompts of drawn lengths

Output: one pickle per trace, named FAMILY-SEED.pickle, with the keys memcomm-replay reads
(Note [Snapshot shape] in trace/snapshot/include/memcomm/snapshot/snapshot.hpp): one device trace
of alloc, free_requested and free_completed events, and no segments. Each trace gets a line on
stderr with its event count, and for decode the largest layer's KV cache as a share of peak live
requested bytes. Judge the policies with
  bench/replay/allocator_targets.py --build build OUT_DIR

  bench/replay/synthetic_snapshots.py OUT_DIR [--seeds N] [--first-seed S] [--families a,b]
"""
import argparse
import os
import pickle
import random
import sys


class Trace:
    """A device trace under construction: unique addresses, a clock that advances by one per event."""

    def __init__(self):
        self.events = []
        self.next_addr = 1 << 40
        self.clock = 0
        self.live = 0       # requested bytes live now, and their peak
        self.peak_live = 0
        self.summary = ""   # what the family reports about this trace besides its event count

    def alloc(self, size):
        size = max(1, int(size))
        addr = self.next_addr
        self.next_addr += (size + 511) // 512 * 512 + 512
        self.live += size
        self.peak_live = max(self.peak_live, self.live)
        self._event("alloc", addr, size)
        return (addr, size)

    def free(self, block):
        self.live -= block[1]
        self._event("free_requested", *block)
        self._event("free_completed", *block)

    def free_all(self, blocks):
        for b in blocks:
            self.free(b)
        blocks.clear()

    def _event(self, action, addr, size):
        self.clock += 1
        self.events.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.clock})

    def snapshot(self):
        return {"segments": [], "device_traces": [self.events]}


def transformer(rng):
    t = Trace()
    hidden = rng.choice([768, 1024, 2048, 4096])
    layers = rng.randint(4, 24)
    heads = hidden // 64
    batch = rng.choice([1, 2, 4, 8, 16])
    max_seq = rng.choice([512, 1024, 2048])
    vocab = rng.choice([32000, 50304])
    el = 2  # bf16 activations and parameters
    flash = rng.random() < 0.5  # no S x S attention matrix
    set_to_none = rng.random() < 0.7  # optimizer.zero_grad(set_to_none=True), PyTorch's default
    layer_shapes = [3 * hidden * hidden, hidden * hidden, 4 * hidden * hidden, 4 * hidden * hidden, hidden, hidden]
    shapes = [vocab * hidden] + layer_shapes * layers
    for n in shapes:
        t.alloc(n * el)  # parameters, live to the end
    grads = []
    for step in range(rng.randint(4, 8)):
        seq = rng.randrange(max_seq // 4, max_seq + 1, 64)
        tokens = batch * seq
        saved = []
        x = t.alloc(tokens * hidden * el)
        for _ in range(layers):
            layer = [t.alloc(tokens * hidden * el), t.alloc(tokens * 3 * hidden * el)]
            if not flash:
                scores = t.alloc(batch * heads * seq * seq * el)
                layer.append(t.alloc(batch * heads * seq * seq * el))  # softmax, saved
                t.free(scores)
            layer += [t.alloc(tokens * hidden * el), t.alloc(tokens * 4 * hidden * el), t.alloc(tokens * 4 * hidden * el)]
            saved.append(layer)
        logits = t.alloc(tokens * vocab * 4)
        loss_tmp = t.alloc(tokens * vocab * 4)
        t.free(loss_tmp)
        grad_logits = t.alloc(tokens * vocab * 4)
        t.free(logits)
        g = t.alloc(tokens * hidden * el)
        t.free(grad_logits)
        first_backward = not grads
        for i in reversed(range(layers)):
            tmp = [t.alloc(tokens * 4 * hidden * el), t.alloc(tokens * 3 * hidden * el)]
            if first_backward:
                grads += [t.alloc(n * el) for n in layer_shapes]  # .grad created as backward reaches it
            t.free_all(saved[i])
            g2 = t.alloc(tokens * hidden * el)
            t.free(g)
            g = g2
            t.free_all(tmp)
        if first_backward:
            grads.append(t.alloc(vocab * hidden * el))
        t.free(g)
        t.free(x)
        if step == 0:
            for n in shapes:
                t.alloc(n * 4)  # Adam's exp_avg and exp_avg_sq, created by the first step
                t.alloc(n * 4)
        step_tmp = [t.alloc(n * 4) for n in shapes]  # foreach Adam's intermediate list
        t.free_all(step_tmp)
        if set_to_none:
            t.free_all(grads)
    return t


def cnn(rng):
    t = Trace()
    batch = rng.choice([16, 32, 64, 128, 256])
    size = rng.choice([64, 128, 224])
    width = rng.choice([32, 64, 96])
    stages = rng.randint(3, 5)
    blocks = rng.randint(2, 4)
    el = 4
    convs = []
    c = width
    for s in range(stages):
        for _ in range(blocks):
            convs.append((c, size >> s))
        c *= 2
    # Weights, batch norm affine parameters and gradients, live to the end.
    for n in [ch * ch * 9 for ch, _ in convs] + [ch * 2 for ch, _ in convs] + [ch * ch * 9 for ch, _ in convs]:
        t.alloc(n * el)
    iters = rng.randint(4, 8)
    for it in range(iters):
        b = batch if it < iters - 1 else rng.randint(1, batch)  # the last batch is smaller
        x = t.alloc(b * 3 * size * size * el)
        saved = []
        for ch, hw in convs:
            act = b * ch * hw * hw * el
            saved.append([t.alloc(act), t.alloc(act), t.alloc(act)])  # conv out, bn out, relu out
            stats = t.alloc(ch * 2 * el)
            t.free(stats)
        g = t.alloc(b * convs[-1][0] * convs[-1][1] ** 2 * el)
        for i in reversed(range(len(convs))):
            ch, hw = convs[i]
            tmp = t.alloc(b * ch * hw * hw * el)
            t.free_all(saved[i])
            g2 = t.alloc(b * ch * hw * hw * el)
            t.free(g)
            t.free(tmp)
            g = g2
        t.free(g)
        t.free(x)
        if it == 0:
            for ch, _ in convs:
                t.alloc(ch * ch * 9 * el)  # SGD momentum buffers, created by the first step
    return t


def decode(rng):
    t = Trace()
    hidden = rng.choice([1024, 2048, 4096])
    layers = rng.randint(8, 32)
    el = 2
    for _ in range(layers):
        t.alloc(4 * hidden * hidden * el)  # attention and MLP weights, live to the end
        t.alloc(8 * hidden * hidden * el)
    per_token = 2 * hidden * el  # K and V of one layer for one token
    largest_cache = 0
    for _ in range(rng.randint(2, 5)):
        batch = rng.choice([1, 4, 8, 16])
        prompt = rng.randint(16, 1024)
        new = rng.randint(16, 256)
        cache = [t.alloc(batch * prompt * per_token) for _ in range(layers)]
        for step in range(new):
            length = prompt + step + 1
            largest_cache = max(largest_cache, batch * length * per_token)
            for i in range(layers):
                h = t.alloc(batch * hidden * el)
                grown = t.alloc(batch * length * per_token)  # torch.cat((cache, kv_new))
                t.free(cache[i])
                cache[i] = grown
                t.free(h)
            logits = t.alloc(batch * 50304 * 4)
            t.free(logits)
        t.free_all(cache)
    # A layout that needs no source calls keeps a free slot of about one layer's cache, so this share
    # decides whether an allocator can stay near peak live without moving pages every step
    # (bench/results/allocator-cpu.md, "decode").
    t.summary = f", largest KV cache {100 * largest_cache / t.peak_live:.2f} % of peak live"
    return t


FAMILIES = {"transformer": transformer, "cnn": cnn, "decode": decode}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder to write the pickles to (created if missing)")
    ap.add_argument("--seeds", type=int, default=4, help="traces per family")
    ap.add_argument("--first-seed", type=int, default=1000, help="seed of each family's first trace")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated: " + ", ".join(FAMILIES))
    args = ap.parse_args()
    families = args.families.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or args.seeds < 1:
        print(f"synthetic_snapshots: unknown family {unknown[0]}" if unknown else "synthetic_snapshots: --seeds must be >= 1",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for fam in families:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            trace = FAMILIES[fam](random.Random(f"{fam}-{seed}"))
            path = os.path.join(args.out, f"{fam}-{seed}.pickle")
            with open(path, "wb") as f:
                pickle.dump(trace.snapshot(), f, protocol=4)
            print(f"{path}: {len(trace.events)} events{trace.summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
