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

}  // namespace memcomm::advise::detail
