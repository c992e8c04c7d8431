// Fuzzing how memcomm-train and a profile read their place in the job from the launcher's
// environment (torchrun's, Slurm's, Lightning's): the input is the values of those variables, one
// per line in the order of kNames (an empty line leaves that variable unset). Every input must give
// a DistEnv whose figures fit together or throw std::invalid_argument; nothing else (no crash, no
// signed overflow, no other exception).
#include <memcomm/train/launch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {
const char* const kNames[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "MEMCOMM_SPAWNED", "NODE_RANK",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_NODELIST"};

void set_from(const uint8_t* data, size_t size) {
  size_t at = 0;
  for (const char* name : kNames) {
    std::string value;
    while (at < size && data[at] != '\n') value += data[at] == 0 ? '?' : static_cast<char>(data[at]), ++at;
    ++at;
    if (value.empty()) ::unsetenv(name);
    else ::setenv(name, value.c_str(), 1);
  }
}

void check(const memcomm::train::DistEnv& e) {
  if (e.world < 1 || e.rank < 0 || e.rank >= e.world || e.local_rank < 0 || e.master_port < 1 ||
      e.master_port > 65535)
    __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  set_from(data, size);
  try {
    check(memcomm::train::read_dist_env());
  } catch (const std::invalid_argument&) {
  }
  try {
    check(memcomm::train::read_launch_identity());
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
