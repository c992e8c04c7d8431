#include "memcomm/trace/comm_kernels.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <re2/re2.h>

namespace memcomm::prof {
namespace {

// Note [A pattern the user writes]: --comm-kernels is any pattern a user types, searched in every
// kernel name, and the names are any length (template arguments run to 5,160 characters in some 60
// real traces). libstdc++'s std::regex backtracks and recurses: a 100,000-character kernel name, or a
// 100,000-character pattern, overflowed the stack, and '.*.*x' on a 121 KB trace ran for minutes
// (its names cut to 2 KiB). RE2 matches in time linear in the name, whatever the pattern, and
// without recursion, so every name is searched whole; its syntax is that of Python's re without
// backreferences and lookaround (HTA's patterns are Python's). Linear needs RE2's DFA, whose states
// grow with the pattern: past its memory budget RE2 falls back to a simulation that costs the
// pattern's length per character, and a 100,000-character pattern then took 56 s on one 300,000-
// character name. A pattern names kernel families (the default is six words), so one longer than
// kMaxCommPattern is refused, saying so.
constexpr size_t kMaxCommPattern = 1000;

}  // namespace

std::string comm_kernels_problem(const std::string& pattern) {  // Note [A pattern the user writes]
  if (pattern.size() > kMaxCommPattern)
    return fmt::format("a pattern of {} characters: at most {} (it names kernel families, as the default '{}' does)",
                       pattern.size(), kMaxCommPattern, kDefaultCommKernels);
  const re2::RE2 re(pattern, re2::RE2::Quiet);
  return re.ok() ? std::string() : fmt::format("'{}' is not a valid regular expression: {}", pattern, re.error());
}

CommKernelRule::CommKernelRule(const std::string& pattern) {
  if (std::string problem = comm_kernels_problem(pattern); !problem.empty()) throw std::invalid_argument(problem);
  pattern_ = std::make_unique<re2::RE2>(pattern, re2::RE2::Quiet);
}

CommKernelRule::~CommKernelRule() = default;
CommKernelRule::CommKernelRule(CommKernelRule&&) noexcept = default;
CommKernelRule& CommKernelRule::operator=(CommKernelRule&&) noexcept = default;

bool CommKernelRule::matches(std::string_view kernel_name) const {
  return re2::RE2::PartialMatch(re2::StringPiece(kernel_name.data(), kernel_name.size()), *pattern_);
}

}  // namespace memcomm::prof
