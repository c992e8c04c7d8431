// torch.profiler (Kineto) memory profiles as request sequences. Private to memcomm_replay
// (Note [Trace formats] in requests.cpp, Note [Replaying a torch.profiler memory profile] in
// kineto_trace.cpp).
#pragma once

#include <string>
#include <vector>

#include "memcomm/trace/event.hpp"

#include "memcomm/replay/requests.hpp"

namespace memcomm::replay {

// One DeviceRequests per device of the trace's [memory] events (device 255 = host memory), with
// the trace's rank. Throws snapshot::ReadError on a bad file, and on a trace without [memory]
// events (not recorded with profile_memory=True). A file cut short is read up to its last complete
// event; TraceRequests::recovery says where it stopped.
TraceRequests read_kineto_trace(const std::string& path);

// The same for one rank's events, as a torch.profiler trace converted to .mct holds them (any
// order; sorted here): appends its devices and notes to `out`.
void fold_memory_profile(std::vector<prof::Event>& events, int rank, TraceRequests& out);

}  // namespace memcomm::replay
