#include <memcomm/train/comm.hpp>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <memcomm/trace/clock.hpp>
#include <memcomm/profiler/clock_sync.hpp>
#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/launch.hpp>
#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace memcomm::train {

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Communicator::Pending {
  c10::intrusive_ptr<c10d::Work> work;  // null when world == 1
  CollectiveRecord record;
  // Set by the engine's completion callback, so overlap is measured from when the data really
  // arrived rather than from when the trainer got round to waiting.
  // Shared with the callback, which may outlive this record when a run is failing.
  std::shared_ptr<std::atomic<int64_t>> completed_ns = std::make_shared<std::atomic<int64_t>>(0);

  void watch_completion() {
    if (!work) return;
    try {
      work->getFuture()->addCallback([done = completed_ns](c10::ivalue::Future&) { *done = monotonic_ns(); });
    } catch (const std::exception&) {
      // Engines without futures: completion is taken at wait time.
    }
  }
};

namespace {

constexpr auto kBeat = std::chrono::milliseconds(500);

std::string hb_key(int r) { return "memcomm/heartbeat/" + std::to_string(r); }

// Note [Naming the ranks that never joined]
// When a rank never starts (a typo in its launch line, a node that never came up), the others' process
// group setup times out with the engine's own words: Gloo's "wait timeout after 5000ms, keys: /0/1",
// followed by a C++ backtrace, which names a key, not a rank. So each rank marks itself in the store
// as soon as it reaches it, and a failed setup lists the ranks whose mark is missing. The mark holds
// the world size the rank was started with: ranks whose launch environments disagree on it (WORLD_SIZE
// 2 beside 3) met in one store, and rank 0 blamed a "lost" rank 1 while rank 1 waited for a rank 2.
// Each other rank compares its world size with rank 0's before its process group forms (one read,
// which waits for rank 0 as the process group would), and a failed setup names the ranks that differ.
std::string joined_key(int r) { return "memcomm/joined/" + std::to_string(r); }

std::vector<uint8_t> world_mark(int world) {
  const std::string s = std::to_string(world);
  return {s.begin(), s.end()};
}

// "" when `mark` (a joined key's value) says `world`; else what it says, for the message.
std::string other_world(const std::vector<uint8_t>& mark, int world) {
  const std::string s(mark.begin(), mark.end());
  return s == std::to_string(world) ? std::string() : s;
}

// Note [c10d's logs on a failing job]
// Once a peer or the store host is gone, c10d logs each failed store call at warning or error level
// with a C++ backtrace: three 20-line blocks came before memcomm's one line that names the lost rank,
// and a rendezvous whose store never answered printed 28 frame lines before memcomm's message. So
// while the communicator sets up, and from the first failure on, c10's logs are kept to fatal ones
// (unless TORCH_CPP_LOG_LEVEL asks for more); c10d's exceptions still arrive, and memcomm reports each
// failure in one line that names the rank at fault. A setup that succeeded puts the level back, so a
// healthy run keeps LibTorch's warnings (NCCL's watchdog's among them).
bool quiet_wanted() { return !std::getenv("TORCH_CPP_LOG_LEVEL"); }

// Once per process (the heartbeat thread and the failing collective may both get here).
void quiet_c10d_logs() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (quiet_wanted()) FLAGS_caffe2_log_level = std::max<int>(FLAGS_caffe2_log_level, 3);
  });
}

// c10's log level for the communicator's setup: fatal only, then as it was once the setup succeeded.
class QuietSetup {
 public:
  QuietSetup() : saved_(FLAGS_caffe2_log_level) {
    if (quiet_wanted()) FLAGS_caffe2_log_level = std::max<int>(saved_, 3);
  }
  void succeeded() const { FLAGS_caffe2_log_level = saved_; }

 private:
  int saved_;
};

