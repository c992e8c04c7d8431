#include <memcomm/train/launch.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <filesystem>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace memcomm::train {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < 0)
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + v + "' is not a whole number >= 0");
  if (x > 1 << 24)  // a number, out of range: said so (it read "not a valid number")
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + v + "' is past " +
                                std::to_string(1 << 24) + ", more ranks or a larger port than any launcher gives");
  return static_cast<int>(x);
}

// MASTER_ADDR and MASTER_PORT over what the launcher implied, then the checks every launcher's
// values pass.
DistEnv checked(DistEnv e) {
  if (env("MASTER_ADDR")) e.master_addr = env("MASTER_ADDR");
  e.master_port = env_int("MASTER_PORT", e.master_port);
  if (e.master_port < 1 || e.master_port > 65535)
    throw std::invalid_argument("environment variable MASTER_PORT='" + std::to_string(e.master_port) +
                                "' is not a port (1-65535)");
  if (e.world < 1 || e.rank >= e.world || e.local_rank >= std::max(e.local_world, 1))
    throw std::invalid_argument("inconsistent launch environment: rank " + std::to_string(e.rank) + ", world size " +
                                std::to_string(e.world) + ", local rank " + std::to_string(e.local_rank) + " of " +
                                std::to_string(e.local_world));
  return e;
}

// First host of a Slurm host list such as "gpu[03-05,07],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& list) {
  const auto bracket = list.find('[');
  const auto comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return list.substr(0, comma);
  std::string prefix = list.substr(0, bracket);
  std::string first;
  for (size_t i = bracket + 1; i < list.size() && std::isdigit(static_cast<unsigned char>(list[i])); ++i)
    first += list[i];
  return prefix + first;
}

// An ephemeral loopback port that is free right now (the rank-0 TCPStore binds it moments later).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

volatile sig_atomic_t g_forward_signal = 0;
void remember_signal(int sig) { g_forward_signal = sig; }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    return "was killed by signal " + std::to_string(s) + " (" + strsignal(s) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

std::string unreachable_store_reason(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res)
    return "MASTER_ADDR " + host + " does not resolve (" + ::gai_strerror(rc) + ")";
  std::string why = "nothing answers connections on " + host + ":" + std::to_string(port) +
                    " (a wrong MASTER_ADDR, a firewall, or a host that is down)";
  for (const addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = ::poll(&p, 1, timeout_ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : ETIMEDOUT;
    }
    ::close(fd);
    if (err == 0) {
      why.clear();
      break;
    }
    if (err == ECONNREFUSED)
      why = "nothing listens on " + host + ":" + std::to_string(port) +
            " (rank 0 has not started, or MASTER_ADDR/MASTER_PORT name another place)";
  }
  ::freeaddrinfo(res);
  return why;
}

bool launched_externally() { return env("RANK") || env("SLURM_PROCID"); }

void warn_if_nproc_ignored(int nproc, const DistEnv& e, const char* tool) {
  if (nproc > 1 && nproc != e.world && e.rank == 0 && e.launcher != "memcomm")
    std::fprintf(stderr, "%s: warning: --nproc %d is ignored: %s starts the ranks (world size %d)\n", tool, nproc,
                 e.launcher.c_str(), e.world);
}

namespace {

// A whole count from 1 to 1 << 24 at text[at...], moving `at` past it (sscanf's %d, which this
// replaced, is undefined past INT_MAX).
bool read_count(const std::string& text, size_t& at, int& count) {
  int64_t v = 0;
  size_t end = at;
  for (; end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) && v <= (1 << 24); ++end)
    v = v * 10 + (text[end] - '0');
  if (end == at || v < 1 || v > (1 << 24)) return false;
  count = static_cast<int>(v);
  at = end;
  return true;
}

// One item of Slurm's tasks per node, "2" or "2(x3)", whole: false for anything else ("x", "2abc").
bool parse_tasks_item(const std::string& item, int& tasks, int& repeat) {
  size_t at = 0;
  repeat = 1;
  if (!read_count(item, at, tasks)) return false;
  if (at == item.size()) return true;
  if (item.compare(at, 2, "(x") != 0) return false;
  at += 2;
  return read_count(item, at, repeat) && item.compare(at, std::string::npos, ")") == 0;
}

