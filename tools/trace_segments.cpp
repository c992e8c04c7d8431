// See trace_segments.hpp. Per device: the segments' reserved bytes, the bytes their active blocks
// span (allocated or freed and pending on a stream), what the user asked for of those, and the free
// bytes (inactive blocks) with the largest free block, which bounds the largest request the device's
// cache could serve without a new segment. Segments are listed largest first, --rows of them.
#include "trace_segments.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/json_output.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::prof::tool {
namespace {

struct SegmentFigures {
  const snapshot::Segment* segment = nullptr;
  std::uint64_t active = 0, requested = 0, free = 0, largest_free = 0;
  std::size_t active_blocks = 0, free_blocks = 0;
};

SegmentFigures figures(const snapshot::Segment& s) {
  SegmentFigures f;
  f.segment = &s;
  for (const snapshot::Block& b : s.blocks) {
    if (b.is_active()) {
      f.active += b.size;
      f.requested += b.requested_size;
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
  std::uint64_t reserved = 0, active = 0, requested = 0, free = 0, largest_free = 0;
  for (const SegmentFigures& f : segs) {
    const snapshot::Segment& s = *f.segment;
    list.push_back({{"address", s.address}, {"total_size", s.total_size}, {"active", f.active}, {"requested", f.requested},
                    {"free", f.free}, {"largest_free", f.largest_free}, {"active_blocks", f.active_blocks},
                    {"free_blocks", f.free_blocks}, {"pool", pool(s)}, {"stream", s.stream}});
    reserved += s.total_size;
    active += f.active;
    requested += f.requested;
    free += f.free;
    largest_free = std::max(largest_free, f.largest_free);
  }
  return {{"device", device}, {"reserved", reserved}, {"active", active}, {"requested", requested},
          {"free", free}, {"largest_free", largest_free}, {"segments", list}};
}

std::string device_text(const nlohmann::json& d, std::size_t rows) {
  const auto bytes = [](const nlohmann::json& v) { return format_bytes(v.get<std::uint64_t>()); };
  const auto reserved = d["reserved"].get<std::uint64_t>(), active = d["active"].get<std::uint64_t>();
  std::string out = fmt::format(
      "device {}: {} segments, reserved {}; active blocks {} (requested {}), free in segments {} (largest free block "
      "{}); fragmentation 1 - active/reserved = {:.3f}\n",
      d["device"].get<int>(), d["segments"].size(), bytes(d["reserved"]), bytes(d["active"]), bytes(d["requested"]),
      bytes(d["free"]), bytes(d["largest_free"]), reserved ? 1.0 - double(active) / double(reserved) : 0.0);
  out += fmt::format("  {:>18}  {:>11}  {:>11}  {:>11}  {:>12}  {:>13}  {}\n", "address", "size", "active", "free",
                     "largest free", "blocks (a/f)", "pool");
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

}  // namespace

std::string segments_report(const std::string& file, const MemoryArgs& args) {
  if (args.at != "end") throw std::invalid_argument("--segments shows the snapshot's end state: drop --at " + args.at);
  if (args.rank >= 0) throw std::invalid_argument("--segments reads a snapshot, which has no ranks: drop --rank");
  if (!snapshot::is_snapshot_file(file))
    throw std::invalid_argument(file + ": --segments reads PyTorch memory snapshots (.pickle), which list their segments");
  const snapshot::Snapshot snap = snapshot::load_snapshot(file);
  std::map<int, std::vector<SegmentFigures>> by_device;
  for (const snapshot::Segment& s : snap.segments)
    if (args.device < 0 || s.device == args.device) by_device[s.device].push_back(figures(s));
  nlohmann::json devices = nlohmann::json::array();
  for (auto& [device, segs] : by_device) {
    std::sort(segs.begin(), segs.end(), [](const SegmentFigures& a, const SegmentFigures& b) {
      return a.segment->total_size != b.segment->total_size ? a.segment->total_size > b.segment->total_size
                                                            : a.segment->address < b.segment->address;
    });
    devices.push_back(device_json(device, segs));
  }
  if (args.json) return json_text(nlohmann::json{{"file", file}, {"devices", devices}}, 1) + "\n";
  std::string out = fmt::format("{}: segments at the end state\n", file);
  if (devices.empty()) out += args.device < 0 ? "  no segments\n" : fmt::format("  no segments on device {}\n", args.device);
  for (const auto& d : devices) out += device_text(d, args.rows);
  return out;
}

}  // namespace memcomm::prof::tool
