// The one small communicator the trainer talks to: c10d's TCPStore for rendezvous and c10d's
// ProcessGroupGloo / ProcessGroupNCCL as the engines (no home-made collectives).
//
// Note [Naming the lost rank]: Gloo reports a dead peer as a connection error or a timeout, without
// saying which rank it was. Every rank therefore bumps a heartbeat key in the store from a side
// thread; when a collective fails, we read the heartbeats twice, one beat interval apart, and name
// the ranks whose counter stood still. When the store itself is gone, rank 0 (its host) is the one lost.
#pragma once

#include <memcomm/train/choices.hpp>
#include <memcomm/train/comm_record.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/launch.hpp>

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class Backend;
class Store;
class Work;
}  // namespace c10d

namespace memcomm::train {

// How an all-reduce combines the ranks' values. Max and Min let ranks agree on a decision
// (any rank out of memory, the smallest size that fits everywhere) in one collective.
enum class Reduce { Sum, Max, Min };

class Communicator {
 public:
  // Rendezvous (rank 0 hosts the TCPStore) and process-group creation. world == 1 needs neither.
  Communicator(const DistEnv& env, Backend backend, double timeout_s);
  ~Communicator();

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  const std::string& backend() const { return backend_name_; }  // "gloo", "nccl" or "none (1 rank)"

  // In-place sum all-reduce; returns a handle to wait on. Completion time is recorded.
  struct Pending;
  std::shared_ptr<Pending> allreduce_async(at::Tensor& t, int bucket, Reduce op = Reduce::Sum);
  // Waits for a pending collective and returns its record; throws CommError naming the missing
  // ranks on failure or timeout (Note [Naming the lost rank]).
  CollectiveRecord wait(const std::shared_ptr<Pending>& p);
  // Blocking sum all-reduce; host tensors are staged through the device under NCCL.
  void allreduce(at::Tensor& t, int bucket = -1, Reduce op = Reduce::Sum);
  // The device collectives run on (CPU for Gloo runs).
  void set_device(const at::Device& d) { device_ = d; }
  void broadcast(std::vector<at::Tensor>& tensors, int root);
  void barrier();
  // Note [Clock offsets at rendezvous]: ranks on different hosts have unrelated monotonic clocks.
  // Every rank but 0 measures its clock against rank 0's with
  // `rounds` send/recv round trips (min-RTT filter, prof::estimate_clock_offset). Returns the ns to
  // add to this rank's timestamps to put them on rank 0's clock (0 on rank 0 and with one rank, and
  // without probing for a rank that reads rank 0's own clock: Note [One clock per host] in
  // memcomm/trace/clock.hpp). Every rank must call it.
  int64_t estimate_clock_offset(int rounds = 8);

  int64_t allreduce_calls() const { return allreduce_calls_; }
  // Completed collectives since the last call (drained by the trainer for the profiler/summary).
  std::vector<CollectiveRecord> take_records();
  // Called for every completed collective, from whichever thread completed it.
  std::function<void(const CollectiveRecord&)> on_collective;

 private:
  // Why the process group could not be set up, in a line (Note [Naming the ranks that never joined]).
  std::string why_not_joined(const std::exception& e) const;
  [[noreturn]] void fail(const std::string& what);
  std::string missing_ranks();

  DistEnv env_;
  std::string backend_name_;
  bool nccl_ = false;  // the process group is NCCL's
  double timeout_s_;
  at::Device device_{at::kCPU};
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  int64_t seq_ = 0;
  int64_t allreduce_calls_ = 0;
  std::mutex records_mu_;
  std::vector<CollectiveRecord> records_;
  std::thread heartbeat_;
  std::atomic<bool> stop_heartbeat_{false};
};

int64_t monotonic_ns();

}  // namespace memcomm::train
