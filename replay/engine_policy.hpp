// Adapter from the replay Policy interface to memcomm's allocator engine (allocator/core), over its
// "simulated" source. Private to memcomm_replay; built only when the engine library is present.
#pragma once

#include <memory>
#include <string>

#include "memcomm/replay/policy.hpp"

namespace memcomm::replay {

// `planned` selects the engine's planned mode (Note [Planned mode] in allocator/core), which learns
// iterations from step markers or detected repetition; otherwise the engine's default configuration.
std::unique_ptr<Policy> make_engine_policy(bool planned, const PolicyOptions& options);

}  // namespace memcomm::replay
