// The models memcomm-train offers: mlp, cnn (Fashion-MNIST) and a decoder-only transformer LM.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace memcomm::train {

struct TrainOptions;

// A model maps a batch's inputs to logits; loss() applies the matching cross-entropy.
class ModelImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  // Mean cross-entropy over the batch (and, for the LM, over positions).
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // Correct predictions in the batch (per position for the LM).
  int64_t correct(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // Predictions the batch holds (batch size, or batch x positions for the LM).
  int64_t predictions(const torch::Tensor& targets) const { return targets.numel(); }

  // A deep copy on `device`, which LibTorch's data_parallel replicates the model with
  // (Note [Replicas for --mode dp] in models.cpp).
  std::shared_ptr<torch::nn::Module> clone(const std::optional<torch::Device>& device = std::nullopt) const override;

 private:
  friend std::shared_ptr<ModelImpl> make_model(const TrainOptions& o, int64_t num_classes);
  std::function<std::shared_ptr<ModelImpl>()> make_fresh_;  // builds an identically shaped model
};

std::shared_ptr<ModelImpl> make_model(const TrainOptions& o, int64_t num_classes);

// Parameters and their bytes, for the start-of-run banner.
int64_t parameter_count(torch::nn::Module& m);
// FNV-1a over the raw bytes of every parameter: equal on all ranks iff they are bitwise identical.
uint64_t parameter_checksum(const std::vector<torch::Tensor>& params);

}  // namespace memcomm::train
