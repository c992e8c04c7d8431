#!/usr/bin/env python3
"""A synthetic PyTorch memory snapshot for memcomm-view's allocation timeline benchmark (issue 18).

N events on one device, half `alloc` and half `free_requested` (LIFO mostly, 30% at random), sizes
log-uniform in 512 B .. 128 MiB, at most ~3000 live, times 0-3 us apart, each event carrying one of
300 shared stacks of 5-40 frames (the same list objects, so the pickle memoises them as PyTorch's
do). Usage: make_snapshot.py N OUT.pickle; then
  xvfb-run -a build/bin/memcomm-view OUT.pickle --bench --panes timeline,allocations
  build/bin/bench_load OUT.pickle 1
"""
import pickle
import random
import sys


def main() -> None:
    n, out = int(sys.argv[1]), sys.argv[2]
    random.seed(1)
    stacks = [[{'filename': f'/src/pkg{random.randint(0, 30)}/mod{random.randint(0, 50)}.py',
                'line': random.randint(1, 900), 'name': f'fn_{random.randint(0, 400)}'}
               for _ in range(random.randint(5, 40))] for _ in range(300)]
    events, live, t, addr = [], [], 1_000_000, 1 << 32
    while len(events) < n:
        t += random.randint(0, 3)
        if live and (random.random() < 0.5 or len(live) > 3000):
            a, size, st = live.pop(random.randrange(len(live)) if random.random() < 0.3 else len(live) - 1)
            events.append({'action': 'free_requested', 'addr': a, 'size': size, 'stream': 0, 'time_us': t,
                           'frames': stacks[st]})
        else:
            size, st = int(2 ** random.uniform(9, 27)), random.randrange(len(stacks))
            addr += 1 << 28
            live.append((addr, size, st))
            events.append({'action': 'alloc', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t,
                           'frames': stacks[st]})
    with open(out, 'wb') as f:
        pickle.dump({'segments': [], 'device_traces': [events]}, f, protocol=4)


if __name__ == '__main__':
    main()
