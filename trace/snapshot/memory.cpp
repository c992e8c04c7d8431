// Who holds memory in a snapshot (memory.hpp): the clock, the lifetimes, live bytes by site.
#include "memcomm/snapshot/memory.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

namespace memcomm::snapshot {
namespace {
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? kMax : kMin) : r;
}
std::int64_t us_to_ns(std::int64_t us) {
  std::int64_t r = 0;
  return __builtin_mul_overflow(us, std::int64_t{1000}, &r) ? (us > 0 ? kMax : kMin) : r;
}
}  // namespace

std::int64_t EventClock::next(const Event& e) {
  if (!e.has_time()) {
    last_ns_ = any_ ? saturating_add(last_ns_, 1000) : 0;
  } else {
    std::int64_t us = e.time_us;
    if (last_us_ != kNoTime && us < last_us_) {  // see Note [Event order within a microsecond]
      steps_back_.add({1, last_us_ - us});
      us = last_us_;
    }
    // The k-th event of a microsecond at +k ns: one past the event before it when that one lies in
    // the same microsecond (or, after a burst of over 1000, past it).
    const std::int64_t at = us_to_ns(us);
    last_us_ = us;
    last_ns_ = any_ && at <= last_ns_ ? saturating_add(last_ns_, 1) : at;
  }
  any_ = true;
  return last_ns_;
}

namespace {
class StreamIndex {
 public:
  std::uint16_t operator()(std::int64_t stream) {
    auto [it, fresh] = ids_.emplace(stream, static_cast<std::uint16_t>(std::min<std::size_t>(values_.size(), 0xFFFF)));
    if (fresh && values_.size() < 0xFFFF) values_.push_back(stream);
    return it->second;
  }
  std::vector<std::int64_t> take() { return std::move(values_); }

 private:
  std::unordered_map<std::int64_t, std::uint16_t> ids_;
  std::vector<std::int64_t> values_;
};

std::uint8_t device_byte(std::size_t d) { return static_cast<std::uint8_t>(std::min<std::size_t>(d, 0xFF)); }
}  // namespace

SnapshotAllocations snapshot_allocations(const Snapshot& snap) {
  prof::AllocationBuilder b(snap.free_requests_recorded());  // Note [A history without free requests]
  StreamIndex stream;
  std::int64_t begin = kMax, end = kMin;
  ClockStepsBack steps_back;
  for (std::size_t dev = 0; dev < snap.device_traces.size(); ++dev) {
    EventClock clock;
    for (const Event& e : snap.device_traces[dev]) {
      const std::int64_t t = clock.next(e);
      begin = std::min(begin, t);
      end = std::max(end, t);
      const prof::BlockInfo info{device_byte(dev), e.addr, e.size, stream(e.stream), e.stack, 0};
      if (e.kind == prof::EventKind::Alloc) b.alloc(t, info);
      else if (e.kind == prof::EventKind::FreeRequested) b.free_requested(t, info);
      else if (e.kind == prof::EventKind::FreeCompleted) b.free_completed(t, info);
    }
    steps_back.add(clock.steps_back());
  }
  if (begin > end) begin = end = 0;  // no events: the end state alone, at t = 0
  for (const Segment& seg : snap.segments)
    for (const Block& blk : seg.blocks)
      if (blk.state == BlockState::active_allocated)
        b.live_at_end({device_byte(static_cast<std::size_t>(std::max(seg.device, 0))), blk.address, blk.requested_size,
                       stream(seg.stream), blk.stack, 0});
  SnapshotAllocations out;
  out.allocations = b.finish(begin, end);
  out.streams = stream.take();
  out.steps_back = steps_back;
  return out;
}

void ClockStepsBack::add(const ClockStepsBack& other) {
  count += other.count;
  largest_us = std::max(largest_us, other.largest_us);
}

std::string ClockStepsBack::warning() const {
  if (count == 0) return {};
  return fmt::format("its events' time_us goes back {} time{} (by up to {} us): such an event is read at the time "
                     "of the one before it, so lifetimes follow the events' order",
                     count, count == 1 ? "" : "s", largest_us);
}

std::vector<std::string> SnapshotAllocations::warnings() const {
  std::vector<std::string> out;
  if (std::string w = steps_back.warning(); !w.empty()) out.push_back(std::move(w));
  if (allocations.unmatched > 0)  // a damaged trace, or one whose ring lost a free
    out.push_back(fmt::format("{} alloc event{} at an address already live (its free is missing: a damaged trace, or "
                              "events lost): the earlier block is taken to end there",
                              allocations.unmatched, allocations.unmatched == 1 ? "" : "s"));
  return out;
}

