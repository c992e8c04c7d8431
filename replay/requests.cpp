// Rebuilding per-device request sequences from traces. See Note [Rebuilding requests].
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "memcomm/replay/requests.hpp"
#include "memcomm/common/input_file.hpp"
#include "memcomm/trace/trace_format.hpp"
#include "kineto_trace.hpp"
#include "memcomm/trace/kineto.hpp"
#include "mct_trace.hpp"
#include "request_builder.hpp"

namespace memcomm::replay {
namespace {

using prof::EventKind;
using snapshot::Event;

std::uint64_t seg_addr(const Event& e) { return e.has_addr() ? e.addr : RequestBuilder::kNoAddr; }

DeviceRequests build_device(const snapshot::Snapshot& snap, int device) {
  RequestBuilder b(kNoRank, device);
  if (device < static_cast<int>(snap.device_traces.size())) {
    for (const Event& e : snap.device_traces[static_cast<std::size_t>(device)]) {
      switch (e.kind) {
        case EventKind::Alloc:
          if (e.has_addr()) b.alloc(e.addr, e.size, e.stream);
          else b.anomaly();
          break;
        case EventKind::FreeCompleted:
          if (e.has_addr()) b.free_completed(e.addr, e.size, e.stream);
          else b.anomaly();
          break;
        case EventKind::FreeRequested:
          if (e.has_addr()) b.free_requested(e.addr);
          else b.other();
          break;
        case EventKind::SegmentAlloc: b.segment_grow(seg_addr(e), e.size, false); break;
        case EventKind::SegmentMap: b.segment_grow(seg_addr(e), e.size, true); break;
        case EventKind::SegmentFree: b.segment_shrink(seg_addr(e), e.size, false); break;
        case EventKind::SegmentUnmap: b.segment_shrink(seg_addr(e), e.size, true); break;
        case EventKind::Oom: b.oom(); break;
        default: b.other(); break;  // markers and unknown actions (Note [Snapshot actions] in snapshot.hpp)
      }
    }
  }
  if (snap.has_segments) b.end_reserved(0, false);  // known, if only to be empty
  for (const auto& seg : snap.segments) {
    if (seg.device != device) continue;
    b.end_reserved(seg.total_size, seg.is_expandable);
    for (const auto& blk : seg.blocks) {
      if (blk.is_active()) b.end_block(blk.address, blk.requested_size ? blk.requested_size : blk.size, seg.stream);
    }
  }
  return b.finish();
}

}  // namespace

// Note [Segments that cannot hold the blocks]: reserved bytes can never be below live ones, but a
// snapshot whose trace records its blocks and not its segments (a generated test file; a producer
// that records only allocations) leaves the `recorded` figures at the end state's segments alone:
// 250 MiB reserved for 2,151 MiB live, and memcomm-trace advise saw nothing to save against it. Such
// a device gets no `recorded` row, and a note says why.
void note_contradicted_segments(DeviceRequests& dev, std::vector<std::string>& notes) {
  RecordedReserved& rec = dev.recorded;
  if (!rec.known || rec.peak >= dev.peak_live) return;
  rec.known = false;
  rec.contradicted = true;
  notes.push_back(fmt::format("device {}: its segments ({} B at most) never held its live blocks ({} B at their peak): "
                              "the trace lacks segment events, so there is no `recorded` row for it",
                              dev.device, rec.peak, dev.peak_live));
}

std::uint64_t DeviceRequests::traced_allocs() const {
  const auto allocs = static_cast<std::uint64_t>(
      std::count_if(requests.begin(), requests.end(), [](const Request& r) { return r.op == Request::Op::alloc; }));
  return allocs - std::min(allocs, preexisting_blocks);
}

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
    if (!used) continue;
    out.devices.push_back(build_device(snap, d));
    note_contradicted_segments(out.devices.back(), out.notes);
  }
  return out;
}

// Note [Trace formats]: load_trace() recognises a file by its first bytes and hands it to the
// matching reader. PyTorch pickles start with PROTO (0x80), older protocols with their first opcode
// (snapshot::is_pickle_start). memcomm's own traces (.mct, written by
// the trace layer; file magic "MEMCTRC\x1A", memcomm::prof::kFileMagic) are read by mct_trace.cpp
// through the trace layer's TraceReader: Alloc ->
// Request::alloc, FreeCompleted -> Request::free, Step ranges -> Request::step, SegmentAlloc/Free/
// Map/Unmap -> RecordedReserved (the trace starts with the process, so reserved starts at 0; an
// expandable segment's virtual range is not reserved memory, Note [Reserved bytes of expandable
// segments]), Oom -> trace_ooms. Devices are kept per (rank, device). A file cut short by a killed
// writer is read up to its last complete chunk, and TraceRequests::recovery says so.
// torch.profiler traces (gzip, or JSON: prof::is_kineto_candidate) are read by kineto_trace.cpp
// through the trace layer's Kineto reader (Note [Replaying a torch.profiler memory profile]).
namespace {
TraceRequests read_trace(const std::string& path, const LoadProgress& progress) {
  if (prof::is_kineto_candidate(path)) return read_kineto_trace(path);  // streamed by the reader: not read whole here
  std::string head, why;
  if (!read_file_head(path, sizeof prof::kFileMagic, head, why)) throw snapshot::ReadError(path, snapshot::kNoOffset, why);
  if (head.empty()) throw snapshot::ReadError(path, snapshot::kNoOffset, "empty file (0 bytes)");
  if (prof::is_mct_start(head.data(), head.size())) return read_mct_trace(path);  // memory-maps the file itself
  const auto first = static_cast<std::uint8_t>(head[0]);
  if (snapshot::is_pickle_start(first)) {
    const std::vector<std::uint8_t> bytes = snapshot::read_file_bytes(path);
    snapshot::ParseOptions opts;
    opts.keep_frames = false;  // replay needs no stacks
    opts.progress = progress.callback;
    opts.progress_user = progress.user;
    snapshot::Snapshot snap = snapshot::parse_snapshot(bytes.data(), bytes.size(), path, opts);
    return build_requests(snap);
  }
  throw snapshot::ReadError(path, 0, fmt::format("unknown trace format (first bytes {:02x}{}): expected a PyTorch memory "
                                                 "snapshot pickle (first byte 0x80), a memcomm trace (.mct) or a "
                                                 "torch.profiler trace (JSON, or gzip: 1f 8b)", first,
                                                 head.size() > 1 ? fmt::format(" {:02x}", static_cast<std::uint8_t>(head[1])) : ""));
}
}  // namespace

TraceRequests load_trace(const std::string& path, const LoadProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  TraceRequests out;
  try {
    out = read_trace(path, progress);
  } catch (const LiveBytesTooLarge& e) {  // Note [Live bytes past 4 EiB]: the file's fault
    throw snapshot::ReadError(path, snapshot::kNoOffset, e.what());
  }
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace memcomm::replay
