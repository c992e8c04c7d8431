// The advisor job (Note [Advice in a child process] in advice.hpp) and the tuner's probes.
#include <memcomm/view/app/advice.hpp>
#include <memcomm/view/loader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <system_error>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace memcomm::view {

const char* advice_state_name(AdviceResult::State s) {
  switch (s) {
    case AdviceResult::State::None: return "none";
    case AdviceResult::State::NoTraces: return "no-traces";
    case AdviceResult::State::Live: return "live";
    case AdviceResult::State::Waiting: return "waiting";
    case AdviceResult::State::Running: return "running";
    case AdviceResult::State::Done: return "done";
    case AdviceResult::State::Failed: return "failed";
  }
  return "?";
}

namespace {

constexpr std::size_t kMaxToolOutput = 16u << 20;  // report text and advice JSON are far smaller

InputKind input_kind(const std::string& path) {
  std::string error;
  return detect_input(path, error);
}

// What memcomm-trace advise reads: .mct traces, torch.profiler traces and PyTorch snapshots (by
// content, as the viewer loads them).
bool is_trace_file(const std::string& path) {
  const InputKind kind = input_kind(path);
  return kind == InputKind::MemcommTrace || kind == InputKind::KinetoTrace || kind == InputKind::TorchSnapshot;
}

bool executable(const std::string& path) {
  struct stat sb {};
  return !path.empty() && ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

struct ChildOutput {
  bool ran = false;     // spawned and waited for
  int exit_code = -1;   // -1: killed by a signal
  bool timed_out = false;     // still running at the job's deadline: killed
  std::string out, err, why;  // why: spawn failure, output over the cap, or the time limit
};

using Clock = std::chrono::steady_clock;
constexpr auto kTermGrace = std::chrono::seconds(2);  // SIGTERM, then SIGKILL after this

// Reaps `pid`, first sending `sig` (0: none, it is ending by itself). A child that is still there
// at the deadline, or kTermGrace after SIGTERM (a cancel while waiting sends one), gets SIGKILL:
// a child that ignores SIGTERM, or closed its pipes and kept running, cannot hang the job.
int stop_and_reap(pid_t pid, int sig, Clock::time_point deadline, const std::atomic<bool>& cancel, ChildOutput& r) {
  if (sig != 0) ::kill(pid, sig);
  auto kill_at = sig == SIGKILL ? Clock::now() : sig == SIGTERM ? std::min(deadline, Clock::now() + kTermGrace) : deadline;
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) return status;
    if (w < 0 && errno != EINTR) return status;
    if (Clock::now() >= kill_at) break;
    if (sig == 0 && cancel.load()) {
      sig = SIGTERM;
      ::kill(pid, SIGTERM);
      kill_at = std::min(kill_at, Clock::now() + kTermGrace);
    }
    ::usleep(10'000);
  }
  if (sig == 0) r.timed_out = true;  // it closed its output but went on past the deadline
  ::kill(pid, SIGKILL);  // not reaped yet: pid is still this child (or its zombie)
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Starts argv[0] with stdin from /dev/null and stdout/stderr into the write ends of `out` and
// `err`, which it closes here. Returns the pid, or 0 with r.why set.
pid_t spawn_child(const std::vector<std::string>& args, int out[2], int err[2], ChildOutput& r) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc == 0) return pid;
  r.why = args[0] + ": " + std::strerror(rc);
  return 0;
}