// Note [A restart under torchrun's agent store]
// With --max-restarts, torchrun's agent hosts one store for the whole job and every attempt's
// processes meet in it at the same port. Keys the killed attempt left there (Gloo's listening
// addresses, the joined marks, the heartbeats) would read as the new attempt's: its Gloo setup
// connected to a dead process's address and failed, so a restart never trained. Each attempt
// therefore works under its own prefix, named by TORCHELASTIC_RESTART_COUNT. That count is the same
// on every rank when one agent restarts its workers after a failure (one node, as --standalone); in
// a multi-node job, an agent that restarts for a membership change keeps its count while the failed
// node's rises, and their ranks would not meet (the rendezvous then times out, naming the ranks).
c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, bool server, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = server;
  o.numWorkers = server ? std::optional<size_t>(env.world) : std::nullopt;
  o.waitWorkers = false;
  o.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  if (!env.agent_hosts_store) return tcp;
  return c10::make_intrusive<c10d::PrefixStore>("memcomm/attempt_" + std::to_string(env.attempt), tcp);
}

// Note [A store that does not answer]: a TCPStore client's connection ends with a ping whose reply it
// waits for with no time limit. Rank 0 stopped rather than dead (SIGSTOP, a debugger, swapped out)
// still accepts connections in its kernel and never answers: a rank that connected then (at the
// rendezvous, for its heartbeats, or to name the lost rank after a collective timed out) waited
// forever, --timeout never ended the run, and --nproc's launcher waited for it. So what talks to
// rank 0's store outside a collective runs on a thread of its own, abandoned (it holds copies of
// what it needs) when `limit` passes; the caller reports rank 0 as not answering.
template <class T>
std::optional<T> within(std::chrono::milliseconds limit, std::function<T()> work) {
  auto done = std::make_shared<std::promise<T>>();
  auto result = done->get_future();
  std::thread([done, work = std::move(work)] {
    try {
      done->set_value(work());
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return result.get();
}

// A client of the store, or an error naming rank 0 when its store takes the connection and never answers.
c10::intrusive_ptr<c10d::Store> connect_client(const DistEnv& env, std::chrono::milliseconds timeout) {
  auto store = within<c10::intrusive_ptr<c10d::Store>>(timeout + std::chrono::seconds(2),
                                                       [env, timeout] { return connect_store(env, false, timeout); });
  if (store) return *store;
  // Connecting is retried until the timeout whatever stops it: only a connection that was taken is rank 0 not answering.
  if (const std::string why = unreachable_store_reason(env.master_addr, env.master_port, 1000); !why.empty())
    throw std::runtime_error(fmt::format("cannot reach the store of rank 0 within {} ms: {}", timeout.count() + 2000, why));
  throw std::runtime_error(fmt::format("the store on {}:{} (rank 0's) took the connection and did not answer within "
                                       "{} ms: is rank 0 stopped?", env.master_addr, env.master_port,
                                       timeout.count() + 2000));
}

}  // namespace

// The first line of the engine's message (c10::Error's without its backtrace), and which ranks never
// reached the store, when the store still answers.
std::string Communicator::why_not_joined(const std::exception& e) const {
  quiet_c10d_logs();
  std::string what = error_message(e);
  if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
  if (!store_) return what;
  std::vector<std::string> missing;
  try {
    for (int r = 0; r < env_.world; ++r) {
      if (!store_->check({joined_key(r)})) {
        missing.push_back(std::to_string(r));
      } else if (const std::string w = other_world(store_->get(joined_key(r)), env_.world); !w.empty()) {
        return fmt::format("rank {} was started with a world size of {}, this rank with {}: the ranks' launch "
                           "environments disagree (WORLD_SIZE, SLURM_NTASKS) ({})", r, w, env_.world, what);
      }
    }
  } catch (const std::exception&) {
    return what;  // the store host itself is gone
  }
  if (missing.empty()) return what;
  std::string ranks;
  for (const auto& r : missing) ranks += (ranks.empty() ? "" : ", ") + r;
  return fmt::format("rank{} {} never joined within --timeout {:g} s ({})", missing.size() == 1 ? "" : "s", ranks,
                     timeout_s_, what);
}

Communicator::Communicator(const DistEnv& env, Backend backend, double timeout_s)
    : env_(env), backend_name_(env.world == 1 ? "none (1 rank)" : to_string(backend)),
      nccl_(env.world > 1 && backend == Backend::Nccl), timeout_s_(timeout_s) {
  if (backend == Backend::Auto) throw std::logic_error("Communicator: choose_device resolves --backend auto");
  if (env.world == 1) return;
#ifndef USE_C10D_NCCL
  if (nccl_) throw UsageError("--backend nccl: this LibTorch build has no NCCL support; use gloo");
#endif
  const QuietSetup quiet;  // Note [c10d's logs on a failing job]
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    const bool server = env.rank == 0 && !env.agent_hosts_store;
    auto store = server ? connect_store(env, true, timeout) : connect_client(env, timeout);
    store_ = store;
    store_->set(joined_key(env.rank), world_mark(env.world));  // Note [Naming the ranks that never joined]
    if (env.rank != 0)
      if (const std::string w = other_world(store_->get(joined_key(0)), env.world); !w.empty())
        throw UsageError(fmt::format("rank 0 was started with a world size of {}, this rank (rank {}) with {}: the "
                                     "ranks' launch environments disagree (WORLD_SIZE, SLURM_NTASKS)",
                                     w, env.rank, env.world));
    if (!nccl_) {
      auto opts = c10d::ProcessGroupGloo::Options::create();
      opts->timeout = timeout;
      // Bind to the interface that reaches the store host, so two-host runs cross the real link.
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(env.master_addr, env.master_port)));
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world, opts);
    } else {
#ifdef USE_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env.rank, env.world, opts);
#endif
    }
  } catch (const UsageError&) {
    quiet_c10d_logs();
    throw;
  } catch (const std::exception& e) {
    std::string why = why_not_joined(e);
    if (!store_)  // c10d's own timeout says only that connecting timed out
      if (const std::string r = unreachable_store_reason(env.master_addr, env.master_port, 1000);
          !r.empty() && why.find(r) == std::string::npos)
        why += ": " + r;
    throw CommError("rendezvous with " + env.master_addr + ":" + std::to_string(env.master_port) + " failed (rank " +
                    std::to_string(env.rank) + " of " + std::to_string(env.world) + "): " + why);
  }
  quiet.succeeded();
  // See Note [Naming the lost rank]: a private store client, so beats never queue behind collectives.
  heartbeat_ = std::thread([this, env] {
    c10::intrusive_ptr<c10d::Store> hb;
    try {
      hb = connect_client(env, std::chrono::seconds(5));
    } catch (const std::exception&) {
      return;
    }
    for (int64_t beat = 1; !stop_heartbeat_; ++beat) {
      try {
        const auto s = std::to_string(beat);
        hb->set(hb_key(env.rank), std::vector<uint8_t>(s.begin(), s.end()));
      } catch (const std::exception&) {
        quiet_c10d_logs();
        return;  // the store is gone; the next collective reports it
      }
      for (int i = 0; i < 10 && !stop_heartbeat_; ++i) std::this_thread::sleep_for(kBeat / 10);
    }
  });
}

