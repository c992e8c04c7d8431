// Recorder: per-thread lock-free rings drained by one collector thread into sinks.
//
// Algorithm summary
// - Each recording thread gets an SpscRing on its first event (slow path: one allocation, a lock,
//   a ThreadName metadata record). A thread-local cache makes later records a generation compare
//   plus a ring push: no lock, no allocation, no system call (Note [Ring protocol]) while the
//   ring has room.
// - A full ring drops the event and counts it, unless it is one the trace's structure rests on
//   (Note [What a full ring keeps]); the collector emits a DropEvent per thread whose count grew,
//   so drops are in the trace and in stats().
// - The collector drains every ring, sends strings then events to each sink, runs the registered
//   samplers (e.g. allocator statistics), flushes sinks every flush_interval_ms and recalibrates
//   the clock about once a second. It drains as seldom as the producers allow (Note [Collector
//   cadence]) and runs at low CPU priority, so a training thread it shares a core with hardly
//   notices it.
// - start()/stop() may be called any number of times. While stopped, record() is one relaxed
//   load and a branch. stop() drains everything recorded before it and flushes the sinks.
//
// Usage (trainer):
//   auto& rec = prof::Recorder::global();
//   rec.set_identity({rank, world, local_rank, device});
//   rec.add_sink(std::make_shared<prof::FileSink>(prof::rank_trace_path("run.mct", rank), wopt));
//   rec.start();
//   { prof::PhaseScope step(prof::Phase::Step, step_no); ... }
//   prof::record(prof::make_mem_block(prof::EventKind::Alloc, prof::now_ns(), ptr, size));
//   rec.stop();
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <sys/types.h>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "memcomm/trace/clock.hpp"
#include "memcomm/trace/event.hpp"
#include "memcomm/profiler/sink.hpp"
#include "memcomm/profiler/spsc_ring.hpp"
#include "memcomm/trace/string_table.hpp"

namespace memcomm::prof {

// How the collector thread is scheduled against the threads that record (Note [Collector cadence]).
enum class CollectorPriority : uint8_t {
  Normal,  // as created (inherits the creating thread's nice value)
  Low,     // nice 19: runs when the recording threads wait, still gets a share on a busy machine
  Idle,    // SCHED_IDLE: runs only when a core has nothing else to do (may starve on a full machine)
};

struct RecorderOptions {
  size_t ring_events = 1 << 16;   // per-thread ring capacity in events (x24 bytes)
  int drain_interval_ms = 5;      // shortest collector period (used while rings fill fast)
  int max_drain_interval_ms = 50; // longest collector period (while rings stay nearly empty)
  int flush_interval_ms = 250;    // sinks flushed at least this often (bounds loss on a crash)
  CollectorPriority collector_priority = CollectorPriority::Low;
};

// Who is recording: written as MetaEvents at every start() and used to name rank files.
struct Identity {
  int rank = -1;            // -1: not distributed
  int world_size = 1;
  int local_rank = -1;
  int device = -1;          // -1: CPU
  int64_t clock_offset_ns = 0;  // Note [Merging ranks]: 0 for one clock, or a rendezvous estimate
};

struct RecorderStats {
  uint64_t recorded = 0;    // events delivered to sinks since construction
  uint64_t dropped = 0;     // events lost to full rings since construction
  uint64_t threads = 0;     // rings ever created
  uint64_t batches = 0;     // collector drains that delivered something
  uint64_t wakeups = 0;     // times the collector thread woke up (drains, samplers)
  uint64_t collector_cpu_ns = 0;  // CPU time of the collector thread(s): draining, samplers, inline sinks
};

// A name interned once: the id goes in events, the text to hooks (e.g. NVTX).
struct Name {
  StringId id = kNoString;
  const char* text = "";
};

// Range hooks: how the CUPTI/NVTX part mirrors phases as NVTX ranges without core depending on
// NVTX. Called on the recording thread, inside PhaseScope / record_range_*; keep them cheap.
struct RangeHook {
  void (*on_begin)(void* ctx, Phase phase, const char* name, uint64_t id) = nullptr;
  void (*on_end)(void* ctx, Phase phase) = nullptr;
  void* ctx = nullptr;
};

namespace detail {
struct ThreadSlot;
// Per-thread cache of "my ring in recorder generation G". Plain data so access is a TLS load.
struct TlsCache {
  uint64_t generation;
  SpscRing* ring;
  uint16_t thread_index;
};
inline thread_local TlsCache tls_cache __attribute__((tls_model("initial-exec"))) = {0, nullptr, 0};
inline constexpr int kMaxRangeHooks = 8;
// The collector's next period (Note [Collector cadence]): `fill` is the largest fraction of a
// ring's capacity that the last drain found in use.
int next_drain_interval_ms(int current_ms, double fill, int min_ms, int max_ms);
}  // namespace detail

class Recorder {
 public:
  explicit Recorder(const RecorderOptions& options = {});
  ~Recorder();  // stops, closes sinks
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The process-wide recorder (never destroyed, so threads may record during static destruction).
  // In a forked child, the parent's, inert, until renew_global_in_forked_child().
  static Recorder& global();
  // In a forked child whose global recorder is the parent's: a fresh one takes its place; false
  // (nothing done) elsewhere (Note [Recording across fork] in recorder.cpp).
  static bool renew_global_in_forked_child();
  // Whether this recorder was made in another process (this one is its forked child): it records,
  // locks and closes nothing here (Note [Recording across fork]).
  bool inherited() const noexcept;
  // In a child forked from this process: turns recording off for good (Note [Recording across fork]).
  void disable_in_forked_child() noexcept;

