// libFuzzer target for outside input of memcomm-replay and of `memcomm-trace memory`: the data-only
// pickle reader, the snapshot model built on it, the frames (memory_viz's filter and format, sites),
// the allocation lifetimes and live bytes by site, request rebuilding, and a checked replay through
// the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "replay/replay_checked.hpp"
#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/memory.hpp"
#include "memcomm/snapshot/snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm;
  snapshot::Snapshot snap;
  try {
    snap = snapshot::parse_snapshot(data, size, "fuzz.pickle");
  } catch (const snapshot::ReadError&) {
    return 0;
  }
  for (const auto& dev : snap.device_traces) {
    for (const auto& e : dev) (void)snapshot::shown_frame(snap, e.stack);
  }
  const snapshot::StackText text(snap);
  for (std::uint32_t s = 0; s < snap.stack_count(); ++s) (void)text.lines(s, true);
  const auto allocs = snapshot::snapshot_allocations(snap);
  for (const char* at : {"end", "peak", "0.5"}) {
    std::int64_t t = 0;
    std::string error;
    if (snapshot::resolve_at(allocs.allocations, at, t, error)) (void)snapshot::memory_at(allocs.allocations, text, t);
  }
  replay::TraceRequests trace = replay::build_requests(snap);
  memcomm_fuzz::replay_checked(trace);
  return 0;
}
