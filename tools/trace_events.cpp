// See trace_events.hpp. Each event of a device's trace is one line (one JSON object): its time, its
// action as the file spells it, stream, address, size, the innermost Python frame of its stack, and two
// running figures after it:
//   - live: bytes requested by allocations not yet freed, a block counting as freed at its free
//     request, as `memory --at` sums them by stack (Note [Live means allocated] in allocations.hpp);
//   - reserved: segment bytes the allocator holds (cudaMalloc'd segments, mapped pages of
//     expandable ones).
// The trace is a ring buffer that usually starts mid-run, so neither figure can be summed forward
// from zero. The end state (segments and their blocks) is complete, so both are known after the last
// event and walked back: before an event, the figure after it less what it added. A file of device
// traces alone (no end state) has no such anchor: there the figures count from the trace's first
// event, signed, and the heading says so.
#include "trace_events.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/json_output.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/memory.hpp"
#include "memcomm/snapshot/snapshot.hpp"
#include "progress.hpp"

namespace memcomm::prof::tool {
namespace {

struct Levels {
  std::int64_t live = 0, reserved = 0;
};

// What each event adds to the two figures, as `memory --at` folds them (AllocationBuilder): a block
// ends at its free request; a completion with no request ends a block allocated in the trace, and is
// otherwise a block whose free was requested before the trace began, never live in it (Note
// [Allocations before the trace]), or, where no request is recorded, the free of a block allocated
// before the trace (Note [A history without free requests]).
std::vector<Levels> added_by(const std::vector<snapshot::Event>& events, bool requests_recorded) {
  std::vector<Levels> out(events.size());
  std::unordered_set<std::uint64_t> open;       // allocated in the trace, not yet freed
  std::unordered_set<std::uint64_t> requested;  // blocks freed by the user, their completion to come
  for (std::size_t i = 0; i < events.size(); ++i) {
    const snapshot::Event& e = events[i];
    const auto size = static_cast<std::int64_t>(std::min<std::uint64_t>(e.size, std::numeric_limits<std::int64_t>::max() / 4));
    switch (e.kind) {
      case EventKind::Alloc:
        open.insert(e.addr);
        out[i] = {size, 0};
        break;
      case EventKind::FreeRequested:
        open.erase(e.addr);
        requested.insert(e.addr);
        out[i] = {-size, 0};
        break;
      case EventKind::FreeCompleted:
        if (requested.erase(e.addr) == 0 && (open.erase(e.addr) == 1 || !requests_recorded)) out[i] = {-size, 0};
        break;
      case EventKind::SegmentAlloc:
      case EventKind::SegmentMap: out[i] = {0, size}; break;
      case EventKind::SegmentFree:
      case EventKind::SegmentUnmap: out[i] = {0, -size}; break;
      default: break;
    }
  }
  return out;
}

// The figures at the end state of `device`.
Levels end_state(const snapshot::Snapshot& snap, int device) {
  Levels end;
  for (const snapshot::Segment& s : snap.segments) {
    if (s.device != device) continue;
    end.reserved += static_cast<std::int64_t>(s.total_size);
    for (const snapshot::Block& b : s.blocks)
      if (b.state == snapshot::BlockState::active_allocated) end.live += static_cast<std::int64_t>(b.requested_size);
  }
  return end;
}

// The figures before the first event and after each one (see the top of the file).
struct Running {
  Levels before;
  std::vector<Levels> after;
};

Running running_levels(const snapshot::Snapshot& snap, int device) {
  const std::vector<snapshot::Event>& events = snap.device_traces[static_cast<std::size_t>(device)];
  const std::vector<Levels> added = added_by(events, snap.free_requests_recorded());
  Running r;
  r.after.resize(events.size());
  Levels now = snap.has_segments ? end_state(snap, device) : Levels{};
  if (snap.has_segments) {  // walked back from the end
    for (std::size_t i = events.size(); i-- > 0;) {
      r.after[i] = now;
      now = {now.live - added[i].live, now.reserved - added[i].reserved};
    }
    r.before = now;
    return r;
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    now = {now.live + added[i].live, now.reserved + added[i].reserved};
    r.after[i] = now;
  }
  return r;
}

// Event times in ns from the trace's first event over every device, as `memory --at` counts them
// (with its warning where a clock stepped back).
std::vector<std::vector<std::int64_t>> event_times(const std::string& file, const snapshot::Snapshot& snap) {
  std::vector<std::vector<std::int64_t>> times(snap.device_traces.size());
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  snapshot::ClockStepsBack steps_back;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    snapshot::EventClock clock;
    for (const snapshot::Event& e : snap.device_traces[d]) {
      times[d].push_back(clock.next(e));
      first = std::min(first, times[d].back());
    }
    steps_back.add(clock.steps_back());
  }
  if (const std::string w = steps_back.warning(); !w.empty())
    fmt::print(stderr, "warning: {}: {}\n", file, w);
  for (auto& device : times)
    for (std::int64_t& t : device) t -= first;
  return times;
}

std::string signed_bytes(std::int64_t v, bool relative) {
  const std::string magnitude = format_bytes(static_cast<std::uint64_t>(v < 0 ? -v : v));
  if (relative) return (v < 0 ? "-" : "+") + magnitude;
  return v < 0 ? "-" + magnitude : magnitude;  // only where the end state and the trace disagree
}

// Walked back from the end state, a figure below zero means the trace and the end state disagree (a
// block the trace allocated and never freed that the segments do not hold): the figures are printed
// as the walk gives them, and this says why they cannot all be true.
void warn_if_disagreeing(const std::string& file, int device, const Running& r) {
  Levels low = r.before;
  for (const Levels& l : r.after) low = {std::min(low.live, l.live), std::min(low.reserved, l.reserved)};
  if (low.live >= 0 && low.reserved >= 0) return;
  fmt::print(stderr, "warning: {}: device {}: the trace and the end state disagree (walked back from the end state, "
                     "live goes down to {} and reserved to {}): the trace holds events the end state does not reflect\n",
             file, device, signed_bytes(low.live, false), signed_bytes(low.reserved, false));
}

// Each event's site, formatted once per interned stack: a trace of millions of events holds a few
// thousand stacks, and formatting every frame of every event's stack (100-200 frames with C++ ones)
// made the listing 3x slower than memory_viz's Python.
class Sites {
 public:
  explicit Sites(const snapshot::Snapshot& snap) : snap_(snap), shown_(snap.stack_count()) {}
  const std::string& of(std::uint32_t stack) {
    if (stack >= shown_.size()) return none_;
    if (!shown_[stack]) shown_[stack] = snapshot::shown_frame(snap_, stack);
    return *shown_[stack];
  }

