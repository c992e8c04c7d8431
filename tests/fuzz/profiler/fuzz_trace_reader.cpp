// Fuzzes the .mct reader over arbitrary bytes: it must either read or throw TraceError, never
// crash, hang or over-allocate. Also loads the result as a TraceSet and analyses it, since tools
// do exactly that with whatever a file contains.
#include <cstddef>
#include <cstdint>

#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/trace_reader.hpp"
#include "memcomm/trace/trace_set.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memcomm::prof;
  try {
    TraceReader r(data, size, "fuzz");
    TraceSet set;
    LoadOptions lo;
    set.add_from_reader(r, lo);
    set.finish(lo);
    if (set.event_count() < 100000) (void)analyze(set);
  } catch (const TraceError&) {
  }
  return 0;
}
