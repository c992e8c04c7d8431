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
  memcomm::view::LoadOptions o;
  o.decode_ahead = false;  // one thread: reproducible runs
  o.prefault_ahead = false;
  memcomm_fuzz::load_and_walk(memcomm::view::ingest_trace, memcomm_fuzz::as_file(data, size), o);
  return 0;
}
