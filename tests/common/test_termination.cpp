// The SIGTERM watch, in forked children so the test process keeps its own disposition.
// See Note [Closing on SIGTERM].
#include "memcomm/common/termination.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Ended {
  bool by_sigterm = false;
  bool by_sighup = false;
  int exit_status = -1;
  std::chrono::milliseconds after{0};
};

// Runs `child` in a forked process (which must not return, nor use Catch's assertions) and reports how
// that process ended.
template <class F>
Ended run_forked(F child) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGTERM, SIG_DFL);  // as a process starts; Catch's fatal-signal handler is the test's
    ::signal(SIGHUP, SIG_DFL);
    child();
    ::_exit(99);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Ended e;
  e.by_sigterm = WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM;
  e.by_sighup = WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP;
  e.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  e.after = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return e;
}

[[noreturn]] void wait_forever() {
  for (;;) std::this_thread::sleep_for(1s);
}

fs::path marker(const char* name) { return fs::temp_directory_path() / (std::string(name) + std::to_string(::getpid())); }

}  // namespace

TEST_CASE("SIGTERM runs the close, then ends the process by SIGTERM") {
  const fs::path closed = marker("memcomm-termination-closed-");
  fs::remove(closed);
  const Ended e = run_forked([&] {
    if (!memcomm::watch_termination([&] { std::ofstream(closed) << "closed"; }, 5000ms)) ::_exit(3);
    ::kill(::getpid(), SIGTERM);
    wait_forever();
  });
  CHECK(e.by_sigterm);
  CHECK(fs::exists(closed));
  CHECK(e.after < 5000ms);
  fs::remove(closed);
}

TEST_CASE("SIGHUP runs the close too, then ends the process by SIGHUP, and nohup's SIG_IGN stays") {
  // A dropped ssh session lost a short run's every step.
  const fs::path closed = marker("memcomm-termination-hup-");
  fs::remove(closed);
  const Ended e = run_forked([&] {
    if (!memcomm::watch_termination([&] { std::ofstream(closed) << "closed"; }, 5000ms)) ::_exit(3);
    ::kill(::getpid(), SIGHUP);
    wait_forever();
  });
  CHECK(e.by_sighup);
  CHECK(fs::exists(closed));
  fs::remove(closed);
  const Ended ignored = run_forked([] {
    ::signal(SIGHUP, SIG_IGN);
    if (!memcomm::watch_termination([] { ::_exit(4); }, 1000ms)) ::_exit(3);
    ::kill(::getpid(), SIGHUP);  // still ignored
    std::this_thread::sleep_for(200ms);
    ::_exit(0);
  });
  CHECK(ignored.exit_status == 0);
}

TEST_CASE("a close that never returns still ends the process by its deadline") {
  const Ended e = run_forked([] {
    memcomm::watch_termination([] { wait_forever(); }, 200ms);
    ::kill(::getpid(), SIGTERM);
    wait_forever();
  });
  CHECK(e.by_sigterm);
  CHECK(e.after >= 200ms);
}

TEST_CASE("a second SIGTERM ends the process at once") {
  const Ended e = run_forked([] {
    memcomm::watch_termination([] { ::kill(::getpid(), SIGTERM); wait_forever(); }, 60000ms);
    ::kill(::getpid(), SIGTERM);
    wait_forever();
  });
  CHECK(e.by_sigterm);
  CHECK(e.after < 30000ms);
}

TEST_CASE("a SIGTERM disposition the program chose is left alone") {
  const Ended e = run_forked([] {
    ::signal(SIGTERM, SIG_IGN);
    const bool watching = memcomm::watch_termination([] {}, 1000ms);
    ::kill(::getpid(), SIGTERM);  // still ignored
    ::_exit(watching ? 1 : 0);
  });
  CHECK(e.exit_status == 0);
}

TEST_CASE("a process forked after the watch, and one after unwatch, end by SIGTERM at once") {
  const Ended forked = run_forked([] {
    memcomm::watch_termination([] { wait_forever(); }, 60000ms);
    const Ended grandchild = run_forked([] {
      ::kill(::getpid(), SIGTERM);  // no watch thread here: the inherited handler ends it
      wait_forever();
    });
    ::_exit(grandchild.by_sigterm ? 0 : 1);
  });
  CHECK(forked.exit_status == 0);
  const Ended unwatched = run_forked([] {
    memcomm::watch_termination([] { wait_forever(); }, 60000ms);
    memcomm::unwatch_termination();
    ::kill(::getpid(), SIGTERM);
    wait_forever();
  });
  CHECK(unwatched.by_sigterm);
  CHECK(unwatched.after < 30000ms);
}
