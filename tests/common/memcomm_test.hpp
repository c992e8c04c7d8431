// Helpers shared by the test executables.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace memcomm::test {

// Exit code that ctest maps to "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipReturnCode = 77;

// Where the checkout is; tests find fixtures and ../shared through it.
inline std::string source_dir() { return MEMCOMM_SOURCE_DIR; }
// Where build/bin lives; tests that run the tools find them through it.
inline std::string bin_dir() { return std::string(MEMCOMM_BINARY_DIR) + "/bin"; }

// The real PyTorch snapshots shipped beside the checkout (../shared/traces/pytorch-snapshots).
inline std::string shared_snapshots_dir() { return source_dir() + "/../shared/traces/pytorch-snapshots"; }

}  // namespace memcomm::test

// Ends the whole test executable as "skipped" (never "passed") when a requirement such as a GPU
// is missing. ctest runs each case in its own process, so this skips exactly one case.
#define MEMCOMM_SKIP_TEST(why)                                              \
  do {                                                                      \
    WARN("SKIPPED: " << (why));                                             \
    std::fprintf(stderr, "SKIPPED: %s\n", std::string(why).c_str());        \
    std::exit(::memcomm::test::kSkipReturnCode);                            \
  } while (0)
