// memcomm-trace memory / compare (trace_memory.hpp). The JSON is the contract:
// {"at_ns": T, "live_bytes": N, "sites": [{"bytes": B, "stack": ["file:line:function", ...]}, ...]}
// with stacks outermost first and filtered as memory_viz filters them; text mode caps each stack
// at kShownFrames lines that end at the line that shows it (Note [The line a stack is shown by] in
// memcomm/snapshot/frames.hpp; the data and the JSON keep them all). A site of blocks
// allocated before the trace, known only by the stack their free recorded (Note [A free's stack]),
// has snapshot::kFreeStackHeading as its first line.
//
// Two kinds of input (HeldMemory): a PyTorch snapshot, whose sites are stacks (snapshot/memory.hpp),
// and a memcomm or torch.profiler trace, one rank of it, whose blocks carry no stacks: its sites
// are the blocks' categories (memcomm's trainer tags parameters, gradients...), "<no category>"
// where the producer gave none (not a snapshot's "<non-python>": the block may well come from Python).
#include "trace_memory.hpp"

#include "input_warnings.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memcomm/common/bytes.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <stdexcept>

#include "memcomm/common/json_output.hpp"
#include "memcomm/snapshot/frames.hpp"
#include "memcomm/snapshot/memory.hpp"
#include "memcomm/trace/trace_error.hpp"
#include "memcomm/trace/trace_set.hpp"

namespace memcomm::prof::tool {
namespace {
constexpr std::size_t kShownFrames = 8;

// Live memory by site in one input.
class HeldMemory {
 public:
  virtual ~HeldMemory() = default;
  virtual const Allocations& allocations() const = 0;
  virtual snapshot::MemoryAt at(std::int64_t t) const = 0;
  virtual std::vector<std::string> lines(std::uint32_t site, bool all_frames) const = 0;
  virtual std::string label() const = 0;  // what was read: the file, and a trace's rank
  // False for a snapshot that records no times (torch <= 2.1): its clock counts events, 1 us each
  // (snapshot::EventClock).
  virtual bool timed() const { return true; }
  // False for a snapshot whose trace holds no event: its blocks are its end state alone.
  virtual bool has_events() const { return true; }

  snapshot::MemoryAt at(const std::string& spec) const {
    std::int64_t t = 0;
    std::string error;
    if (!snapshot::resolve_at(allocations(), spec, t, error)) throw std::invalid_argument(error);
    return at(t);  // without events, every --at names the end state (Note [Allocations before the trace])
  }
  std::vector<snapshot::NamedSite> named(const snapshot::MemoryAt& m) const {
    std::vector<snapshot::NamedSite> out;
    for (const auto& s : m.sites) out.push_back({lines(s.site, false), s.bytes});
    return out;
  }
};

// `all` narrowed to one device (device < 0: all of it). A device the file does not know (`devices`
// and those its blocks are on) is a usage error naming the ones it does, not an empty answer.
Allocations on_device(Allocations all, int device, std::set<int> devices, const std::string& label) {
  if (device < 0) return all;
  for (const Allocation& a : all.list) devices.insert(a.device);
  if (!devices.count(device))
    throw std::invalid_argument(fmt::format("--device {}: {} has no device {} (devices: {})", device, label, device,
                                            devices.empty() ? std::string("none") : fmt::format("{}", fmt::join(devices, ", "))));
  return allocations_of_device(all, static_cast<std::uint8_t>(device));
}

// A snapshot. StackText points into `snap_`: not movable.
class SnapshotMemory final : public HeldMemory {
 public:
  SnapshotMemory(const std::string& path, int device)
      : path_(path), snap_(snapshot::load_snapshot(path)), allocs_(snapshot::snapshot_allocations(snap_)), text_(snap_),
        timed_(records_times(snap_)) {
    for (const std::string& w : allocs_.warnings()) fmt::print(stderr, "warning: {}: {}\n", path, w);
    allocs_.allocations = on_device(std::move(allocs_.allocations), device, snap_.devices(), path);
    std::size_t traced_devices = 0;
    for (const auto& events : snap_.device_traces) traced_devices += events.empty() ? 0 : 1;
    has_events_ = traced_devices > 0;
    if (device < 0 && traced_devices > 1 && !timed_)  // each device's clock counts its own events
      fmt::print(stderr, "warning: {}: its devices' traces record no times, so their events are aligned by index, "
                         "not by moment: the sum over devices at a time is no state that existed; --device N "
                         "shows one\n", path);
  }
  const Allocations& allocations() const override { return allocs_.allocations; }
  snapshot::MemoryAt at(std::int64_t t) const override { return snapshot::memory_at(allocs_.allocations, text_, t); }
  // A snapshot of memcomm's CPU allocator says so, as a trace's host memory does (Note [A host
  // snapshot's device] in snapshot_model.cpp).
  std::string label() const override { return snap_.settings.host ? path_ + ", host memory" : path_; }
  bool timed() const override { return timed_; }
  bool has_events() const override { return has_events_; }
  std::vector<std::string> lines(std::uint32_t site, bool all_frames) const override {
    return text_.site_lines(site, all_frames);
  }

