// The end-of-run summary: printed by rank 0 and written as --summary-json. Free of LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace memcomm::train {

struct RunSummary {
  std::string model, dataset, backend, device, mode;
  int world = 1;
  int accum = 1;
  int64_t micro_batch = 0;       // per rank
  int64_t global_batch = 0;      // micro_batch * accum * world
  int64_t steps = 0;             // optimizer steps run in this process (after a resume: since it)
  int64_t samples_per_rank_epoch = 0;  // each rank's shard of the training set, after --tail
  int64_t batches_per_epoch = 0;       // micro-batches per rank and epoch
  int64_t tail_adjust = 0;             // --tail: >0 samples repeated (pad), <0 samples left out (drop)
  int64_t unused_per_epoch = 0;        // each rank's partial last batch, not trained on (Note [Partial batches])
  double wall_s = 0;             // training loop wall time
  double samples_per_s = 0;      // global samples per second
  double step_ms_mean = 0, step_ms_p50 = 0, step_ms_p95 = 0;
  double data_wait_ms = 0;       // total time blocked on the loader
  double comm_ms = 0;            // time gradient all-reduces were in flight (union over buckets)
  double exposed_comm_ms = 0;    // time waiting for gradients after backward
  double backward_ms = 0;        // total backward time
  double overlap_pct = 0;        // 100 * (1 - exposed / comm)
  int64_t allreduce_calls = 0;   // gradient all-reduces (buckets) issued
  int64_t param_syncs = 0;       // local-SGD parameter averages
  int buckets = 0;
  int64_t bytes_on_wire = 0;
  double first_loss = 0, final_loss = 0;
  double eval_loss = 0, eval_accuracy = 0;
  int64_t eval_samples = 0;    // predictions scored: one per sample, one per token for the transformer
  std::string eval_error;           // why the evaluation failed ("" when it ran): the run ends with that error
  // Memory figures are the largest over the ranks, counts their sum (Note [Run-wide figures]).
  std::string allocator = "torch";  // whose figures: memcomm (CPU), torch-cuda (GPU) or torch (none kept)
  int64_t peak_allocated = -1, peak_reserved = -1;  // -1: not known for this allocator
  double fragmentation = -1;
  int64_t peak_rss = -1;            // the process's peak resident set
  int64_t cache_clears = 0;         // --empty-cache: times the cache was given back, per rank
  int64_t cache_released = 0;       // bytes those clears released, all ranks
  int64_t trace_events = 0, trace_drops = 0;
  double trace_collector_cpu_ms = 0;  // the profiler's collector threads, summed over ranks
};

void print_summary(const RunSummary& s);
// Writes JSON atomically; throws std::runtime_error naming the file on failure.
void write_summary_json(const RunSummary& s, const std::string& path);

}  // namespace memcomm::train
