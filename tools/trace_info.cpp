// `memcomm-trace info`: counts per kind, duration, ranks, drops and recovery, per file; memory events
// per device where a file holds several (CUPTI reports pinned host buffers beside the GPU's memory).
//
// An .mct file is read chunk by chunk (no full load). A torch.profiler trace is converted in full
// (read_kineto), then counted the same way; its KinetoInfo adds what the file held and what became
// of it (kineto_info_text: categories, generic ones kept, skipped events with their reasons, flows,
// communication kernels, [memory] events). A file cut short is described up to where it stops, with
// a warning on stderr as every subcommand gives.
#include "trace_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "input_warnings.hpp"
#include "memcomm/common/json_output.hpp"
#include "memcomm/trace/kineto.hpp"
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
  uint64_t strings = 0;  // non-empty strings in the file's table
  // Memory block and segment events per device (kHostDevice: host memory, such as the pinned
  // buffers CUPTI reports beside the GPU's): {block events, segment events}.
  std::map<uint8_t, std::array<uint64_t, 2>> memory_per_device;
  // The last WorldSize meta event: a rank that learned its world after its file was opened (a profile
  // started before its launcher set the world up) says so there, and the readers keep the last.
  std::optional<uint32_t> world_size;
};

std::string device_name(uint8_t device) { return device == kHostDevice ? "host" : "device " + std::to_string(device); }

void count_event(FileCounts& f, const Event& e, uint32_t rank, const std::vector<std::string>& strings) {
  ++f.per_rank[rank];
  ++f.per_kind[uint8_t(e.kind)];
  f.t_min = std::min(f.t_min, e.ts);
  f.t_max = std::max(f.t_max, event_end(e));
  if (e.kind == EventKind::Drops) f.drops += e.as<DropEvent>().count;
  if (is_mem_block_kind(e.kind))
    ++f.memory_per_device[e.as<MemBlockEvent>().device][is_segment_kind(e.kind) ? 1 : 0];
  if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::WorldSize)
    f.world_size = uint32_t(e.as<MetaEvent>().value);
  if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::Host) {
    const StringId id = e.as<MetaEvent>().str;
    f.hosts[rank] = id < strings.size() ? strings[id] : std::string();
  }
}

uint64_t non_empty(const std::vector<std::string>& strings) {
  return uint64_t(std::count_if(strings.begin(), strings.end(), [](const std::string& x) { return !x.empty(); }));
}

FileCounts count_events(TraceReader& r) {
  FileCounts f;
  ChunkView c;
  while (r.next(c))
    for (const Event& e : c) count_event(f, e, c.rank, r.strings());
  f.strings = non_empty(r.strings());
  return f;
}

// The parts every format shares: duration, drops, ranks, kinds.
void add_counts(nlohmann::json& j, const FileCounts& f) {
  j["duration_s"] = f.t_max > f.t_min ? double(f.t_max - f.t_min) / 1e9 : 0.0;
  j["drops"] = f.drops;
  j["strings"] = f.strings;
  nlohmann::json ranks = nlohmann::json::array();
  for (auto& [rank, n] : f.per_rank) {
    const auto host = f.hosts.find(rank);
    ranks.push_back({{"rank", rank == kUnknownRank ? -1 : int64_t(rank)},
                     {"events", n},
                     {"host", host == f.hosts.end() ? std::string() : host->second}});
  }
  j["ranks"] = ranks;
  nlohmann::json kinds = nlohmann::json::object();
  for (int k = 0; k < 256; ++k)
    if (f.per_kind[size_t(k)]) kinds[kind_name(EventKind(k))] = f.per_kind[size_t(k)];
  j["kinds"] = kinds;
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& [device, n] : f.memory_per_device)
    memory.push_back({{"device", device_name(device)}, {"block_events", n[0]}, {"segment_events", n[1]}});
  j["memory_by_device"] = memory;
}

// The world size a per-rank file ends with (its last WorldSize event, as TraceSet reads it); a merged
// file's header speaks for the merge.
uint32_t world_size(const TraceReader& r, const FileCounts& f) {
  return !r.merged() && f.world_size ? *f.world_size : r.header().world_size;
}

nlohmann::json mct_json(const std::string& path, const TraceReader& r, const FileCounts& f) {
  const RecoveryInfo& rec = r.recovery();
  nlohmann::json j = {{"file", path},
                      {"format", "mct"},
                      {"format_version", r.header().format_version},
                      {"merged", r.merged()},
                      {"world_size", world_size(r, f)},
                      {"chunks", rec.chunks},
                      {"events", rec.events},
                      {"bytes", rec.file_bytes},
                      {"bytes_per_event", rec.events ? double(rec.file_bytes) / double(rec.events) : 0.0},
                      {"truncated", rec.truncated},
                      {"truncated_bytes", rec.truncated_bytes}};
  add_counts(j, f);
  return j;
}

