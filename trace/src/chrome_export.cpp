// Chrome/Perfetto JSON writer; layout documented in chrome_export.hpp. Streams with fmt so that
// exports of tens of millions of events need no DOM.
#include "memcomm/trace/chrome_export.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memcomm/trace/analysis.hpp"

namespace memcomm::prof {

namespace {

constexpr int64_t kStreamTid = 100000;
constexpr int64_t kCommTid = 200000;

// The JSON string body of `s`. Names are mostly printable ASCII, returned as they are; anything else
// goes through nlohmann's writer, which escapes and writes invalid UTF-8 as U+FFFD.
std::string escape(std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x80 && c != '"' && c != '\\';
  });
  if (plain) return std::string(s);
  const std::string quoted =
      nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

// Lanes for collectives that may overlap: each goes to the first of its communicator's lanes whose
// last slice has ended (greedy interval partitioning, in the order they begin).
class CollectiveLanes {
 public:
  int64_t place(uint8_t comm, int64_t begin, int64_t end) {
    auto& ends = ends_[comm];
    std::size_t k = 0;
    while (k < ends.size() && ends[k] > begin) ++k;
    if (k == ends.size()) ends.push_back(end); else ends[k] = end;
    return kCommTid + int64_t(k) * 256 + comm;
  }

 private:
  std::map<uint8_t, std::vector<int64_t>> ends_;  // per communicator: each lane's last end
};

class Writer {
 public:
  Writer(std::FILE* f, int64_t t0) : f_(f), t0_(t0) {}
  // Microseconds with ns precision.
  std::string us(int64_t ns) const {
    const int64_t d = ns - t0_;
    return fmt::format("{}{}.{:03}", d < 0 ? "-" : "", std::abs(d) / 1000, std::abs(d) % 1000);
  }
  void raw(const std::string& s) {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    std::fputs(s.c_str(), f_);
  }
  std::FILE* f_;
  int64_t t0_;
  bool first_ = true;
};

int64_t stream_tid(const ComputeEvent& c) { return kStreamTid + int64_t(c.device == kHostDevice ? 255 : c.device) * 256 + c.stream; }

// One export: each rank's sections in turn (its process and lane names, ranges, compute spans and
// launch flows, collectives, memory and counters), then the flows between matching collectives.
class ChromeExport {
 public:
  ChromeExport(std::FILE* out, int64_t t0) : w_(out, t0), t0_(t0) {}

  void rank(const RankTrace& r) {
    const int64_t pid = r.rank == kUnknownRank ? 999999 : int64_t(r.rank);
    const std::vector<PlacedCollective> placed = place_collectives(r);
    process_and_lanes(r, pid, placed);
    ranges(r, pid);
    compute(r, pid);
    collectives(pid, placed);
    memory_and_counters(r, pid);
  }

  // Cross-rank flows between matching collectives, in the order they began.
  void collective_flows() {
    for (auto& [key, slices] : coll_slices_) {
      std::stable_sort(slices.begin(), slices.end(), [](const CollSlice& x, const CollSlice& y) { return x.begin < y.begin; });
      for (size_t i = 0; i + 1 < slices.size(); ++i) {
        const CollSlice& a = slices[i];
        const CollSlice& b = slices[i + 1];
        w_.raw(fmt::format(R"({{"ph":"s","cat":"collective","name":"match","id":{},"pid":{},"tid":{},"ts":{}}})", flow_id_,
                           a.pid, a.tid, w_.us(a.begin)));
        w_.raw(fmt::format(R"({{"ph":"f","bp":"e","cat":"collective","name":"match","id":{},"pid":{},"tid":{},"ts":{}}})",
                           flow_id_, b.pid, b.tid, w_.us(b.begin)));
        ++flow_id_;
        ++st_.flows;
      }
    }
  }

  const ChromeExportStats& stats() const { return st_; }

