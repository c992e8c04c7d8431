// The churn rule: segments PyTorch gave back to CUDA and then took again at the same size, which
// cost a cudaFree and a cudaMalloc (or an unmap and a map) each and saved nothing in the end.
//
// Note [Segment churn]: per device, in trace order, every segment_free (segment_unmap) puts its size
// in a pool of released sizes, and every later segment_alloc (segment_map) of a size in the pool
// takes the earliest such release out and counts one pair: had the cache kept that segment, both
// calls were avoidable. Frees match allocs and unmaps match maps (different calls). A release is
// never forgotten: a size taken again much later is still a segment the cache could have kept, as
// long as nothing else needed the memory meanwhile, which a trace cannot tell; the advice says both
// causes (torch.cuda.empty_cache() in the loop, or releases under memory pressure). Sizes must be
// equal: PyTorch rounds segment sizes (2 MiB, 20 MiB, 2 MiB multiples), so the same tensors come
// back at the same sizes. A round is a run of consecutive releases (one empty_cache call, one
// release before an OOM retry); the rule fires only when pairs come from kMinRounds rounds or more,
// because a single round (an empty_cache between training and evaluation) is paid once, while a
// repeating one is paid every step.
#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "snapshot_rules.hpp"

namespace memcomm::advise::detail {

namespace {

constexpr std::uint64_t kMinRounds = 2;

struct Release {
  std::int64_t time_us;
  std::uint64_t round;
};

bool is_release(prof::EventKind k) { return k == prof::EventKind::SegmentFree || k == prof::EventKind::SegmentUnmap; }
bool is_take(prof::EventKind k) { return k == prof::EventKind::SegmentAlloc || k == prof::EventKind::SegmentMap; }

void take_earliest(std::deque<Release>& q, const snapshot::Event& e, std::set<std::uint64_t>& rounds, Churn& c) {
  const Release r = q.front();
  q.pop_front();
  ++c.pairs;
  c.bytes += e.size;
  rounds.insert(r.round);
  if (r.time_us != snapshot::kNoTime && (c.first_us == snapshot::kNoTime || r.time_us < c.first_us)) c.first_us = r.time_us;
  if (e.has_time()) c.last_us = std::max(c.last_us, e.time_us);
}

}  // namespace

Churn count_churn(const std::vector<snapshot::Event>& events) {
  Churn c;
  std::map<std::pair<bool, std::uint64_t>, std::deque<Release>> released;  // (mapping?, size) -> releases
  std::set<std::uint64_t> rounds;
  std::uint64_t round = 0;
  bool in_round = false;
  for (const auto& e : events) {
    const bool mapping = e.kind == prof::EventKind::SegmentUnmap || e.kind == prof::EventKind::SegmentMap;
    if (is_release(e.kind)) {
      if (!in_round) ++round;
      released[{mapping, e.size}].push_back(Release{e.time_us, round});
    } else if (is_take(e.kind)) {
      auto it = released.find({mapping, e.size});
      if (it != released.end() && !it->second.empty()) take_earliest(it->second, e, rounds, c);
    }
    // Only allocator decisions end a round: block events between two releases keep it going.
    if (is_release(e.kind) || is_take(e.kind)) in_round = is_release(e.kind);
  }
  c.rounds = rounds.size();
  return c;
}

namespace {
// The calls have a price in memory: select_n's releases held its peak at 20.97 GiB, where PyTorch's
// allocator keeping its cache reaches 28.73 GiB (the replay); the advice said nothing of it.
void say_what_keeping_costs(const snapshot::Snapshot& snap, Advice& adv) {
  const CacheKept k = peak_with_cache_kept(snap);
  if (k.recorded == 0 || k.kept <= k.recorded) return;
  adv.change += fmt::format("; kept, the cache would reserve up to {} where the run's releases held it to {} (replayed): "
                            "keep it only where the memory allows",
                            format_bytes(k.kept), format_bytes(k.recorded));
}
}  // namespace

void churn_rule(const snapshot::Snapshot& snap, bool replay, std::vector<Advice>& out) {
  // memcomm's allocator gives pages back by its own page budget, not at empty_cache(): nothing in the
  // script makes those releases, and the advice named a call the script never made.
  if (snap.settings.memcomm) return;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    const Churn c = count_churn(snap.device_traces[d]);
    if (c.rounds < kMinRounds) continue;
    Advice adv;
    adv.topic = Topic::Churn;
    adv.change = "keep the cache: remove torch.cuda.empty_cache() from the loop (or, if the releases come from memory "
                 "pressure, free memory elsewhere) so PyTorch stops giving segments back and taking them again";
    adv.evidence = fmt::format("device {}: {} segments released and taken again at the same size ({} re-allocated) "
                               "over {} release rounds",
                               d, c.pairs, format_bytes(c.bytes), c.rounds);
    if (c.first_us != snapshot::kNoTime && c.last_us >= c.first_us)
      adv.evidence += fmt::format(", within {:.3f} s", double(c.last_us - c.first_us) / 1e6);
    adv.saving = double(2 * c.pairs);  // a release and a take per pair
    adv.saving_unit = "calls";
    if (replay) say_what_keeping_costs(snap, adv);
    out.push_back(adv);
  }
}

}  // namespace memcomm::advise::detail
