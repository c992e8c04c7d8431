// The advisor's rules, one per topic (internal to memcomm_advisor).
#pragma once

#include "memcomm/advisor/advise.hpp"

#include <string>

namespace memcomm::advise::detail {

std::string ms(int64_t ns);     // "12.3 ms"
std::string bytes(uint64_t b);  // "512.0 MiB"

void fragmentation_rule(const prof::Analysis& a, const std::vector<std::string>& files, const AdviseOptions& o,
                        std::vector<Advice>& out);
void headroom_rule(const prof::TraceSet& set, const prof::Analysis& a, const AdviseOptions& o, std::vector<Advice>& out);

}  // namespace memcomm::advise::detail
