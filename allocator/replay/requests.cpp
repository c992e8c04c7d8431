// Rebuilding per-device request sequences from traces. See Note [Rebuilding requests].
#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "memcomm/replay/requests.hpp"

namespace memcomm::replay {
namespace {

using snapshot::Action;
using snapshot::Event;

struct Preexisting {
  std::uint64_t addr;
  std::uint64_t size;
  std::int64_t stream;
  std::uint32_t block;
};

DeviceRequests build_device(const snapshot::Snapshot& snap, int device) {
  DeviceRequests out;
  out.device = device;
  static const std::vector<Event> kNoEvents;
  const auto& events = device < static_cast<int>(snap.device_traces.size()) ? snap.device_traces[device] : kNoEvents;
  out.trace_events = events.size();

  // --- the traced part: live addresses map to block ids ---
  std::unordered_map<std::uint64_t, std::uint32_t> live;  // addr -> block id
  std::unordered_set<std::uint64_t> touched;              // every address an alloc/free event names
  live.reserve(events.size() / 2 + 16);
  touched.reserve(events.size() / 2 + 16);
  std::vector<Preexisting> pre;
  std::vector<Request> traced;
  traced.reserve(events.size());
  std::vector<std::uint64_t> block_size;  // requested bytes per block id

  std::int64_t seg_delta = 0;  // net reserved change over the trace
  bool expandable = false;
  for (const Event& e : events) {
    switch (e.action) {
      case Action::alloc: {
        if (!e.has_addr()) {
          ++out.anomalies;
          break;
        }
        touched.insert(e.addr);
        auto it = live.find(e.addr);
        if (it != live.end()) {  // the trace lost a free: end the old block first
          ++out.anomalies;
          traced.push_back(Request{0, e.stream, it->second, Request::Op::free});
          live.erase(it);
        }
        auto id = static_cast<std::uint32_t>(block_size.size());
        block_size.push_back(e.size);
        live.emplace(e.addr, id);
        traced.push_back(Request{e.size, e.stream, id, Request::Op::alloc});
        break;
      }
      case Action::free_completed: {
        if (!e.has_addr()) {
          ++out.anomalies;
          break;
        }
        touched.insert(e.addr);
        auto it = live.find(e.addr);
        std::uint32_t id;
        if (it != live.end()) {
          id = it->second;
          live.erase(it);
        } else {  // allocated before the trace started
          id = static_cast<std::uint32_t>(block_size.size());
          block_size.push_back(e.size);
          pre.push_back(Preexisting{e.addr, e.size, e.stream, id});
        }
        traced.push_back(Request{0, e.stream, id, Request::Op::free});
        break;
      }
      case Action::free_requested:
        if (e.has_addr()) touched.insert(e.addr);
        break;
      case Action::segment_alloc:
      case Action::segment_map:
        seg_delta += static_cast<std::int64_t>(e.size);
        ++out.recorded.source_allocs;
        expandable |= e.action == Action::segment_map;
        break;
      case Action::segment_free:
      case Action::segment_unmap:
        seg_delta -= static_cast<std::int64_t>(e.size);
        ++out.recorded.source_frees;
        expandable |= e.action == Action::segment_unmap;
        break;
      case Action::oom:
        ++out.trace_ooms;
        break;
      case Action::snapshot:
      case Action::other:
        break;
    }
  }

  // --- end state: active blocks the trace never touched predate it; reserved bytes at the end ---
  std::uint64_t end_reserved = 0;
  bool has_segments = false;
  for (const auto& seg : snap.segments) {
    if (seg.device != device) continue;
    has_segments = true;
    end_reserved += seg.total_size;
    expandable |= seg.is_expandable;
    for (const auto& b : seg.blocks) {
      if (!b.is_active()) continue;
      if (touched.count(b.address)) {
        // Allocated by the trace and still live, as expected; anything else is a contradiction.
        if (!live.count(b.address)) ++out.anomalies;
        continue;
      }
      auto id = static_cast<std::uint32_t>(block_size.size());
      std::uint64_t bytes = b.requested_size ? b.requested_size : b.size;
      block_size.push_back(bytes);
      pre.push_back(Preexisting{b.address, bytes, seg.stream, id});
    }
  }

  std::sort(pre.begin(), pre.end(), [](const Preexisting& a, const Preexisting& b) { return a.addr < b.addr; });
  out.requests.reserve(pre.size() + traced.size());
  for (const auto& p : pre) {
    out.requests.push_back(Request{p.size, p.stream, p.block, Request::Op::alloc});
    out.preexisting_bytes += p.size;
  }
  out.preexisting_blocks = pre.size();
  out.requests.insert(out.requests.end(), traced.begin(), traced.end());
  out.block_count = static_cast<std::uint32_t>(block_size.size());

  // Peak live requested bytes over the rebuilt sequence.
  std::uint64_t cur = 0;
  for (const Request& r : out.requests) {
    if (r.op == Request::Op::alloc) {
      cur += r.size;
      out.peak_live = std::max(out.peak_live, cur);
    } else if (r.op == Request::Op::free) {
      cur -= block_size[r.block];
    }
  }

  // --- what PyTorch reserved: replay the segment events from the start value ---
  RecordedReserved& rec = out.recorded;
  rec.known = has_segments || rec.source_allocs + rec.source_frees > 0;
  rec.expandable = expandable;
  rec.at_end = end_reserved;
  std::int64_t start = static_cast<std::int64_t>(end_reserved) - seg_delta;
  if (start < 0) {  // segment events without end-state segments (a file without `segments`)
    ++out.anomalies;
    start = 0;
  }
  rec.at_start = static_cast<std::uint64_t>(start);
  std::int64_t r = start;
  std::int64_t peak = start;
  for (const Event& e : events) {
    if (e.action == Action::segment_alloc || e.action == Action::segment_map) r += static_cast<std::int64_t>(e.size);
    if (e.action == Action::segment_free || e.action == Action::segment_unmap) r -= static_cast<std::int64_t>(e.size);
    peak = std::max(peak, r);
  }
  rec.peak = static_cast<std::uint64_t>(peak);
  return out;
}

}  // namespace

TraceRequests build_requests(const snapshot::Snapshot& snap) {
  TraceRequests out;
  out.file = snap.source;
  out.format = "pytorch-snapshot";
  out.settings = snap.settings;
  int max_device = static_cast<int>(snap.device_traces.size()) - 1;
  for (const auto& s : snap.segments) max_device = std::max(max_device, s.device);
  for (int d = 0; d <= max_device; ++d) {
    bool used = d < static_cast<int>(snap.device_traces.size()) && !snap.device_traces[d].empty();
    for (const auto& s : snap.segments) used |= s.device == d;
    if (used) out.devices.push_back(build_device(snap, d));
  }
  return out;
}

// Note [Trace formats]: load_trace() recognises a file by its first bytes and hands it to the
// matching reader. PyTorch pickles start with PROTO (0x80). memcomm's own traces (.mct, written by
// profiler/core; file magic "MEMCTRC\x1A", memcomm::prof::kFileMagic) get a reader that fills
// TraceRequests from the allocator's MemBlockEvents per device: Alloc -> Request::alloc,
// FreeCompleted -> Request::free, step markers -> Request::step, SegmentAlloc/Free/Map/Unmap ->
// RecordedReserved, Oom -> trace_ooms. That reader is the one missing piece: it links
// memcomm::profiler (prof::TraceReader) and plugs in below, where such files are now refused clearly.
TraceRequests load_trace(const std::string& path, const LoadProgress& progress) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> bytes = snapshot::read_file_bytes(path);
  if (bytes.empty()) throw snapshot::ReadError(path, 0, "empty file");
  TraceRequests out;
  if (bytes[0] == 0x80) {
    snapshot::ParseOptions opts;
    opts.keep_frames = false;  // replay needs no stacks
    opts.progress = progress.callback;
    opts.progress_user = progress.user;
    snapshot::Snapshot snap = snapshot::parse_snapshot(bytes.data(), bytes.size(), path, opts);
    out = build_requests(snap);
  } else if (bytes.size() >= 8 && std::memcmp(bytes.data(), "MEMCTRC\x1A", 8) == 0) {
    throw snapshot::ReadError(path, 0, "this is a memcomm .mct trace; memcomm-replay cannot read those yet "
                                       "(Note [Trace formats] in allocator/replay/requests.cpp)");
  } else {
    throw snapshot::ReadError(path, 0, fmt::format("unknown trace format (first byte 0x{:02x}): expected a PyTorch memory "
                                                   "snapshot pickle (first byte 0x80)", bytes[0]));
  }
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace memcomm::replay
