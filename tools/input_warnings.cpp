#include "input_warnings.hpp"

#include <fmt/format.h>

namespace memcomm::prof::tool {

void warn_about_inputs(const TraceSet& set) {
  for (const FileLoadInfo& f : set.files)
    if (f.recovery.truncated) fmt::print(stderr, "memcomm-trace: warning: {}: {}\n", f.path, f.recovery.detail);
  for (const std::string& line : set.mixed_runs()) fmt::print(stderr, "memcomm-trace: warning: {}\n", line);
  // A burst of allocations can outrun the recorder: the frees it dropped leave blocks live for good
  // (a burst of 300k tensors read 95-115 MiB live where 73 MiB were), and the tables say so nowhere.
  for (const RankTrace& r : set.ranks)
    if (r.drops > 0)
      fmt::print(stderr, "memcomm-trace: warning: {}: rank {} dropped {} events while recording (its buffer was full): "
                         "memory figures count blocks whose frees were among them as live\n", r.source, r.rank, r.drops);
}

}  // namespace memcomm::prof::tool
