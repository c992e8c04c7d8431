// The advisor: reads a trace's analysis and says what to change, each piece of advice with the
// numbers behind it. What `memcomm-trace advise` prints. PyTorch snapshots: advise_snapshot.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/trace_set.hpp"

namespace memcomm::advise {

// Oom and Churn come from PyTorch snapshots only (advise_snapshot.hpp).
enum class Topic { Fragmentation, Communication, DataWait, Headroom, Straggler, Oom, Churn };
const char* topic_name(Topic t);

struct Advice {
  Topic topic;
  std::string change;     // what to do, concretely (a flag, a policy)
  std::string evidence;   // the measured numbers that call for it
  double saving = 0;      // expected saving, in `saving_unit`
  std::string saving_unit;  // "bytes", "ms/step" or "calls" (segment calls avoided)
  bool at_most = false;   // the saving is the whole cost the change attacks, a bound: measured, more loader
                          // workers won back half a data wait, and compression none of a wait for a slower rank
};

// The saving as the advice says it ("at most 3.2 ms per step", "1.5 GiB"): the text and the viewer's.
std::string saving_text(const Advice& a);

struct AdviseOptions {
  uint64_t memory_limit = 0;           // bytes per rank; 0: the trace's DeviceTotal samples, else unknown
  bool replay = true;                  // replay allocations through the allocator policies (slower)
  double fragmentation_threshold = 0.10;  // 1 - peak allocated / peak reserved above this
  double exposed_comm_threshold = 0.10;   // exposed communication / step time above this
  double data_wait_threshold = 0.05;      // data wait / step time above this
  double headroom_threshold = 0.40;       // unused share of the limit above this
  double straggler_threshold = 0.10;      // a rank's collective start skew this share of a step, or,
                                          // where too few collectives are matched to tell, its mean
                                          // step this much slower than the median
};

// `files` are the traces `set` was loaded from (the replay reads them again).
std::vector<Advice> advise(const prof::TraceSet& set, const prof::Analysis& analysis,
                           const std::vector<std::string>& files, const AdviseOptions& options = {});

// The saving in words: "1.2 GiB", "3.5 ms per step", "40 segment calls".
std::string saving_text(const Advice& a);
std::string advice_to_text(const std::vector<Advice>& advice);
std::string advice_to_json(const std::vector<Advice>& advice);

}  // namespace memcomm::advise
