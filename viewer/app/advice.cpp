// The advisor job (Note [Advice in a child process] in advice.hpp) and the tuner's probes.
#include <memcomm/view/app/advice.hpp>

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

constexpr char kTraceMagic[8] = {'M', 'E', 'M', 'C', 'T', 'R', 'C', '\x1A'};  // prof::kFileMagic
constexpr std::size_t kMaxToolOutput = 16u << 20;  // report text and advice JSON are far smaller

bool is_trace_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[sizeof kTraceMagic] = {};
  return f.read(magic, sizeof magic) && std::memcmp(magic, kTraceMagic, sizeof magic) == 0;
}

bool executable(const std::string& path) {
  struct stat sb {};
  return !path.empty() && ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

struct ChildOutput {
  bool ran = false;     // spawned and waited for
  int exit_code = -1;   // -1: killed by a signal
  std::string out, err, why;  // why: spawn failure, or output over the cap
};

// Runs argv[0] with stdin from /dev/null and stdout/stderr captured, both read as they come (a
// child that fills one pipe while the other is read would otherwise block). `child` holds its pid,
// under `mu`, until just before it is reaped, so that another thread can kill it: a pid read under
// `mu` is the child or its zombie, never a pid the system gave to another process since.
ChildOutput run_child(const std::vector<std::string>& args, std::mutex& mu, pid_t& child, const std::atomic<bool>& cancel) {
  ChildOutput r;
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    r.why = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    return r;
  }
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
  if (rc != 0) {
    r.why = args[0] + ": " + std::strerror(rc);
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    child = pid;
    if (cancel.load()) ::kill(pid, SIGTERM);  // cancelled while it was starting
  }
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sink[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sink[i]->append(buf, static_cast<std::size_t>(n));
        if (sink[i]->size() > kMaxToolOutput && r.why.empty()) {
          r.why = "its output passed " + std::to_string(kMaxToolOutput >> 20) + " MiB; stopped it";
          ::kill(pid, SIGTERM);
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
  {
    std::lock_guard<std::mutex> lock(mu);
    child = 0;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.ran = true;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The tool's own message (its last stderr line), else how it ended.
std::string failure(const std::string& what, const ChildOutput& c) {
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
      out.push_back(std::move(it));
    }
    return true;
  } catch (const std::exception& e) {
    error = std::string("unreadable advice JSON: ") + e.what();
    return false;
  }
}

AdviceJob::AdviceJob(std::string tool, std::vector<std::string> files, std::function<void()> on_done)
    : tool_(std::move(tool)), files_(std::move(files)), on_done_(std::move(on_done)) {
  result_.state = AdviceResult::State::Running;
  result_.files = files_;
  result_.tool = tool_;
  thread_ = std::thread([this] { work(); });
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
  AdviceResult& r = result_;
  const auto fail = [&](std::string why) {
    r.state = AdviceResult::State::Failed;
    r.error = std::move(why);
  };
  std::vector<std::string> advise = {tool_, "advise", "--json"}, report = {tool_, "report", "--rows", "12"};
  for (const auto& f : files_) {
    advise.push_back(f);
    report.push_back(f);
  }
  const ChildOutput a = run_child(advise, child_mu_, child_, cancel_);
  if (!cancel_.load()) {
    std::string error;
    if (!a.ran || a.exit_code != 0 || !a.why.empty()) fail(failure("memcomm-trace advise", a));
    else if (!parse_advice_json(a.out, r.advice, error)) fail("memcomm-trace advise: " + error);
  }
  if (!cancel_.load() && r.state == AdviceResult::State::Running) {
    const ChildOutput rep = run_child(report, child_mu_, child_, cancel_);
    if (!rep.ran || rep.exit_code != 0 || !rep.why.empty()) fail(failure("memcomm-trace report", rep));
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
