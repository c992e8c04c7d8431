// `memcomm-trace info`: counts per kind, duration, ranks, drops and recovery, per file.
#include "trace_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>

#include "memcomm/trace/trace_reader.hpp"

namespace memcomm::prof::tool {

namespace {

// What one pass over a file's events finds.
struct FileCounts {
  std::array<uint64_t, 256> per_kind{};
  std::map<uint32_t, uint64_t> per_rank;
  std::map<uint32_t, std::string> hosts;
  int64_t t_min = INT64_MAX, t_max = INT64_MIN;
  uint64_t drops = 0;
};

FileCounts count_events(TraceReader& r) {
  FileCounts f;
  ChunkView c;
  while (r.next(c)) {
    f.per_rank[c.rank] += c.count;
    for (const Event& e : c) {
      ++f.per_kind[uint8_t(e.kind)];
      f.t_min = std::min(f.t_min, e.ts);
      int64_t end = e.ts;
      if (family_of(e.kind) == EventFamily::Compute) end += e.as<ComputeEvent>().dur_ns;
      f.t_max = std::max(f.t_max, end);
      if (e.kind == EventKind::Drops) f.drops += e.as<DropEvent>().count;
      if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::Host)
        f.hosts[c.rank] = std::string(r.string(e.as<MetaEvent>().str));
    }
  }
  return f;
}

nlohmann::json file_json(const std::string& path, const TraceReader& r, FileCounts& f) {
  const RecoveryInfo& rec = r.recovery();
  nlohmann::json j = {{"file", path},
                      {"format_version", r.header().format_version},
                      {"merged", r.merged()},
                      {"world_size", r.header().world_size},
                      {"chunks", rec.chunks},
                      {"events", rec.events},
                      {"bytes", rec.file_bytes},
                      {"bytes_per_event", rec.events ? double(rec.file_bytes) / double(rec.events) : 0.0},
                      {"duration_s", f.t_max > f.t_min ? double(f.t_max - f.t_min) / 1e9 : 0.0},
                      {"drops", f.drops},
                      {"truncated", rec.truncated},
                      {"truncated_bytes", rec.truncated_bytes},
                      {"strings", std::count_if(r.strings().begin(), r.strings().end(),
                                                [](const std::string& x) { return !x.empty(); })}};
  nlohmann::json ranks = nlohmann::json::array();
  for (auto& [rank, n] : f.per_rank)
    ranks.push_back({{"rank", rank == kUnknownRank ? -1 : int64_t(rank)}, {"events", n}, {"host", f.hosts[rank]}});
  j["ranks"] = ranks;
  nlohmann::json kinds = nlohmann::json::object();
  for (int k = 0; k < 256; ++k)
    if (f.per_kind[size_t(k)]) kinds[kind_name(EventKind(k))] = f.per_kind[size_t(k)];
  j["kinds"] = kinds;
  return j;
}

void print_text(const std::string& path, const TraceReader& r, FileCounts& f, const nlohmann::json& j) {
  const RecoveryInfo& rec = r.recovery();
  fmt::print("{}\n", path);
  fmt::print("  format v{}, {}; {} chunks, {} events, {} bytes ({:.2f} B/event on disk), {} strings\n",
             r.header().format_version, r.merged() ? "merged" : "per-rank", rec.chunks, rec.events, rec.file_bytes,
             j["bytes_per_event"].get<double>(), j["strings"].get<int64_t>());
  fmt::print("  duration {:.6f} s", j["duration_s"].get<double>());
  if (r.header().world_size) fmt::print(", world size {}", r.header().world_size);
  fmt::print("\n  ranks:");
  for (auto& [rank, n] : f.per_rank)
    fmt::print(" {}{} ({} events)", rank == kUnknownRank ? std::string("?") : std::to_string(rank),
               f.hosts[rank].empty() ? "" : "@" + f.hosts[rank], n);
  fmt::print("\n  drops: {}\n", f.drops);
  if (rec.truncated)
    fmt::print("  recovered: {} complete chunks; {} trailing bytes ignored ({})\n", rec.chunks, rec.truncated_bytes,
               rec.detail);
  else
    fmt::print("  recovered: complete file (no truncated chunk)\n");
  fmt::print("  events per kind:\n");
  for (int k = 0; k < 256; ++k)
    if (f.per_kind[size_t(k)])
      fmt::print("    {:<15} {:>12}  ({})\n", kind_name(EventKind(k)), f.per_kind[size_t(k)],
                 family_name(family_of(EventKind(k))));
}

}  // namespace

bool print_info(const std::vector<std::string>& files, bool json) {
  bool ok = true;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& path : files) {
    try {
      TraceReader r(path);
      FileCounts f = count_events(r);
      const nlohmann::json j = file_json(path, r, f);
      if (json) all.push_back(j);
      else print_text(path, r, f, j);
    } catch (const TraceError& e) {
      fmt::print(stderr, "memcomm-trace info: {}\n", e.what());
      ok = false;
    }
  }
  if (json) fmt::print("{}\n", all.dump(2));
  return ok;
}

}  // namespace memcomm::prof::tool
