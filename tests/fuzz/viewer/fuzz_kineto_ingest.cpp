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
  using namespace memcomm::view;
  const std::string path = memcomm_fuzz::as_file(data, size);
  LoadOptions o;
  {
    Timeline tl;
    std::string error;
    if (ingest_kineto(path, tl, error, nullptr, o)) memcomm_fuzz::walk(tl);
  }
  // A --range load cuts the events by time (Note [Time range load]) and measures the span otherwise.
  o.range_lo_s = 0;
  o.range_hi_s = 1e-3;
  Timeline tl;
  std::string error;
  if (ingest_kineto(path, tl, error, nullptr, o)) memcomm_fuzz::walk(tl);
  return 0;
}