 private:
  // A collective and the lane it goes on.
  struct PlacedCollective {
    CollectiveOnRank c;
    int64_t tid;
  };

  static std::vector<PlacedCollective> place_collectives(const RankTrace& r) {
    std::vector<PlacedCollective> out;
    for (const CollectiveOnRank& c : collectives_of(r)) out.push_back({c, 0});
    const auto begin = [](const CollectiveOnRank& c) { return c.start >= 0 ? c.start : c.enqueue; };
    std::stable_sort(out.begin(), out.end(), [&](const PlacedCollective& x, const PlacedCollective& y) {
      return begin(x.c) < begin(y.c);
    });
    CollectiveLanes lanes;
    for (PlacedCollective& p : out) {
      const int64_t b = begin(p.c);  // one with no slice (no start, or an end before it) holds no lane
      p.tid = b < 0 || p.c.end < b ? kCommTid + p.c.comm : lanes.place(p.c.comm, b, p.c.end);
    }
    return out;
  }

  void process_and_lanes(const RankTrace& r, int64_t pid, const std::vector<PlacedCollective>& placed) {
    w_.raw(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"rank {}{}"}}}})", pid,
                       r.rank == kUnknownRank ? std::string("?") : std::to_string(r.rank),
                       r.host.empty() ? "" : " (" + escape(r.host) + ")"));
    w_.raw(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", pid, pid));
    std::map<int64_t, std::string> lanes;
    std::map<uint8_t, std::string_view> stream_names;  // by stream index: the source's stream ids
    for (const Event& e : r.events)
      if (e.kind == EventKind::Meta && e.as<MetaEvent>().key == MetaKey::StreamName)
        stream_names[uint8_t(e.as<MetaEvent>().thread)] = r.name(e.as<MetaEvent>().str);
    for (const Event& e : r.events) {
      if (e.kind == EventKind::Meta) {
        const auto m = e.as<MetaEvent>();
        if (m.key == MetaKey::ThreadName)  // with the OS thread id where the source recorded one
          lanes[m.thread] = std::string(r.name(m.str)) + (m.value ? " (" + std::to_string(m.value) + ")" : "");
      } else if (family_of(e.kind) == EventFamily::Compute && !e.as<ComputeEvent>().on_host(e.kind)) {
        const auto c = e.as<ComputeEvent>();
        const auto named = stream_names.find(c.stream);
        lanes.emplace(stream_tid(c), named != stream_names.end() && !named->second.empty()
                                         ? std::string(named->second)
                                         : fmt::format("GPU {} stream {}", int(c.device), int(c.stream)));
      }
    }
    for (const PlacedCollective& p : placed) {
      const int64_t overlap = (p.tid - kCommTid) / 256;
      lanes.emplace(p.tid, overlap == 0 ? fmt::format("collectives (comm {})", int(p.c.comm))
                                        : fmt::format("collectives (comm {}, overlapping {})", int(p.c.comm), overlap));
    }
    for (auto& [tid, name] : lanes)
      w_.raw(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", pid, tid,
                         escape(name)));
  }

  void ranges(const RankTrace& r, int64_t pid) {
    for (const RangeSpan& rs : pair_ranges(r)) {
      const std::string name = rs.name ? escape(r.name(rs.name)) : std::string(phase_name(rs.phase));
      w_.raw(fmt::format(R"({{"ph":"X","cat":"phase","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"phase":"{}","id":{}{}}}}})",
                         name, pid, rs.thread, w_.us(rs.begin), w_.us(t0_ + (rs.end - rs.begin)), phase_name(rs.phase),
                         rs.id, rs.closed ? "" : ",\"unclosed\":true"));
      ++st_.slices;
    }
  }

  // Compute spans, launches and the flows from a launch to its span.
  void compute(const RankTrace& r, int64_t pid) {
    std::unordered_map<uint32_t, ComputeEvent> launches;
    for (const Event& e : r.events)
      if (e.kind == EventKind::Launch && e.as<ComputeEvent>().corr != 0) launches[e.as<ComputeEvent>().corr] = e.as<ComputeEvent>();
    for (const Event& e : r.events) {
      if (family_of(e.kind) != EventFamily::Compute) continue;
      const auto c = e.as<ComputeEvent>();
      const bool host = c.on_host(e.kind);
      const int64_t tid = host ? int64_t(c.thread()) : stream_tid(c);
      std::string name, args;
      if (e.kind == EventKind::Memcpy) {
        name = fmt::format("memcpy {}", copy_kind_name(CopyKind(c.sub)));
        args = fmt::format(R"("bytes":{},"corr":{})", decode_bytes32(c.arg), c.corr);
      } else if (e.kind == EventKind::Memset) {
        name = "memset";
        args = fmt::format(R"("bytes":{},"corr":{})", decode_bytes32(c.arg), c.corr);
      } else {
        name = escape(r.name(c.arg));
        if (name.empty()) name = kind_name(e.kind);
        args = fmt::format(R"("corr":{}{})", c.corr, e.kind == EventKind::Kernel && c.sub == 1 ? ",\"communication\":true" : "");
      }
      w_.raw(fmt::format(R"({{"ph":"X","cat":"{}","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}}}}})",
                         kind_name(e.kind), name, pid, tid, w_.us(c.ts), w_.us(t0_ + c.duration()), args));
      ++st_.slices;
      if (host || c.corr == 0) continue;
      auto it = launches.find(c.corr);
      if (it == launches.end()) continue;
      const ComputeEvent& l = it->second;
      w_.raw(fmt::format(R"({{"ph":"s","cat":"launch","name":"launch","id":{},"pid":{},"tid":{},"ts":{}}})", flow_id_, pid,
                         l.thread(), w_.us(l.ts)));
      w_.raw(fmt::format(R"({{"ph":"f","bp":"e","cat":"launch","name":"launch","id":{},"pid":{},"tid":{},"ts":{}}})",
                         flow_id_, pid, tid, w_.us(c.ts)));
      ++flow_id_;
      ++st_.flows;
    }
  }

  void collectives(int64_t pid, const std::vector<PlacedCollective>& placed) {
    for (const auto& [c, tid] : placed) {
      const int64_t b = c.start >= 0 ? c.start : c.enqueue;
      if (c.enqueue >= 0) {
        w_.raw(fmt::format(R"({{"ph":"i","s":"t","cat":"collective","name":"enqueue {} #{}","pid":{},"tid":{},"ts":{}}})",
                           coll_op_name(c.op), c.seq, pid, tid, w_.us(c.enqueue)));
        ++st_.instants;
      }
      if (b < 0 || c.end < b) continue;
      w_.raw(fmt::format(R"({{"ph":"X","cat":"collective","name":"{}","pid":{},"tid":{},"ts":{},"dur":{},"args":{{"seq":{},"bytes":{},"dtype":"{}","bucket":{},"comm":{}}}}})",
                         coll_op_name(c.op), pid, tid, w_.us(b), w_.us(t0_ + (c.end - b)), c.seq, c.bytes, dtype_name(c.dtype),
                         c.bucket == kNoBucket ? -1 : int(c.bucket), c.comm_key));
      ++st_.slices;
      coll_slices_[{c.comm_key, c.seq}].push_back({pid, tid, b, c.end});
    }
  }

  void memory_and_counters(const RankTrace& r, int64_t pid) {
    for (const MemoryPoint& p : memory_series(r)) {
      w_.raw(fmt::format(R"({{"ph":"C","name":"memory","pid":{},"ts":{},"args":{{"allocated":{},"reserved":{},"active":{}}}}})",
                         pid, w_.us(p.ts), p.allocated, p.reserved, p.active));
      w_.raw(fmt::format(R"({{"ph":"C","name":"fragmentation","pid":{},"ts":{},"args":{{"fragmentation":{:.4f}}}}})", pid,
                         w_.us(p.ts), p.fragmentation));
      st_.counters += 2;
    }
    for (const Event& e : r.events) {
      if (e.kind == EventKind::Counter) {
        const auto c = e.as<CounterEvent>();
        const std::string name = escape(r.name(c.name));
        if (!std::isfinite(c.value)) {  // JSON has no NaN: a diverged loss is an instant saying so, not a 0
          w_.raw(fmt::format(R"({{"ph":"i","s":"p","cat":"counter","name":"{} = {}","pid":{},"tid":0,"ts":{}}})",
                             name.empty() ? "counter" : name, c.value, pid, w_.us(c.ts)));
          ++st_.instants;
          continue;
        }
        w_.raw(fmt::format(R"({{"ph":"C","name":"{}","pid":{},"ts":{},"args":{{"{}":{}}}}})", name.empty() ? "counter" : name,
                           pid, w_.us(c.ts), name.empty() ? "value" : name, c.value));
        ++st_.counters;
      } else if (e.kind == EventKind::Oom) {
        const auto o = e.as<OomEvent>();
        w_.raw(fmt::format(R"({{"ph":"i","s":"p","cat":"memory","name":"OOM","pid":{},"tid":0,"ts":{},"args":{{"requested":{},"device":{}}}}})",
                           pid, w_.us(o.ts), o.requested, int(o.device)));
        ++st_.instants;
      } else if (e.kind == EventKind::Drops) {
        const auto d = e.as<DropEvent>();
        w_.raw(fmt::format(R"({{"ph":"i","s":"t","cat":"profiler","name":"dropped {} events","pid":{},"tid":{},"ts":{}}})",
                           d.count, pid, d.thread, w_.us(d.ts)));
        ++st_.instants;
      }
    }
  }

  // A matched collective's slice on one rank, for the cross-rank flows.
  struct CollSlice {
    int64_t pid, tid, begin, end;
  };
  Writer w_;
  int64_t t0_;
  ChromeExportStats st_;
  std::map<std::pair<uint64_t, uint32_t>, std::vector<CollSlice>> coll_slices_;  // (comm_key, seq) -> per rank
  uint64_t flow_id_ = 1;
};

}  // namespace

