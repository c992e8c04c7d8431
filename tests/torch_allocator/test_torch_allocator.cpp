// LibTorch on memcomm's allocator: alignment, accounting, and bitwise-identical training.
#include "catch_with_torch.hpp"  // first: Note [Two CHECKs]

#include <memcomm/allocator/torch_allocator.hpp>

#include <cstring>

namespace {

// One SGD step of a small MLP from a fixed initialisation; returns the parameters after it.
std::vector<torch::Tensor> one_training_step() {
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Linear(32, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto x = torch::randn({16, 32});
  auto y = torch::randint(10, {16});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

}  // namespace

// One test case without sections: the reference must run on LibTorch's allocator, once, before ours.
TEST_CASE("LibTorch CPU tensors on memcomm's allocator: aligned, accounted, bitwise-identical training") {
  const auto reference = one_training_step();  // LibTorch's own CPU allocator

  auto& engine = memcomm::alloc::install_torch_cpu_allocator();
  REQUIRE(memcomm::alloc::torch_cpu_allocator() == &engine);
  CHECK(&memcomm::alloc::install_torch_cpu_allocator() == &engine);  // idempotent

  {  // every tensor is at least 64-byte aligned, like LibTorch's own allocator
    std::vector<torch::Tensor> keep;
    for (int64_t n : {1, 3, 17, 100, 1000, 4097, 100000, 1 << 20}) {
      keep.push_back(torch::empty({n}, torch::kUInt8));
      CHECK(reinterpret_cast<uintptr_t>(keep.back().data_ptr()) % 64 == 0);
    }
  }

  {  // allocations are served and accounted by the engine
    const auto before = engine.stats();
    auto t = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB
    const auto during = engine.stats();
    CHECK(during.allocated_bytes.current - before.allocated_bytes.current >= int64_t(4) << 20);
    CHECK(engine.block_size(t.data_ptr()) >= size_t(4) << 20);
    t.reset();
    CHECK(engine.stats().allocated_bytes.current == before.allocated_bytes.current);
  }

  {  // a training step gives bitwise the same parameters as on LibTorch's allocator
    const auto ours = one_training_step();
    REQUIRE(ours.size() == reference.size());
    for (size_t i = 0; i < ours.size(); ++i) CHECK(bitwise_equal(ours[i], reference[i]));
    CHECK(engine.stats().allocation.allocated > 0);
    engine.check_invariants();
  }
}
