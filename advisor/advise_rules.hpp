// The advisor's rules, one per topic (internal to memcomm_advisor).
#pragma once

#include "memcomm/advisor/advise.hpp"

#include <memcomm/common/bytes.hpp>     // format_bytes: every byte figure in the advice
#include <memcomm/common/duration.hpp>  // format_ms: every time figure in it

#include <string>

namespace memcomm::advise::detail {

void fragmentation_rule(const prof::Analysis& a, const std::vector<std::string>& files, const AdviseOptions& o,
                        std::vector<Advice>& out);
void headroom_rule(const prof::TraceSet& set, const prof::Analysis& a, const AdviseOptions& o, std::vector<Advice>& out);

// The run's accumulation: the most common number of micro-steps in a step (0 when the run marks
// none, as a script profiled from Python does).
uint32_t accumulation_of(const prof::Analysis& a);

}  // namespace memcomm::advise::detail
