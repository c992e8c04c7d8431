// Where this process sits in the job: standalone, spawned by `memcomm-train --nproc N`, under
// `torchrun --no-python`, or under Slurm. Free of LibTorch.
#pragma once

#include <string>

namespace memcomm::train {

struct DistEnv {
  int rank = 0;              // global rank
  int world = 1;             // number of ranks
  int local_rank = 0;        // rank among the processes of this host
  int local_world = 1;       // processes on this host
  std::string master_addr = "127.0.0.1";  // host of the TCPStore (rank 0)
  int master_port = 29500;   // port of the TCPStore
  std::string launcher = "standalone";    // standalone | memcomm | torchrun | slurm | lightning
  // torchrun's agent already hosts the store at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True); then rank 0 joins it as a client instead of serving one.
  bool agent_hosts_store = false;
  // torchrun's restart count (TORCHELASTIC_RESTART_COUNT; 0 on the first attempt). Every attempt
  // keeps its store keys apart (Note [A restart under torchrun's agent store], comm.cpp).
  int attempt = 0;
};

// Reads RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, and our own
// spawner) or SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. A value that is not a number, or values that
// do not fit together, throw std::invalid_argument naming them.
DistEnv read_dist_env();
// read_dist_env(), or where no launcher named the rank, the rank Lightning's launcher implies
// (Note [Lightning's launch environment], launch.cpp). For a profile, not for a tool's main.
DistEnv read_launch_identity();
// read_dist_env() for a tool's main: an error goes to stderr after "`tool`: ", and the process
// exits with 2 (a usage error).
DistEnv detect_dist_env(const char* tool);

// The local IP address this host uses to reach `host` (a UDP connect picks the route; nothing is
// sent). Collective transports bind to it, so multi-host runs use the link that reaches rank 0.
// Falls back to "127.0.0.1" when `host` cannot be resolved.
std::string local_address_towards(const std::string& host, int port);
// Why no store can be reached at host:port, found by connecting once (at most `timeout_ms`): the host
// does not resolve, nothing listens there, or nothing answers; "" when a connection is taken
// (then rank 0 took it and did not answer: Note [A store that does not answer] in comm.cpp).
std::string unreachable_store_reason(const std::string& host, int port, int timeout_ms);

// True when the environment already names this process's rank (so --nproc must not spawn).
bool launched_externally();

// Rank 0 of a run another launcher started (srun, torchrun, an sbatch script's own SLURM_PROCID) says
// that `--nproc N` is ignored when N is not that launcher's world size: a script that meant --nproc
// would otherwise wait --timeout for ranks nobody starts, or train fewer than it asked for.
void warn_if_nproc_ignored(int nproc, const DistEnv& env, const char* tool);

// Spawns `nproc` copies of this executable as local ranks 0..nproc-1 with a fresh loopback port,
// forwards SIGINT/SIGTERM, and supervises them: when one fails, the others get `grace_s` seconds to
// notice and exit by themselves before they are killed, so no process is left behind. Returns the
// exit code for the whole job (0 only if every rank succeeded).
int spawn_local_ranks(int argc, char** argv, int nproc, double grace_s);

}  // namespace memcomm::train
