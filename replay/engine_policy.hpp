// Adapter from the replay Policy interface to memcomm's allocator engine (allocator/core), over its
// "simulated" source. Private to memcomm_replay; built only when the engine library is present.
#pragma once

#include <memory>
#include <string>

#include "memcomm/replay/policy.hpp"

namespace memcomm::replay {

// The engine in its default configuration, capped at options.capacity.
std::unique_ptr<Policy> make_engine_policy(const PolicyOptions& options);

}  // namespace memcomm::replay
