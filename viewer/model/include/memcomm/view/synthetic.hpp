// A synthetic multi-rank run of a given size, generated in memory: the input of --bench and of the
// 10 M-event targets, and a stand-in for a real trace in tests.
#pragma once

#include <memcomm/view/timeline.hpp>

namespace memcomm::view {

struct SyntheticOptions {
  std::uint64_t events = 1'000'000;  // total events, roughly
  std::uint32_t ranks = 2;
  std::uint32_t streams = 2;         // kernel streams per rank
  std::uint64_t seed = 1;
};

Timeline make_synthetic(const SyntheticOptions& opt);

}  // namespace memcomm::view
