// memcomm's own .mct traces (trace/) as request sequences. Private to memcomm_replay
// (Note [Trace formats] in requests.cpp).
#pragma once

#include <string>

#include "memcomm/replay/requests.hpp"

namespace memcomm::replay {

// One DeviceRequests per (rank, device index) (device 255 = host memory), so a merged multi-rank
// file keeps each rank's devices apart. Throws snapshot::ReadError on a bad file. A tail cut off by
// a killed writer is not an error: TraceRequests::recovery reports what was read and what ignored.
TraceRequests read_mct_trace(const std::string& path);

}  // namespace memcomm::replay
