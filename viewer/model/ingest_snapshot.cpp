#include "ingest_snapshot.hpp"

#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/view/builder.hpp>

#include <cstdint>
#include <map>

namespace memcomm::view {
namespace {
// A snapshot's time_us comes from outside: an absurd one is bounded (Note [Bounded timestamps] in
// timeline.hpp) instead of overflowing.
TimeNs us_to_ns(std::int64_t us) {
  std::int64_t ns = 0;
  if (__builtin_mul_overflow(us, std::int64_t{1000}, &ns)) return us < 0 ? -kTimeLimit : kTimeLimit;
  return bounded_time(ns);
}
}  // namespace

// Each device of the snapshot becomes one lane group (shown as a rank). Snapshots older than
// time_us carry no times: events are then spaced 1 us apart in trace order.
bool ingest_snapshot(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress) {
  try {
    snapshot::ParseOptions opts;
    opts.keep_frames = false;
    opts.progress_user = progress;
    opts.progress = [](std::uint64_t done, std::uint64_t total, void* user) {
      if (user && total) *static_cast<std::atomic<double>*>(user) = 0.9 * static_cast<double>(done) / static_cast<double>(total);
    };
    const snapshot::Snapshot snap = snapshot::load_snapshot(path, opts);
    TimelineBuilder b;
    std::map<std::int64_t, std::uint32_t> streams;  // cudaStream_t value -> small index
    auto stream_index = [&](std::int64_t s) {
      return streams.emplace(s, static_cast<std::uint32_t>(streams.size())).first->second;
    };
    for (std::size_t dev = 0; dev < snap.device_traces.size(); ++dev) {
      const auto& trace = snap.device_traces[dev];
      std::int64_t i = 0;
      for (const auto& e : trace) {
        const std::int64_t t = e.has_time() ? us_to_ns(e.time_us) : i * 1000;
        ++i;
        // Markers and actions this reader does not know (kind Invalid) are not allocator events.
        // Maps and unmaps back parts of a reservation (Note [Virtual reservations] in trace/ virtual_reservations.hpp).
        if (e.kind == prof::EventKind::Invalid) continue;
        b.alloc_event(static_cast<std::uint32_t>(dev), {t, e.addr, e.size, stream_index(e.stream), e.kind});
      }
    }
    // A snapshot whose traces are empty (history not recorded) still shows its end state as one
    // "allocation" per block at t = 0.
    if (b.event_count() == 0) {
      for (const auto& seg : snap.segments) {
        const auto dev = static_cast<std::uint32_t>(seg.device);
        b.alloc_event(dev, {0, seg.address, seg.total_size, stream_index(seg.stream), prof::EventKind::SegmentAlloc});
        for (const auto& blk : seg.blocks)
          if (blk.is_active())
            b.alloc_event(dev, {1, blk.address, blk.size, stream_index(seg.stream), prof::EventKind::Alloc});
      }
    }
    out = b.finish(path);
    if (progress) *progress = 1.0;
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
