// The snapshot advisor's entry points and its policy rule: the snapshot's requests (rebuilt as
// memcomm-replay does, Note [Rebuilding requests]) replayed under PyTorch's allocator as recorded
// (its expandable_segments setting), with the other setting, and under memcomm's allocator. The
// saving is the best policy's peak reserved below the recorded setting's, summed over devices, and
// measured against the smaller of that setting's replayed peak and the peak PyTorch recorded: the
// replay starts from an empty cache and never calls empty_cache(), so either can be the higher,
// and the larger would overclaim. Below 5% of it no policy change is worth advising (rounding and
// page granularity remain). A snapshot whose trace allocates nothing (an end state alone, or a trace
// of frees) gets no policy advice: its replay packs the live blocks in an order the run never had,
// and what it "saves" is the cache PyTorch kept from an earlier peak. A snapshot memcomm's allocator
// wrote is compared with memcomm's allocator, the policy it ran; one of the host's memory gets no
// policy advice (PyTorch has no caching allocator there to switch to). memcomm's allocator serves no
// private pool (a CUDA graph's, a MemPool's), so a run that had one is never told to use it.
#include "memcomm/advisor/advise_snapshot.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "memcomm/replay/replayer.hpp"
#include "memcomm/replay/requests.hpp"
#include "snapshot_rules.hpp"

