// libFuzzer target for memcomm-view's torch.profiler input: bytes (JSON or gzip) -> ingest_kineto
// (viewer/model/ingest_kineto.cpp over the trace layer's reader) -> build_indexes -> the allocator
// state at a few cursors. ingest_kineto reports bad input by returning false; anything that escapes,
// crashes or trips a sanitizer is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../fuzz_file.hpp"
#include "ingest_kineto.hpp"
#include "viewer_model_walk.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  memcomm_fuzz::load_and_walk(memcomm::view::ingest_kineto, memcomm_fuzz::as_file(data, size), {});
  return 0;
}
