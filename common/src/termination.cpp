// The SIGTERM (and SIGHUP) watch: a handler that writes to a pipe, a thread that closes the run and
// ends the process by the signal (Note [Closing on SIGTERM]).
#include "memcomm/common/termination.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>
#include <utility>

namespace memcomm {

namespace {

int g_pipe[2] = {-1, -1};
std::atomic<pid_t> g_owner{0};        // the process whose thread reads the pipe
std::atomic<int> g_signals_seen{0};

std::mutex g_mu;                      // guards the two below
std::function<void()> g_close;
std::chrono::milliseconds g_deadline{0};
std::string g_late_note;

void restore_default(int sig) {  // async-signal-safe
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
}

// The signal's default action, now: from the handler too (every call is async-signal-safe).
[[noreturn]] void end_by(int sig) {
  restore_default(sig);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // only if the default action did not end the process
}

void on_signal(int sig) {
  const int saved_errno = errno;
  // A forked child has no watch thread; a second signal means "now".
  if (::getpid() != g_owner.load() || g_signals_seen.fetch_add(1) > 0) end_by(sig);
  const char byte = static_cast<char>(sig);
  if (::write(g_pipe[1], &byte, 1) != 1) end_by(sig);
  errno = saved_errno;
}

[[noreturn]] void watch_loop() {
  char byte = 0;
  ssize_t got = 0;
  do {
    got = ::read(g_pipe[0], &byte, 1);
  } while (got < 0 && errno == EINTR);
  const int sig = got == 1 ? static_cast<unsigned char>(byte) : SIGTERM;
  std::function<void()> close;
  std::chrono::milliseconds deadline{};
  std::string late_note;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    close = g_close;
    deadline = g_deadline;
    late_note = g_late_note;
  }
  std::thread([deadline, sig, late_note] {
    std::this_thread::sleep_for(deadline);
    if (!late_note.empty() && ::write(STDERR_FILENO, late_note.data(), late_note.size()) < 0) {
      // stderr is gone: the process ends all the same
    }
    end_by(sig);
  }).detach();
  if (close) {
    try {
      close();
    } catch (...) {  // the close's own failure: the process still ends as the signal asked
    }
  }
  end_by(sig);
}

// SIGTERM, and SIGHUP: a closed terminal or a dropped ssh session ends a run as SIGTERM does.
constexpr int kWatched[] = {SIGTERM, SIGHUP};

bool handler_is(int sig, void (*handler)(int)) {
  struct sigaction now {};
  ::sigaction(sig, nullptr, &now);
  return (now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == handler;
}

// The pipe and the thread, once per process (a forked child makes its own: its owner differs).
bool start_thread() {
  if (g_owner.load() == ::getpid()) return true;
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return false;
  g_owner.store(::getpid());
  std::thread(watch_loop).detach();
  return true;
}

}  // namespace

bool watch_termination(std::function<void()> close, std::chrono::milliseconds deadline, std::string late_note) {
  if (!handler_is(SIGTERM, SIG_DFL) && !handler_is(SIGTERM, on_signal)) return false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_close = std::move(close);
    g_deadline = deadline;
    g_late_note = std::move(late_note);
  }
  if (!start_thread()) return false;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the program's system calls go on as they would have
  for (const int sig : kWatched)  // SIGHUP only where it has its default action (nohup ignores it)
    if (sig != SIGTERM && handler_is(sig, SIG_DFL)) ::sigaction(sig, &sa, nullptr);
  return ::sigaction(SIGTERM, &sa, nullptr) == 0;
}

void unwatch_termination() {
  for (const int sig : kWatched)
    if (handler_is(sig, on_signal)) restore_default(sig);
  std::lock_guard<std::mutex> lock(g_mu);
  g_close = nullptr;
}

}  // namespace memcomm
