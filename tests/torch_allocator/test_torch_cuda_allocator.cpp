// torch's CUDA allocator swapped for memcomm's (label gpu; skipped where there is no GPU).
//
// Every case installs the adapter before the first CUDA allocation of its process (ctest runs each
// case in its own process). Figures from torch's own allocator come from a fresh process: this
// binary runs itself with a hidden case and an environment variable naming where to write.
#include "catch_with_torch.hpp"  // first: Note [Two CHECKs]

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <memcomm/allocator/cuda_sources.hpp>
#include <memcomm/allocator/torch_allocator.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
constexpr auto kAgg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
constexpr const char* kReferenceOut = "MEMCOMM_TORCH_CUDA_REFERENCE_OUT";

void require_gpu() {
  if (memcomm::alloc::cuda_device_count() == 0) MEMCOMM_SKIP_TEST("no CUDA GPU here");
}

// Three SGD steps of a small MLP on the GPU from a CPU-made initialisation; returns the parameters (on the CPU).
std::vector<torch::Tensor> cuda_training_step() {
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Linear(256, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10));
  auto x = torch::randn({64, 256});
  auto y = torch::randint(10, {64});
  net->to(torch::kCUDA);
  x = x.to(torch::kCUDA);
  y = y.to(torch::kCUDA);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().cpu());
  return out;
}

// Runs this test binary on `test_spec` with `env_assignment` ("NAME=value" or empty); returns its exit code.
int run_self(const std::string& test_spec, const std::string& env_assignment) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!env_assignment.empty()) putenv(const_cast<char*>(env_assignment.c_str()));
    // -w NoTests: a spec that matches no case fails instead of passing silently.
    execl("/proc/self/exe", "/proc/self/exe", test_spec.c_str(), "-w", "NoTests", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

// Hidden: the reference run on torch's own allocator, started by the next case in a fresh process.
TEST_CASE("reference: CUDA training step on torch's own allocator", "[.reference]") {
  const char* out = std::getenv(kReferenceOut);
  if (!out) MEMCOMM_SKIP_TEST(std::string("run by the training case with ") + kReferenceOut + " set");
  require_gpu();
  CHECK(cca::name() != "memcomm");
  torch::save(cuda_training_step(), out);
}

TEST_CASE("torch CUDA training on memcomm's allocator: stats move, results match torch's allocator") {
  require_gpu();
  memcomm::alloc::install_torch_cuda_allocator();
  REQUIRE(cca::name() == "memcomm");
  REQUIRE(c10::GetAllocator(c10::DeviceType::CUDA) == cca::get());

  const auto ours = cuda_training_step();

  auto* engine = memcomm::alloc::torch_cuda_allocator(0);
  REQUIRE(engine != nullptr);
  const auto s = engine->stats();
  CHECK(s.allocation.allocated > 10);  // parameters, activations, gradients, momentum buffers
  CHECK(s.allocated_bytes.peak > 0);
  CHECK(s.reserved_bytes.current >= s.allocated_bytes.current);
  CHECK(s.source_calls() > 0);
  engine->check_invariants();

  // torch's own view of the stats is ours.
  const auto c10s = cca::getDeviceStats(0);
  CHECK(c10s.allocation[kAgg].allocated == s.allocation.allocated);
  CHECK(c10s.reserved_bytes[kAgg].current == s.reserved_bytes.current);
  CHECK(c10s.allocated_bytes[kAgg].peak == s.allocated_bytes.peak);
  cca::resetAccumulatedStats(0);
  CHECK(cca::getDeviceStats(0).allocation[kAgg].allocated == 0);
  CHECK(cca::getDeviceStats(0).allocation[kAgg].current == s.allocation.current);

  {  // a block used on a side stream is tracked, freed and its memory stays accounted
    auto t = torch::ones({1 << 20}, torch::kCUDA);
    auto side = c10::cuda::getStreamFromPool();
    cca::recordStream(t.storage().data_ptr(), side);
    const auto live = engine->stats().allocated_bytes.current;
    t.reset();
    CHECK(engine->stats().allocated_bytes.current < live);
    torch::cuda::synchronize();
    engine->process_events();
    engine->check_invariants();
  }

  {  // the snapshot describes our segments
    const auto snap = cca::snapshot();
    REQUIRE(!snap.segments.empty());
    size_t total = 0;
    for (const auto& seg : snap.segments) total += seg.total_size;
    CHECK(total > 0);
    CHECK(total <= size_t(engine->stats().reserved_bytes.current));
  }

  // The same step in a fresh process on torch's own allocator.
  const std::string ref_path = "/tmp/memcomm_torch_cuda_ref_" + std::to_string(getpid()) + ".pt";
  const std::string env = std::string(kReferenceOut) + "=" + ref_path;
  REQUIRE(run_self("[.reference]", env) == 0);
  std::vector<torch::Tensor> reference;
  torch::load(reference, ref_path);
  std::remove(ref_path.c_str());
  REQUIRE(reference.size() == ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(ours[i], reference[i], /*rtol=*/1e-5, /*atol=*/1e-6));
  }

  cca::emptyCache();
  engine->check_invariants();
}

TEST_CASE("torch CUDA: an over-capacity allocation raises torch's OutOfMemoryError") {
  require_gpu();
  memcomm::alloc::install_torch_cuda_allocator();
  auto keep = torch::ones({1024}, torch::kCUDA);
  auto* engine = memcomm::alloc::torch_cuda_allocator(0);
  REQUIRE(engine != nullptr);
  const auto before = engine->stats().num_ooms;

  static std::atomic<bool> observed{false};  // static: the observer stays attached for the process
  cca::attachOutOfMemoryObserver([](int64_t, size_t, size_t, size_t) { observed = true; });
  const int64_t huge = int64_t(1) << 45;  // 32 TiB: more than any GPU has
  try {
    auto t = torch::empty({huge}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
    FAIL("allocating 32 TiB succeeded");
  } catch (const c10::OutOfMemoryError& e) {
    CHECK(std::string(e.what()).find("CUDA out of memory") != std::string::npos);
  }
  CHECK(observed);
  CHECK(engine->stats().num_ooms == before + 1);
  CHECK(cca::getDeviceStats(0).num_ooms == before + 1);

  // The allocator still serves requests afterwards.
  auto after = torch::ones({1 << 16}, torch::kCUDA);
  CHECK(after.sum().item<float>() == float(1 << 16));
  engine->check_invariants();
}

// Hidden: torch allocates first, then the install must refuse; run by the next case in a fresh process.
TEST_CASE("late install: refused once torch's allocator has allocated", "[.late-install]") {
  require_gpu();
  auto t = torch::ones({16}, torch::kCUDA);
  CHECK_THROWS_AS(memcomm::alloc::install_torch_cuda_allocator(), std::logic_error);
  CHECK(cca::name() != "memcomm");
}

TEST_CASE("torch CUDA: installing after the first CUDA allocation is a clear error") {
  require_gpu();
  CHECK(run_self("[.late-install]", "") == 0);
}
