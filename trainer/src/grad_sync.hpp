// DDP-style gradient synchronisation: bucketed, overlapped with backward, accumulation-aware.
//
// Note [Gradient buckets]: as in torch.nn.parallel.DistributedDataParallel, parameters are packed
// in reverse order (the order backward produces their gradients) into flat buckets: the first holds
// 1 MiB, the rest --bucket-mb. Each parameter's .grad is a view into its bucket, so autograd
// accumulates straight into the buffer that goes on the wire (no copy in, no copy out). A post-hook
// on each parameter's gradient accumulator counts down its bucket; when a bucket is complete, its
// all-reduce starts while backward continues on earlier layers. After the first synchronised
// iteration, buckets are rebuilt in the order gradients actually became ready.
//
// Note [Averaging before the wire]: each bucket is scaled by 1/world just before its all-reduce, so
// the sum that comes back is the mean, identical bit for bit on every rank, and no pass is needed
// after the collective. With compression, the scaling is folded into the copy to bf16/fp16.
#pragma once

#include "comm.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::train {

struct GradSyncStats {
  int64_t allreduce_calls = 0;   // bucket all-reduces issued
  int64_t comm_ns = 0;           // sum over buckets of (completion - launch)
  int64_t exposed_ns = 0;        // time the trainer waited for buckets after backward
  int64_t bytes = 0;             // bytes put on the wire
};

class GradSync {
 public:
  GradSync(std::vector<torch::Tensor> params, Communicator& comm, double bucket_mb, bool overlap,
           const std::string& compression);
  ~GradSync();

  // Before each backward: `sync` is false on the first K-1 micro-steps of --accum K (no_sync).
  void prepare(bool sync);
  // After backward: launches what is left, waits for every bucket, unpacks compressed buckets.
  void finish();
  // Zeroes every bucket (the gradients); rebuilds the bucket order after the first sync iteration.
  void zero_grad();

  const GradSyncStats& stats() const { return stats_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Parameter indices per bucket, in bucket order (for tests and the trace).
  std::vector<std::vector<size_t>> layout() const;

 private:
  struct Bucket;
  void build(const std::vector<size_t>& order);
  void on_grad_ready(size_t param);
  void launch(Bucket& b);

  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  int64_t cap_bytes_;
  bool overlap_;
  std::string compression_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;      // parameter -> bucket
  std::vector<size_t> ready_order_;    // first iteration's readiness order
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  bool sync_ = true;
  bool rebuilt_ = false;
  GradSyncStats stats_;
};

// Local SGD: averages parameters across ranks in one flat all-reduce.
void average_parameters(std::vector<torch::Tensor>& params, Communicator& comm);

}  // namespace memcomm::train
