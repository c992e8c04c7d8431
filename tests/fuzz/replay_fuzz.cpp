// libFuzzer target for outside input of memcomm-replay: the data-only pickle reader, the snapshot
// model built on it, request rebuilding, and a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "memcomm/replay/pytorch_sim.hpp"
#include "memcomm/replay/replayer.hpp"
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
  for (const auto& dev : trace.devices) {
    if (dev.requests.size() > 100000) continue;  // keep each input fast
    for (bool expandable : {false, true}) {
      replay::PyTorchSimConfig cfg;
      cfg.expandable_segments = expandable;
      cfg.capacity = std::uint64_t{1} << 34;  // exercise the free-cache-and-retry path too
      auto policy = replay::make_pytorch_sim(cfg);
      replay::ReplayOptions opts;
      opts.check = true;  // a broken invariant throws std::logic_error: a finding
      opts.check_every = 64;
      replay::replay_device(trace, dev, *policy, opts);
    }
  }
  return 0;
}