 private:
  std::string path_;
  snapshot::Snapshot snap_;
  snapshot::SnapshotAllocations allocs_;
  snapshot::StackText text_;
  bool timed_;
  bool has_events_ = false;

  static bool records_times(const snapshot::Snapshot& snap) {
    for (const auto& events : snap.device_traces)
      for (const snapshot::Event& e : events)
        if (e.has_time()) return true;
    return false;
  }
};

// One rank of a memcomm or torch.profiler trace; its sites are categories (Note [Sites of blocks
// without stacks] in memcomm/snapshot/memory.hpp).
class TraceMemory final : public HeldMemory {
 public:
  TraceMemory(const std::string& path, const RankTrace& rank, int device)
      : label_(fmt::format("{} (rank {})", path, rank.rank)), allocs_(rank_allocations(rank)) {
    if (allocs_.list.empty())
      throw std::invalid_argument(fmt::format("{}: no allocation events (a torch.profiler trace records them with "
                                              "profile_memory=True; memcomm-train and memcomm.profile with memcomm's allocator)", label_));
    if (device < 0 && leave_out_host_beside_gpu(allocs_))  // Note [Host memory beside a GPU's]
      label_ += fmt::format(", GPU memory (the host's with --device {})", kHostDevice);
    allocs_ = on_device(std::move(allocs_), device, {}, label_);
    if (device == kHostDevice ||
        std::all_of(allocs_.list.begin(), allocs_.list.end(), [](const Allocation& a) { return a.device == kHostDevice; }))
      label_ += ", host memory";  // a CPU run's, or the host's alone or asked for: not to be read as a GPU's
  }
  const Allocations& allocations() const override { return allocs_; }
  std::string label() const override { return label_; }
  snapshot::MemoryAt at(std::int64_t t) const override { return snapshot::memory_by_category(allocs_, t); }
  std::vector<std::string> lines(std::uint32_t site, bool) const override { return snapshot::category_site_lines(site); }

