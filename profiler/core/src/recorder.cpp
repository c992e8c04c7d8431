// Recorder: see the algorithm summary in recorder.hpp.
//
// Note [Strings before events]
// A producer interns a name before it records an event that uses the id. The collector drains the
// rings FIRST and exports new strings AFTER, so every id in a drained batch is already in the
// export (the ring's release/acquire orders the intern before the drain). Each sink then gets the
// strings before the events of the same batch.
//
// Note [Collector cadence]
// The collector shares the cores with the program it records; on the project's 2-core machine a
// training rank and its data loader already want both. Each wake-up costs a context switch and
// cache misses on a core the training threads could use, so the collector wakes as rarely as the
// rings allow and yields when they compete:
// - It sleeps until the next drain or the next sampler, whichever is first; nothing else wakes it
//   but stop().
// - The drain period adapts to the fullest ring the last drain found (next_drain_interval_ms):
//   above a quarter of its capacity the period drops to drain_interval_ms at once (a burst could
//   overflow the ring, and every overflowing event is lost); above an eighth it halves; below a
//   thirty-second it doubles, up to max_drain_interval_ms; in between it stays. Doubling on the way
//   down and jumping on the way up keep a quiet program's wake-ups few and a busy one's drops at
//   zero; the band between the thresholds keeps the period from flapping.
// - It runs at nice 19 (CollectorPriority::Low) by default, so it gets the cores when the
//   recording threads wait (on a collective, on the data loader), and still a share when they never
//   do. SCHED_IDLE (CollectorPriority::Idle) can starve it on a full machine until the rings
//   overflow, so it is opt-in.
// - Compression runs on this thread too where the caller asks for no compression thread (the
//   trainer's file sink): one background thread per rank, not two.
// The period bounds the loss on a crash only through flush_interval_ms, which the adaptation never
// stretches. Measured in bench/results/profiler-cpu.md: the profiler threads use 0.18 % of a
// 2-rank CPU training run's CPU time.
//
// Note [Recording across fork]
// A process that forks while it records (a DataLoader's workers, started from inside a profile)
// gives the child a copy of the recorder whose collector thread does not exist, whose mutexes may be
// copies of ones another parent thread held at that instant (the collector drains every few ms), and
// whose sinks write to the parent's file descriptors. A worker's first allocation then recorded its
// thread's name, took rare_mu_ and waited forever: DataLoader(num_workers=2) under memcomm.profile
// hung in 4 of 6 runs. So a recorder records nothing in a process other than the one that made it
// (inherited()): an at-fork child handler, registered by the first Recorder, notes the child's pid
// and turns the global recorder off, and every call of an inherited recorder that would lock, drain,
// join or close returns at once, so the parent's trace keeps only the parent's writes. Its sinks stay
// referenced by the inherited recorder, never destroyed, so a child never closes one.
// A child that trains (a process the script forks to run a rank, as multiprocessing's default
// method does on Linux) records into a recorder of its own: renew_global_in_forked_child() puts a
// fresh global recorder, with fresh locks and no sink, in place of the inherited one, which is
// leaked as it stands. Only what asks for it renews (python -m memcomm for the processes the script
// starts: Note [Profiles of spawned processes] in python/memcomm/_spawned.py); a DataLoader worker
// keeps the inherited recorder and records nothing.
#include "memcomm/profiler/recorder.hpp"

#include "memcomm/trace/event_sort.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace memcomm::prof {

namespace detail {
struct ThreadSlot {
  explicit ThreadSlot(size_t cap) : ring(cap) {}
  SpscRing ring;
  uint16_t index = 0;
  std::atomic<bool> exited{false};
  uint64_t drops_reported = 0;  // collector-owned
};
}  // namespace detail

