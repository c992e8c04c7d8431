// Allocation lifetimes (allocations.hpp): pairing allocs with frees, live bytes by stack, the peak.
#include "memcomm/trace/allocations.hpp"

#include "memcomm/trace/event.hpp"
#include "memcomm/trace/trace_set.hpp"

#include <algorithm>
#include <limits>

namespace memcomm::prof {
namespace {
Allocation make(std::int64_t alloc_ns, const BlockInfo& b) {
  Allocation a;
  a.alloc_ns = alloc_ns;
  a.addr = b.addr;
  a.size = b.size;
  a.stack = b.stack;
  a.stream = b.stream;
  a.device = b.device;
  a.category = b.category & 0xF;
  a.before_trace = 0;
  a.stack_of_free = 0;
  return a;
}
}  // namespace

void AllocationBuilder::alloc(std::int64_t t, const BlockInfo& b) {
  saw_event_ = true;
  requested_.erase(key(b));  // a completion the trace lost
  if (auto it = open_.find(key(b)); it != open_.end()) {  // the trace lost this address's free
    list_[it->second].free_ns = t;
    open_.erase(it);
    ++unmatched_;
  }
  open_.emplace(key(b), list_.size());
  list_.push_back(make(t, b));
}

void AllocationBuilder::close(std::int64_t t, const BlockInfo& b) {
  auto it = open_.find(key(b));
  list_[it->second].free_ns = t;
  if (const std::uint32_t alloc_stack = list_[it->second].stack; alloc_stack != kNoStackId && b.stack != kNoStackId)
    ++(alloc_stack == b.stack ? frees_with_alloc_stack_ : frees_with_other_stack_);
  open_.erase(it);
}

void AllocationBuilder::free_requested(std::int64_t t, const BlockInfo& b) {
  saw_event_ = true;
  requests_seen_ = true;
  requested_.insert(key(b));
  if (open_.count(key(b))) return close(t, b);
  before_trace(t, b);
}

void AllocationBuilder::free_completed(std::int64_t t, const BlockInfo& b) {
  saw_event_ = true;
  if (requested_.erase(key(b))) return;  // its life ended at the request
  if (open_.count(key(b))) return close(t, b);
  lone_completions_.push_back(list_.size());  // Note [Allocations before the trace]
  before_trace(t, b);
}

void AllocationBuilder::before_trace(std::int64_t free_ns, const BlockInfo& b) {
  Allocation a = make(0, b);  // Note [Allocations before the trace]; alloc_ns set by finish()
  a.before_trace = 1;
  a.stack_of_free = b.stack != kNoStackId;
  a.free_ns = free_ns;
  list_.push_back(a);
}

void AllocationBuilder::live_at_end(const BlockInfo& b) {
  if (auto it = open_.find(key(b)); it != open_.end()) {
    Allocation& a = list_[it->second];
    if (a.stack == kNoStackId) a.stack = b.stack;
    return;
  }
  Allocation a = make(0, b);
  a.before_trace = 1;
  open_.emplace(key(b), list_.size());  // a second end-state block at one address is ignored
  list_.push_back(a);
}

Allocations AllocationBuilder::finish(std::int64_t begin, std::int64_t end) {
  Allocations out;
  out.begin = begin;
  out.end = std::max(begin, end);
  const bool frees_carry_alloc_stacks = frees_with_alloc_stack_ > 0 && frees_with_other_stack_ == 0;
  if (requests_told_ || requests_seen_) {  // each was pending free at the trace's start: never live in it
    std::vector<bool> drop(list_.size(), false);
    for (const std::size_t i : lone_completions_) drop[i] = true;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < list_.size(); ++i)
      if (!drop[i]) list_[kept++] = list_[i];
    list_.resize(kept);
  }
  for (Allocation& a : list_) {
    if (frees_carry_alloc_stacks) a.stack_of_free = 0;  // Note [A free's stack]
    if (a.before_trace) {  // live before the first event (Note [Allocations before the trace])
      a.alloc_ns = std::min(begin, a.free_ns);
      if (saw_event_ && a.alloc_ns > std::numeric_limits<std::int64_t>::min()) --a.alloc_ns;
    }
  }
  // Stable: allocations at one time keep their events' order.
  std::stable_sort(list_.begin(), list_.end(), [](const Allocation& x, const Allocation& y) { return x.alloc_ns < y.alloc_ns; });
  out.list = std::move(list_);
  out.list.shrink_to_fit();
  out.unmatched = unmatched_;
  *this = AllocationBuilder(requests_told_);
  return out;
}

