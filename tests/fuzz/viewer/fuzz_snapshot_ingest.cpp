// libFuzzer target for memcomm-view's PyTorch snapshot input: pickle bytes -> ingest_snapshot
// (viewer/model/ingest_snapshot.cpp over memcomm_snapshot) -> build_indexes -> the allocator state
// at a few cursors. ingest_snapshot reports bad input by returning false; anything that escapes,
// crashes or trips a sanitizer is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../fuzz_file.hpp"
#include "ingest_snapshot.hpp"
#include "viewer_model_walk.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm::view;
  Timeline tl;
  std::string error;
  if (ingest_snapshot(memcomm_fuzz::as_file(data, size), tl, error, nullptr)) memcomm_fuzz::walk(tl);
  return 0;
}
