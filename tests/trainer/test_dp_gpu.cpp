// --mode dp's real path on a GPU: LibTorch's data_parallel scatters the batch, replicates the model
// with ModelImpl::clone (Note [Replicas for --mode dp]), runs the replicas on their own threads and
// reduces their gradients into the model. With one GPU the batch is split over the same device
// twice, which takes every one of those steps (one device alone would skip them all).
#include <catch2/catch.hpp>
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include "memcomm_test.hpp"
#include <memcomm/train/models.hpp>
#include "small_models.hpp"

using namespace memcomm::train;

TEST_CASE("data_parallel over two replicas on the GPU gives the gradients of one full batch") {
  if (!torch::cuda::is_available()) MEMCOMM_SKIP_TEST("no CUDA device");
  const torch::Device gpu(torch::kCUDA, 0);
  for (const std::string name : {"mlp", "cnn", "transformer"}) {
    INFO(name);
    torch::manual_seed(5);
    auto model = make_model(memcomm::test::small_model(name), 10);
    model->to(gpu);
    const auto x = memcomm::test::small_inputs(name, 8).to(gpu), y = memcomm::test::small_targets(name, 8).to(gpu);

    model->zero_grad();
    model->loss(model->forward(x), y).backward();
    std::vector<torch::Tensor> full;
    for (const auto& p : model->parameters()) full.push_back(p.grad().clone());

    model->zero_grad();
    const auto logits = torch::nn::parallel::data_parallel(model, x, std::vector<torch::Device>{gpu, gpu}, gpu, 0);
    model->loss(logits, y).backward();
    const auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      REQUIRE(params[i].grad().defined());
      CHECK(torch::allclose(params[i].grad(), full[i], 1e-4, 1e-5));
    }
  }
}
