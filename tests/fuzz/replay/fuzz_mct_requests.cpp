// libFuzzer target for memcomm-replay's other input: .mct bytes -> read_mct_trace (the profiler's
// trace reader feeding RequestBuilder) -> a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
#include <cstddef>
#include <cstdint>

#include "mct_trace.hpp"
#include "replay_checked.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  memcomm_fuzz::load_and_replay_checked(memcomm::replay::read_mct_trace, data, size);
  return 0;
}