namespace {
void most_bytes_first(std::vector<SiteBytes>& sites) {
  std::sort(sites.begin(), sites.end(), [](const SiteBytes& x, const SiteBytes& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.site < y.site;
  });
}
}  // namespace

MemoryAt memory_at(const prof::Allocations& a, const StackText& text, std::int64_t t) {
  std::unordered_map<std::uint32_t, SiteBytes> by_site;
  MemoryAt out;
  out.at_ns = t;
  for (const prof::StackBytes& s : prof::live_by_stack(a, t)) {
    const std::uint32_t site = text.site(s.stack, s.stack_of_free);
    SiteBytes& sb = by_site[site];
    sb.site = site;
    sb.bytes += s.bytes;
    sb.count += s.count;
    out.live_bytes += s.bytes;
  }
  for (auto& [site, sb] : by_site) out.sites.push_back(sb);
  most_bytes_first(out.sites);
  return out;
}

MemoryAt memory_by_category(const prof::Allocations& a, std::int64_t t) {
  std::vector<SiteBytes> by_site(kBeforeTraceCategorySite + 1);
  MemoryAt out;
  out.at_ns = t;
  for (const prof::Allocation& x : a.list) {
    if (x.alloc_ns > t) break;  // sorted by alloc_ns
    if (!x.live_at(t)) continue;
    const std::uint32_t site = x.before_trace && x.category == 0 ? kBeforeTraceCategorySite : x.category;
    by_site[site].site = site;
    by_site[site].bytes += x.size;
    ++by_site[site].count;
    out.live_bytes += x.size;
  }
  for (const SiteBytes& s : by_site)
    if (s.count) out.sites.push_back(s);
  most_bytes_first(out.sites);
  return out;
}

std::vector<std::string> category_site_lines(std::uint32_t site) {
  if (site == kBeforeTraceCategorySite) return {std::string(kBeforeTraceSite)};
  if (site == 0) return {"<no category>"};
  return {fmt::format("<{}>", prof::mem_category_name(static_cast<prof::MemCategory>(site)))};
}

bool resolve_at(const prof::Allocations& a, const std::string& spec, std::int64_t& t, std::string& error) {
  if (spec == "end") return t = a.end, true;
  if (spec == "peak") return t = prof::peak_live(a).t, true;
  double seconds = 0;
  const char* first = spec.data();
  const char* last = first + spec.size();
  const auto [ptr, ec] = std::from_chars(first, last, seconds);
  if (ec != std::errc() || ptr != last || !std::isfinite(seconds) || seconds < 0) {
    error = "--at: expected end, peak or seconds from the trace's begin (a number >= 0), got '" + spec + "'";
    return false;
  }
  if (seconds <= 1e9) t = saturating_add(a.begin, static_cast<std::int64_t>(std::llround(seconds * 1e9)));
  if (seconds > 1e9 || t > a.end) {  // a time in milliseconds, or another trace's: the end state would hide the mistake
    error = fmt::format("--at {}: past the trace's end ({:.6f} s after its begin; --at end is the end state)", spec,
                        static_cast<double>(a.end - a.begin) / 1e9);
    return false;
  }
  return true;
}

std::vector<NamedSite> named_sites(const MemoryAt& m, const StackText& text) {
  std::vector<NamedSite> out;
  out.reserve(m.sites.size());
  for (const SiteBytes& s : m.sites) out.push_back({text.site_lines(s.site), s.bytes});
  return out;
}

std::vector<SiteChange> compare_sites(const std::vector<NamedSite>& before, const std::vector<NamedSite>& after) {
  std::map<std::vector<std::string>, SiteChange> by_stack;
  for (const NamedSite& s : before) by_stack[s.stack].before += s.bytes;
  for (const NamedSite& s : after) by_stack[s.stack].after += s.bytes;
  std::vector<SiteChange> out;
  out.reserve(by_stack.size());
  for (auto& [stack, change] : by_stack) {
    change.stack = stack;
    out.push_back(std::move(change));
  }
  std::stable_sort(out.begin(), out.end(), [](const SiteChange& x, const SiteChange& y) { return x.delta() > y.delta(); });
  return out;
}

}  // namespace memcomm::snapshot
