// Who holds memory in a snapshot: its allocations' lifetimes (memcomm/trace/allocations.hpp) on
// one clock, and the live bytes by site (Note [Sites] in frames.hpp) at any time, at the peak or at
// the end. What `memcomm-trace memory` and `compare` print and what the viewer draws, so the two
// agree to the byte.
//
// Note [Event order within a microsecond]: snapshots stamp events in microseconds, and a burst of
// allocs and frees often shares one. Read at microsecond resolution, a peak reached and left
// inside one microsecond would vanish, and "live at the peak" would disagree with the events'
// order. So the k-th event within one microsecond of a device's trace gets k extra nanoseconds:
// times follow the events' order, and stay within their microsecond up to 1000 events in it (a
// burst of more, which no allocator logs in a microsecond but a converted file may hold, runs on
// into the next nanoseconds rather than sharing one: capped at +999 ns, the 1001st event and the
// rest were applied together and a 1 GiB peak among them vanished). Files
// without time_us space events 1 us apart in trace order. A time earlier than the one before it (a
// clock stepped back mid-trace) is read as that one: times never go back within a device's trace,
// so a block's free never comes before its allocation and lifetimes follow the events' order, as
// memory_viz draws them; the tools say how often it happened (EventClock::steps_back).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/snapshot.hpp"
#include "memcomm/trace/allocations.hpp"

namespace memcomm::snapshot {

// Events whose time_us was earlier than the one before them (Note [Event order within a
// microsecond]), and the largest such step.
struct ClockStepsBack {
  std::size_t count = 0;
  std::int64_t largest_us = 0;
  void add(const ClockStepsBack& other);
  // What the tools print ("its events' time_us goes back N times..."); empty when none went back.
  std::string warning() const;
};

// A device trace's event times in ns (Note [Event order within a microsecond]); feed it the events
// in order. Absurd times saturate instead of overflowing.
class EventClock {
 public:
  std::int64_t next(const Event& e);
  const ClockStepsBack& steps_back() const noexcept { return steps_back_; }

 private:
  ClockStepsBack steps_back_;
  std::int64_t last_us_ = kNoTime;
  std::int64_t last_ns_ = 0;
  bool any_ = false;
};

struct SnapshotAllocations {
  prof::Allocations allocations;     // Allocation::stack is the snapshot's stack id
  std::vector<std::int64_t> streams;  // Allocation::stream -> the cudaStream_t value PyTorch printed
  ClockStepsBack steps_back;          // over every device
  // What the tools and the viewer print about the events (times that go back, an address allocated
  // again while live), over every device; take it before filtering the allocations by device.
  std::vector<std::string> warnings() const;
};
// Every device's alloc/free events, and the end state's active_allocated blocks
// (Note [Allocations before the trace] in allocations.hpp).
SnapshotAllocations snapshot_allocations(const Snapshot& snap);

// Live bytes by site at one time.
struct SiteBytes {
  std::uint32_t site = 0;     // StackText site
  std::uint64_t bytes = 0;
  std::uint32_t count = 0;    // allocations
};
struct MemoryAt {
  std::int64_t at_ns = 0;
  std::uint64_t live_bytes = 0;
  std::vector<SiteBytes> sites;  // most bytes first
};
MemoryAt memory_at(const prof::Allocations& a, const StackText& text, std::int64_t t);

// Note [Sites of blocks without stacks]: a memcomm or torch.profiler trace's blocks carry no stack,
// so who holds memory is told by block category (memcomm's trainer tags parameters, gradients...),
// with the bytes live from before the trace that carry none (a torch.profiler profile's model and
// optimizer state, Note [Bytes a memory profile never saw allocated] in trace/ allocations.cpp) a
// site of their own. `memcomm-trace memory` and the viewer's "who holds memory" fold them alike.
// Sites are categories (prof::MemCategory values), or kBeforeTraceCategorySite.
inline constexpr std::uint32_t kBeforeTraceCategorySite = 16;  // past the 4-bit categories
MemoryAt memory_by_category(const prof::Allocations& a, std::int64_t t);
// A category site's one line: "<parameter>", "<no category>", or kBeforeTraceSite.
std::vector<std::string> category_site_lines(std::uint32_t site);

// `memcomm-trace memory --at`: "end", "peak", or seconds from the trace's begin ("1.5") up to its end.
// Returns false (with a message) for anything else.
bool resolve_at(const prof::Allocations& a, const std::string& spec, std::int64_t& t, std::string& error);

// A site with its lines: what compare_sites takes, so sites of two files (whose site ids differ)
// and sites that are no stacks (a memcomm trace's categories) compare alike.
struct NamedSite {
  std::vector<std::string> stack;
  std::uint64_t bytes = 0;
};
std::vector<NamedSite> named_sites(const MemoryAt& m, const StackText& text);

// What changed by site between two states (of two snapshots, or two times of one).
struct SiteChange {
  std::vector<std::string> stack;  // the site's lines
  std::uint64_t before = 0, after = 0;
  std::int64_t delta() const { return static_cast<std::int64_t>(after - before); }
};
// Sites present in either state, by their lines; largest growth first (shrinks last).
std::vector<SiteChange> compare_sites(const std::vector<NamedSite>& before, const std::vector<NamedSite>& after);

}  // namespace memcomm::snapshot
