// Helpers shared by the test executables.
#pragma once
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace memcomm::test {

inline constexpr std::uint64_t MiB = std::uint64_t(1) << 20;

// Exit code that ctest maps to "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipReturnCode = 77;

// Where the checkout is; tests find fixtures and ../shared through it.
inline std::string source_dir() { return MEMCOMM_SOURCE_DIR; }
// Where build/bin lives; tests that run the tools find them through it.
inline std::string bin_dir() { return std::string(MEMCOMM_BINARY_DIR) + "/bin"; }

// The real PyTorch snapshots shipped beside the checkout (../shared/traces/pytorch-snapshots).
inline std::string shared_snapshots_dir() { return source_dir() + "/../shared/traces/pytorch-snapshots"; }

// The path of a test's file `name` in the folder `folder` of the temporary directory (created).
inline std::string temp_path(const std::string& folder, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / folder;
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A port the kernel has just given out on loopback, free now: unlike a port derived from the pid, not
// one that another test (or process) already holds. 0 when none could be had.
inline std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Which sanitizer the test executable was built with (GCC defines __SANITIZE_*__, clang answers
// __has_feature). Tests that fork a multithreaded process need to know: TSan does not support threads
// started in such a child, and clang 14's ASan malloc is not fork-safe.
#if defined(__has_feature)
#define MEMCOMM_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define MEMCOMM_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || MEMCOMM_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || MEMCOMM_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Waits up to `seconds` for the child `pid` and kills it if it still runs then (a child that hangs
// must not hang the test). True when it exited by itself with status 0.
inline bool child_exits_cleanly(pid_t pid, int seconds) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace memcomm::test

// Ends the whole test executable as "skipped" (never "passed") when a requirement such as a GPU
// is missing. ctest runs each case in its own process, so this skips exactly one case.
#define MEMCOMM_SKIP_TEST(why)                                              \
  do {                                                                      \
    WARN("SKIPPED: " << (why));                                             \
    std::fprintf(stderr, "SKIPPED: %s\n", std::string(why).c_str());        \
    std::exit(::memcomm::test::kSkipReturnCode);                            \
  } while (0)
