// Evaluation on the test split: every sample scored once across the ranks, totals summed with one
// all-reduce, a failing rank's error carried to every rank (Note [Evaluation fails together]).
#include <memcomm/train/evaluate.hpp>

#include <memcomm/train/data.hpp>
#include <memcomm/train/device_memory.hpp>
#include <memcomm/train/errors.hpp>
#include <memcomm/train/profiling.hpp>

#include <exception>
#include <string>

namespace memcomm::train {

// Note [Evaluation fails together]: a rank whose evaluation fails (out of memory under a cap, a
// bad sample) still joins the closing all-reduces, after its loader and batches are gone, so its
// peers are not left waiting; then every rank throws, the failing one its own error and the others
// one that names it (and says "out of memory" when that is what it was).
EvalResult evaluate(ModelImpl& model, const TrainOptions& o, const DistEnv& env, Communicator& comm,
                    const torch::Device& dev) {
  torch::NoGradGuard no_grad;
  MemoryCategoryScope cat(prof::MemCategory::Activation);
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  std::exception_ptr failure;
  double failure_code = 0;  // 1: an error, 2: out of memory
  try {
    auto test = make_dataset(o, "test");
    LoaderOptions lo;
    lo.keep_partial = true;  // no gradients here: a short last batch is fine, and every sample counts
    BatchLoader loader(test, strided_shard(test->size(), env.rank, env.world), o.batch_size, o.workers, o.prefetch,
                       dev.is_cuda(), lo);
    Batch b;
    for (int64_t i = 0; loader.next(b); ++i) {
      if (o.eval_batches > 0 && i >= o.eval_batches) break;
      auto x = b.inputs.to(dev, true), y = b.targets.to(dev, true);
      auto logits = model.forward(x);
      loss_sum += model.loss(logits, y).item<double>() * static_cast<double>(model.predictions(y));
      correct += model.correct(logits, y);
      count += model.predictions(y);
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    failure = std::current_exception();
    failure_code = is_out_of_memory(e) ? 2 : 1;
  }
  auto totals = torch::tensor({loss_sum, static_cast<double>(correct), static_cast<double>(count)}, torch::kFloat64);
  comm.allreduce(totals);
  auto failed = torch::tensor({failure_code, failure_code > 0 ? double(env.world - env.rank) : 0.0}, torch::kFloat64);
  comm.allreduce(failed, -1, Reduce::Max);
  model.train();
  if (failure) std::rethrow_exception(failure);
  if (failed[0].item<double>() > 0) {
    const int who = env.world - static_cast<int>(failed[1].item<double>());
    throw std::runtime_error("rank " + std::to_string(who) +
                             (failed[0].item<double>() > 1 ? " ran out of memory in the evaluation pass"
                                                           : " failed in the evaluation pass"));
  }
  EvalResult e;
  e.samples = static_cast<int64_t>(totals[2].item<double>());
  if (e.samples == 0)
    throw std::runtime_error("evaluation scored no sample: the test split of " +
                             std::string(to_string(resolved_dataset(o))) + " is empty");
  e.loss = totals[0].item<double>() / static_cast<double>(e.samples);
  e.accuracy = totals[1].item<double>() / static_cast<double>(e.samples);
  return e;
}

}  // namespace memcomm::train
