#include "summary.hpp"

#include <fmt/core.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/json_output.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace memcomm::train {

namespace {

std::string bytes_str(int64_t b) { return b < 0 ? "n/a" : format_bytes(static_cast<uint64_t>(b)); }

}  // namespace

void print_summary(const RunSummary& s) {
  fmt::print("\n== memcomm-train summary ==\n");
  fmt::print("  model {} on {} | {} rank(s), backend {}, device {}\n", s.model, s.dataset, s.world, s.backend, s.device);
  fmt::print("  batch {} per rank x accum {} x {} ranks = {} global | {} steps in {:.2f} s\n", s.micro_batch, s.accum,
             s.world, s.global_batch, s.steps, s.wall_s);
  fmt::print("  per rank and epoch: {} samples, {} batches{}{}\n", s.samples_per_rank_epoch, s.batches_per_epoch,
             s.tail_adjust > 0   ? fmt::format(", {} repeated by --tail pad", s.tail_adjust)
             : s.tail_adjust < 0 ? fmt::format(", {} left out by --tail drop", -s.tail_adjust)
                                 : std::string(),
             s.unused_per_epoch > 0 ? fmt::format(", last {} unused (partial batch)", s.unused_per_epoch) : std::string());
  fmt::print("  throughput {:.1f} samples/s | step {:.2f} ms mean, {:.2f} p50, {:.2f} p95\n", s.samples_per_s,
             s.step_ms_mean, s.step_ms_p50, s.step_ms_p95);
  if (s.eval_error.empty())
    fmt::print("  loss {:.4f} -> {:.4f} | eval loss {:.4f}, accuracy {:.2f}% on {} {}\n", s.first_loss,
               s.final_loss, s.eval_loss, 100 * s.eval_accuracy, s.eval_samples,
               s.dataset == "tokens" ? "tokens" : "samples");  // the transformer predicts every token of a window
  else
    fmt::print("  loss {:.4f} -> {:.4f} | evaluation failed: {}\n", s.first_loss, s.final_loss, s.eval_error);
  const std::string across = s.param_syncs > 0 ? "(local SGD's parameter averages)" : fmt::format("in {} buckets", s.buckets);
  fmt::print("  communication {:.1f} ms, exposed {:.1f} ms, overlap {:.1f}% | {} all-reduces {}, {}\n", s.comm_ms,
             s.exposed_comm_ms, s.overlap_pct, s.allreduce_calls, across, bytes_str(s.bytes_on_wire));
  if (s.param_syncs > 0) fmt::print("  local SGD: {} parameter averages, the last after the last step\n", s.param_syncs);
  fmt::print("  data wait {:.1f} ms | backward {:.1f} ms\n", s.data_wait_ms, s.backward_ms);
  fmt::print("  allocator {}: peak allocated {}, peak reserved {}, fragmentation {} | peak rss {} (largest rank)\n",
             s.allocator, bytes_str(s.peak_allocated), bytes_str(s.peak_reserved),
             s.fragmentation < 0 ? std::string("n/a") : fmt::format("{:.3f}", s.fragmentation), bytes_str(s.peak_rss));
  if (s.cache_clears > 0)
    fmt::print("  cache cleared {} time(s) per rank, {} given back in all\n", s.cache_clears,
               s.allocator == "torch" ? std::string("n/a (LibTorch's CPU allocator keeps no cache)")
                                      : bytes_str(s.cache_released));
  if (s.trace_events > 0 || s.trace_drops > 0)
    fmt::print("  trace: {} events, {} dropped (all ranks)\n", s.trace_events, s.trace_drops);
  std::fflush(stdout);
}

void write_summary_json(const RunSummary& s, const std::string& path) {
  nlohmann::json j = {
      {"model", s.model}, {"dataset", s.dataset}, {"backend", s.backend}, {"device", s.device}, {"mode", s.mode},
      {"world", s.world}, {"accum", s.accum}, {"micro_batch", s.micro_batch}, {"global_batch", s.global_batch},
      {"steps", s.steps}, {"wall_s", s.wall_s}, {"samples_per_s", s.samples_per_s},
      {"step_ms", {{"mean", s.step_ms_mean}, {"p50", s.step_ms_p50}, {"p95", s.step_ms_p95}}},
      {"data_wait_ms", s.data_wait_ms}, {"comm_ms", s.comm_ms}, {"exposed_comm_ms", s.exposed_comm_ms},
      {"backward_ms", s.backward_ms}, {"overlap_pct", s.overlap_pct}, {"allreduce_calls", s.allreduce_calls},
      {"param_syncs", s.param_syncs}, {"buckets", s.buckets}, {"bytes_on_wire", s.bytes_on_wire},
      {"first_loss", s.first_loss}, {"final_loss", s.final_loss}, {"eval_loss", s.eval_loss},
      {"eval_accuracy", s.eval_accuracy}, {"eval_samples", s.eval_samples},
      {"eval_error", s.eval_error.empty() ? nlohmann::json() : nlohmann::json(s.eval_error)}, {"allocator", s.allocator},
      {"peak_allocated", s.peak_allocated}, {"peak_reserved", s.peak_reserved}, {"fragmentation", s.fragmentation},
      {"trace_events", s.trace_events}, {"trace_drops", s.trace_drops},
      {"trace_collector_cpu_ms", s.trace_collector_cpu_ms}, {"peak_rss", s.peak_rss},
      {"cache_clears", s.cache_clears}, {"cache_released", s.cache_released},
      {"samples_per_rank_epoch", s.samples_per_rank_epoch}, {"batches_per_epoch", s.batches_per_epoch},
      {"tail_adjust", s.tail_adjust}, {"unused_per_epoch", s.unused_per_epoch}};
  write_replacing(path, json_text(j, 2) + "\n");  // Note [Outputs replaced whole]
}

}  // namespace memcomm::train