namespace {
std::atomic<uint64_t> g_generation{1};
std::atomic<pid_t> g_pid{0};  // this process's id: set by the first Recorder, again in each forked child
std::atomic<Recorder*> g_global{nullptr};

pid_t this_process() {
  pid_t pid = g_pid.load(std::memory_order_relaxed);
  if (pid == 0) {
    pid = ::getpid();
    g_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

// See Note [Recording across fork]: runs in the child, before fork() returns there.
void mark_forked_child() {
  g_pid.store(::getpid(), std::memory_order_relaxed);
  if (Recorder* r = g_global.load(std::memory_order_relaxed)) r->disable_in_forked_child();
}

// Owns the calling thread's slots (one per recorder generation it has recorded into) and marks
// them exited when the thread ends, so the collector can free them once drained.
struct ThreadSlots {
  std::vector<std::pair<uint64_t, std::shared_ptr<detail::ThreadSlot>>> slots;
  ~ThreadSlots() {
    for (auto& s : slots) s.second->exited.store(true, std::memory_order_release);
  }
};
thread_local ThreadSlots tl_slots;

// Best effort: a collector that keeps its priority still works.
void apply_collector_priority(CollectorPriority p) {
  switch (p) {
    case CollectorPriority::Normal:
      return;
    case CollectorPriority::Low:
      (void)::setpriority(PRIO_PROCESS, id_t(gettid()), 19);  // per thread on Linux
      return;
    case CollectorPriority::Idle: {
      sched_param sp{};
      sp.sched_priority = 0;
      (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
      return;
    }
  }
}

uint64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
}

std::string current_thread_name() {
  char buf[64] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof buf) != 0) return {};
  return buf;
}
}  // namespace

namespace detail {
int next_drain_interval_ms(int current_ms, double fill, int min_ms, int max_ms) {
  if (min_ms < 1) min_ms = 1;
  if (max_ms < min_ms) max_ms = min_ms;
  int next = current_ms;
  if (fill > 0.25) {
    next = min_ms;
  } else if (fill > 0.125) {
    next = current_ms / 2;
  } else if (fill < 1.0 / 32) {
    next = current_ms > max_ms / 2 ? max_ms : current_ms * 2;
  }
  return next < min_ms ? min_ms : next > max_ms ? max_ms : next;
}
}  // namespace detail

Recorder::Recorder(const RecorderOptions& options)
    : opt_(options), generation_(g_generation.fetch_add(1)), owner_pid_(this_process()) {
  clock_init();
  rare_.reserve(kRareBacklog);  // See Note [What a full ring keeps]: kept without allocating
  rare_taken_.reserve(kRareBacklog);
  static const int registered = ::pthread_atfork(nullptr, nullptr, &mark_forked_child);
  (void)registered;
}

void Recorder::disable_in_forked_child() noexcept { enabled_.store(false, std::memory_order_relaxed); }

bool Recorder::inherited() const noexcept { return owner_pid_ != g_pid.load(std::memory_order_relaxed); }

Recorder::~Recorder() {
  if (inherited()) return;  // the parent's sinks and threads: Note [Recording across fork]
  stop();
  std::lock_guard<std::mutex> lock(sinks_mu_);
  for (auto& s : sinks_) {
    try {
      s.sink->close();
    } catch (...) {
    }
  }
  sinks_.clear();
}

Recorder& Recorder::global() {
  if (Recorder* r = g_global.load(std::memory_order_acquire)) return *r;
  Recorder* first = nullptr;
  auto* fresh = new Recorder();  // leaked on purpose (see the header)
  if (g_global.compare_exchange_strong(first, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread's came first
  return *first;
}

bool Recorder::renew_global_in_forked_child() {
  Recorder* r = g_global.load(std::memory_order_acquire);
  if (r == nullptr || !r->inherited()) return false;
  g_global.store(new Recorder(), std::memory_order_release);  // the inherited one is leaked as it stands
  return true;
}

void Recorder::attach_thread() noexcept {
  if (inherited()) return;  // Note [Recording across fork]
  detail::TlsCache& c = detail::tls_cache;
  for (auto& [gen, slot] : tl_slots.slots) {
    if (gen == generation_) {
      c = {generation_, &slot->ring, slot->index};
      return;
    }
  }
  // First event of this thread in this recorder: the one allocation a thread ever makes here.
  auto slot = std::make_shared<detail::ThreadSlot>(opt_.ring_events);
  const std::string tname = current_thread_name();
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    slot->index = uint16_t(threads_created_++);
    threads_.push_back(slot);
  }
  tl_slots.slots.emplace_back(generation_, slot);
  c = {generation_, &slot->ring, slot->index};
  const int64_t ts = now_ns();
  record_rare(Event::from(make_meta(ts, MetaKey::ThreadName, int64_t(gettid()),
                                    intern(tname.empty() ? "thread" : tname), slot->index)));
}

void Recorder::set_thread_name(std::string_view name) {
  if (inherited()) return;
  const uint16_t idx = thread_index();
  record_rare(Event::from(make_meta(now_ns(), MetaKey::ThreadName, int64_t(gettid()), intern(name), idx)));
}

void Recorder::keep_or_drop(SpscRing& ring, const Event& e) noexcept {
  const EventFamily f = family_of(e.kind);
  if ((f != EventFamily::Range && f != EventFamily::Communication && f != EventFamily::Metadata) || inherited())
    return ring.count_drop();
  try {
    std::lock_guard<std::mutex> lock(rare_mu_);
    if (rare_.size() < std::min(kRareBacklog, rare_.capacity())) return rare_.push_back(e);
  } catch (...) {  // no memory for the queue: lost as the ring would lose it
  }
  ring.count_drop();
}

void Recorder::take_rare(bool& runs_sorted) {
  // After the rings' events, so that a kept event (Note [What a full ring keeps]) follows what its
  // thread recorded before it at the same time. Swapped out under the lock: a recording thread that
  // waits for it waits for a swap, never for this low-priority thread's copy.
  {
    std::lock_guard<std::mutex> rl(rare_mu_);
    rare_.swap(rare_taken_);
  }
  const auto from = static_cast<std::ptrdiff_t>(batch_.size());
  batch_.insert(batch_.end(), rare_taken_.begin(), rare_taken_.end());
  rare_taken_.clear();
  runs_sorted &= std::is_sorted(batch_.begin() + from, batch_.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });
  run_bounds_.push_back(batch_.size());
}

