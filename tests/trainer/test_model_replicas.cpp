// See Note [Replicas for --mode dp]: what LibTorch's data_parallel does with our models on several
// devices (replicate, run each replica on its chunk, reduce gradients into the original), driven on
// CPU "devices": replicate() needs no GPU, only the scatter/gather around it does.
#include <catch2/catch.hpp>
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <memcomm/train/models.hpp>
#include "small_models.hpp"

using namespace memcomm::train;
using namespace memcomm::test;


TEST_CASE("replicas of every model reduce their gradients into the original like one full batch") {
  for (const std::string name : {"mlp", "cnn", "transformer"}) {
    INFO(name);
    torch::manual_seed(1);
    auto model = make_model(small_model(name), 10);
    const auto x = small_inputs(name, 6), y = small_targets(name, 6);

    model->zero_grad();
    model->loss(model->forward(x), y).backward();
    std::vector<torch::Tensor> full;
    for (const auto& p : model->parameters()) full.push_back(p.grad().clone());

    // Cloning must not move the default generator (the run's later random draws stay the same).
    torch::manual_seed(2);
    const auto expect_next = torch::rand({4});
    torch::manual_seed(2);
    const std::vector<torch::Device> devices{torch::kCPU, torch::kCPU, torch::kCPU};
    auto replicas = torch::nn::parallel::replicate(model, devices);
    CHECK(torch::equal(torch::rand({4}), expect_next));

    model->zero_grad();
    const auto xs = x.chunk(3), ys = y.chunk(3);
    torch::Tensor total;
    for (size_t i = 0; i < replicas.size(); ++i) {
      REQUIRE(replicas[i].get() != model.get());
      // The mean over the full batch is the mean of the equal chunks' means.
      auto l = replicas[i]->loss(replicas[i]->forward(xs[i]), ys[i]) / 3.0;
      total = total.defined() ? total + l : l;
    }
    total.backward();
    const auto params = model->parameters();
    REQUIRE(params.size() == full.size());
    for (size_t i = 0; i < params.size(); ++i) {
      REQUIRE(params[i].grad().defined());
      CHECK(torch::allclose(params[i].grad(), full[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("a replica holds the original's values in its own storage") {
  torch::manual_seed(3);
  auto model = make_model(small_model("mlp"), 10);
  auto copy = std::dynamic_pointer_cast<ModelImpl>(model->clone(torch::Device(torch::kCPU)));
  REQUIRE(copy);
  const auto a = model->named_parameters(), b = copy->named_parameters();
  REQUIRE(a.size() == b.size());
  for (const auto& item : a) {
    const auto& other = b[item.key()];
    CHECK(torch::equal(item.value(), other));
    CHECK(item.value().data_ptr() != other.data_ptr());
  }
}
