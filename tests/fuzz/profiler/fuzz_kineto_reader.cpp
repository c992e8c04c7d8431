// Fuzzes the torch.profiler (Kineto) reader over arbitrary bytes: it must read (skipping what it
// cannot use, with counts) or throw TraceError, never crash, hang or over-allocate. The result is
// loaded and analysed as the tools do.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_set.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memcomm::prof;
  try {
    KinetoTrace k = read_kineto_buffer(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)kineto_info_text(k.info);
    TraceSet set;
    set.ranks.push_back(std::move(k.trace));
    LoadOptions lo;
    set.finish(lo);
    if (set.event_count() < 100000) (void)analyze(set);
  } catch (const TraceError&) {
  }
  return 0;
}
