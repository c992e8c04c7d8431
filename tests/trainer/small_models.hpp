// Tiny versions of memcomm-train's models and batches for them, shared by the model-level tests.
#pragma once

#include <torch/torch.h>

#include <string>

#include <memcomm/train/options.hpp>

namespace memcomm::test {

inline train::TrainOptions small_model(const std::string& model) {
  train::TrainOptions o;
  o.model = train::choice_from_string<train::ModelKind>(model).value();
  o.hidden = 32;
  o.layers = 1;
  o.width = 32;
  o.heads = 2;
  o.seq_len = 8;
  o.vocab = 16;
  return o;
}

// A batch of n for small_model(model): token windows for the transformer, images otherwise.
inline torch::Tensor small_inputs(const std::string& model, int64_t n) {
  if (model == "transformer") return torch::randint(0, 16, {n, 8}, torch::kLong);
  return torch::randn({n, 1, 28, 28});
}

inline torch::Tensor small_targets(const std::string& model, int64_t n) {
  if (model == "transformer") return torch::randint(0, 16, {n, 8}, torch::kLong);
  return torch::randint(0, 10, {n}, torch::kLong);
}

}  // namespace memcomm::test
