#include "input_warnings.hpp"

#include <fmt/format.h>

namespace memcomm::prof::tool {

void warn_about_inputs(const TraceSet& set) {
  for (const FileLoadInfo& f : set.files)
    if (f.recovery.truncated) fmt::print(stderr, "memcomm-trace: warning: {}: {}\n", f.path, f.recovery.detail);
  for (const std::string& line : set.mixed_runs()) fmt::print(stderr, "memcomm-trace: warning: {}\n", line);
}

}  // namespace memcomm::prof::tool
