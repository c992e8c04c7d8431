// libFuzzer target for outside input of memcomm-replay: the data-only pickle reader, the snapshot
// model built on it, request rebuilding, and a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "replay/replay_checked.hpp"
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
    for (const auto& e : dev) (void)snap.top_frame(e.stack);
  }
  replay::TraceRequests trace = replay::build_requests(snap);
  memcomm_fuzz::replay_checked(trace);
  return 0;
}
