// memcomm-tune's cache files are read back from disk: any bytes must give a result or a clean
// error, never a crash.
#include "memcomm/tuner/report.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const auto r = memcomm::tune::from_json(j);
    (void)memcomm::tune::format_trials(r);
    (void)memcomm::tune::format_recommendation(r);
    (void)memcomm::tune::to_json(r).dump();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