  // --- hot path ---
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  // Records any 24-byte view (Event, MemBlockEvent, CollectiveEvent...).
  template <class View>
  void record(const View& v) noexcept {
    if (!enabled()) return;
    detail::TlsCache& c = detail::tls_cache;
    if (__builtin_expect(c.generation != generation_, 0)) {
      attach_thread();
      if (c.generation != generation_) return;  // not attached (Note [Recording across fork])
    }
    if (__builtin_expect(!c.ring->try_push(v), 0)) keep_or_drop(*c.ring, Event::from(v));
  }
  // Index of the calling thread (for RangeEvent::thread and host spans); registers it if needed.
  uint16_t thread_index() noexcept {
    detail::TlsCache& c = detail::tls_cache;
    if (c.generation != generation_) attach_thread();
    return c.thread_index;
  }

  // --- control ---
  void start();
  void stop();
  void add_sink(std::shared_ptr<Sink> sink);     // any time; it first receives all strings
  void remove_sink(const std::shared_ptr<Sink>& sink);  // flushes and closes it
  void set_identity(const Identity& id);
  const Identity& identity() const { return identity_; }
  const RecorderOptions& options() const { return opt_; }
  RecorderStats stats() const;
  // Drains now (synchronously, from the calling thread; tests and shutdown paths).
  void drain_now();

  // Names and strings (slow path: lock + hash lookup; cache the result). Inherited by a forked
  // child, where it records nothing, kNoString (Note [Recording across fork]).
  StringId intern(std::string_view s) { return inherited() ? kNoString : strings_.intern(s); }
  Name name(std::string_view s) {
    const StringId id = intern(s);
    return {id, id == kNoString ? "" : strings_.text(id)};
  }
  const StringTable& strings() const { return strings_; }
  void set_thread_name(std::string_view name);   // names the calling thread in the trace

  // Rare events from any thread (metadata, comm info): locked queue, never dropped.
  void record_rare(const Event& e);
  // Note [What a full ring keeps]: an allocator burst on a machine whose cores the training holds
  // (the collector runs at nice 19) fills a thread's ring, and every event that does not fit is
  // lost: with --allocator, a reinforcement-learning script lost 15,593 of 180,444 events, among
  // them one of its 30 steps and 60 of its 755 forwards, where only memory events were meant to be
  // at risk. An event of a range, a collective or metadata (a few per step, against a block event
  // per tensor) that finds its ring full goes to the rare queue instead; the trace is sorted by
  // time on load, so it lands where it belongs. Memory, compute and counter events (the floods, and
  // a counter a script may record per tensor) are dropped and counted, as are kept ones past
  // kRareBacklog waiting (a collector that never runs). The queue holds room for them from the
  // start (384 KiB), so a full ring still allocates nothing; a kept event does take the queue's
  // lock, which the collector holds only to swap the queue out.
  static constexpr size_t kRareBacklog = 1 << 14;

  // Samplers run on the collector thread every period (e.g. allocator statistics -> MemSample).
  int add_sampler(std::function<void(Recorder&)> fn, std::chrono::milliseconds period);
  void remove_sampler(int id);

  // Range hooks (NVTX bridge). Returns a slot, -1 when all kMaxRangeHooks are taken.
  int add_range_hook(const RangeHook& hook);
  void remove_range_hook(int slot);
  void call_begin_hooks(Phase p, const char* name, uint64_t id) noexcept {
    if (hook_count_.load(std::memory_order_acquire) == 0) return;
    for (auto& h : hooks_)
      if (auto* fn = h.on_begin.load(std::memory_order_acquire)) fn(h.ctx.load(std::memory_order_relaxed), p, name, id);
  }
  void call_end_hooks(Phase p) noexcept {
    if (hook_count_.load(std::memory_order_acquire) == 0) return;
    for (auto& h : hooks_)
      if (auto* fn = h.on_end.load(std::memory_order_acquire)) fn(h.ctx.load(std::memory_order_relaxed), p);
  }

 private:
  void attach_thread() noexcept;
  void collector_loop();
  void run_due_samplers(std::chrono::steady_clock::time_point now);
  void drain_locked(bool final_flush);
  // A full ring's event: kept in the rare queue or dropped (Note [What a full ring keeps]).
  void keep_or_drop(SpscRing& ring, const Event& e) noexcept;
  // Appends the rare queue's events to batch_ as one more run (drain_locked).
  void take_rare(bool& runs_sorted);
  void emit_identity(int64_t ts);

