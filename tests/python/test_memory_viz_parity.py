"""`memcomm-trace memory` against PyTorch's own memory_viz, on every shared snapshot (issue 18) and on
the real CUDA snapshots of tests/data/gpu-snapshots (pending frees, ring buffers, graphs...).

* At the end state, live bytes by stack equal the active_allocated lines of
  torch.cuda._memory_viz.memory(snapshot, format_flamegraph=lambda s: s), folded by stack. memory_viz
  adds a "<gaps>" line per block for the allocator's rounding (block size minus requested size);
  memcomm counts requested bytes (Note [Live means allocated] in trace/ allocations.hpp), so those
  lines are left out of the comparison.
* At the peak, the live bytes by stack add up to the peak live bytes of an independent fold written
  here: the events in order, with the blocks the trace never allocated live from its start.
* memcomm-replay's peak live counts every block the snapshot's allocator holds at its end (active,
  or freed and pending on a stream): replay holds a block until its free completes.
"""
import ast
import glob
import json
import pickle
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
SNAPSHOTS = sorted(glob.glob(str(SHARED / "pytorch-snapshots*" / "*.pickle")))
# Collected and skipped (not skipped at import, which pytest reports as "no tests"), so ctest sees a
# skip (conftest.py) where the shared data is missing.
needs_shared = pytest.mark.skipif(not SNAPSHOTS, reason=f"no shared snapshots under {SHARED}")
GPU_SNAPSHOTS = sorted(glob.glob(str(Path(__file__).resolve().parents[1] / "data" / "gpu-snapshots" / "*.pickle")))
PARAMS = [pytest.param(p, id=Path(p).stem[:40]) for p in GPU_SNAPSHOTS] + \
    [pytest.param(p, id=Path(p).stem[:40], marks=needs_shared) for p in SNAPSHOTS or ["missing"]]


