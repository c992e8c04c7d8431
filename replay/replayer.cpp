// The replay loop. It is the hot path of memcomm-replay (goal: >= 2 M events/s), so it keeps one
// flat vector of block addresses and touches nothing else per request unless checking is on.
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "memcomm/replay/call_bound.hpp"
#include "memcomm/replay/replayer.hpp"

namespace memcomm::replay {
namespace {

constexpr std::uint64_t kNotLive = ~std::uint64_t{0};  // block not allocated (or refused: OOM)
// Requests above this (256 TiB) cannot be served by any device; they count as OOMs without asking
// the policy, so corrupt sizes near 2^64 cannot overflow a policy's rounding arithmetic.
constexpr std::uint64_t kMaxRequest = std::uint64_t{1} << 48;

// Live blocks by address, to prove that no two overlap (only with ReplayOptions::check).
class OverlapChecker {
 public:
  void add(std::uint64_t addr, std::uint64_t size, const std::string& policy) {
    auto next = live_.lower_bound(addr);
    if (next != live_.end() && next->first < addr + size) overlap(addr, size, next->first, policy);
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > addr) overlap(addr, size, prev->first, policy);
    }
    live_.emplace(addr, size);
  }
  void remove(std::uint64_t addr) { live_.erase(addr); }

 private:
  [[noreturn]] static void overlap(std::uint64_t addr, std::uint64_t size, std::uint64_t other, const std::string& policy) {
    throw std::logic_error(fmt::format("{}: block 0x{:x} (+{} B) overlaps live block 0x{:x}", policy, addr, size, other));
  }
  std::map<std::uint64_t, std::uint64_t> live_;
};

// What a result says of the trace and the device whatever the policy.
ReplayResult result_for(const TraceRequests& trace, const DeviceRequests& dev, std::string policy) {
  ReplayResult r;
  r.file = trace.file;
  r.format = trace.format;
  r.recorded_from_profile = dev.recorded_from_profile;
  r.rank = dev.rank;
  r.device = dev.device;
  r.policy = std::move(policy);
  r.peak_live = dev.peak_live;
  r.events = dev.trace_events;
  r.requests = dev.requests.size();
  r.traced_allocs = dev.traced_allocs();
  r.starts_empty = dev.recorded.starts_empty();
  return r;
}

}  // namespace

ReplayResult replay_device(const TraceRequests& trace, const DeviceRequests& dev, Policy& policy, const ReplayOptions& options) {
  ReplayResult r = result_for(trace, dev, policy.name());

  std::vector<std::uint64_t> addr(dev.block_count, kNotLive);
  std::vector<std::uint64_t> size_of;  // requested bytes per block, for the overlap checker
  OverlapChecker overlap;
  if (options.check) size_of.assign(dev.block_count, 0);
  std::uint64_t since_check = 0;

  auto t0 = std::chrono::steady_clock::now();
  for (const Request& q : dev.requests) {
    switch (q.op) {
      case Request::Op::alloc: {
        auto a = q.size <= kMaxRequest ? policy.allocate(q.size ? q.size : 1, q.stream) : std::nullopt;
        if (!a) {
          ++r.ooms;
          break;
        }
        addr[q.block] = *a;
        if (options.check) {
          size_of[q.block] = q.size ? q.size : 1;
          overlap.add(*a, size_of[q.block], r.policy);
        }
        break;
      }
      case Request::Op::free: {
        std::uint64_t a = addr[q.block];
        if (a == kNotLive) break;  // its allocation was refused
        addr[q.block] = kNotLive;
        if (options.check) overlap.remove(a);
        policy.free(a);
        break;
      }
    }
    if (options.check && ++since_check >= options.check_every) {
      since_check = 0;
      policy.check_invariants();
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (options.check) policy.check_invariants();

  PolicyStats s = policy.stats();
  r.peak_reserved = s.peak_reserved;
  r.peak_allocated = s.peak_allocated;
  r.source_allocs = s.source_allocs;
  r.source_frees = s.source_frees;

  // Teardown (not measured): free what the trace left live, so every policy ends empty. With
  // checking on this proves the policy's accounting returns to zero.
  for (std::uint64_t a : addr) {
    if (a != kNotLive) policy.free(a);
  }
  if (options.check) {
    policy.check_invariants();
    if (policy.stats().allocated != 0) {
      throw std::logic_error(fmt::format("{}: {} bytes still allocated after every block was freed", r.policy,
                                         policy.stats().allocated));
    }
  }
  return r;
}

ReplayResult recorded_result(const TraceRequests& trace, const DeviceRequests& dev) {
  ReplayResult r = result_for(trace, dev, kRecordedPolicy);
  r.peak_reserved = dev.recorded.peak;
  r.peak_allocated = dev.peak_live;
  r.ooms = dev.trace_ooms;
  r.source_allocs = dev.recorded.source_allocs;
  r.source_frees = dev.recorded.source_frees;
  return r;
}

std::vector<ReplayResult> replay_all(const TraceRequests& trace, const std::vector<std::string>& policies,
                                     std::uint64_t capacity, const ReplayOptions& options) {
  std::vector<ReplayResult> out;
  for (const DeviceRequests& dev : trace.devices) {
    const std::uint64_t bound = ideal_calls(dev, kCallBoundRatio);  // the device's, once for all its policies
    for (const std::string& name : policies) {
      if (name == kRecordedPolicy) {
        if (dev.recorded.contradicted) continue;  // Note [Segments that cannot hold the blocks] (requests.cpp)
        out.push_back(recorded_result(trace, dev));
      } else {
        PolicyOptions po;
        po.capacity = capacity;
        po.settings = trace.settings;
        po.device = dev.device;
        auto policy = make_policy(name, po);
        out.push_back(replay_device(trace, dev, *policy, options));
      }
      out.back().call_bound = bound;
    }
  }
  return out;
}

}  // namespace memcomm::replay
