// memcomm-trace memory / compare (trace_memory.hpp). The JSON is the contract:
// {"at_ns": T, "live_bytes": N, "sites": [{"bytes": B, "stack": ["file:line:function", ...]}, ...]}
// with stacks outermost first and filtered as memory_viz filters them; text mode caps each stack
// at its innermost kShownFrames lines (the data and the JSON keep them all).
#include "trace_memory.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "memcomm/snapshot/memory.hpp"

namespace memcomm::prof::tool {
namespace {
constexpr std::size_t kShownFrames = 8;

// One snapshot with what `memory` needs of it. StackText points into `snap`: not movable.
struct Loaded {
  explicit Loaded(const std::string& path)
      : snap(snapshot::load_snapshot(path)), allocs(snapshot::snapshot_allocations(snap)), text(snap) {}
  Loaded(const Loaded&) = delete;
  snapshot::Snapshot snap;
  snapshot::SnapshotAllocations allocs;
  snapshot::StackText text;

  snapshot::MemoryAt at(const std::string& spec) const {
    std::int64_t t = 0;
    std::string error;
    if (!snapshot::resolve_at(allocs.allocations, spec, t, error)) throw std::invalid_argument(error);
    return snapshot::memory_at(allocs.allocations, text, t);
  }
  std::vector<std::string> lines(const snapshot::SiteBytes& s, bool all_frames) const;
};

// The site's lines, or with --all-frames those of one of its raw stacks (the first live one: all
// raw stacks of a site agree on the filtered frames, so any one is honest about the rest).
std::vector<std::string> Loaded::lines(const snapshot::SiteBytes& s, bool all_frames) const {
  if (!all_frames) return text.site_lines(s.site);
  for (const Allocation& a : allocs.allocations.list)
    if (text.site(a.stack) == s.site) return text.lines(a.stack, true);
  return text.site_lines(s.site);
}

std::string seconds_into(const Allocations& a, std::int64_t t) {
  return fmt::format("{:.6f} s", static_cast<double>(t - a.begin) / 1e9);
}

void append_stack(std::string& out, const std::vector<std::string>& stack) {
  const std::size_t skip = stack.size() > kShownFrames ? stack.size() - kShownFrames : 0;
  if (skip) out += fmt::format("      ... {} outer frames\n", skip);
  for (std::size_t k = skip; k < stack.size(); ++k) out += fmt::format("      {}\n", stack[k].empty() ? "(empty)" : stack[k]);
  if (stack.empty()) out += "      (every frame filtered out; --all-frames shows them)\n";
}
}  // namespace

std::string memory_report(const std::string& file, const MemoryArgs& args) {
  const Loaded l(file);
  const snapshot::MemoryAt m = l.at(args.at);
  if (args.json) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& s : m.sites) sites.push_back({{"bytes", s.bytes}, {"count", s.count}, {"stack", l.lines(s, args.all_frames)}});
    nlohmann::json j = {{"file", file}, {"at", args.at}, {"at_ns", m.at_ns}, {"live_bytes", m.live_bytes}, {"sites", sites}};
    return j.dump(1) + "\n";
  }
  std::string out = fmt::format("{}: at {} ({} after the trace's begin): {} live in {} sites\n", file, args.at,
                                seconds_into(l.allocs.allocations, m.at_ns), format_bytes(m.live_bytes), m.sites.size());
  const std::size_t shown = std::min(args.rows, m.sites.size());
  for (std::size_t k = 0; k < shown; ++k) {
    const auto& s = m.sites[k];
    out += fmt::format("  {:>10}  {:5.1f}%  {} allocations\n", format_bytes(s.bytes),
                       m.live_bytes ? 100.0 * static_cast<double>(s.bytes) / static_cast<double>(m.live_bytes) : 0.0, s.count);
    append_stack(out, l.lines(s, args.all_frames));
  }
  if (shown < m.sites.size()) out += fmt::format("  ... {} more sites (--rows, or --json for all)\n", m.sites.size() - shown);
  return out;
}

std::string compare_report(const std::string& before, const std::string& after, const MemoryArgs& args) {
  const Loaded a(before), b(after);
  const snapshot::MemoryAt ma = a.at(args.at), mb = b.at(args.at);
  const auto changes = snapshot::compare_sites(ma, a.text, mb, b.text);
  if (args.json) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& c : changes)
      if (c.delta() != 0) sites.push_back({{"before", c.before}, {"after", c.after}, {"delta", c.delta()}, {"stack", c.stack}});
    nlohmann::json j = {{"before", {{"file", before}, {"at_ns", ma.at_ns}, {"live_bytes", ma.live_bytes}}},
                        {"after", {{"file", after}, {"at_ns", mb.at_ns}, {"live_bytes", mb.live_bytes}}},
                        {"at", args.at}, {"sites", sites}};
    return j.dump(1) + "\n";
  }
  std::string out = fmt::format("live at {}: {} in {}, {} in {}\n", args.at, format_bytes(ma.live_bytes), before,
                                format_bytes(mb.live_bytes), after);
  std::size_t shown = 0;
  for (const auto& c : changes) {
    if (c.delta() == 0 || shown == args.rows) continue;
    ++shown;
    out += fmt::format("  {}{:>10}  ({} -> {})\n", c.delta() > 0 ? '+' : '-',
                       format_bytes(static_cast<std::uint64_t>(c.delta() > 0 ? c.delta() : -c.delta())),
                       format_bytes(c.before), format_bytes(c.after));
    append_stack(out, c.stack);
  }
  if (shown == 0) out += "  no site changed\n";
  return out;
}

}  // namespace memcomm::prof::tool
