// CUPTI capture on a real GPU (label gpu; exit 77 = skipped where there is none): kernels, memcpy,
// memset, driver and pool allocations, syncs, phase attribution, clock alignment, NCCL kernels,
// and nothing left hooked after stop().
#include <cuda_runtime.h>  // not _api.h: the typed cudaMalloc(T**) overloads

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "gpu_work.hpp"
#include "memcomm/profiler/cupti_capture.hpp"
#include "memcomm/profiler/recorder.hpp"
#include "memcomm/profiler/sink.hpp"
#include "memcomm_test.hpp"
#ifdef MEMCOMM_TEST_HAVE_NCCL
#include <nccl.h>
#endif

using namespace memcomm::prof;

namespace {

void require_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) MEMCOMM_SKIP_TEST("no CUDA device");
}

#define CUDA_OK(x) REQUIRE((x) == cudaSuccess)

constexpr int64_t kClockTolerance = 50'000;  // ns: the "aligned within 50 us"

struct Session {
  Recorder rec;
  std::shared_ptr<MemorySink> sink = std::make_shared<MemorySink>();
  Session() {
    rec.add_sink(sink);
    rec.start();
  }
  std::vector<Event> of(EventKind k) const {
    std::vector<Event> v;
    for (const Event& e : sink->events())
      if (e.kind == k) v.push_back(e);
    return v;
  }
  std::string name(StringId id) const {
    const auto s = sink->strings();
    return id < s.size() ? s[id] : std::string();
  }
};

}  // namespace

