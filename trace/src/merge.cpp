// write_merged: one string table for all ranks, then each rank's events in chunks.
#include "memcomm/trace/merge.hpp"

#include "memcomm/trace/string_table.hpp"

namespace memcomm::prof {

void remap_strings(Event& e, const std::vector<StringId>& map) {
  auto re = [&](StringId id) { return id < map.size() ? map[id] : kNoString; };
  switch (family_of(e.kind)) {
    case EventFamily::Compute:
      if (e.kind == EventKind::Kernel || e.kind == EventKind::Launch || e.kind == EventKind::Sync) {
        auto c = e.as<ComputeEvent>();
        c.arg = re(c.arg);
        e = Event::from(c);
      }
      break;
    case EventFamily::Range: {
      auto r = e.as<RangeEvent>();
      r.name = re(r.name);
      e = Event::from(r);
      break;
    }
    case EventFamily::Counter: {
      auto c = e.as<CounterEvent>();
      c.name = re(c.name);
      e = Event::from(c);
      break;
    }
    case EventFamily::Metadata:
      if (e.kind == EventKind::Meta) {
        auto m = e.as<MetaEvent>();
        m.str = re(m.str);
        e = Event::from(m);
      }
      break;
    default: break;
  }
}

MergeStats write_merged(const TraceSet& set, const std::string& path, const WriterOptions& base) {
  WriterOptions o = base;
  o.merged = true;
  o.rank = kUnknownRank;
  uint32_t world = 0;
  for (const RankTrace& r : set.ranks) world = std::max(world, r.world_size);
  o.world_size = world;
  TraceWriter w(path, o);
  StringTable table;
  StringId exported = 0;
  std::vector<StringDef> defs;
  std::vector<Event> buf;
  MergeStats st;
  constexpr size_t kChunk = 1 << 16;
  for (const RankTrace& r : set.ranks) {
    std::vector<StringId> map(r.strings.size(), kNoString);
    for (size_t i = 1; i < r.strings.size(); ++i) map[i] = table.intern(r.strings[i]);
    defs.clear();
    exported = table.export_since(exported, defs);
    for (size_t i = 0; i < r.events.size(); i += kChunk) {
      const size_t n = std::min(kChunk, r.events.size() - i);
      buf.assign(r.events.begin() + long(i), r.events.begin() + long(i + n));
      for (Event& e : buf) remap_strings(e, map);
      w.write_chunk(i == 0 ? defs : std::vector<StringDef>{}, buf, r.rank);
    }
    if (r.events.empty() && !defs.empty()) w.write_chunk(defs, {}, r.rank);
    ++st.ranks;
    st.events += r.events.size();
  }
  w.close();
  st.chunks = w.chunks_written();
  st.bytes = w.bytes_written();
  return st;
}

}  // namespace memcomm::prof
