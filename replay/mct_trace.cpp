// Reading .mct traces: the allocator's MemBlockEvents become requests exactly as a PyTorch
// snapshot's events do (request_builder.hpp).
#include "mct_trace.hpp"

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "memcomm/trace/event.hpp"
#include "memcomm/trace/trace_reader.hpp"
#include "request_builder.hpp"

namespace memcomm::replay {

TraceRequests read_mct_trace(const std::string& path) {
  TraceRequests out;
  out.file = path;
  out.format = "mct";
  std::map<std::pair<int, int>, RequestBuilder> devices;  // key: (rank, device)
  auto device = [&](int rank, int dev) -> RequestBuilder& {
    auto it = devices.find({rank, dev});
    if (it == devices.end()) it = devices.emplace(std::make_pair(rank, dev), RequestBuilder(rank, dev)).first;
    return it->second;
  };
  try {
    prof::TraceReader reader(path);
    prof::ChunkView chunk;
    while (reader.next(chunk)) {
      const int rank = chunk.rank == prof::kUnknownRank ? kNoRank : static_cast<int>(chunk.rank);
      for (const prof::Event& e : chunk) {
        switch (e.kind) {
          case prof::EventKind::Alloc:
          case prof::EventKind::FreeRequested:
          case prof::EventKind::FreeCompleted:
          case prof::EventKind::SegmentAlloc:
          case prof::EventKind::SegmentFree:
          case prof::EventKind::SegmentMap:
          case prof::EventKind::SegmentUnmap: {
            const auto m = e.as<prof::MemBlockEvent>();
            RequestBuilder& b = device(rank, m.device);
            switch (e.kind) {
              case prof::EventKind::Alloc: b.alloc(m.addr(), m.size(), m.stream); break;
              case prof::EventKind::FreeRequested: b.free_requested(m.addr()); break;
              case prof::EventKind::FreeCompleted: b.free_completed(m.addr(), m.size(), m.stream); break;
              case prof::EventKind::SegmentAlloc: b.segment_grow(m.addr(), m.size(), false, m.virtual_range()); break;
              case prof::EventKind::SegmentMap: b.segment_grow(m.addr(), m.size(), true); break;
              case prof::EventKind::SegmentFree: b.segment_shrink(m.addr(), m.size(), false, m.virtual_range()); break;
              default: b.segment_shrink(m.addr(), m.size(), true); break;
            }
            break;
          }
          case prof::EventKind::Oom:
            device(rank, e.as<prof::OomEvent>().device).oom();
            break;
          default:
            break;  // communication, compute, counters, metadata: not the allocator's
        }
      }
    }
    const prof::RecoveryInfo& rec = reader.recovery();
    if (rec.truncated) {
      out.recovery = rec.detail + "; " + std::to_string(rec.truncated_bytes) + " trailing bytes ignored";
    }
  } catch (const prof::TraceError& e) {
    std::string what = e.what();  // already names the file (and byte offset); do not repeat it
    if (what.rfind(path + ": ", 0) == 0) what.erase(0, path.size() + 2);
    throw snapshot::ReadError(path, snapshot::kNoOffset, what);
  }
  for (auto& [key, b] : devices) out.devices.push_back(b.finish());
  return out;
}

}  // namespace memcomm::replay
