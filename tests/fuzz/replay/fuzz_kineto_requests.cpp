// libFuzzer target for memcomm-replay's torch.profiler input: JSON (or gzip) bytes -> the trace
// layer's Kineto reader -> read_kineto_trace's pairing of [memory] events into requests (Note
// [Replaying a torch.profiler memory profile]) -> a checked replay through the PyTorch simulation.
// Any input must either load or raise snapshot::ReadError; nothing else may escape or crash.
// Seeds: the Kineto readers' (scripts/fuzz.sh), whose profile_memory traces hold [memory] events.
#include <cstddef>
#include <cstdint>

#include "kineto_trace.hpp"
#include "replay_checked.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  memcomm_fuzz::load_and_replay_checked(memcomm::replay::read_kineto_trace, data, size);
  return 0;
}
