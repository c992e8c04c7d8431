// See trace_segments.hpp. Per device: the segments' reserved bytes, the bytes their active blocks
// span (allocated or freed and pending on a stream), what the user asked for of those, and the free
// bytes (inactive blocks) with the largest free block, which bounds the largest request the device's
// cache could serve without a new segment. Segments are listed largest first, --rows of them.
// compare --segments keys segments by (address, total size), as memory_viz's compare does: those
// only in the earlier snapshot were freed (or resized) since, those only in the later one are new.
#include "trace_segments.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/json_output.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::prof::tool {
namespace {

struct SegmentFigures {
  const snapshot::Segment* segment = nullptr;
  std::uint64_t active = 0, requested = 0, pending_free = 0, free = 0, largest_free = 0;
  std::size_t active_blocks = 0, free_blocks = 0;
};

SegmentFigures figures(const snapshot::Segment& s) {
  SegmentFigures f;
  f.segment = &s;
  for (const snapshot::Block& b : s.blocks) {
    if (b.is_active()) {
      f.active += b.size;
      f.requested += b.requested_size;
      if (b.state == snapshot::BlockState::active_pending_free) f.pending_free += b.size;
      ++f.active_blocks;
    } else {
      f.free += b.size;
      f.largest_free = std::max(f.largest_free, b.size);
      ++f.free_blocks;
    }
  }
  return f;
}

std::string pool(const snapshot::Segment& s) {
  std::string p = s.is_small ? "small" : "large";
  if (s.is_expandable) p += ", expandable";
  if (s.pool_id != std::pair<std::int64_t, std::int64_t>{0, 0}) p += fmt::format(", graph pool ({},{})", s.pool_id.first, s.pool_id.second);
  return p;
}

// One device's segments, largest first, and their sums.
nlohmann::json device_json(int device, const std::vector<SegmentFigures>& segs) {
  nlohmann::json list = nlohmann::json::array();
  std::uint64_t reserved = 0, active = 0, requested = 0, pending_free = 0, free = 0, largest_free = 0;
  for (const SegmentFigures& f : segs) {
    const snapshot::Segment& s = *f.segment;
    list.push_back({{"address", s.address}, {"total_size", s.total_size}, {"active", f.active}, {"requested", f.requested},
                    {"pending_free", f.pending_free}, {"free", f.free}, {"largest_free", f.largest_free},
                    {"active_blocks", f.active_blocks},
                    {"free_blocks", f.free_blocks}, {"pool", pool(s)}, {"stream", s.stream}});
    reserved += s.total_size;
    active += f.active;
    requested += f.requested;
    pending_free += f.pending_free;
    free += f.free;
    largest_free = std::max(largest_free, f.largest_free);
  }
  return {{"device", device}, {"reserved", reserved}, {"active", active}, {"requested", requested},
          {"pending_free", pending_free}, {"free", free}, {"largest_free", largest_free}, {"segments", list}};
}

// The segments of a device_json(), --rows of them, as a table.
std::string segment_table(const nlohmann::json& d, std::size_t rows) {
  const auto bytes = [](const nlohmann::json& v) { return format_bytes(v.get<std::uint64_t>()); };
  std::string out = fmt::format("  {:>18}  {:>11}  {:>11}  {:>11}  {:>12}  {:>13}  {}\n", "address", "size", "active",
                                "free", "largest free", "blocks (a/f)", "pool");
  std::size_t shown = 0;
  for (const auto& s : d["segments"]) {
    if (shown++ == rows) break;
    out += fmt::format("  {:>#18x}  {:>11}  {:>11}  {:>11}  {:>12}  {:>13}  {}\n", s["address"].get<std::uint64_t>(),
                       bytes(s["total_size"]), bytes(s["active"]), bytes(s["free"]), bytes(s["largest_free"]),
                       fmt::format("{}/{}", s["active_blocks"].get<std::size_t>(), s["free_blocks"].get<std::size_t>()),
                       s["pool"].get<std::string>());
  }
  if (d["segments"].size() > rows) out += fmt::format("  ... {} more (--rows)\n", d["segments"].size() - rows);
  return out;
}

// A device_json() as text: its sums, then its segments.
std::string device_text(const nlohmann::json& d, std::size_t rows) {
  const auto bytes = [](const nlohmann::json& v) { return format_bytes(v.get<std::uint64_t>()); };
  const auto reserved = d["reserved"].get<std::uint64_t>(), active = d["active"].get<std::uint64_t>();
  const auto pending = d["pending_free"].get<std::uint64_t>();
  // Blocks the program freed that wait on a stream are active: the allocator cannot reuse them yet.
  const std::string pending_part = pending ? fmt::format("{} of them pending free; ", bytes(d["pending_free"])) : "";
  return fmt::format(
             "device {}: {} segments, reserved {}; active blocks {} ({}requested {}), free in segments {} (largest "
             "free block {}); fragmentation 1 - active/reserved = {:.3f}\n",
             d["device"].get<int>(), d["segments"].size(), bytes(d["reserved"]), bytes(d["active"]), pending_part,
             bytes(d["requested"]), bytes(d["free"]), bytes(d["largest_free"]), reserved ? 1.0 - double(active) / double(reserved) : 0.0) +
         segment_table(d, rows);
}


snapshot::Snapshot load_for_segments(const std::string& file, const MemoryArgs& args) {
  if (args.at != "end") throw std::invalid_argument("--segments shows the snapshot's end state: drop --at " + args.at);
  if (args.rank >= 0) throw std::invalid_argument("--segments reads a snapshot, which has no ranks: drop --rank");
  if (!snapshot::is_snapshot_file(file))
    throw std::invalid_argument(file + ": --segments reads PyTorch memory snapshots (.pickle), which list their segments");
  return snapshot::load_snapshot(file);
}

// Each device's segments (those of --device only), largest first.
std::map<int, std::vector<SegmentFigures>> by_device(const snapshot::Snapshot& snap, int device) {
  std::map<int, std::vector<SegmentFigures>> out;
  for (const snapshot::Segment& s : snap.segments)
    if (device < 0 || s.device == device) out[s.device].push_back(figures(s));
  for (auto& [d, segs] : out)
    std::sort(segs.begin(), segs.end(), [](const SegmentFigures& a, const SegmentFigures& b) {
      return a.segment->total_size != b.segment->total_size ? a.segment->total_size > b.segment->total_size
                                                            : a.segment->address < b.segment->address;
    });
  return out;
}

using SegmentKey = std::pair<std::uint64_t, std::uint64_t>;  // (address, total size): memory_viz compare's key

SegmentKey key(const SegmentFigures& f) { return {f.segment->address, f.segment->total_size}; }

// The segments of `from` whose (address, size) `other` lacks.
std::vector<SegmentFigures> only_in(const std::vector<SegmentFigures>& from, const std::vector<SegmentFigures>& other) {
  std::set<SegmentKey> keys;
  for (const SegmentFigures& f : other) keys.insert(key(f));
  std::vector<SegmentFigures> out;
  for (const SegmentFigures& f : from)
    if (!keys.count(key(f))) out.push_back(f);
  return out;
}

std::string compare_text(const nlohmann::json& d, std::size_t rows) {
  std::string out = fmt::format("device {}: {} segments in both\n", d["device"].get<int>(), d["in_both"].get<std::size_t>());
  for (const char* side : {"only_before", "only_after"}) {
    const nlohmann::json& s = d[side];
    out += fmt::format("  {}: {} segments, reserved {}, active blocks {}\n", side, s["segments"].size(),
                       format_bytes(s["reserved"].get<std::uint64_t>()), format_bytes(s["active"].get<std::uint64_t>()));
    if (!s["segments"].empty()) out += segment_table(s, rows);
  }
  return out;
}

}  // namespace