namespace {
// The export to `out`; a write error names `destination`.
ChromeExportStats export_to(const TraceSet& set, std::FILE* out, const std::function<void(double)>& progress,
                            const std::string& destination) {
  int64_t t0 = INT64_MAX;
  for (const RankTrace& r : set.ranks)
    if (!r.events.empty()) t0 = std::min(t0, r.events.front().ts);
  if (t0 == INT64_MAX) t0 = 0;
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", out);
  ChromeExport x(out, t0);
  for (size_t i = 0; i < set.ranks.size(); ++i) {
    x.rank(set.ranks[i]);
    if (progress) progress(double(i + 1) / double(set.ranks.size()));
  }
  x.collective_flows();
  std::fprintf(out, "\n],\"otherData\":{\"producer\":\"%s\",\"t0_ns\":%lld}}\n", kChromeExportProducer, (long long)t0);
  if (std::ferror(out)) throw TraceError(fmt::format("writing {} failed: {}", destination, std::strerror(errno)));
  return x.stats();
}
}  // namespace

ChromeExportStats export_chrome(const TraceSet& set, std::FILE* out, const std::function<void(double)>& progress) {
  return export_to(set, out, progress, "the chrome trace");
}

ChromeExportStats export_chrome(const TraceSet& set, const std::string& path, const std::function<void(double)>& progress) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw TraceError(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
  ChromeExportStats st;
  try {
    st = export_to(set, f, progress, "'" + path + "'");
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) throw TraceError(fmt::format("writing '{}' failed: {}", path, std::strerror(errno)));
  return st;
}

}  // namespace memcomm::prof
