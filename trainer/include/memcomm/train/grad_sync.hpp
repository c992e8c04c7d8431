// DDP-style gradient synchronisation: bucketed, overlapped with backward, accumulation-aware.
//
// Note [Gradient buckets]: as in torch.nn.parallel.DistributedDataParallel, parameters are packed
// in reverse order (the order backward produces their gradients) into flat buckets: a bucket closes
// with the parameter that takes it to its cap, 1 MiB for the first, --bucket-mb after. Each parameter's .grad is a view into its bucket, so autograd
// accumulates straight into the buffer that goes on the wire (no copy in, no copy out). A post-hook
// on each parameter's gradient accumulator counts down its bucket; when a bucket is complete, its
// all-reduce starts while backward continues on earlier layers. After the first synchronised
// iteration, buckets are rebuilt in the order gradients actually became ready
// (Note [Rebuilding buckets in ready order] in grad_sync.cpp).
//
// Note [Buckets go out in order]: a bucket's all-reduce starts only once every bucket before it has
// started (as DDP's next_bucket_ rule). Gloo and NCCL pair the n-th collective of every rank, so the
// order must not depend on timing; it also lets a rank that failed mid-step (an out-of-memory
// caught by the tuner) issue exactly the collectives the healthy ranks issue (abandon()).
//
// Note [Averaging before the wire]: each bucket is scaled by 1/world just before its all-reduce, so
// the sum that comes back is the mean, identical bit for bit on every rank, and no pass is needed
// after the collective. With compression, the scaling is folded into the copy to bf16/fp16.
#pragma once

#include <memcomm/train/comm.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::train {

struct GradSyncStats {
  int64_t allreduce_calls = 0;   // bucket all-reduces issued
  int64_t comm_ns = 0;           // time any bucket's all-reduce was in flight (Note [Communication time])
  int64_t exposed_ns = 0;        // time the trainer waited for buckets after backward
  int64_t bytes = 0;             // bytes put on the wire
};

class GradSync {
 public:
  GradSync(std::vector<torch::Tensor> params, Communicator& comm, double bucket_mb, bool overlap,
           GradCompression compression);
  ~GradSync();

  // Before each backward: `sync` is false on the first K-1 micro-steps of --accum K (no_sync).
  void prepare(bool sync);
  // After backward: launches what is left, waits for every bucket, unpacks compressed buckets.
  void finish();
  // Zeroes every bucket (the gradients); rebuilds the bucket order after the first sync iteration.
  void zero_grad();
  // After a step failed on this rank (an exception mid-forward/backward): issues every collective
  // of the step not yet issued, in bucket order, with whatever the buckets hold, waits for all and
  // zeroes the gradients, so the other ranks' step completes (Note [Buckets go out in order]).
  // Every rank must then discard the step.
  void abandon();
  // Re-packs the buckets with a new size cap (the tuner's bucket-size probes), keeping the order.
  // Needs memory for the new buckets; if that fails, the old layout stays and the error propagates.
  // A cap that packs the parameters as they are moves nothing (Note [A bucket size that changes nothing]).
  void rebucket(double bucket_mb);

  const GradSyncStats& stats() const { return stats_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Parameter indices per bucket, in bucket order (for tests and the trace).
  std::vector<std::vector<size_t>> layout() const;

 private:
  struct Bucket;
  // The parameters of each bucket for `order` under cap_bytes_ (Note [Gradient buckets]).
  std::vector<std::vector<size_t>> plan(const std::vector<size_t>& order) const;
  void build(const std::vector<size_t>& order);
  void on_grad_ready(size_t param);
  void launch(Bucket& b);
  void launch_ready();
  void rebuild_once();
  std::vector<size_t> current_order() const;

  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  int64_t cap_bytes_;
  bool overlap_;
  GradCompression compression_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;      // parameter -> bucket
  std::vector<size_t> ready_order_;    // first iteration's readiness order
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  size_t next_launch_ = 0;             // first bucket whose all-reduce has not started this step
                                       // (reset by zero_grad(), which ends a step)
  bool sync_ = true;
  bool rebuilt_ = false;
  int64_t synced_steps_ = 0;           // synchronised steps ended (finish() or abandon())
  GradSyncStats stats_;
};

// Local SGD: averages parameters across ranks in one flat all-reduce.
void average_parameters(std::vector<torch::Tensor>& params, Communicator& comm);

}  // namespace memcomm::train