Communicator::~Communicator() {
  stop_heartbeat_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

namespace {

// Which ranks' heartbeats stopped, read from the store twice, three beats apart (Note [Naming the lost rank]).
std::string ranks_without_heartbeat(const DistEnv& env) {
  auto probe = connect_store(env, false, std::chrono::seconds(3));
  auto read_all = [&](std::vector<std::string>& out) {
    for (int r = 0; r < env.world; ++r) {
      const auto key = hb_key(r);
      if (!probe->check({key})) { out[static_cast<size_t>(r)] = ""; continue; }
      auto v = probe->get(key);
      out[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
    }
  };
  std::vector<std::string> a(static_cast<size_t>(env.world)), b(a.size());
  read_all(a);
  std::this_thread::sleep_for(kBeat * 3);
  read_all(b);
  std::vector<int> lost;
  for (int r = 0; r < env.world; ++r)
    if (r != env.rank && a[static_cast<size_t>(r)] == b[static_cast<size_t>(r)]) lost.push_back(r);
  if (lost.empty()) return "no rank looks dead; the collective was just slower than --timeout";
  std::ostringstream s;
  s << (lost.size() == 1 ? "lost rank " : "lost ranks ");
  for (size_t i = 0; i < lost.size(); ++i) s << (i ? ", " : "") << lost[i];
  s << " (heartbeat stopped)";
  return s.str();
}

}  // namespace

std::string Communicator::missing_ranks() {
  const std::string gone = "lost rank 0 (the rendezvous store on " + env_.master_addr + " no longer answers)";
  try {  // Note [A store that does not answer]
    const DistEnv env = env_;
    const auto who = within<std::string>(std::chrono::seconds(10), [env] { return ranks_without_heartbeat(env); });
    return who ? *who : gone;
  } catch (const std::exception&) {
    return gone;
  }
}

void Communicator::fail(const std::string& what) {
  quiet_c10d_logs();
  const std::string who = missing_ranks();
  throw CommError("rank " + std::to_string(env_.rank) + ": " + what + ": " + who);
}

void Communicator::allreduce(at::Tensor& t, int bucket, Reduce op) {
  // NCCL reduces device memory only: small host tensors (evaluation totals) take a round trip.
  if (nccl_ && !t.is_cuda() && device_.is_cuda()) {
    auto on_device = t.to(device_);
    wait(allreduce_async(on_device, bucket, op));
    t.copy_(on_device);
    return;
  }
  wait(allreduce_async(t, bucket, op));
}

namespace {

// The element type as the trace names it (prof::DType): the size alone cannot tell bf16 from fp16.
std::string wire_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return "f32";
    case at::kDouble: return "f64";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "f16";
    case at::kLong: return "i64";
    case at::kInt: return "i32";
    case at::kByte: return "u8";
    case at::kChar: return "i8";
    default: return "other";
  }
}

}  // namespace

