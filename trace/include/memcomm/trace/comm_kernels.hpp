// Which GPU kernels are communication: one rule for every reader of kernels. memcomm's CUPTI capture
// flags them as it records (ComputeEvent::sub = 1), and the torch.profiler reader, where
// `--comm-kernels` may replace the pattern, also turns them into collectives (Note [Collectives from
// communication kernels] in src/kineto/collectives.hpp). In the trace model (memcomm_trace), not the
// analysis library, because the recorder's CUPTI layer links only the model.
//
//   const CommKernelRule rule;                       // the default pattern
//   rule.matches("ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)")   // true
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace re2 {
class RE2;
}

namespace memcomm::prof {

// The default pattern (RE2 syntax, searched anywhere in the kernel name, mangled or not: Note [A
// pattern the user writes] in src/comm_kernels.cpp): NCCL and RCCL kernels, and NCCL's one-rank
// reduction (a single-rank communicator runs oneRankReduce<FuncPreMulSum...>, or a plain copy, in
// place of the collective); DeepEP's kernels that talk to other GPUs (its intranode:: and internode::
// namespaces: dispatch, combine and their notify steps; deep_ep:: in the public library, dpsk::ep:: in
// DeepSeek's own profile-data traces; its layout kernel only counts tokens on the GPU) and NVSHMEM
// kernels. HTA counts only ^nccl.*Kernel as communication; `memcomm-trace report --hta` uses HTA's
// rule whatever this is.
inline constexpr const char* kDefaultCommKernels =
    R"(nccl|rccl|oneRankReduce|(deep_ep|dpsk::ep)::(intra|inter)node|nvshmem)";

// Why `pattern` cannot be a communication-kernel pattern (too long, or not RE2: "'(' is not a valid
// regular expression: ..."), or "" when it can. The CLI checks `--comm-kernels` with it first, so a
// pattern is refused also where no torch.profiler trace is read.
std::string comm_kernels_problem(const std::string& pattern);

class CommKernelRule {
 public:
  // Throws std::invalid_argument with comm_kernels_problem's message for a pattern it refuses.
  explicit CommKernelRule(const std::string& pattern = kDefaultCommKernels);
  ~CommKernelRule();
  CommKernelRule(CommKernelRule&&) noexcept;
  CommKernelRule& operator=(CommKernelRule&&) noexcept;

  // Whether the pattern occurs in `kernel_name`. Linear in the name; callers that see one name
  // many times (every launch of a kernel) keep the answer per name.
  bool matches(std::string_view kernel_name) const;

 private:
  std::unique_ptr<re2::RE2> pattern_;
};

}  // namespace memcomm::prof
