// Merging ranks into one .mct file on one timeline (memcomm-trace merge).
#pragma once

#include <string>

#include "memcomm/trace/trace_set.hpp"
#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof {

// Rewrites the StringId fields of an event through `map` (old id -> new id; ids past its end
// become kNoString). Which fields hold names depends on the kind (event.hpp).
void remap_strings(Event& e, const std::vector<StringId>& map);

struct MergeStats {
  uint64_t ranks = 0, events = 0, chunks = 0, bytes = 0;
};

// Writes every rank of `set` (already on one timeline, see TraceSet::load) to `path` as a merged
// file: one global string table, chunks tagged with their rank. Throws TraceError.
MergeStats write_merged(const TraceSet& set, const std::string& path, const WriterOptions& base = {});

}  // namespace memcomm::prof