// Slurm's tasks per node, in node order with runs compressed ("2(x3),1": three nodes of 2 tasks, then
// one of 1): the count on node `node`. A text that is not in that form, or names fewer nodes, throws
// naming `name`: an even split guessed instead gave ranks a wrong local world (and device).
int slurm_tasks_on_node(const char* name, const char* text, int node) {
  std::istringstream in(text);
  int64_t first = 0;  // the run's first node
  for (std::string item; std::getline(in, item, ',');) {
    int tasks = 0, repeat = 1;
    if (!parse_tasks_item(item, tasks, repeat))
      throw std::invalid_argument(std::string(name) + "=" + text + " is not Slurm's tasks per node (such as 2(x3),1)");
    if (node < first + repeat) return tasks;
    first += repeat;
  }
  throw std::invalid_argument(std::string(name) + "=" + text + " names " + std::to_string(first) +
                              (first == 1 ? " node" : " nodes") + ", and SLURM_NODEID is " + std::to_string(node));
}

// The tasks on this rank's node: from the step's (or the job's) tasks per node and SLURM_NODEID, which
// srun sets for every task; else --ntasks-per-node; else an even split, which is only right when the
// tasks divide evenly over the nodes (srun -n 3 -N 2 puts 2 on the first).
int slurm_local_world(int world) {
  const int node = env_int("SLURM_NODEID", -1);
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    if (node >= 0 && env(name)) return slurm_tasks_on_node(name, env(name), node);
  return env_int("SLURM_NTASKS_PER_NODE", world / std::max(1, env_int("SLURM_NNODES", 1)));
}

}  // namespace

DistEnv read_dist_env() {
  DistEnv e;
  if (env("RANK")) {
    e.rank = env_int("RANK", 0);
    e.world = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world = env_int("LOCAL_WORLD_SIZE", e.world);
    e.launcher = env("MEMCOMM_SPAWNED") ? "memcomm" : "torchrun";
    e.agent_hosts_store = env("TORCHELASTIC_USE_AGENT_STORE") && std::string(env("TORCHELASTIC_USE_AGENT_STORE")) == "True";
    e.attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  } else if (env("SLURM_PROCID")) {
    e.rank = env_int("SLURM_PROCID", 0);
    e.world = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.local_world = slurm_local_world(e.world);
    e.launcher = "slurm";
    if (!env("MASTER_ADDR") && env("SLURM_STEP_NODELIST")) e.master_addr = first_slurm_host(env("SLURM_STEP_NODELIST"));
  }
  return checked(e);
}

// Note [Lightning's launch environment]
// Lightning's own launcher (Trainer(strategy="ddp") under plain python) starts the other local ranks
// with LOCAL_RANK, NODE_RANK and WORLD_SIZE, never RANK. The rank is NODE_RANK x LOCAL_WORLD_SIZE +
// LOCAL_RANK, known with LOCAL_WORLD_SIZE or on the first node (where the local world is the world);
// elsewhere it cannot be told, and the process is rank-less. Only a profile reads this
// (memcomm.profile started before init_process_group): memcomm-train and memcomm-tune never run under
// Lightning, and a LOCAL_RANK left in a shell must not make them wait for a world.
DistEnv read_launch_identity() {
  if (launched_externally() || !env("LOCAL_RANK") || !env("WORLD_SIZE")) return read_dist_env();
  DistEnv e;
  const int node = env_int("NODE_RANK", 0);
  e.world = env_int("WORLD_SIZE", 1);
  e.local_rank = env_int("LOCAL_RANK", 0);
  e.local_world = env_int("LOCAL_WORLD_SIZE", node == 0 ? e.world : -1);
  if (e.local_world < 0) return read_dist_env();
  const int64_t rank = int64_t(node) * e.local_world + e.local_rank;
  if (e.local_world == 0 || rank >= e.world)
    throw std::invalid_argument("inconsistent launch environment: local rank " + std::to_string(e.local_rank) + " of " +
                                std::to_string(e.local_world) + " on node " + std::to_string(node) + " gives rank " +
                                std::to_string(rank) + ", world size " + std::to_string(e.world));
  e.rank = int(rank);
  e.launcher = "lightning";
  return checked(e);
}

DistEnv detect_dist_env(const char* tool) {
  try {
    return read_dist_env();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    std::exit(2);
  }
}