def memcomm_memory(tool, path, at):
    out = subprocess.run([str(tool("memcomm-trace")), "memory", path, "--at", at, "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def as_dict(snapshot):
    """torch.cuda.memory_snapshot()'s list of segments as _memory_viz's command line wraps it."""
    return snapshot if isinstance(snapshot, dict) else {"segments": snapshot, "traces": []}


def memory_viz_end_state(snapshot):
    from torch.cuda import _memory_viz
    folded = defaultdict(int)
    for line in _memory_viz.memory(as_dict(snapshot), format_flamegraph=lambda s: s).splitlines():
        path, size = line.rsplit(" ", 1)
        _stream, state, stack = path.split(";", 2)
        if state == "active_allocated" and stack != "<gaps>":
            folded[stack] += int(size)
    return {stack: n for stack, n in folded.items() if n}


def independent_peak(snapshot):
    """Live requested bytes after each event, in the events' order; the largest.

    Blocks the trace never allocated were live from its start: those whose free it requests while
    they are not open, and those the end state holds active that are not open at the end.
    """
    from torch.cuda import _memory_viz
    snapshot = as_dict(snapshot)
    events = [(e.get("time_us", 0), dev, k, e) for dev, trace in enumerate(snapshot.get("device_traces", []))
              for k, e in enumerate(trace or [])]
    events.sort(key=lambda x: x[:3])
    open_blocks = {}      # (device, addr) -> size
    requested = set()     # (device, addr) whose free was requested and has not completed
    before_trace = 0      # bytes live from the start
    steps = []            # live bytes after each event, not counting before_trace blocks still held
    freed_before = []     # (event index, size) of before-trace blocks freed there
    live = 0
    for i, (_, dev, _, e) in enumerate(events):
        key = (dev, e.get("addr"))
        if e["action"] == "alloc":
            live += e["size"]
            open_blocks[key] = e["size"]
        elif e["action"] == "free_requested":  # a block ends at its free request
            requested.add(key)
            if key in open_blocks:
                live -= open_blocks.pop(key)
            else:
                before_trace += e["size"]
                freed_before.append((i, e["size"]))
        elif e["action"] == "free_completed":
            if key in requested:
                requested.discard(key)
            elif key in open_blocks:  # a completion whose request the trace lost
                live -= open_blocks.pop(key)
            # Else PyTorch, which records every free's request, had its request before the trace:
            # the block was pending free all through it, never live in it.
        steps.append(live)
    for seg in snapshot["segments"]:
        address = seg["address"]  # old files leave block addresses implicit
        for b in seg["blocks"]:
            address = b.get("address", address)
            if b["state"] == "active_allocated" and (seg["device"], address) not in open_blocks:
                before_trace += _memory_viz._block_extra(b)[1]  # requested bytes, as memory_viz reads them
            address += b["size"]
    # Before-trace blocks are live until their free: add what is still held after each event.
    held = before_trace
    peak = held
    freed = dict(freed_before)
    for i, level in enumerate(steps):
        held -= freed.get(i, 0)
        peak = max(peak, level + held)
    return peak


@pytest.mark.parametrize("path", PARAMS)
def test_end_state_matches_memory_viz(tool, path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    ours = memcomm_memory(tool, path, "end")
    by_stack = defaultdict(int)
    for site in ours["sites"]:
        by_stack[";".join(site["stack"])] += site["bytes"]
    assert dict(by_stack) == memory_viz_end_state(snapshot)
    assert ours["live_bytes"] == sum(by_stack.values())


@pytest.mark.parametrize("path", PARAMS)
def test_sites_at_peak_add_up_to_the_peak(tool, path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    ours = memcomm_memory(tool, path, "peak")
    assert sum(site["bytes"] for site in ours["sites"]) == ours["live_bytes"]
    assert ours["live_bytes"] == independent_peak(snapshot)


@pytest.mark.parametrize("path", PARAMS)
def test_events_list_the_trace_with_live_and_reserved_bytes_that_agree(tool, path):
    """`memory --events` lists the entries memory_viz's trace lists, device by device and in order; its live bytes
    peak where the independent fold's do, and its reserved bytes end at the end state's segments."""
    with open(path, "rb") as f:
        snapshot = as_dict(pickle.load(f))
    out = subprocess.run([str(tool("memcomm-trace")), "memory", path, "--events", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ours = {d["device"]: d for d in json.loads(out.stdout)["devices"]}
    traces = {i: t for i, t in enumerate(snapshot.get("device_traces", [])) if t}
    assert sorted(ours) == sorted(traces)
    for device, entries in traces.items():
        listed = ours[device]["events"]
        assert [(e["action"], e["size"]) for e in listed] == [(e["action"], e["size"]) for e in entries]
        reserved = sum(seg["total_size"] for seg in snapshot["segments"] if seg.get("device", 0) == device)
        assert listed[-1]["reserved"] == reserved
    if len(traces) == 1:
        (device,) = traces
        levels = [ours[device]["before"]["live"]] + [e["live"] for e in ours[device]["events"]]
        assert max(levels) == independent_peak(snapshot)


def legacy_snapshots():
    """Three older shapes memory_viz reads (Note [Snapshot shape] in trace/snapshot): PyTorch 2.0's
    blocks, with their stack and requested size in their first history entry and no address; blocks
    without requested_size; torch.cuda.memory_snapshot()'s bare list of segments."""
    def frame(name, line):
        return {"filename": "train.py", "line": line, "name": name}

    def history_block(size, real, frames):  # a live block's history is its own allocation
        return {"size": size, "state": "active_allocated", "history": [{"addr": 0, "real_size": real, "frames": frames}]}

    def segment(address, blocks):
        return {"device": 0, "address": address, "total_size": sum(b["size"] for b in blocks), "stream": 0,
                "segment_type": "large", "allocated_size": 0, "active_size": 0, "blocks": blocks}

    torch20 = {"segments": [segment(1 << 30, [history_block(1 << 20, 1000000, [frame("weights", 3)]),
                                              {"size": 1 << 20, "state": "inactive",  # its past allocations
                                               "history": [{"addr": 0, "real_size": 9, "frames": [frame("old", 5)]}] * 2},
                                              history_block(2 << 20, 2000000, [frame("forward", 9), frame("main", 1)])])],
               "device_traces": [[]]}
    sizes_only = [segment(1 << 31, [{"size": 4 << 20, "state": "active_allocated", "address": 1 << 31},
                                    {"size": 2 << 20, "state": "inactive", "address": (1 << 31) + (4 << 20)}])]
    return {"torch20_history": torch20, "segment_list": sizes_only,
            "no_requested_size": {"segments": sizes_only, "device_traces": [[]]}}


@pytest.mark.parametrize("name", sorted(legacy_snapshots()))
def test_older_snapshot_shapes_match_memory_viz(tool, tmp_path, name):
    snapshot = legacy_snapshots()[name]
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    ours = memcomm_memory(tool, str(path), "end")
    by_stack = defaultdict(int)
    for site in ours["sites"]:
        by_stack[";".join(site["stack"])] += site["bytes"]
    expected = memory_viz_end_state(snapshot)
    assert dict(by_stack) == expected and ours["live_bytes"] > 0
    peak = memcomm_memory(tool, str(path), "peak")
    assert peak["live_bytes"] == independent_peak(snapshot)
    # Without events the end state is the one state: the peak is it, at the same time (it read -1 and 0).
    assert (peak["at_ns"], peak["live_bytes"]) == (ours["at_ns"], ours["live_bytes"])


def held_at_end(snapshot):
    """Requested bytes of the blocks the allocator holds at the end, per device."""
    from torch.cuda import _memory_viz
    held = defaultdict(int)
    for seg in as_dict(snapshot)["segments"]:
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                held[seg["device"]] += _memory_viz._block_extra(b)[1]
    return held


PAIRS = [pytest.param(a, b, id=f"{Path(a).stem[:20]}-{Path(b).stem[:20]}") for a, b in
         zip(GPU_SNAPSHOTS, GPU_SNAPSHOTS[1:] + GPU_SNAPSHOTS[:1])] + \
    [pytest.param(a, b, id=f"{Path(a).stem[:20]}-{Path(b).stem[:20]}", marks=needs_shared)
     for a, b in zip(SNAPSHOTS[::4] or ["missing"], SNAPSHOTS[1::4] or ["missing"])]


@pytest.mark.parametrize("before, after", PAIRS)
def test_segments_only_in_one_snapshot_match_memory_viz_compare(tool, before, after, capsys):
    from torch.cuda import _memory_viz
    segments = []
    for path in (before, after):
        with open(path, "rb") as f:
            segments.append(as_dict(pickle.load(f))["segments"])
    capsys.readouterr()
    _memory_viz.compare(*segments, format_flamegraph=lambda s: s)
    printed = dict(line.split(" = ", 1) for line in capsys.readouterr().out.splitlines())
    out = subprocess.run([str(tool("memcomm-trace")), "compare", "--segments", "--json", before, after],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    devices = json.loads(out.stdout)["devices"]
    for side in ("only_before", "only_after"):
        ours = sorted(s["address"] for d in devices for s in d[side]["segments"])
        assert ours == sorted(ast.literal_eval(printed[side])), side  # memory_viz prints a list of addresses


@pytest.mark.parametrize("path", PARAMS)
def test_replay_holds_every_block_held_at_the_end(tool, path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    out = subprocess.run([str(tool("memcomm-replay")), "-q", "--policy", "memcomm", path, "--json", "-"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak = {row["device"]: row["peak_live"] for row in json.loads(out.stdout)}
    for device, held in held_at_end(snapshot).items():
        assert peak.get(device, 0) >= held, (device, peak.get(device), held)


def test_addresses_in_the_upper_half_read_as_memory_viz_reads_them(tool, tmp_path):
    # pickle writes 2^63..2^64-1 as a 9-byte LONG1, which the reader refused as "does not fit in 64 bits".
    path = Path(GPU_SNAPSHOTS[0]) if GPU_SNAPSHOTS else pytest.skip("no tests/data/gpu-snapshots")
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    shift = 0xF000000000000000
    for seg in snapshot["segments"]:
        seg["address"] += shift
        for b in seg["blocks"]:
            if "address" in b:
                b["address"] += shift
    for trace in snapshot["device_traces"]:
        for e in trace:
            if e.get("addr") is not None:
                e["addr"] += shift
    shifted = tmp_path / "upper.pickle"
    shifted.write_bytes(pickle.dumps(snapshot, protocol=4))
    for at in ("peak", "end"):
        ours, theirs = memcomm_memory(tool, str(shifted), at), memcomm_memory(tool, str(path), at)
        assert ours["live_bytes"] == theirs["live_bytes"] > 0, at
        assert sorted(s["bytes"] for s in ours["sites"]) == sorted(s["bytes"] for s in theirs["sites"]), at


@pytest.mark.parametrize("path", PARAMS)
def test_segments_say_which_active_bytes_are_pending_free(tool, path):
    # memory_viz's segsum counts a block freed but waiting on a stream as free; memcomm counts it active
    # (the allocator cannot reuse it yet) and says how much of the active bytes it is.
    with open(path, "rb") as f:
        snapshot = as_dict(pickle.load(f))
    by_state = defaultdict(lambda: defaultdict(int))
    for seg in snapshot["segments"]:
        for b in seg["blocks"]:
            by_state[seg["device"]][b["state"]] += b["size"]
    out = subprocess.run([str(tool("memcomm-trace")), "memory", path, "--segments", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for d in json.loads(out.stdout)["devices"]:
        states = by_state[d["device"]]
        assert d["pending_free"] == states["active_pending_free"], d["device"]
        assert d["active"] - d["pending_free"] == states["active_allocated"], d["device"]
