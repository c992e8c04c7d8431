// Fuzzes the live stream decoder: arbitrary bytes, fed in pieces whose sizes come from the input,
// must be decoded or refused with an error, never crash.
#include <cstddef>
#include <cstdint>

#include "memcomm/profiler/stream_protocol.hpp"

namespace {
struct Sink : memcomm::prof::StreamDecoder::Output {
  size_t events = 0;
  bool on_hello(const memcomm::prof::StreamHello& h, std::string& why) override {
    if (h.protocol_version != memcomm::prof::kStreamProtocolVersion) {
      why = "version";
      return false;
    }
    return true;
  }
  void on_frame(const std::vector<memcomm::prof::StringDef>& defs, const memcomm::prof::Event* ev, size_t n) override {
    for (size_t i = 0; i < n; ++i) events += uint8_t(ev[i].kind) != 0;
    for (const auto& d : defs) events += d.text.size() > 0;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  memcomm::prof::StreamDecoder dec(1u << 20);
  Sink sink;
  const size_t step = 1 + data[0] % 64;  // feed in pieces, like recv() does
  for (size_t i = 1; i < size; i += step) {
    const size_t n = std::min(step, size - i);
    if (!dec.feed(data + i, n, sink)) break;
  }
  return 0;
}