namespace {

// In the forked child: rank `r` of `nproc` execs this program again with torchrun's variables.
[[noreturn]] void exec_rank(int argc, char** argv, int r, int nproc, int port, const std::string& program) {
  // A rank never outlives its launcher (Note [No orphans]).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher forwards SIGINT and SIGTERM, so they must act here: a shell without job control
  // (a script's `memcomm-train ... &`) starts the launcher with SIGINT ignored, which exec keeps.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::setenv("RANK", std::to_string(r).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("MEMCOMM_SPAWNED", "1", 1);
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  std::perror((program + ": exec").c_str());
  ::_exit(127);
}

// Note [No orphans]: the launcher reaps every rank. After the first failure the survivors get
// grace_s (the collective timeout plus a margin) to report the lost rank themselves; then they die.
// A SIGINT or SIGTERM is forwarded, and the ranks get kSignalGrace to end on it: a stopped or hung
// rank held the job for the whole grace_s, past Slurm's 30 s between its SIGTERM and its SIGKILL.
class Reaper {
 public:
  Reaper(std::vector<pid_t> pids, double grace_s, std::string program)
      : pids_(std::move(pids)), alive_(int(pids_.size())), grace_s_(grace_s), program_(std::move(program)) {}

  // Waits for every rank; the job's exit code (the first failed rank's).
  int run() {
    while (alive_ > 0) {
      forward_signal();
      int status = 0;
      const pid_t done = ::waitpid(-1, &status, WNOHANG);
      if (done > 0) {
        reaped(done, status);
        continue;
      }
      if (done < 0 && errno != EINTR) break;
      if (std::chrono::steady_clock::now() > deadline_) kill_overdue();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return job_code_;
  }

 private:
  static constexpr auto kSignalGrace = std::chrono::seconds(10);
  using Clock = std::chrono::steady_clock;

  void set_deadline(Clock::time_point when, int signal) {
    if (when < deadline_) deadline_ = when, deadline_signal_ = signal;  // else the other grace is the shorter
  }

  void forward_signal() {
    const int sig = g_forward_signal;
    if (!sig) return;
    for (pid_t p : pids_)
      if (p > 0) ::kill(p, sig);
    g_forward_signal = 0;
    set_deadline(Clock::now() + kSignalGrace, sig);
  }

  void reaped(pid_t done, int status) {
    for (std::size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] != done) continue;
      pids_[r] = -1;
      --alive_;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::fprintf(stderr, "%s: rank %zu %s\n", program_.c_str(), r, describe_status(status).c_str());
      if (job_code_ != 0) continue;
      job_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      set_deadline(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s_ * 1000)), 0);
    }
  }

  void kill_overdue() {
    const std::string overdue = deadline_signal_ == 0 ? "did not exit after the failure"
                                : "did not exit within " + std::to_string(kSignalGrace.count()) + " s of the " +
                                      (deadline_signal_ == SIGINT ? "SIGINT" : "SIGTERM") + " passed on to it";
    for (std::size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] <= 0) continue;
      std::fprintf(stderr, "%s: rank %zu %s; killing it\n", program_.c_str(), r, overdue.c_str());
      ::kill(pids_[r], SIGKILL);
    }
    deadline_ = Clock::time_point::max();
  }

  std::vector<pid_t> pids_;
  int alive_;
  double grace_s_;
  std::string program_;
  int job_code_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
  int deadline_signal_ = 0;  // the signal whose grace set the deadline; 0: a failure's
};

}  // namespace

int spawn_local_ranks(int argc, char** argv, int nproc, double grace_s) {
  const int port = free_loopback_port();
  // memcomm-train or memcomm-tune: the messages name the program the user ran.
  const std::string program = std::filesystem::path(argv[0]).filename().string();
  std::vector<pid_t> pids(nproc, -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror((program + ": fork").c_str());
      for (int k = 0; k < r; ++k) ::kill(pids[k], SIGKILL);
      return 1;
    }
    if (pid == 0) exec_rank(argc, argv, r, nproc, port, program);
    pids[r] = pid;
  }
  struct sigaction sa{};
  sa.sa_handler = remember_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  return Reaper(std::move(pids), grace_s, program).run();
}

}  // namespace memcomm::train