// Reads both pipes as they fill until EOF on both, the output cap, a cancel or the deadline.
// Returns the signal to stop the child with, 0 when it closed its output itself; closes the pipes.
int read_outputs(int out_fd, int err_fd, const std::atomic<bool>& cancel, Clock::time_point deadline, ChildOutput& r) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sink[2] = {&r.out, &r.err};
  int open_fds = 2;
  int stop_signal = 0;  // set when reading stops before EOF
  char buf[65536];
  while (open_fds > 0 && stop_signal == 0) {
    if (cancel.load()) {
      stop_signal = SIGTERM;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      stop_signal = SIGKILL;
      break;
    }
    // Wakes at least every 100 ms to see a cancel.
    if (::poll(fds, 2, static_cast<int>(std::min<long long>(left, 100))) < 0) {
      if (errno == EINTR) continue;
      r.why = std::string("poll: ") + std::strerror(errno);
      stop_signal = SIGKILL;
      break;
    }
    for (int i = 0; i < 2 && stop_signal == 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        const std::size_t room = kMaxToolOutput - sink[i]->size();  // sinks never pass the cap
        sink[i]->append(buf, std::min(room, static_cast<std::size_t>(n)));
        if (static_cast<std::size_t>(n) > room) {
          r.why = "its output passed " + std::to_string(kMaxToolOutput >> 20) + " MiB; stopped it";
          stop_signal = SIGTERM;
        }
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  return stop_signal;
}

// Runs argv[0] with stdin from /dev/null and stdout/stderr captured, both read as they come (a
// child that fills one pipe while the other is read would otherwise block). `child` holds its pid,
// under `mu`, until just before it is reaped, so that another thread can kill it: a pid read under
// `mu` is the child or its zombie, never a pid the system gave to another process since. Reading
// stops at the output cap, on cancel and at `deadline`: the pipes are closed (a grandchild that
// holds them cannot keep the job waiting) and the child is stopped and reaped (stop_and_reap).
ChildOutput run_child(const std::vector<std::string>& args, std::mutex& mu, pid_t& child, const std::atomic<bool>& cancel,
                      Clock::time_point deadline) {
  ChildOutput r;
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    r.why = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    return r;
  }
  const pid_t pid = spawn_child(args, out, err, r);
  if (pid == 0) {
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    child = pid;
    if (cancel.load()) ::kill(pid, SIGTERM);  // cancelled while it was starting
  }
  const int stop_signal = read_outputs(out[0], err[0], cancel, deadline, r);
  {
    std::lock_guard<std::mutex> lock(mu);
    child = 0;  // from here on only this thread signals it, before reaping it
  }
  const int status = stop_and_reap(pid, stop_signal, deadline, cancel, r);
  r.ran = true;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The tool's own message (its last stderr line), else how it ended.
std::string failure(const std::string& what, const ChildOutput& c, double timeout_s) {
  if (c.timed_out) return what + " timed out after " + std::to_string(static_cast<long>(timeout_s)) + " s (killed)";
  if (!c.why.empty()) return what + ": " + c.why;
  std::string e = c.err;
  while (!e.empty() && (e.back() == '\n' || e.back() == '\r')) e.pop_back();
  const auto nl = e.rfind('\n');
  if (nl != std::string::npos) e = e.substr(nl + 1);
  if (c.exit_code < 0) return what + ": killed by a signal" + (e.empty() ? "" : " (" + e + ")");
  return what + ": exit " + std::to_string(c.exit_code) + (e.empty() ? "" : ": " + e);
}

}  // namespace

std::vector<std::string> loaded_trace_files(const std::vector<std::string>& paths, const std::vector<std::string>& sources) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (p.empty() || std::find(out.begin(), out.end(), p) != out.end()) continue;
    // A source is the path, perhaps followed by " (range ...)" or " (truncated: ...)".
    const bool loaded = std::any_of(sources.begin(), sources.end(), [&](const std::string& s) {
      return s.compare(0, p.size(), p) == 0 && (s.size() == p.size() || s[p.size()] == ' ');
    });
    if (loaded && is_trace_file(p)) out.push_back(p);
  }
  return out;
}

std::string find_trace_tool(const std::string& configured) {
  if (!configured.empty()) return configured;
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<std::size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    if (executable(dir + "memcomm-trace")) return dir + "memcomm-trace";
  }
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    std::size_t start = 0;
    while (start <= all.size()) {
      const auto end = std::min(all.find(':', start), all.size());
      const std::string d = all.substr(start, end - start);
      if (!d.empty() && executable(d + "/memcomm-trace")) return d + "/memcomm-trace";
      start = end + 1;
    }
  }
  return "";
}

bool parse_advice_json(const std::string& text, std::vector<AdviceItem>& out, std::string& error) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_array()) {
      error = "expected a JSON list of advice";
      return false;
    }
    out.clear();
    for (const auto& a : j) {
      AdviceItem it;
      it.topic = a.at("topic").get<std::string>();
      it.change = a.at("change").get<std::string>();
      it.evidence = a.at("evidence").get<std::string>();
      it.saving = a.value("saving", 0.0);
      it.saving_unit = a.value("saving_unit", std::string());
      it.saving_text = a.value("saving_text", std::string());
      out.push_back(std::move(it));
    }
    return true;
  } catch (const std::exception& e) {
    error = std::string("unreadable advice JSON: ") + e.what();
    return false;
  }
}

