// libFuzzer target for memcomm-view's .mct input: bytes -> ingest_trace (viewer/model's fast ingest,
// with alloc_derive's curves and marks) -> build_indexes (allocator checkpoints, step table,
// summary) -> the allocator state at a few cursors. ingest_trace reports bad input by returning
// false; anything that escapes, crashes or trips a sanitizer is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../fuzz_file.hpp"
#include "ingest_trace.hpp"
#include "viewer_model_walk.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm::view;
  const std::string path = memcomm_fuzz::as_file(data, size);
  LoadOptions o;
  o.decode_ahead = false;    // one thread: reproducible runs
  o.prefault_ahead = false;
  {
    Timeline tl;
    std::string error;
    if (ingest_trace(path, tl, error, nullptr, o)) memcomm_fuzz::walk(tl);
  }
  // The time-range load (Note [Time range load]) takes other paths through the same events.
  o.range_lo_s = 0;
  o.range_hi_s = 1e-3;
  Timeline tl;
  std::string error;
  if (ingest_trace(path, tl, error, nullptr, o)) memcomm_fuzz::walk(tl);
  return 0;
}