nlohmann::json kineto_json(const std::string& path, const KinetoTrace& k, const FileCounts& f) {
  const KinetoInfo& i = k.info;
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  nlohmann::json j = {{"file", path},
                      {"format", "torch.profiler"},
                      {"world_size", k.trace.world_size},
                      {"events", k.trace.events.size()},
                      {"bytes", ec ? 0 : uint64_t(bytes)},
                      {"truncated", i.truncated},
                      {"truncation", i.truncation}};
  j["kineto"] = {{"gzip", i.gzip},
                 {"json_bytes", i.json_bytes},
                 {"schema_version", i.schema_version},
                 {"trace_events", i.trace_events},
                 {"converted", i.converted},
                 {"categories", i.categories},
                 {"generic", i.generic},
                 {"skipped", i.skipped},
                 {"flows", i.flows},
                 {"clamped_ranges", i.clamped_ranges},
                 {"saturated_durations", i.saturated_durations},
                 {"comm_kernels", i.comm_kernels},
                 {"host_collectives", i.host_collectives},
                 {"data_waits", i.data_waits},
                 {"memory_events", i.memory_events},
                 {"memory_events_without_addr", i.memory_events_without_addr},
                 {"float_timestamps", i.float_timestamps},
                 {"display_time_unit", i.display_time_unit},
                 {"base_time_ns", i.base_time_ns},
                 {"truncated_at", i.truncated ? nlohmann::json(i.truncated_at) : nlohmann::json(nullptr)}};  // where it was cut
  add_counts(j, f);
  return j;
}

// Duration, world size, ranks, drops and kinds: the lines every format prints alike.
void print_counts(const FileCounts& f, const nlohmann::json& j, uint64_t world_size) {
  fmt::print("  duration {:.6f} s", j["duration_s"].get<double>());
  if (world_size) fmt::print(", world size {}", world_size);
  fmt::print("\n  ranks:");
  for (auto& [rank, n] : f.per_rank) {
    const auto host = f.hosts.find(rank);
    const bool named = host != f.hosts.end() && !host->second.empty();
    fmt::print(" {}{} ({} events)", rank == kUnknownRank ? std::string("?") : std::to_string(rank),
               named ? "@" + host->second : "", n);
  }
  fmt::print("\n  drops: {}\n", f.drops);
}

void print_kinds(const FileCounts& f) {
  fmt::print("  events per kind:\n");
  for (int k = 0; k < 256; ++k)
    if (f.per_kind[size_t(k)])
      fmt::print("    {:<15} {:>12}  ({})\n", kind_name(EventKind(k)), f.per_kind[size_t(k)],
                 family_name(family_of(EventKind(k))));
  if (f.memory_per_device.size() < 2) return;  // one device: the kinds above say it all
  fmt::print("  memory events by device:\n");
  for (const auto& [device, n] : f.memory_per_device)
    fmt::print("    {:<15} {:>12} block, {} segment\n", device_name(device), n[0], n[1]);
}

void print_mct(const std::string& path, const TraceReader& r, const FileCounts& f, const nlohmann::json& j) {
  const RecoveryInfo& rec = r.recovery();
  fmt::print("{}\n", path);
  fmt::print("  format v{}, {}; {} chunks, {} events, {} bytes ({:.2f} B/event on disk), {} strings\n",
             r.header().format_version, r.merged() ? "merged" : "per-rank", rec.chunks, rec.events, rec.file_bytes,
             j["bytes_per_event"].get<double>(), f.strings);
  print_counts(f, j, world_size(r, f));
  if (rec.truncated)
    fmt::print("  recovered: {} complete chunks; {} trailing bytes ignored ({})\n", rec.chunks, rec.truncated_bytes,
               rec.detail);
  else
    fmt::print("  recovered: complete file (no truncated chunk)\n");
  print_kinds(f);
}

void print_kineto(const std::string& path, const KinetoTrace& k, const FileCounts& f, const nlohmann::json& j) {
  fmt::print("{}\n", path);
  fmt::print("{}", kineto_info_text(k.info));
  fmt::print("  {} events, {} strings, {} bytes on disk\n", k.trace.events.size(), f.strings,
             j["bytes"].get<uint64_t>());
  print_counts(f, j, k.trace.world_size);
  print_kinds(f);
}

// One file: its JSON object (also printed as text unless `json`).
nlohmann::json describe(const std::string& path, bool json) {
  if (is_kineto_candidate(path)) {
    const KinetoTrace k = read_kineto(path);
    if (k.info.truncated) fmt::print(stderr, "memcomm-trace: warning: {}\n", k.info.truncation);
    warn_if_empty(path, k.trace.events.size(), true);
    FileCounts f;
    for (const Event& e : k.trace.events) count_event(f, e, k.trace.rank, k.trace.strings);
    f.strings = non_empty(k.trace.strings);
    nlohmann::json j = kineto_json(path, k, f);
    if (!json) print_kineto(path, k, f, j);
    return j;
  }
  TraceReader r(path);
  const FileCounts f = count_events(r);
  if (r.recovery().truncated) fmt::print(stderr, "memcomm-trace: warning: {}: {}\n", path, r.recovery().detail);
  warn_if_empty(path, r.recovery().events, false);
  nlohmann::json j = mct_json(path, r, f);
  if (!json) print_mct(path, r, f, j);
  return j;
}

}  // namespace

bool print_info(const std::vector<std::string>& files, bool json) {
  bool ok = true;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& path : files) {
    try {
      all.push_back(describe(path, json));
    } catch (const TraceError& e) {
      fmt::print(stderr, "memcomm-trace info: {}\n", e.what());
      ok = false;
    }
  }
  if (json) fmt::print("{}\n", json_text(all, 2));
  return ok;
}

}  // namespace memcomm::prof::tool
