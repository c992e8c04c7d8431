// LibTorch works here: autograd forward/backward with numbers checked by hand.
#include "catch_with_torch.hpp"  // first: Note [Two CHECKs]


TEST_CASE("autograd gives the analytic gradient of a small expression") {
  // f(w) = sum((w * x)^2)  =>  df/dw = 2 * w * x^2
  auto x = torch::tensor({1.0, 2.0, 3.0}, torch::kFloat64);
  auto w = torch::tensor({0.5, -1.0, 2.0}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto f = (w * x).pow(2).sum();
  f.backward();
  CHECK(f.item<double>() == Approx(0.25 + 4.0 + 36.0));
  auto g = w.grad();
  CHECK(g[0].item<double>() == Approx(2 * 0.5 * 1));
  CHECK(g[1].item<double>() == Approx(2 * -1.0 * 4));
  CHECK(g[2].item<double>() == Approx(2 * 2.0 * 9));
}

TEST_CASE("a linear layer with fixed weights computes W x + b and its weight gradient") {
  torch::nn::Linear lin(2, 1);
  {
    torch::NoGradGuard no_grad;
    lin->weight.copy_(torch::tensor({{3.0f, -2.0f}}));
    lin->bias.fill_(0.5f);
  }
  auto in = torch::tensor({{1.0f, 4.0f}, {2.0f, 1.0f}});
  auto out = lin(in);  // [3 - 8 + 0.5, 6 - 2 + 0.5]
  REQUIRE(out.sizes() == torch::IntArrayRef({2, 1}));
  CHECK(out[0][0].item<float>() == Approx(-4.5f));
  CHECK(out[1][0].item<float>() == Approx(4.5f));
  out.sum().backward();
  // d(sum)/dW = sum over rows of the inputs.
  CHECK(lin->weight.grad()[0][0].item<float>() == Approx(3.0f));
  CHECK(lin->weight.grad()[0][1].item<float>() == Approx(5.0f));
  CHECK(lin->bias.grad()[0].item<float>() == Approx(2.0f));
}

TEST_CASE("the CUDA build of LibTorch reports GPUs at run time without failing") {
  // The wheel is the CUDA 13.0 build; on a machine with no driver it must say zero, not throw.
  const auto n = torch::cuda::device_count();
  CHECK(n >= 0);
  CHECK(torch::cuda::is_available() == (n > 0));
}
