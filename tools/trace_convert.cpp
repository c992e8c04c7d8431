// `memcomm-trace convert`: a loaded rank written back as a per-rank .mct file (trace_convert.hpp).
// The string table is written as it is, id for id, so no event needs its names remapped (merge
// needs that, having one table for all ranks); the events go in time order, so a copy cut short
// (Note [Crash safety]) still reads back as a prefix of the trace.
#include "trace_convert.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "memcomm/common/bytes.hpp"
#include "memcomm/trace/kineto.hpp"

namespace memcomm::prof::tool {

ConvertStats write_rank(const RankTrace& rank, const std::string& path, const WriterOptions& options,
                        size_t chunk_events) {
  WriterOptions o = options;
  o.rank = rank.rank;
  o.world_size = rank.world_size;
  o.merged = false;
  TraceWriter w(path, o);
  std::vector<StringDef> defs;
  for (size_t i = 1; i < rank.strings.size(); ++i)
    if (!rank.strings[i].empty()) defs.push_back({StringId(i), rank.strings[i]});
  const size_t n = rank.events.size();
  size_t done = 0;
  do {  // at least one chunk, so that the strings are written even without events
    const size_t take = std::min(chunk_events, n - done);
    if (done == 0) w.write_chunk(defs.data(), defs.size(), rank.events.data(), take);
    else w.write_chunk(nullptr, 0, rank.events.data() + done, take);
    done += take;
  } while (done < n);
  w.close();
  return ConvertStats{n, defs.size(), w.chunks_written(), w.bytes_written()};
}

std::string convert_summary(const std::string& in, const FileLoadInfo& info, const std::string& out,
                            const ConvertStats& st) {
  std::error_code ec;
  const uint64_t in_bytes = std::filesystem::file_size(in, ec);
  std::string s = fmt::format("wrote {}: {} events, {} strings, {} chunks, {} ({:.2f} B/event)\n", out, st.events,
                              st.strings, st.chunks, format_bytes(st.bytes),
                              st.events ? double(st.bytes) / double(st.events) : 0.0);
  if (ec || st.bytes == 0) return s;
  s += fmt::format("size: {} is {:.3f} x {} ({})", out, double(st.bytes) / double(in_bytes), in, format_bytes(in_bytes));
  if (info.kineto) {
    const uint64_t json = info.kineto->json_bytes;
    if (info.kineto->gzip && json) s += fmt::format(", {:.3f} x its uncompressed JSON ({})", double(st.bytes) / double(json),
                                                    format_bytes(json));
  }
  return s + "\n";
}

}  // namespace memcomm::prof::tool
