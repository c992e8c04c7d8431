#include "input_warnings.hpp"

#include <fmt/format.h>

#include "memcomm/trace/analysis.hpp"

namespace memcomm::prof::tool {

void warn_if_empty(const std::string& path, uint64_t events, bool torch_profiler) {
  // A recorder killed before its first chunk leaves a header alone: every figure would read as a quiet
  // run ("nothing to change") rather than as no data at all.
  if (events == 0)
    fmt::print(stderr, "memcomm-trace: warning: {}: holds no events{}: every figure from it is empty\n", path,
               torch_profiler ? "" : " (its recorder ended before writing a chunk)");
}

void warn_about_inputs(const TraceSet& set) {
  for (const FileLoadInfo& f : set.files) {
    if (f.recovery.truncated) fmt::print(stderr, "memcomm-trace: warning: {}: {}\n", f.path, f.recovery.detail);
    warn_if_empty(f.path, f.recovery.events, f.kineto != nullptr);
  }
  for (const std::string& line : set.mixed_runs()) fmt::print(stderr, "memcomm-trace: warning: {}\n", line);
  // A burst of allocations can outrun the recorder: the frees it dropped leave blocks live for good
  // (a burst of 300k tensors read 95-115 MiB live where 73 MiB were), and the tables say so nowhere.
  for (const RankTrace& r : set.ranks)
    if (const uint64_t launches = kernel_launches_without_kernels(r); launches > 0)
      fmt::print(stderr, "memcomm-trace: warning: {}: rank {} launched {} {} but the trace holds none that ran (kernels "
                         "were not recorded: torch.profiler without ProfilerActivity.CUDA, or CUPTI failed): its "
                         "breakdown counts no device compute\n",
                 r.source, r.rank, launches, launches == 1 ? "kernel" : "kernels");
  for (const RankTrace& r : set.ranks)
    if (r.drops > 0)
      fmt::print(stderr, "memcomm-trace: warning: {}: rank {} dropped {} events while recording (its buffer was full): "
                         "memory figures count blocks whose frees were among them as live\n", r.source, r.rank, r.drops);
}

}  // namespace memcomm::prof::tool
