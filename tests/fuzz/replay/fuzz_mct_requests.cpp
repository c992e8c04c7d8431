// libFuzzer target for memcomm-replay's other input: .mct bytes -> read_mct_trace (the profiler's
// trace reader feeding RequestBuilder) -> a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "../fuzz_file.hpp"
#include "mct_trace.hpp"
#include "replay_checked.hpp"
#include "memcomm/snapshot/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm;
  replay::TraceRequests trace;
  try {
    trace = replay::read_mct_trace(memcomm_fuzz::as_file(data, size));
  } catch (const snapshot::ReadError&) {
    return 0;
  }
  memcomm_fuzz::replay_checked(trace);
  return 0;
}