namespace {
// The allocations of `all` that `keep`, in the same order, with the same time bounds.
template <class Keep>
Allocations kept(const Allocations& all, Keep keep) {
  Allocations out;
  out.begin = all.begin;
  out.end = all.end;
  out.unmatched = all.unmatched;
  for (const Allocation& a : all.list)
    if (keep(a)) out.list.push_back(a);
  out.list.shrink_to_fit();
  return out;
}
}  // namespace

Allocations allocations_of_device(const Allocations& all, std::uint8_t device) {
  return kept(all, [device](const Allocation& a) { return a.device == device; });
}

bool leave_out_host_beside_gpu(Allocations& all) {
  bool host = false, gpu = false;
  for (const Allocation& a : all.list) (a.device == kHostDevice ? host : gpu) = true;
  if (!host || !gpu) return false;
  all = kept(all, [](const Allocation& a) { return a.device != kHostDevice; });
  return true;
}

// Note [Bytes a memory profile never saw allocated]: a torch.profiler memory profile starts with the
// model and optimizer state already allocated (Note [Replaying a torch.profiler memory profile] in
// replay/kineto_trace.cpp), and its blocks are only those its [memory] events touch; the
// "Total Allocated" each event carries counts the rest too. Blocks it frees without having
// allocated them are before_trace already; what every total holds beyond the blocks live then (the
// least such excess: a total is taken after its own event, and other events may share its
// timestamp) stayed live through the whole trace, and becomes one before_trace allocation per device, at no
// address, so that "who holds memory" adds up to the totals (a MoE trace: 60.5 MiB of blocks at its
// peak, 8,928 MiB allocated). memcomm's own traces start with the process and are left alone; the
// viewer applies the same to any rank whose blocks were cut (a time-range load).

void add_untraced_live(Allocations& a, const std::vector<LevelAt>& allocated) {
  // Live tracked bytes per device over time, swept against the readings in time order. Each reading
  // holds at least the tracked bytes plus the untraced ones, exactly so where its event is the last
  // of its timestamp: the smallest excess over all readings is the untraced part.
  struct Change {
    std::int64_t t;
    std::uint8_t device;
    std::int64_t bytes;  // added (alloc) or taken away (free)
  };
  std::vector<Change> changes;
  for (const Allocation& x : a.list) {
    changes.push_back({x.alloc_ns, x.device, std::int64_t(x.size)});
    if (x.free_ns != kStillLive) changes.push_back({x.free_ns, x.device, -std::int64_t(x.size)});
  }
  std::stable_sort(changes.begin(), changes.end(), [](const Change& p, const Change& q) { return p.t < q.t; });
  std::vector<std::int64_t> live(256, 0);
  std::vector<std::int64_t> least(256, -1);  // smallest excess of a reading over the tracked bytes; -1: none
  size_t next = 0;
  for (const LevelAt& s : allocated) {
    for (; next < changes.size() && changes[next].t <= s.t; ++next) live[changes[next].device] += changes[next].bytes;
    const std::int64_t excess = std::max<std::int64_t>(0, std::int64_t(s.value) - std::max<std::int64_t>(0, live[s.device]));
    if (least[s.device] < 0 || excess < least[s.device]) least[s.device] = excess;
  }
  std::vector<Allocation> untraced;
  for (std::size_t dev = 0; dev < least.size(); ++dev) {
    if (least[dev] <= 0) continue;
    Allocation x;
    x.alloc_ns = a.begin;
    x.size = std::uint64_t(least[dev]);
    x.device = std::uint8_t(dev);
    x.category = 0;
    x.before_trace = 1;
    x.stack_of_free = 0;
    untraced.push_back(x);
  }
  a.list.insert(a.list.begin(), untraced.begin(), untraced.end());
}