 private:
  std::string label_;
  Allocations allocs_;
};

std::unique_ptr<HeldMemory> open_held(const std::string& path, const MemoryArgs& args) {
  if (args.device > 255) throw std::invalid_argument(fmt::format("--device {}: devices are numbered 0-255", args.device));
  if (snapshot::is_snapshot_file(path)) return std::make_unique<SnapshotMemory>(path, args.device);
  TraceSet set;
  try {
    set = TraceSet::load({path});
  } catch (const TraceError& e) {
    throw std::invalid_argument(fmt::format("{} (memory and compare read PyTorch snapshots and memcomm or torch.profiler traces)", e.what()));
  }
  warn_about_inputs(set);
  for (const RankTrace& r : set.ranks)
    if (args.rank < 0 || r.rank == static_cast<std::uint32_t>(args.rank)) return std::make_unique<TraceMemory>(path, r, args.device);
  throw std::invalid_argument(args.rank < 0 ? fmt::format("{}: holds no rank", path)
                                            : fmt::format("{}: holds no rank {} (--rank)", path, args.rank));
}

// --rank picks a trace's rank; a snapshot is one process's allocator. Asked of snapshots alone, it
// would be silently ignored: a usage error instead.
void check_rank_applies(const std::vector<std::string>& files, const MemoryArgs& args) {
  if (args.rank < 0) return;
  for (const auto& f : files)
    if (!snapshot::is_snapshot_file(f)) return;
  throw std::invalid_argument(fmt::format("--rank {}: {} PyTorch memory snapshot{}, which record{} no ranks", args.rank,
                                          files.size() == 1 ? files[0] + " is a" : "the inputs are",
                                          files.size() == 1 ? "" : "s", files.size() == 1 ? "s" : ""));
}

// The stack's window (Note [The line a stack is shown by] in memcomm/snapshot/frames.hpp).
void append_stack(std::string& out, const std::vector<std::string>& stack) {
  const snapshot::StackWindow w = snapshot::shown_window(stack, kShownFrames);
  if (w.heading) out += fmt::format("      {}\n", stack[0]);
  if (w.outer) out += fmt::format("      ... {} outer frames\n", w.outer);
  for (std::size_t k = w.first; k < w.first + w.count; ++k) out += fmt::format("      {}\n", stack[k]);
  if (w.inner) out += fmt::format("      ... {} native frames inside it (--json lists them)\n", w.inner);
  if (w.count == 0) out += "      (every frame filtered out; --all-frames shows them)\n";
}

double percent(std::uint64_t part, std::uint64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}
}  // namespace

std::string memory_report(const std::string& file, const MemoryArgs& args) {
  check_rank_applies({file}, args);
  const auto held = open_held(file, args);
  const snapshot::MemoryAt m = held->at(args.at);
  if (args.json) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& s : m.sites) sites.push_back({{"bytes", s.bytes}, {"count", s.count}, {"stack", held->lines(s.site, args.all_frames)}});
    return json_text(nlohmann::json{{"file", file}, {"at", args.at}, {"at_ns", m.at_ns}, {"live_bytes", m.live_bytes}, {"sites", sites}}, 1) + "\n";
  }
  const Allocations& a = held->allocations();
  // Before the first event: the blocks from before the trace, held then (Note [Allocations before the trace]).
  // Nanoseconds, so that the time printed is one --at takes back to the same state.
  const double after = static_cast<double>(m.at_ns - a.begin) / 1e9;
  const std::string when = !held->has_events() ? std::string("its end state: the snapshot's trace holds no events")
                           : m.at_ns < a.begin  ? std::string("before the trace's first event")
                           : held->timed() ? fmt::format("{:.9f} s after the trace's first event", after)
                                           : fmt::format("after event {} of each device's trace: the snapshot records no "
                                                         "times, so --at counts events, 1 us each",
                                                         (m.at_ns - a.begin) / 1000 + 1);
  std::string out = fmt::format("{}: at {} ({}): {} live in {} sites\n", held->label(), args.at, when,
                                format_bytes(m.live_bytes), m.sites.size());
  const std::size_t shown = std::min(args.rows, m.sites.size());
  for (std::size_t k = 0; k < shown; ++k) {
    const auto& s = m.sites[k];
    out += fmt::format("  {:>10}  {:5.1f}%  {} allocations\n", format_bytes(s.bytes), percent(s.bytes, m.live_bytes), s.count);
    append_stack(out, held->lines(s.site, args.all_frames));
  }
  if (shown < m.sites.size()) out += fmt::format("  ... {} more sites (--rows, or --json for all)\n", m.sites.size() - shown);
  return out;
}

std::string compare_report(const std::string& before, const std::string& after, const MemoryArgs& args) {
  check_rank_applies({before, after}, args);
  const auto a = open_held(before, args), b = open_held(after, args);
  const snapshot::MemoryAt ma = a->at(args.at), mb = b->at(args.at);
  const auto changes = snapshot::compare_sites(a->named(ma), b->named(mb));
  if (args.json) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& c : changes)  // every site, unchanged ones too (delta 0), as --help says
      sites.push_back({{"before", c.before}, {"after", c.after}, {"delta", c.delta()}, {"stack", c.stack}});
    const nlohmann::json doc{{"before", {{"file", before}, {"at_ns", ma.at_ns}, {"live_bytes", ma.live_bytes}}},
                             {"after", {{"file", after}, {"at_ns", mb.at_ns}, {"live_bytes", mb.live_bytes}}},
                             {"at", args.at},
                             {"sites", sites}};
    return json_text(doc, 1) + "\n";
  }
  std::string out = fmt::format("live at {}: {} in {}, {} in {}\n", args.at, format_bytes(ma.live_bytes), a->label(),
                                format_bytes(mb.live_bytes), b->label());
  std::size_t shown = 0;
  for (const auto& c : changes) {
    if (c.delta() == 0 || shown == args.rows) continue;
    ++shown;
    const std::uint64_t size = static_cast<std::uint64_t>(c.delta() > 0 ? c.delta() : -c.delta());
    out += fmt::format("  {}{:>10}  ({} -> {})\n", c.delta() > 0 ? '+' : '-', format_bytes(size), format_bytes(c.before), format_bytes(c.after));
    append_stack(out, c.stack);
  }
  if (shown == 0) out += "  no site changed\n";
  return out;
}

}  // namespace memcomm::prof::tool
