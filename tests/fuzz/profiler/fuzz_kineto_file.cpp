// Fuzzes the torch.profiler (Kineto) reader through a file, as the tools open one: bytes ->
// is_kineto_candidate -> read_kineto(path). Unlike profiler_kineto_reader_fuzz (a buffer), this
// takes the gzip path too: a producer thread inflates into blocks while the parser reads them
// (Note [Inflating beside the parser]), so corrupt, cut or multi-member gzip streams exercise its
// hand-over of errors and its early stop. Seeds are gzip members of small traces. It must read or
// throw TraceError, never crash, hang, leak the producer or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../fuzz_file.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/trace_set.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memcomm::prof;
  const std::string path = memcomm_fuzz::as_file(data, size);
  if (!is_kineto_candidate(path)) return 0;
  try {
    KinetoTrace k = read_kineto(path);
    (void)kineto_info_text(k.info);
    TraceSet set;
    set.ranks.push_back(std::move(k.trace));
    set.finish(LoadOptions{});
  } catch (const TraceError&) {
  }
  return 0;
}
