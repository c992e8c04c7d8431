// The part the replay fuzz targets share: every device of a loaded trace replayed through the
// PyTorch simulation, with and without expandable segments, with invariant checks on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../fuzz_file.hpp"
#include "memcomm/replay/pytorch_sim.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm/snapshot/error.hpp"

namespace memcomm_fuzz {

inline void replay_checked(const memcomm::replay::TraceRequests& trace) {
  namespace replay = memcomm::replay;
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
}

// The input bytes read as a file by `read` (memcomm-replay's reader of one format), then replayed
// checked. Any input must either load or raise snapshot::ReadError; nothing else may escape.
template <typename Read>
void load_and_replay_checked(Read read, const std::uint8_t* data, std::size_t size) {
  memcomm::replay::TraceRequests trace;
  try {
    trace = read(as_file(data, size));
  } catch (const memcomm::snapshot::ReadError&) {
    return;
  }
  replay_checked(trace);
}

}  // namespace memcomm_fuzz