std::shared_ptr<Communicator::Pending> Communicator::allreduce_async(at::Tensor& t, int bucket, Reduce op) {
  auto p = std::make_shared<Pending>();
  p->record = {"allreduce", static_cast<int64_t>(t.numel() * t.element_size()), bucket, seq_++, monotonic_ns(), 0,
               wire_dtype(t)};
  ++allreduce_calls_;
  if (!pg_) {
    p->record.end_ns = p->record.start_ns;
    return p;
  }
  std::vector<at::Tensor> ts{t};
  try {
    c10d::AllreduceOptions ao;
    ao.reduceOp = op == Reduce::Max ? c10d::ReduceOp::MAX : op == Reduce::Min ? c10d::ReduceOp::MIN : c10d::ReduceOp::SUM;
    p->work = pg_->allreduce(ts, ao);
    p->watch_completion();
  } catch (const std::exception& e) {
    fail(std::string("all-reduce failed: ") + e.what());
  }
  return p;
}

CollectiveRecord Communicator::wait(const std::shared_ptr<Pending>& p) {
  if (p->work) {
    try {
      p->work->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      fail(fmt::format("{} #{} did not complete within {:g} s or lost a peer ({})", p->record.op, p->record.seq,
                       timeout_s_, msg));
    }
  }
  if (p->work) {
    const int64_t done = p->completed_ns->load();
    p->record.end_ns = done > 0 ? done : monotonic_ns();
  }
  if (on_collective) on_collective(p->record);
  std::lock_guard<std::mutex> lk(records_mu_);
  records_.push_back(p->record);
  return p->record;
}

void Communicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (!pg_) return;
  c10d::BroadcastOptions o;
  o.rootRank = root;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    auto p = std::make_shared<Pending>();
    p->record = {"broadcast", static_cast<int64_t>(t.numel() * t.element_size()), -1, seq_++, monotonic_ns(), 0,
                 wire_dtype(t)};
    try {
      p->work = pg_->broadcast(one, o);
    } catch (const std::exception& e) {
      fail(std::string("broadcast failed: ") + e.what());
    }
    wait(p);
  }
}

void Communicator::barrier() {
  if (!pg_) return;
  auto p = std::make_shared<Pending>();
  p->record = {"barrier", 0, -1, seq_++, monotonic_ns(), 0, "u8"};
  try {
    p->work = pg_->barrier();
  } catch (const std::exception& e) {
    fail(std::string("barrier failed: ") + e.what());
  }
  wait(p);
}

int64_t Communicator::estimate_clock_offset(int rounds) {
  if (!pg_) return 0;
  // NCCL moves device memory only; Gloo takes host tensors.
  const auto opts = at::TensorOptions(at::kLong).device(nccl_ ? device_ : at::Device(at::kCPU));
  auto stamps = at::zeros({2}, opts);
  std::vector<at::Tensor> one{stamps};
  const int kTag = 0x6d63;  // "mc": apart from any other point-to-point traffic
  auto wait = [&](c10::intrusive_ptr<c10d::Work> w, const char* what) {
    try {
      w->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
    } catch (const std::exception& e) {
      fail(std::string("clock probe ") + what + " failed: " + e.what());
    }
  };
  // First the peer tells its clock domain, and rank 0 answers whether it is its own: then the
  // clocks are one and the offset is 0 without probing (Note [One clock per host]).
  // MEMCOMM_CLOCK_PROBE=1 probes anyway (tests of the probing path on one host).
  const char* force = std::getenv("MEMCOMM_CLOCK_PROBE");
  const auto domain = force && *force == '1' ? int64_t{0} : static_cast<int64_t>(prof::clock_domain_id());
  int64_t offset = 0;
  for (int peer = 1; peer < env_.world; ++peer) {
    if (env_.rank == 0) {  // answer `rounds` pings from this peer with (receive, reply) times
      wait(pg_->recv(one, peer, kTag), "receive");
      const bool same_clock = domain != 0 && stamps.to(at::kCPU)[0].item<int64_t>() == domain;
      stamps.fill_(same_clock ? 1 : 0);
      wait(pg_->send(one, peer, kTag), "reply");
      if (same_clock) continue;
      for (int r = 0; r < rounds; ++r) {
        wait(pg_->recv(one, peer, kTag), "receive");
        const int64_t t1 = prof::now_ns();
        stamps.copy_(at::tensor({t1, prof::now_ns()}, at::kLong));
        wait(pg_->send(one, peer, kTag), "reply");
      }
    } else if (env_.rank == peer) {
      stamps.fill_(domain);
      wait(pg_->send(one, 0, kTag), "send");
      wait(pg_->recv(one, 0, kTag), "reply");
      if (stamps.to(at::kCPU)[0].item<int64_t>() == 1) continue;
      std::vector<prof::ClockProbe> probes;
      for (int r = 0; r < rounds; ++r) {
        const int64_t t0 = prof::now_ns();
        wait(pg_->send(one, 0, kTag), "send");
        wait(pg_->recv(one, 0, kTag), "reply");
        const int64_t t3 = prof::now_ns();
        const auto host = stamps.to(at::kCPU);
        probes.push_back({t0, host[0].item<int64_t>(), host[1].item<int64_t>(), t3});
      }
      offset = prof::estimate_clock_offset(probes).offset_ns;
    }
  }
  return offset;
}

std::vector<CollectiveRecord> Communicator::take_records() {
  std::lock_guard<std::mutex> lk(records_mu_);
  return std::exchange(records_, {});
}

}  // namespace memcomm::train