  struct HookSlot {
    std::atomic<void (*)(void*, Phase, const char*, uint64_t)> on_begin{nullptr};
    std::atomic<void (*)(void*, Phase)> on_end{nullptr};
    std::atomic<void*> ctx{nullptr};
  };
  struct SinkEntry {
    std::shared_ptr<Sink> sink;
    StringId strings_sent = 0;
  };
  struct Sampler {
    int id;
    std::function<void(Recorder&)> fn;
    std::chrono::milliseconds period;
    std::chrono::steady_clock::time_point next;
  };

  RecorderOptions opt_;
  const uint64_t generation_;
  const pid_t owner_pid_;  // the process that made it (inherited())
  std::atomic<bool> enabled_{false};
  Identity identity_;
  StringTable strings_;

  std::mutex threads_mu_;  // guards threads_ (registration and draining)
  std::vector<std::shared_ptr<detail::ThreadSlot>> threads_;
  uint64_t threads_created_ = 0;

  std::mutex drain_mu_;    // one drain at a time (collector or drain_now)
  std::vector<Event> batch_;
  std::vector<size_t> run_bounds_;  // per-thread runs inside batch_, merged before delivery
  std::vector<Event> drop_events_;
  std::vector<StringDef> new_strings_;
  std::vector<SinkEntry> sinks_;
  std::mutex sinks_mu_;
  std::vector<Event> rare_;
  std::vector<Event> rare_taken_;  // the collector's: rare_ swapped out by take_rare()
  std::mutex rare_mu_;
  std::vector<Sampler> samplers_;
  std::mutex samplers_mu_;
  int next_sampler_id_ = 1;
  std::chrono::steady_clock::time_point next_flush_, next_recalibrate_, next_drain_;
  int drain_ms_ = 0;        // the collector's current period (collector-owned)
  double last_fill_ = 0;    // largest ring fill fraction seen by the last drain (drain_mu_)

  std::atomic<uint64_t> recorded_{0}, dropped_{0}, batches_{0}, wakeups_{0};
  std::atomic<uint64_t> collector_cpu_ns_{0};  // finished collector threads + the running one so far

  HookSlot hooks_[detail::kMaxRangeHooks];
  std::atomic<int> hook_count_{0};

  std::mutex control_mu_;  // start/stop
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool collector_stop_ = false;
  std::thread collector_;
};

// --- free-function API on the global recorder ---
inline bool recording() noexcept { return Recorder::global().enabled(); }
template <class View>
inline void record(const View& v) noexcept {
  Recorder::global().record(v);
}

// Begin/end a range by hand (NVTX push/pop semantics: LIFO per thread), stamped `ts` (0: now).
inline void range_begin(Recorder& r, Phase p, Name name, uint64_t id = 0, int64_t ts = 0) noexcept {
  if (!r.enabled()) return;
  r.record(make_range(EventKind::RangeBegin, ts ? ts : now_ns(), p, name.id, id, r.thread_index()));
  r.call_begin_hooks(p, name.id ? name.text : phase_name(p), id);
}
inline void range_end(Recorder& r, Phase p, Name name = {}, uint64_t id = 0, int64_t ts = 0) noexcept {
  if (!r.enabled()) return;
  r.record(make_range(EventKind::RangeEnd, ts ? ts : now_ns(), p, name.id, id, r.thread_index()));
  r.call_end_hooks(p);
}

// RAII phase scope: a RangeBegin/RangeEnd pair, mirrored to the range hooks (NVTX). If the
// recorder is stopped at construction the scope records nothing, even if it starts meanwhile.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p, uint64_t id = 0, Name name = {}, Recorder& r = Recorder::global()) noexcept
      : r_(r), phase_(p), name_(name), id_(id), active_(r.enabled()) {
    if (active_) range_begin(r_, phase_, name_, id_);
  }
  ~PhaseScope() {
    if (active_) range_end(r_, phase_, name_, id_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Recorder& r_;
  Phase phase_;
  Name name_;
  uint64_t id_;
  bool active_;
};

inline void record_counter(Recorder& r, Name name, double value) noexcept {
  if (r.enabled()) r.record(make_counter(now_ns(), name.id, value));
}

// A completed collective: its enqueue at start_ns and its end at end_ns (bucket kNoBucket: none).
inline void record_collective(Recorder& r, CollOp op, DType dtype, uint64_t bytes, uint8_t comm, uint32_t seq,
                              uint16_t bucket, int64_t start_ns, int64_t end_ns) noexcept {
  r.record(make_collective(EventKind::CollEnqueue, start_ns, op, dtype, bytes, comm, seq, bucket));
  r.record(make_collective(EventKind::CollEnd, end_ns, op, dtype, bytes, comm, seq, bucket));
}

}  // namespace memcomm::prof