AdviceJob::AdviceJob(std::string tool, std::vector<std::string> files, std::function<void()> on_done, double timeout_s)
    : tool_(std::move(tool)), files_(std::move(files)), on_done_(std::move(on_done)), timeout_s_(timeout_s) {
  result_.state = AdviceResult::State::Running;
  result_.files = files_;
  result_.tool = tool_;
  try {
    thread_ = std::thread([this] {
      try {
        work();
      } catch (const std::exception& e) {  // e.g. out of memory: a message in the pane, not std::terminate
        result_.state = AdviceResult::State::Failed;
        result_.error = std::string("memcomm-trace advise: ") + e.what();
        done_.store(true);
        if (on_done_) on_done_();
      }
    });
  } catch (const std::system_error& e) {
    result_.state = AdviceResult::State::Failed;
    result_.error = std::string("cannot start the advisor's thread: ") + e.what();
    done_.store(true);
  }
}

AdviceJob::~AdviceJob() {
  {
    std::lock_guard<std::mutex> lock(child_mu_);
    cancel_.store(true);  // under the lock: a child that starts after this is killed by run_child
    if (child_ > 0) ::kill(child_, SIGTERM);
  }
  if (thread_.joinable()) thread_.join();
}

AdviceResult AdviceJob::take() { return std::move(result_); }

void AdviceJob::work() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  AdviceResult& r = result_;
  const auto fail = [&](std::string why) {
    r.state = AdviceResult::State::Failed;
    r.error = std::move(why);
  };
  // "--": a file named "-h" or "--json.mct" is a file, not an option (its advice failed).
  std::vector<std::string> advise = {tool_, "advise", "--json", "--"}, report = {tool_, "report", "--rows", "12", "--"};
  bool any_trace = false;
  for (const auto& f : files_) {
    advise.push_back(f);
    // memcomm-trace report analyses traces only; a snapshot's advice is all the pane has of it.
    if (input_kind(f) != InputKind::TorchSnapshot) report.push_back(f), any_trace = true;
  }
  const ChildOutput a = run_child(advise, child_mu_, child_, cancel_, deadline);
  if (!cancel_.load()) {
    std::string error;
    if (!a.ran || a.exit_code != 0 || !a.why.empty() || a.timed_out) fail(failure("memcomm-trace advise", a, timeout_s_));
    else if (!parse_advice_json(a.out, r.advice, error)) fail("memcomm-trace advise: " + error);
  }
  if (!cancel_.load() && r.state == AdviceResult::State::Running && any_trace) {
    const ChildOutput rep = run_child(report, child_mu_, child_, cancel_, deadline);
    if (!rep.ran || rep.exit_code != 0 || !rep.why.empty() || rep.timed_out)
      fail(failure("memcomm-trace report", rep, timeout_s_));
    else r.report = rep.out;
  }
  if (r.state == AdviceResult::State::Running) r.state = cancel_.load() ? AdviceResult::State::None : AdviceResult::State::Done;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done_.store(true);
  if (on_done_) on_done_();
}

std::vector<TuneProbe> tune_probes(const Timeline& tl, std::uint32_t& rank) {
  std::vector<TuneProbe> out;
  for (const auto& rd : tl.ranks) {
    const CounterSeries* mb = rd.counter("tune.micro_batch");
    if (mb == nullptr || mb->size() == 0) continue;
    rank = rd.rank;
    const CounterSeries* oom = rd.counter("tune.oom");
    const CounterSeries* peak = rd.counter("tune.peak_reserved");
    const CounterSeries* step = rd.counter("tune.step_ms");
    std::size_t jo = 0, jp = 0, js = 0;
    // The probe's other counters are recorded right after its tune.micro_batch, before the next
    // probe's: take the first sample of each in [this probe, next probe).
    const auto take = [](const CounterSeries* s, std::size_t& j, TimeNs lo, TimeNs hi, bool last, double& v) {
      if (s == nullptr) return false;
      while (j < s->size() && s->time(j) < lo) ++j;
      if (j >= s->size() || (!last && s->time(j) >= hi)) return false;
      v = s->value(j++);
      return true;
    };
    for (std::size_t i = 0; i < mb->size(); ++i) {
      TuneProbe p;
      p.t = mb->time(i);
      p.micro_batch = mb->value(i);
      const bool last = i + 1 == mb->size();
      const TimeNs hi = last ? p.t : mb->time(i + 1);
      double v = 0;
      if (take(oom, jo, p.t, hi, last, v)) p.oom = v != 0;
      if (take(peak, jp, p.t, hi, last, v)) p.peak_reserved = v;
      if (take(step, js, p.t, hi, last, v)) p.step_ms = v;
      out.push_back(p);
    }
    return out;
  }
  return out;
}

}  // namespace memcomm::view