void Recorder::record_rare(const Event& e) {
  if (inherited()) return;
  std::lock_guard<std::mutex> lock(rare_mu_);
  rare_.push_back(e);
}

void Recorder::set_identity(const Identity& id) {
  identity_ = id;
  if (enabled()) emit_identity(now_ns());
}

void Recorder::emit_identity(int64_t ts) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char exe[512] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string pname = n > 0 ? std::string(exe, size_t(n)) : std::string("unknown");
  if (auto slash = pname.rfind('/'); slash != std::string::npos) pname = pname.substr(slash + 1);
  const Event metas[] = {
      Event::from(make_meta(ts, MetaKey::Rank, identity_.rank)),
      Event::from(make_meta(ts, MetaKey::WorldSize, identity_.world_size)),
      Event::from(make_meta(ts, MetaKey::LocalRank, identity_.local_rank)),
      Event::from(make_meta(ts, MetaKey::Device, identity_.device)),
      Event::from(make_meta(ts, MetaKey::Host, 0, intern(host))),
      Event::from(make_meta(ts, MetaKey::ProcessName, 0, intern(pname))),
      Event::from(make_meta(ts, MetaKey::Pid, int64_t(::getpid()))),
      Event::from(make_meta(ts, MetaKey::ClockOffset, identity_.clock_offset_ns)),
      Event::from(make_meta(ts, MetaKey::StartTime, realtime_ns())),
  };
  std::lock_guard<std::mutex> lock(rare_mu_);
  rare_.insert(rare_.end(), std::begin(metas), std::end(metas));
}

void Recorder::start() {
  if (inherited()) return;  // Note [Recording across fork]
  std::lock_guard<std::mutex> lock(control_mu_);
  if (enabled()) return;
  {
    // Anything a racing thread pushed after the last stop() is stale: discard it.
    std::lock_guard<std::mutex> tl(threads_mu_);
    for (auto& t : threads_) t->ring.discard();
  }
  emit_identity(now_ns());
  // Enabled before the collector exists, so the samplers' first run (due at once) is recorded.
  enabled_.store(true, std::memory_order_release);
  if (!collector_.joinable()) {
    {
      std::lock_guard<std::mutex> wl(wake_mu_);
      collector_stop_ = false;
    }
    const auto now = std::chrono::steady_clock::now();
    next_flush_ = now + std::chrono::milliseconds(opt_.flush_interval_ms);
    next_recalibrate_ = now + std::chrono::seconds(1);
    drain_ms_ = std::max(1, opt_.drain_interval_ms);
    next_drain_ = now + std::chrono::milliseconds(drain_ms_);
    collector_ = std::thread([this] { collector_loop(); });
  }
}

