// allocation_tip, tip_text and holders_at (allocation_tip.hpp): formatting over StackText and
// memory_at, nothing folded here.
#include <memcomm/view/allocation_tip.hpp>

#include <memcomm/common/bytes.hpp>

#include <fmt/format.h>

namespace memcomm::view {
namespace {

// Seconds from `from` to `t`, in doubles: a snapshot's times are its own clock's (EventClock, which
// saturates but is not bounded as the Timeline's are), so their difference may not fit an int64.
std::string time_text(TimeNs t, TimeNs from) {
  return fmt::format("{:.6f} s", (static_cast<double>(t) - static_cast<double>(from)) / 1e9);
}

// The trainer's tag, else the guess from the stack (Note [Categories from frames] in
// memcomm/snapshot/frames.hpp), said to be one; "" when neither knows.
std::string category_of(const RankData& rd, const prof::Allocation& a) {
  if (a.category > 0 && a.category < kMemCategoryCount) return kMemCategoryNames[a.category];
  if (!rd.stacks || a.stack == prof::kNoStackId || a.stack_of_free) return {};  // a free's frames say no role
  const prof::MemCategory guess = snapshot::category_from_frames(rd.stacks->snap, a.stack);
  if (guess == prof::MemCategory::Unknown) return {};
  return fmt::format("{} (from frames)", prof::mem_category_name(guess));
}

}  // namespace

AllocationTip allocation_tip(const RankData& rd, std::uint32_t index, bool all_frames) {
  const prof::Allocation& a = rd.allocations.list.at(index);
  AllocationTip tip;
  tip.size = a.size;
  tip.addr = a.addr;
  tip.stream = a.stream;
  if (rd.stacks && a.stream < rd.stacks->streams.size()) tip.stream = rd.stacks->streams[a.stream];
  tip.category = category_of(rd, a);
  tip.alloc_ns = a.alloc_ns;
  tip.free_ns = a.free_ns;
  tip.before_trace = a.before_trace;
  tip.stack_of_free = a.stack_of_free;
  if (rd.stacks && a.stack != prof::kNoStackId) tip.stack = rd.stacks->text.lines(a.stack, all_frames);
  if (tip.stack.empty() || !rd.stacks || a.stack == prof::kNoStackId) tip.stack = {kNoStackText};
  return tip;
}

std::string tip_text(const AllocationTip& tip, TimeNs trace_begin) {
  std::string s = fmt::format("{} at 0x{:x}\nstream {}", format_bytes(tip.size), tip.addr, tip.stream);
  if (!tip.category.empty()) s += fmt::format("\ncategory: {}", tip.category);
  const char* before = tip.stack_of_free ? " (before the trace; the stack below is its free's)" : " (before the trace)";
  s += fmt::format("\nallocated at {}{}", time_text(tip.alloc_ns, trace_begin), tip.before_trace ? before : "");
  if (tip.free_ns == prof::kStillLive) s += "\nstill live at the end";
  else s += fmt::format("\nfreed at {} (lifetime {})", time_text(tip.free_ns, trace_begin), time_text(tip.free_ns, tip.alloc_ns));
  const snapshot::StackWindow w = snapshot::shown_window(tip.stack, kStackLinesShown);  // Note [The line a stack is shown by]
  if (w.heading) s += "\n  " + tip.stack[0];
  if (w.outer) s += fmt::format("\n  ... {} more", w.outer);
  for (std::size_t k = w.first; k < w.first + w.count; ++k) s += "\n  " + (tip.stack[k].empty() ? std::string("(empty)") : tip.stack[k]);
  if (w.inner) s += fmt::format("\n  ... {} native frames inside", w.inner);
  return s;
}

HoldersAt holders_at(const RankData& rd, TimeNs t) {
  HoldersAt out;
  out.at_ns = t;
  if (rd.stacks) {
    const snapshot::MemoryAt m = snapshot::memory_at(rd.allocations, rd.stacks->text, t);
    out.live_bytes = m.live_bytes;
    for (const auto& s : m.sites) out.sites.push_back({s.bytes, s.count, rd.stacks->text.site_lines(s.site)});
    return out;
  }
  // Blocks without stacks: by category, as `memcomm-trace memory` tells them (Note [Sites of blocks
  // without stacks] in memcomm/snapshot/memory.hpp).
  const snapshot::MemoryAt m = snapshot::memory_by_category(rd.allocations, t);
  out.live_bytes = m.live_bytes;
  for (const auto& s : m.sites) out.sites.push_back({s.bytes, s.count, snapshot::category_site_lines(s.site)});
  return out;
}

std::vector<snapshot::SiteChange> compare_holders(const HoldersAt& before, const HoldersAt& after) {
  const auto named = [](const HoldersAt& h) {
    std::vector<snapshot::NamedSite> out;
    out.reserve(h.sites.size());
    for (const HoldersAt::Site& s : h.sites) out.push_back({s.stack, s.bytes});
    return out;
  };
  return snapshot::compare_sites(named(before), named(after));
}

}  // namespace memcomm::view