Allocations rank_allocations(const RankTrace& rank) {
  AllocationBuilder b;
  for (const Event& e : rank.events) {
    if (e.kind != EventKind::Alloc && e.kind != EventKind::FreeRequested && e.kind != EventKind::FreeCompleted) continue;
    const auto m = e.as<MemBlockEvent>();
    const BlockInfo info{m.device, m.addr(), m.size(), m.stream, kNoStackId, m.category};
    if (e.kind == EventKind::Alloc) b.alloc(m.ts, info);
    else if (e.kind == EventKind::FreeRequested) b.free_requested(m.ts, info);
    else b.free_completed(m.ts, info);
  }
  Allocations a = b.finish(rank.begin_ns(), rank.events.empty() ? 0 : rank.events.back().ts);
  if (rank.from_torch_profiler) {
    std::vector<LevelAt> allocated;
    for (const Event& e : rank.events)
      if (e.kind == EventKind::MemSample && e.as<MemSampleEvent>().metric == MemMetric::Allocated)
        allocated.push_back({e.ts, e.as<MemSampleEvent>().device, e.as<MemSampleEvent>().value});
    add_untraced_live(a, allocated);
  }
  return a;
}

std::vector<StackBytes> live_by_stack(const Allocations& a, std::int64_t t) {
  std::unordered_map<std::uint64_t, StackBytes> by;
  for (const Allocation& x : a.list) {
    if (x.alloc_ns > t) break;  // sorted by alloc_ns
    if (!x.live_at(t)) continue;
    StackBytes& s = by[std::uint64_t{x.stack} | std::uint64_t{x.stack_of_free} << 32];
    s.stack = x.stack;
    s.stack_of_free = x.stack_of_free;
    s.bytes += x.size;
    ++s.count;
  }
  std::vector<StackBytes> out;
  out.reserve(by.size());
  for (auto& [stack, s] : by) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const StackBytes& x, const StackBytes& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.stack != y.stack ? x.stack < y.stack : x.stack_of_free < y.stack_of_free;
  });
  return out;
}

std::uint64_t live_bytes(const Allocations& a, std::int64_t t) {
  std::uint64_t sum = 0;
  for (const Allocation& x : a.list) {
    if (x.alloc_ns > t) break;
    if (x.live_at(t)) sum += x.size;
  }
  return sum;
}

// Sweep: all changes at one time apply together (Note [Live means allocated]), then the level is
// compared with the peak. Unsigned, wrapping arithmetic: a hostile file's sizes give a wrong
// figure, never undefined behaviour.
LivePeak peak_live(const Allocations& a) {
  struct Change {
    std::int64_t t;
    std::uint64_t bytes;
    bool free;
  };
  std::vector<Change> changes;
  changes.reserve(a.list.size() * 2);
  for (const Allocation& x : a.list) {
    if (x.free_ns <= x.alloc_ns) continue;  // never live
    changes.push_back({x.alloc_ns, x.size, false});
    if (x.free_ns != kStillLive) changes.push_back({x.free_ns, x.size, true});
  }
  std::sort(changes.begin(), changes.end(), [](const Change& x, const Change& y) { return x.t < y.t; });
  LivePeak peak{a.begin, 0};
  std::uint64_t level = 0;
  for (std::size_t k = 0; k < changes.size();) {
    const std::int64_t t = changes[k].t;
    for (; k < changes.size() && changes[k].t == t; ++k) level = changes[k].free ? level - changes[k].bytes : level + changes[k].bytes;
    if (level > peak.bytes) peak = {t, level};
  }
  return peak;
}

}  // namespace memcomm::prof
