// The snapshot advisor's rules (internal to memcomm_advisor), one per file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/advisor/advise.hpp"
#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::advise::detail {

// advise_snapshot.cpp: the snapshot's requests replayed under each policy; `notes` (may be null)
// says why none were compared.
void snapshot_policy_rule(const snapshot::Snapshot& snap, std::vector<Advice>& out, std::vector<std::string>* notes);

// advise_snapshot.cpp: the peak the run recorded and the one its allocator's setting reaches when
// replayed, which never empties the cache: what keeping the cache costs. Zeros without a recorded peak.
struct CacheKept {
  std::uint64_t recorded = 0, kept = 0;
};
CacheKept peak_with_cache_kept(const snapshot::Snapshot& snap);

// snapshot_churn.cpp (Note [Segment churn]).
struct Churn {
  std::uint64_t pairs = 0;    // segment releases followed by a take of the same size
  std::uint64_t bytes = 0;    // bytes taken again
  std::uint64_t rounds = 0;   // release rounds (runs of releases) with at least one pair
  std::int64_t first_us = snapshot::kNoTime, last_us = snapshot::kNoTime;  // first release, last re-take
};
Churn count_churn(const std::vector<snapshot::Event>& events);
// `replay`: say what keeping the cache costs (peak_with_cache_kept), which replays the snapshot.
void churn_rule(const snapshot::Snapshot& snap, bool replay, std::vector<Advice>& out);

// snapshot_oom.cpp: one piece of advice per `oom` event.
void oom_rule(const snapshot::Snapshot& snap, std::vector<Advice>& out);

// oom_stack.cpp: the failed allocation's frames, innermost first, as memory_viz prints them.
std::string oom_stack_text(const snapshot::Snapshot& snap, std::uint32_t stack, std::size_t max_frames = 12);

}  // namespace memcomm::advise::detail