 private:
  const snapshot::Snapshot& snap_;
  std::vector<std::optional<std::string>> shown_;
  std::string none_;  // an event with no stack: shown_frame's answer for it
};

// An event's compile context and user metadata, those it has, as (JSON key, text): memory_viz's
// tooltip shows both.
std::vector<std::pair<const char*, std::string_view>> notes_present(const snapshot::Snapshot& snap,
                                                                     const snapshot::EventNotes* notes) {
  std::vector<std::pair<const char*, std::string_view>> out;
  if (!notes) return out;
  if (notes->compile_context != snapshot::kNoNote) out.emplace_back("compile_context", snap.str(notes->compile_context));
  if (notes->user_metadata != snapshot::kNoNote) out.emplace_back("user_metadata", snap.str(notes->user_metadata));
  return out;
}

// The site column: the event's site, or an oom's free bytes, then its notes ("[compile context: ...]").
std::string note(const snapshot::Snapshot& snap, Sites& sites, const snapshot::Event& e, const snapshot::EventNotes* notes) {
  std::string text = e.kind == EventKind::Oom && e.device_free()
                         ? fmt::format("{} free on the device", format_bytes(*e.device_free()))
                         : sites.of(e.stack);
  for (const auto& [key, value] : notes_present(snap, notes)) {
    std::string label(key);
    std::replace(label.begin(), label.end(), '_', ' ');
    text += fmt::format(" [{}: {}]", label, value);
  }
  return text;
}

void print_text_device(const snapshot::Snapshot& snap, int device, const std::vector<std::int64_t>& times, Sites& sites,
                       std::FILE* out) {
  const auto& events = snap.device_traces[static_cast<std::size_t>(device)];
  const Running levels = running_levels(snap, device);
  const std::vector<Levels>& after = levels.after;
  const bool relative = !snap.has_segments;
  if (relative)
    fmt::print(out, "device {}: {} events; live and reserved after each, counted from the trace's first event (the "
               "file has no end state)\n", device, events.size());
  else
    fmt::print(out, "device {}: {} events; live and reserved after each (before the first: live {}, reserved {})\n",
               device, events.size(), signed_bytes(levels.before.live, false), signed_bytes(levels.before.reserved, false));
  fmt::print(out, "{:>12}  {:<15} {:>16} {:>18} {:>11} {:>11} {:>11}  {}\n", "time_s", "action", "stream", "address",
             "size", "live", "reserved", "site");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const snapshot::Event& e = events[i];
    const std::string addr = e.has_addr() && e.kind != EventKind::Oom ? fmt::format("{:#x}", e.addr) : "-";
    fmt::print(out, "{:>12.6f}  {:<15} {:>16} {:>18} {:>11} {:>11} {:>11}  {}\n", static_cast<double>(times[i]) / 1e9,
               snap.action_label(e), e.stream, addr, format_bytes(e.size), signed_bytes(after[i].live, relative),
               signed_bytes(after[i].reserved, relative),
               note(snap, sites, e, snap.notes_of(static_cast<std::size_t>(device), i)));
  }
}