TEST_CASE("kernel, memcpy, memset, allocations and syncs are captured on our clock", "[cupti][gpu]") {
  require_gpu();
  Session s;
  CuptiCapture cupti;
  REQUIRE(cupti.start(s.rec));
  CHECK(cupti.stats().timestamp_callback);

  // The application's own NVTX range (first NVTX call of this process: Note [NVTX injection]).
  nvtxRangePushA("app range");
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  nvtxRangePop();
  constexpr size_t kBytes = 64u << 20;
  void* dev = nullptr;
  void* host = nullptr;
  int* done = nullptr;
  CUDA_OK(cudaMalloc(&dev, kBytes));
  CUDA_OK(cudaMallocHost(&host, kBytes));
  CUDA_OK(cudaMalloc(&done, sizeof(int)));
  CUDA_OK(cudaMemcpyAsync(dev, host, kBytes, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemsetAsync(dev, 0, kBytes, stream));

  // A stream-ordered allocation from an explicit pool (MEMORY2 with pool information).
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CUDA_OK(cudaMemPoolCreate(&pool, &props));
  void* pooled = nullptr;
  constexpr size_t kPooled = 1u << 20;
  CUDA_OK(cudaMallocFromPoolAsync(&pooled, kPooled, pool, stream));
  CUDA_OK(cudaFreeAsync(pooled, stream));
  CUDA_OK(cudaStreamSynchronize(stream));

  // The kernel runs 5 ms, launched inside a Forward phase: its end falls between the two host
  // timestamps around the synchronize, its start after the launch.
  int64_t t_launch, t_before_sync, t_after_sync;
  {
    PhaseScope fwd(Phase::Forward, 7, {}, s.rec);
    t_launch = now_ns();
    CUDA_OK(memcomm::test::launch_spin(stream, 5'000'000, done));
    t_before_sync = now_ns();
    CUDA_OK(cudaDeviceSynchronize());
    t_after_sync = now_ns();
  }
  cupti.stop();
  CHECK_FALSE(cupti.running());
  s.rec.stop();

  const CuptiStats st = cupti.stats();
  INFO("records " << st.convert.records << " events " << st.convert.events << " dropped " << st.cupti_dropped);
  CHECK(st.convert.records > 0);
  CHECK(st.cupti_dropped == 0);
  CHECK(st.buffers_completed > 0);

  // Kernel: present, ~5 ms, aligned with the host clock.
  const Event* spin = nullptr;
  const auto kernels = s.of(EventKind::Kernel);
  for (const Event& e : kernels)
    if (s.name(e.as<ComputeEvent>().arg).find("memcomm_spin_kernel") != std::string::npos) spin = &e;
  REQUIRE(spin != nullptr);
  const auto k = spin->as<ComputeEvent>();
  CHECK(k.duration() >= 5'000'000);
  CHECK(k.duration() < 100'000'000);
  CHECK(k.sub == 0);
  INFO("launch " << t_launch << " kernel [" << k.ts << ", " << k.end() << "] sync [" << t_before_sync << ", "
                 << t_after_sync << "]");
  CHECK(k.ts >= t_launch - kClockTolerance);
  CHECK(k.end() >= t_before_sync - kClockTolerance);
  CHECK(k.end() <= t_after_sync + kClockTolerance);
  CHECK(st.attribution.spans[size_t(Phase::Forward)] >= 1);
  CHECK(st.attribution.gpu_ns[size_t(Phase::Forward)] >= 5'000'000u);

  // Memcpy and memset: the right kinds and sizes, plausible durations (64 MiB: > 1 us, < 1 s).
  bool h2d = false, memset_seen = false;
  for (const Event& e : s.of(EventKind::Memcpy)) {
    const auto c = e.as<ComputeEvent>();
    if (CopyKind(c.sub) == CopyKind::HtoD && decode_bytes32(c.arg) == kBytes) {
      h2d = true;
      CHECK(c.duration() > 1'000);
      CHECK(c.duration() < 1'000'000'000);
    }
  }
  for (const Event& e : s.of(EventKind::Memset)) {
    const auto c = e.as<ComputeEvent>();
    if (decode_bytes32(c.arg) == kBytes) {
      memset_seen = true;
      CHECK(c.duration() > 0);
      CHECK(c.duration() < 1'000'000'000);
    }
  }
  CHECK(h2d);
  CHECK(memset_seen);

  // MEMORY2: cudaMalloc is a segment at the returned address; the pool allocation a block.
  bool segment = false, pool_alloc = false, pool_free = false;
  for (const Event& e : s.of(EventKind::SegmentAlloc))
    segment |= e.as<MemBlockEvent>().addr() == (reinterpret_cast<uint64_t>(dev) & 0xFFFF'FFFF'FFFFull) &&
               e.as<MemBlockEvent>().size() == kBytes;
  for (const Event& e : s.of(EventKind::Alloc))
    pool_alloc |= e.as<MemBlockEvent>().addr() == (reinterpret_cast<uint64_t>(pooled) & 0xFFFF'FFFF'FFFFull) &&
                  e.as<MemBlockEvent>().size() >= kPooled;
  for (const Event& e : s.of(EventKind::FreeRequested))
    pool_free |= e.as<MemBlockEvent>().addr() == (reinterpret_cast<uint64_t>(pooled) & 0xFFFF'FFFF'FFFFull);
  CHECK(segment);
  CHECK(pool_alloc);
  CHECK(pool_free);

  // SYNCHRONIZATION: the cudaDeviceSynchronize waited for the kernel.
  bool device_sync = false;
  for (const Event& e : s.of(EventKind::Sync)) {
    const auto c = e.as<ComputeEvent>();
    if (s.name(c.arg) == "cudaDeviceSynchronize" && c.ts >= t_before_sync - kClockTolerance &&
        c.end() <= t_after_sync + kClockTolerance)
      device_sync = true;
  }
  CHECK(device_sync);

  // MARKER: the NVTX range came back as a Custom range pair.
  bool app_begin = false, app_end = false;
  for (const Event& e : s.of(EventKind::RangeBegin))
    app_begin |= e.as<RangeEvent>().phase == Phase::Custom && s.name(e.as<RangeEvent>().name) == "app range";
  for (const Event& e : s.of(EventKind::RangeEnd))
    app_end |= e.as<RangeEvent>().phase == Phase::Custom && s.name(e.as<RangeEvent>().name) == "app range";
  CHECK(app_begin);
  CHECK(app_end);

  CUDA_OK(cudaMemPoolDestroy(pool));
  CUDA_OK(cudaFree(dev));
  CUDA_OK(cudaFree(done));
  CUDA_OK(cudaFreeHost(host));
  CUDA_OK(cudaStreamDestroy(stream));
}

// (No ';' in test names: ctest's discovery would split them.)
TEST_CASE("after stop nothing is captured, a second capture is refused while one runs, restart works",
          "[cupti][gpu]") {
  require_gpu();
  int* done = nullptr;
  CUDA_OK(cudaMalloc(&done, sizeof(int)));
  {
    Session s;
    CuptiCapture first;
    REQUIRE(first.start(s.rec));
    CuptiOptions quiet;
    quiet.quiet = true;
    CuptiCapture second(quiet);
    CHECK_FALSE(second.start(s.rec));
    CHECK(second.last_error().find("another CuptiCapture") != std::string::npos);
    first.stop();

    // Stopped: kernels run unobserved even though the recorder still records.
    CUDA_OK(memcomm::test::launch_spin(nullptr, 10'000, done));
    CUDA_OK(cudaDeviceSynchronize());
    s.rec.drain_now();
    CHECK(s.of(EventKind::Kernel).empty());

    // CUPTI re-initializes after cuptiFinalize: a new session captures again.
    REQUIRE(second.start(s.rec));
    CUDA_OK(memcomm::test::launch_spin(nullptr, 10'000, done));
    CUDA_OK(cudaDeviceSynchronize());
    second.stop();
    s.rec.stop();
    CHECK(s.of(EventKind::Kernel).size() == 1);
  }
  CUDA_OK(cudaFree(done));
}

#ifdef MEMCOMM_TEST_HAVE_NCCL
TEST_CASE("a 1-rank NCCL all-reduce kernel is recognised as communication", "[cupti][gpu]") {
  require_gpu();
  Session s;
  CuptiCapture cupti;
  REQUIRE(cupti.start(s.rec));
  ncclComm_t comm;
  int device = 0;
  REQUIRE(ncclCommInitAll(&comm, 1, &device) == ncclSuccess);
  constexpr size_t kCount = 1u << 20;
  float *send = nullptr, *recv = nullptr;
  CUDA_OK(cudaMalloc(&send, kCount * sizeof(float)));
  CUDA_OK(cudaMalloc(&recv, kCount * sizeof(float)));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  // ncclAvg: with one rank NCCL turns a plain sum into a copy, but an average needs arithmetic, so
  // it launches a kernel (the communication-kernel rule covers ncclDevKernel_* and that one-rank kernel).
  REQUIRE(ncclAllReduce(send, recv, kCount, ncclFloat, ncclAvg, comm, stream) == ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(stream));
  cupti.stop();
  s.rec.stop();

  std::vector<std::string> names;
  size_t comm_kernels = 0;
  for (const Event& e : s.of(EventKind::Kernel)) {
    const auto k = e.as<ComputeEvent>();
    names.push_back(s.name(k.arg));
    if (k.sub == 1) {
      ++comm_kernels;
      CHECK(CommKernelRule().matches(s.name(k.arg)));
      CHECK(k.duration() > 0);
    }
  }
  std::string all;
  for (const auto& n : names) all += n + "\n";
  INFO("kernels:\n" << all);
  CHECK(comm_kernels >= 1);
  CHECK(cupti.stats().convert.comm_kernels == comm_kernels);

  ncclCommDestroy(comm);
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  CUDA_OK(cudaStreamDestroy(stream));
}
#endif
