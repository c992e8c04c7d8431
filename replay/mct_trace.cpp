// Reading .mct traces: the allocator's MemBlockEvents become requests exactly as a PyTorch
// snapshot's events do (request_builder.hpp). A rank converted from a torch.profiler trace
// (`memcomm-trace convert`, tagged kKinetoSourceTag) is replayed as the torch.profiler trace itself
// is (Note [Replaying a torch.profiler memory profile] in kineto_trace.cpp): its bytes allocated
// before the profile began, and its Total Reserved as the recorded policy, are in its samples.
#include "mct_trace.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kineto_trace.hpp"
#include "memcomm/trace/event.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_reader.hpp"
#include "request_builder.hpp"

namespace memcomm::replay {

namespace {

// convert writes a rank's metadata at its first timestamp, so the tag is in its first chunk.
bool converted_from_torch_profiler(const prof::ChunkView& chunk, const prof::TraceReader& reader) {
  for (const prof::Event& e : chunk)
    if (e.kind == prof::EventKind::Meta && e.as<prof::MetaEvent>().key == prof::MetaKey::Tag &&
        reader.string(e.as<prof::MetaEvent>().str) == prof::kKinetoSourceTag)
      return true;
  return false;
}

bool memory_profile_event(prof::EventKind k) {
  return k == prof::EventKind::Alloc || k == prof::EventKind::FreeRequested || k == prof::EventKind::FreeCompleted ||
         k == prof::EventKind::Oom || k == prof::EventKind::MemSample;
}

}  // namespace

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
  std::map<int, std::optional<std::vector<prof::Event>>> profiles;  // rank -> its events, when converted
  try {
    prof::TraceReader reader(path);
    prof::ChunkView chunk;
    while (reader.next(chunk)) {
      const int rank = chunk.rank == prof::kUnknownRank ? kNoRank : static_cast<int>(chunk.rank);
      auto profile = profiles.find(rank);
      if (profile == profiles.end()) {
        profile = profiles.emplace(rank, std::nullopt).first;
        if (converted_from_torch_profiler(chunk, reader)) profile->second.emplace();
      }
      if (profile->second) {
        for (const prof::Event& e : chunk)
          if (memory_profile_event(e.kind)) profile->second->push_back(e);
        continue;
      }
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
  for (auto& [rank, events] : profiles)
    if (events) fold_memory_profile(*events, rank, out);
  if (out.devices.empty())  // as a torch.profiler trace without [memory] events (kineto_trace.cpp)
    throw snapshot::ReadError(path, snapshot::kNoOffset,
                              "a memcomm trace without allocator events: nothing to replay (memcomm-train records "
                              "them with --allocator memcomm, python -m memcomm with --allocator)");
  return out;
}

}  // namespace memcomm::replay
