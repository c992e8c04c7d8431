// An existing LibTorch program switched to memcomm's allocator (two lines, marked), with its
// statistics read afterwards and the allocator's events recorded to a trace file.
// For CUDA tensors the second line is memcomm::alloc::install_torch_cuda_allocator(), called before
// the first CUDA tensor; memcomm::alloc::torch_cuda_allocator(device)->stats() reads its statistics.
//
// Built in the project as sample_allocator_switch, and on its own against an installed memcomm:
//   cmake --install build --prefix /tmp/memcomm
//   cmake -S samples/find_package -B /tmp/sample -DCMAKE_PREFIX_PATH="/tmp/memcomm;$(python -c 'import torch;print(torch.utils.cmake_prefix_path)')"
#include <memcomm/allocator/torch_allocator.hpp>   // (1)
#include <memcomm/profiler/recorder.hpp>
#include <memcomm/profiler/sink.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>

namespace {

// Forwards the allocator's events into the profiler (the trainer does the same).
struct Tap final : memcomm::alloc::Observer {
  void on_event(const memcomm::alloc::AllocEvent& e) noexcept override {
    namespace prof = memcomm::prof;
    // The allocator speaks the trace's vocabulary: its kinds go into the record as they are.
    if (e.kind == prof::EventKind::Alloc || e.kind == prof::EventKind::FreeCompleted)
      prof::record(prof::make_mem_block(e.kind, int64_t(e.time_ns), e.address, e.size, prof::kHostDevice));
  }
};

}  // namespace

int main(int argc, char** argv) {
  // The only argument is the trace path: anything that looks like a flag (--help) is answered,
  // never taken as a file name to write.
  if (argc > 2 || (argc == 2 && argv[1][0] == '-') || (argc == 2 && argv[1][0] == '\0')) {
    const bool help = argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
    std::fprintf(help ? stdout : stderr,
                 "usage: sample_allocator_switch [TRACE.mct]\n"
                 "  trains a small net on memcomm's CPU allocator and records its events to TRACE.mct\n"
                 "  (default sample.mct)\n");
    return help ? 0 : 2;
  }
  auto& allocator = memcomm::alloc::install_torch_cpu_allocator();  // (2)

  Tap tap;
  allocator.add_observer(&tap);
  auto& rec = memcomm::prof::Recorder::global();
  const std::string trace = argc > 1 ? argv[1] : "sample.mct";
  rec.add_sink(std::make_shared<memcomm::prof::FileSink>(trace));
  rec.start();

  torch::nn::Sequential net(torch::nn::Linear(256, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10));
  torch::optim::Adam opt(net->parameters());
  for (int step = 0; step < 20; ++step) {
    memcomm::prof::PhaseScope scope(memcomm::prof::Phase::Step, uint64_t(step));
    opt.zero_grad();
    auto loss = net->forward(torch::randn({64, 256})).logsumexp(1).mean();
    loss.backward();
    opt.step();
  }

  rec.stop();
  allocator.remove_observer(&tap);
  const auto st = allocator.stats();
  std::printf("peak allocated %.2f MiB, peak reserved %.2f MiB, fragmentation %.3f, source calls %lld\n",
              double(st.allocated_bytes.peak) / (1 << 20), double(st.reserved_bytes.peak) / (1 << 20),
              st.fragmentation(), static_cast<long long>(st.source_calls()));
  std::printf("trace written to %s (memcomm-trace info %s)\n", trace.c_str(), trace.c_str());
  return 0;
}