void Recorder::stop() {
  if (inherited()) {  // no collector to join, no drain into the parent's sinks
    enabled_.store(false, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> lock(control_mu_);
  enabled_.store(false, std::memory_order_release);
  if (collector_.joinable()) {
    {
      std::lock_guard<std::mutex> wl(wake_mu_);
      collector_stop_ = true;
    }
    wake_.notify_all();
    collector_.join();
  }
  std::lock_guard<std::mutex> dl(drain_mu_);
  drain_locked(true);
}

void Recorder::drain_now() {
  if (inherited()) return;
  std::lock_guard<std::mutex> dl(drain_mu_);
  drain_locked(false);
}

void Recorder::collector_loop() {
  pthread_setname_np(pthread_self(), "memcomm-collect");
  apply_collector_priority(opt_.collector_priority);
  const int min_ms = std::max(1, opt_.drain_interval_ms);
  const int max_ms = std::max(min_ms, opt_.max_drain_interval_ms);
  const uint64_t cpu_before = collector_cpu_ns_.load(std::memory_order_relaxed);  // earlier collectors
  std::unique_lock<std::mutex> wl(wake_mu_);
  while (!collector_stop_) {
    // Sleep until the next drain or the next sampler, whichever is first (Note [Collector cadence]).
    auto deadline = next_drain_;
    {
      std::lock_guard<std::mutex> sl(samplers_mu_);
      for (const auto& s : samplers_) deadline = std::min(deadline, s.next);
    }
    wake_.wait_until(wl, deadline, [this] { return collector_stop_; });
    if (collector_stop_) break;
    wl.unlock();
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    run_due_samplers(now);
    if (now >= next_drain_) {
      if (now >= next_recalibrate_) {
        clock_recalibrate();
        next_recalibrate_ = now + std::chrono::seconds(1);
      }
      const bool flush = now >= next_flush_;
      if (flush) next_flush_ = now + std::chrono::milliseconds(opt_.flush_interval_ms);
      double fill = 0;
      {
        std::lock_guard<std::mutex> dl(drain_mu_);
        drain_locked(flush);
        fill = last_fill_;
      }
      drain_ms_ = detail::next_drain_interval_ms(drain_ms_, fill, min_ms, max_ms);
      next_drain_ = now + std::chrono::milliseconds(drain_ms_);
    }
    collector_cpu_ns_.store(cpu_before + thread_cpu_ns(), std::memory_order_relaxed);
    wl.lock();
  }
  collector_cpu_ns_.store(cpu_before + thread_cpu_ns(), std::memory_order_relaxed);
}

void Recorder::run_due_samplers(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> sl(samplers_mu_);
  for (auto& s : samplers_) {
    if (now >= s.next) {
      s.next = now + s.period;
      try {
        s.fn(*this);
      } catch (...) {
        // A failing sampler must not end collection; it will run again next period.
      }
    }
  }
}

void Recorder::drain_locked(bool flush) {
  batch_.clear();
  const int64_t ts = now_ns();
  run_bounds_.assign(1, 0);
  drop_events_.clear();
  double fill = 0;  // largest fraction of a ring found in use
  bool runs_sorted = true;
  {
    std::lock_guard<std::mutex> tl(threads_mu_);
    for (auto& t : threads_) {
      const size_t begin = batch_.size();
      int64_t last = INT64_MIN;
      t->ring.drain([&](const Event& e) {
        runs_sorted &= e.ts >= last;
        last = e.ts;
        batch_.push_back(e);
      });
      if (batch_.size() > begin) run_bounds_.push_back(batch_.size());
      fill = std::max(fill, double(batch_.size() - begin) / double(t->ring.capacity()));
      const uint64_t d = t->ring.dropped();
      if (d != t->drops_reported) {
        DropEvent de{};
        de.ts = ts;
        de.kind = EventKind::Drops;
        de.thread = t->index;
        de.count = d - t->drops_reported;
        drop_events_.push_back(Event::from(de));
        dropped_.fetch_add(de.count, std::memory_order_relaxed);
        t->drops_reported = d;
      }
    }
    last_fill_ = fill;
    // Free rings of threads that ended, once nothing is left in them.
    threads_.erase(std::remove_if(threads_.begin(), threads_.end(),
                                  [](const std::shared_ptr<detail::ThreadSlot>& t) {
                                    return t->exited.load(std::memory_order_acquire) && t->ring.size() == 0;
                                  }),
                   threads_.end());
  }
  take_rare(runs_sorted);
  if (!drop_events_.empty()) {  // all stamped `ts`: one more sorted run
    batch_.insert(batch_.end(), drop_events_.begin(), drop_events_.end());
    run_bounds_.push_back(batch_.size());
  }
  // Each thread's events are a sorted run (unless it recorded past timestamps); merging the runs
  // gives sinks time-ordered batches, which keeps loading traces O(n) (Note [Nearly sorted]).
  if (runs_sorted) {
    run_bounds_.erase(std::unique(run_bounds_.begin(), run_bounds_.end()), run_bounds_.end());
    merge_sorted_runs(batch_, run_bounds_);
  } else {
    sort_by_time(batch_);
  }
  std::lock_guard<std::mutex> sl(sinks_mu_);
  for (SinkEntry& s : sinks_) {  // Note [Strings before events]
    new_strings_.clear();
    s.strings_sent = strings_.export_since(s.strings_sent, new_strings_);
    if (batch_.empty() && new_strings_.empty()) {
      if (flush) s.sink->flush();
      continue;
    }
    Batch b{new_strings_.data(), new_strings_.size(), batch_.data(), batch_.size()};
    try {
      s.sink->consume(b);
      if (flush) s.sink->flush();
    } catch (...) {
      // Sinks report their own errors (FileSink::error); never let one stop collection.
    }
  }
  if (!batch_.empty()) {
    recorded_.fetch_add(batch_.size(), std::memory_order_relaxed);
    batches_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Recorder::add_sink(std::shared_ptr<Sink> sink) {
  if (inherited()) return;
  std::lock_guard<std::mutex> sl(sinks_mu_);
  sinks_.push_back({std::move(sink), 0});
}

void Recorder::remove_sink(const std::shared_ptr<Sink>& sink) {
  if (inherited()) return;  // the sink stays referenced here: the child never closes it
  {
    std::lock_guard<std::mutex> dl(drain_mu_);
    drain_locked(true);
  }
  std::lock_guard<std::mutex> sl(sinks_mu_);
  for (auto it = sinks_.begin(); it != sinks_.end(); ++it) {
    if (it->sink == sink) {
      it->sink->close();
      sinks_.erase(it);
      return;
    }
  }
}

RecorderStats Recorder::stats() const {
  RecorderStats s;
  s.recorded = recorded_.load();
  s.dropped = dropped_.load();
  s.batches = batches_.load();
  s.wakeups = wakeups_.load();
  s.collector_cpu_ns = collector_cpu_ns_.load();
  if (inherited()) return s;
  auto* self = const_cast<Recorder*>(this);
  std::lock_guard<std::mutex> tl(self->threads_mu_);
  s.threads = threads_created_;
  return s;
}

int Recorder::add_sampler(std::function<void(Recorder&)> fn, std::chrono::milliseconds period) {
  if (inherited()) return 0;
  std::lock_guard<std::mutex> sl(samplers_mu_);
  const int id = next_sampler_id_++;
  samplers_.push_back({id, std::move(fn), period, std::chrono::steady_clock::now()});
  return id;
}

void Recorder::remove_sampler(int id) {
  if (inherited()) return;
  std::lock_guard<std::mutex> sl(samplers_mu_);
  samplers_.erase(std::remove_if(samplers_.begin(), samplers_.end(), [id](const Sampler& s) { return s.id == id; }),
                  samplers_.end());
}

int Recorder::add_range_hook(const RangeHook& hook) {
  for (int i = 0; i < detail::kMaxRangeHooks; ++i) {
    HookSlot& s = hooks_[i];
    if (s.on_begin.load() == nullptr && s.on_end.load() == nullptr) {
      s.ctx.store(hook.ctx);
      s.on_end.store(hook.on_end);
      s.on_begin.store(hook.on_begin);
      hook_count_.fetch_add(1);
      return i;
    }
  }
  return -1;
}

void Recorder::remove_range_hook(int slot) {
  if (slot < 0 || slot >= detail::kMaxRangeHooks) return;
  HookSlot& s = hooks_[slot];
  const bool had_begin = s.on_begin.exchange(nullptr) != nullptr;
  const bool had_end = s.on_end.exchange(nullptr) != nullptr;
  if (had_begin || had_end) hook_count_.fetch_sub(1);
}

}  // namespace memcomm::prof
