// `memcomm-trace info`: counts per kind, duration, ranks, drops and recovery, per file.
#include "trace_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>

#include "memcomm/trace/trace_reader.hpp"

namespace memcomm::prof::tool {

bool print_info(const std::vector<std::string>& files, bool json) {
  bool ok = true;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& path : files) {
    try {
      TraceReader r(path);
      std::array<uint64_t, 256> counts{};
      std::map<uint32_t, uint64_t> per_rank;
      int64_t t_min = INT64_MAX, t_max = INT64_MIN;
      uint64_t drops = 0;
      std::map<uint32_t, std::string> hosts;
      ChunkView c;
      while (r.next(c)) {
        per_rank[c.rank] += c.count;
        for (const Event& e : c) {
          ++counts[uint8_t(e.kind)];
          t_min = std::min(t_min, e.ts);
          int64_t end = e.ts;
          if (family_of(e.kind) == EventFamily::Compute) end += e.as<ComputeEvent>().dur_ns;
          t_max = std::max(t_max, end);
          if (e.kind == EventKind::Drops) drops += e.as<DropEvent>().count;
          if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::Host)
            hosts[c.rank] = std::string(r.string(e.as<MetaEvent>().str));
        }
      }
      const RecoveryInfo& rec = r.recovery();
      const double dur_s = t_max > t_min ? double(t_max - t_min) / 1e9 : 0.0;
      nlohmann::json j = {{"file", path},
                          {"format_version", r.header().format_version},
                          {"merged", r.merged()},
                          {"world_size", r.header().world_size},
                          {"chunks", rec.chunks},
                          {"events", rec.events},
                          {"bytes", rec.file_bytes},
                          {"bytes_per_event", rec.events ? double(rec.file_bytes) / double(rec.events) : 0.0},
                          {"duration_s", dur_s},
                          {"drops", drops},
                          {"truncated", rec.truncated},
                          {"truncated_bytes", rec.truncated_bytes},
                          {"strings", std::count_if(r.strings().begin(), r.strings().end(),
                                                    [](const std::string& x) { return !x.empty(); })}};
      nlohmann::json ranks = nlohmann::json::array();
      for (auto& [rank, n] : per_rank)
        ranks.push_back({{"rank", rank == kUnknownRank ? -1 : int64_t(rank)}, {"events", n}, {"host", hosts[rank]}});
      j["ranks"] = ranks;
      nlohmann::json kinds = nlohmann::json::object();
      for (int k = 0; k < 256; ++k)
        if (counts[size_t(k)]) kinds[kind_name(EventKind(k))] = counts[size_t(k)];
      j["kinds"] = kinds;
      if (json) {
        all.push_back(j);
        continue;
      }
      fmt::print("{}\n", path);
      fmt::print("  format v{}, {}; {} chunks, {} events, {} bytes ({:.2f} B/event on disk), {} strings\n",
                 r.header().format_version, r.merged() ? "merged" : "per-rank", rec.chunks, rec.events, rec.file_bytes,
                 j["bytes_per_event"].get<double>(), j["strings"].get<int64_t>());
      fmt::print("  duration {:.6f} s", dur_s);
      if (r.header().world_size) fmt::print(", world size {}", r.header().world_size);
      fmt::print("\n  ranks:");
      for (auto& [rank, n] : per_rank)
        fmt::print(" {}{} ({} events)", rank == kUnknownRank ? std::string("?") : std::to_string(rank),
                   hosts[rank].empty() ? "" : "@" + hosts[rank], n);
      fmt::print("\n  drops: {}\n", drops);
      if (rec.truncated)
        fmt::print("  recovered: {} complete chunks; {} trailing bytes ignored ({})\n", rec.chunks, rec.truncated_bytes,
                   rec.detail);
      else
        fmt::print("  recovered: complete file (no truncated chunk)\n");
      fmt::print("  events per kind:\n");
      for (int k = 0; k < 256; ++k)
        if (counts[size_t(k)])
          fmt::print("    {:<15} {:>12}  ({})\n", kind_name(EventKind(k)), counts[size_t(k)],
                     family_name(family_of(EventKind(k))));
    } catch (const TraceError& e) {
      fmt::print(stderr, "memcomm-trace info: {}\n", e.what());
      ok = false;
    }
  }
  if (json) fmt::print("{}\n", all.dump(2));
  return ok;
}

}  // namespace memcomm::prof::tool