std::string segments_report(const std::string& file, const MemoryArgs& args) {
  const snapshot::Snapshot snap = load_for_segments(file, args);
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& [device, segs] : by_device(snap, args.device)) devices.push_back(device_json(device, segs));
  if (args.json) return json_text(nlohmann::json{{"file", file}, {"devices", devices}}, 1) + "\n";
  std::string out = fmt::format("{}: segments at the end state\n", file);
  if (devices.empty()) out += args.device < 0 ? "  no segments\n" : fmt::format("  no segments on device {}\n", args.device);
  for (const auto& d : devices) out += device_text(d, args.rows);
  return out;
}

std::string segments_compare_report(const std::string& before, const std::string& after, const MemoryArgs& args) {
  const snapshot::Snapshot first = load_for_segments(before, args), second = load_for_segments(after, args);
  const auto a = by_device(first, args.device), b = by_device(second, args.device);  // they point into the snapshots
  std::set<int> devices;
  for (const auto* side : {&a, &b})
    for (const auto& [device, segs] : *side) devices.insert(device);
  const std::vector<SegmentFigures> none;
  const auto of = [&none](const std::map<int, std::vector<SegmentFigures>>& m, int device) -> const std::vector<SegmentFigures>& {
    const auto it = m.find(device);
    return it == m.end() ? none : it->second;
  };
  nlohmann::json list = nlohmann::json::array();
  for (int device : devices) {
    const auto& x = of(a, device);
    const auto& y = of(b, device);
    const auto gone = only_in(x, y), added = only_in(y, x);
    list.push_back({{"device", device}, {"in_both", x.size() - gone.size()}, {"only_before", device_json(device, gone)},
                    {"only_after", device_json(device, added)}});
  }
  if (args.json) return json_text(nlohmann::json{{"before", before}, {"after", after}, {"devices", list}}, 1) + "\n";
  std::string out = fmt::format("{} -> {}: segments (by address and size) only in one snapshot, at their end states\n",
                                before, after);
  if (list.empty()) out += "  no segments in either\n";
  for (const auto& d : list) out += compare_text(d, args.rows);
  return out;
}

}  // namespace memcomm::prof::tool