nlohmann::json event_json(const snapshot::Snapshot& snap, const snapshot::Event& e, std::int64_t t, const Levels& after,
                          Sites& sites, const snapshot::EventNotes* notes) {
  nlohmann::json j{{"t_ns", t}, {"action", std::string(snap.action_label(e))}, {"stream", e.stream},
                   {"size", e.size}, {"live", after.live}, {"reserved", after.reserved},
                   {"site", sites.of(e.stack)}};
  if (e.kind == EventKind::Oom) j["device_free"] = e.device_free() ? nlohmann::json(*e.device_free()) : nlohmann::json();
  else j["addr"] = e.has_addr() ? nlohmann::json(e.addr) : nlohmann::json();
  for (const auto& [key, value] : notes_present(snap, notes)) j[key] = std::string(value);
  return j;
}

// One JSON document written as it goes: {"file", "relative", "devices": [{"device", "before", "events": [...]}]}.
void print_json(const std::string& file, const snapshot::Snapshot& snap, const std::vector<int>& devices,
                const std::vector<std::vector<std::int64_t>>& times, Sites& sites, std::FILE* out) {
  fmt::print(out, "{{\"file\": {}, \"relative\": {}, \"devices\": [", json_text(nlohmann::json(file)),
             snap.has_segments ? "false" : "true");
  for (std::size_t k = 0; k < devices.size(); ++k) {
    const int d = devices[k];
    const auto& events = snap.device_traces[static_cast<std::size_t>(d)];
    const Running levels = running_levels(snap, d);
    fmt::print(out, "{}\n {{\"device\": {}, \"before\": {{\"live\": {}, \"reserved\": {}}}, \"events\": [", k ? "," : "", d,
               levels.before.live, levels.before.reserved);
    for (std::size_t i = 0; i < events.size(); ++i)
      fmt::print(out, "{}\n  {}", i ? "," : "", json_text(event_json(snap, events[i], times[d][i], levels.after[i], sites,
                                                                     snap.notes_of(static_cast<std::size_t>(d), i))));
    fmt::print(out, "]}}");
  }
  fmt::print(out, "]}}\n");
}

snapshot::Snapshot load_for_events(const std::string& file, const MemoryArgs& args) {
  if (args.segments) throw std::invalid_argument("--events and --segments are two listings: choose one");
  if (args.at != "end") throw std::invalid_argument("--events lists the whole trace: drop --at " + args.at);
  if (args.rank >= 0) throw std::invalid_argument("--events reads a snapshot, which has no ranks: drop --rank");
  if (args.all_frames) throw std::invalid_argument("--events shows each event's innermost Python frame: drop --all-frames");
  if (!snapshot::is_snapshot_file(file))
    throw std::invalid_argument(file + ": --events reads PyTorch memory snapshots (.pickle), which record their allocator's events");
  return snapshot::load_snapshot(file);
}

}  // namespace

void print_events(const std::string& file, const MemoryArgs& args, std::FILE* out) {
  const snapshot::Snapshot snap = load_for_events(file, args);
  std::vector<int> devices;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d)
    if (!snap.device_traces[d].empty() && (args.device < 0 || static_cast<int>(d) == args.device))
      devices.push_back(static_cast<int>(d));
  const auto times = event_times(file, snap);
  if (snap.has_segments)
    for (int d : devices) warn_if_disagreeing(file, d, running_levels(snap, d));
  std::size_t listed = 0;
  for (int d : devices) listed += snap.device_traces[static_cast<std::size_t>(d)].size();
  Progress progress(fmt::format("listing {} events", listed));
  Sites sites(snap);
  if (args.json) return print_json(file, snap, devices, times, sites, out);
  fmt::print(out, "{}: the allocator's events, in order\n", file);
  if (devices.empty())
    fmt::print(out, "  {}\n", args.device < 0 ? "no events (the snapshot was taken without recording its history)"
                                                 : fmt::format("no events on device {}", args.device));
  for (int d : devices) print_text_device(snap, d, times[static_cast<std::size_t>(d)], sites, out);
}

}  // namespace memcomm::prof::tool