namespace memcomm::advise {

namespace detail {

namespace {

constexpr double kMinSavingShare = 0.05;
const std::vector<std::string> kPolicies = {"pytorch", "pytorch-expandable", "memcomm"};

struct PolicyPeaks {
  std::map<std::string, std::uint64_t> reserved;  // per policy: peak reserved, summed over devices
  std::uint64_t live = 0, recorded = 0, requests = 0;
  std::uint64_t traced_allocs = 0;  // allocations the trace made (pre-trace blocks not counted)
  std::size_t devices = 0;
};

PolicyPeaks replay_peaks(const snapshot::Snapshot& snap) {
  const replay::TraceRequests trace = replay::build_requests(snap);
  std::vector<std::string> names = kPolicies;
  names.push_back(replay::kRecordedPolicy);
  PolicyPeaks p;
  p.devices = trace.devices.size();
  for (const replay::DeviceRequests& d : trace.devices) p.traced_allocs += d.traced_allocs();
  std::size_t recorded_devices = 0;
  for (const auto& r : replay::replay_all(trace, names, 0)) {
    if (r.policy == replay::kRecordedPolicy) {
      p.recorded += r.peak_reserved;
      ++recorded_devices;
      continue;
    }
    p.reserved[r.policy] += r.peak_reserved;
    if (r.policy == kPolicies.front()) p.live += r.peak_live, p.requests += r.requests;
  }
  // A device without a `recorded` row (Note [Segments that cannot hold the blocks] in replay's
  // requests.cpp) leaves no recorded peak to compare the whole file with.
  if (recorded_devices != p.devices) p.recorded = 0;
  return p;
}

// The policy the run used: memcomm's allocator marks its snapshots (settings.memcomm), PyTorch's
// says whether its segments expand.
std::string current_policy(const snapshot::Snapshot& snap) {
  if (snap.settings.memcomm) return "memcomm";
  return snap.expandable_segments() ? "pytorch-expandable" : "pytorch";
}

std::string policy_change(const std::string& best, const std::string& current) {
  const bool leave_memcomm = current == "memcomm";
  if (best == "pytorch-expandable")
    return leave_memcomm ? "use PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
                         : "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
  if (best == "memcomm") return "use memcomm's caching allocator (install_torch_cuda_allocator)";
  return leave_memcomm ? "use PyTorch's allocator without expandable segments"
                       : "use PyTorch's allocator without expandable segments (drop expandable_segments:True)";
}

std::string recorded_setting(const snapshot::Snapshot& snap) {
  if (snap.settings.memcomm) return "; recorded by memcomm's allocator";
  return snap.settings.present
             ? fmt::format("; recorded setting expandable_segments:{}", snap.settings.expandable_segments ? "True" : "False")
             : fmt::format("; expandable segments {} (no recorded setting: from its segments)",
                           snap.expandable_segments() ? "in use" : "not in use");
}

// The numbers behind the policy advice: every policy's replayed peak, the recorded setting and peak.
std::string policy_evidence(const snapshot::Snapshot& snap, const PolicyPeaks& p, const std::string& current,
                            std::uint64_t then) {
  std::string evidence = fmt::format("replaying the snapshot's {} requests on {} device(s) (peak live {}), peak reserved:",
                                     p.requests, p.devices, format_bytes(p.live));
  for (const auto& name : kPolicies) evidence += fmt::format(" {} {}", name, format_bytes(p.reserved.at(name)));
  evidence += recorded_setting(snap);
  if (p.recorded)
    evidence += fmt::format(", {} recorded a peak of {} (against it the saving is {})",
                            snap.settings.memcomm ? "it" : "PyTorch", format_bytes(p.recorded),
                            format_bytes(p.recorded > then ? p.recorded - then : 0));
  if (current != "pytorch")
    evidence += fmt::format("; against PyTorch's default the saving is {}",
                            format_bytes(p.reserved.at("pytorch") > then ? p.reserved.at("pytorch") - then : 0));
  return evidence;
}

}  // namespace

CacheKept peak_with_cache_kept(const snapshot::Snapshot& snap) {
  const PolicyPeaks p = replay_peaks(snap);
  const auto kept = p.reserved.find(current_policy(snap));
  if (p.recorded == 0 || kept == p.reserved.end()) return {};
  return {p.recorded, kept->second};
}

void snapshot_policy_rule(const snapshot::Snapshot& snap, std::vector<Advice>& out, std::vector<std::string>* notes) {
  if (snap.settings.host) {  // PyTorch's caching policies are its CUDA allocator's: none for the host
    if (notes)
      notes->push_back("a snapshot of the host's memory (memcomm's CPU allocator): PyTorch's allocator policies are "
                       "CUDA's, so none is advised; memcomm-replay compares them on its requests");
    return;
  }
  const PolicyPeaks p = replay_peaks(snap);
  if (p.reserved.empty()) {  // no device has an event or a segment
    if (notes) notes->push_back("it holds no segments and no trace events: there is no memory to advise on");
    return;
  }
  if (p.traced_allocs == 0) {      // no order to replay the live blocks in
    if (notes)
      notes->push_back(std::string("its trace allocates nothing (an end state only): the allocator policies were not "
                                   "compared; ") +
                       (snap.settings.memcomm ? "record the allocator's history with python -m memcomm --allocator "
                                                "DEVICE --history N (memcomm.use_allocator(..., history=N))"
                                              : "record the run with torch.cuda.memory._record_memory_history() "
                                                "before its first step"));
    return;
  }
  const std::string current = current_policy(snap);
  const bool private_pools = snap.has_private_pools();
  if (private_pools && notes)
    notes->push_back("its segments include private pools (CUDA graphs, torch.cuda.MemPool), which memcomm's allocator "
                     "does not serve: it is not advised, and the replay put those pools' blocks in the default pool");
  std::string best = current;
  for (const auto& name : kPolicies)
    if (p.reserved.at(name) < p.reserved.at(best) && !(private_pools && name == "memcomm")) best = name;
  const std::uint64_t now = p.reserved.at(current), then = p.reserved.at(best);
  const std::uint64_t baseline = p.recorded ? std::min(now, p.recorded) : now;
  if (best == current || then >= baseline || double(baseline - then) < kMinSavingShare * double(baseline)) return;
  Advice adv;
  adv.topic = Topic::Fragmentation;
  adv.saving_unit = "bytes";
  adv.saving = double(baseline - then);
  // Against the same figure as the saving: the run's recorded peak where it is below the replay's
  // (the run's own empty_cache calls, which the replay does not make).
  const std::string against = baseline < now ? format_bytes(baseline) + " (the run's recorded peak)" : format_bytes(now);
  adv.change = fmt::format("{}: {} would reserve {} instead of {}", policy_change(best, current), best,
                           format_bytes(then), against);
  adv.evidence = policy_evidence(snap, p, current, then);
  const std::uint64_t expandable = p.reserved.at("pytorch-expandable");
  if (best == "memcomm" && current == "pytorch" && double(now) - double(expandable) >= kMinSavingShare * double(now))
    adv.change += fmt::format("; staying on PyTorch's allocator, expandable_segments:True would reserve {}",
                              format_bytes(expandable));
  out.push_back(adv);
}

}  // namespace detail

std::vector<Advice> advise_snapshot(const snapshot::Snapshot& snap, const AdviseOptions& o,
                                    std::vector<std::string>* notes) {
  std::vector<Advice> out;
  if (o.replay) detail::snapshot_policy_rule(snap, out, notes);
  detail::churn_rule(snap, o.replay, out);
  detail::oom_rule(snap, out);
  return out;
}

std::vector<Advice> advise_snapshot(const std::string& path, const AdviseOptions& o, std::vector<std::string>* notes) {
  std::vector<std::string> mine;
  auto advice = advise_snapshot(snapshot::load_snapshot(path), o, &mine);
  // Beside other files' advice, each piece must say which snapshot it is about.
  const std::string name = std::filesystem::path(path).filename().string();
  for (auto& a : advice) a.evidence = name + ": " + a.evidence;
  if (notes)
    for (auto& n : mine) notes->push_back(name + ": " + n);
  return advice;
}

}  // namespace memcomm::advise
