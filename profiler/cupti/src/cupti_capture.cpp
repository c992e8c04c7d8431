// CuptiCapture: the CUPTI session around ActivityConverter (see cupti_capture.hpp).
//
// Note [CUPTI clock]
// cuptiActivityRegisterTimestampCallback makes CUPTI ask us for every CPU-side timestamp and use
// our clock for its linear GPU-to-CPU interpolation, so kernel start/end come out directly on
// now_ns() (CLOCK_MONOTONIC, Note [TSC clock]) and sit on the same axis as the host phases. It must
// be registered before any kind is enabled. If registration fails we fall back to CUPTI's own clock
// plus an offset measured once at start (now_ns() - cuptiGetTimestamp()), which drifts slowly.
//
// Note [CUPTI callbacks are global]
// CUPTI's buffer callbacks carry no user pointer, and CUPTI's activity API has one client per
// process. So one CuptiCapture at a time is active, published in g_active; a second start() fails
// with a clear message instead of stealing the first one's buffers.
//
// Note [Phase attribution]
// GPU time is charged to the recorder phase that launched it: the range hook pushes an external
// correlation id per phase, and CUPTI ties it to each launch's correlation id in an
// EXTERNAL_CORRELATION record. CUPTI writes that record only beside an API record (it correlates API
// records with external ones), so with RUNTIME and DRIVER off there were none, and the first run on a
// GPU (an H200, bench/results/gpu-20261204) charged a 5 ms kernel launched in Forward to no phase.
// So phase_correlation enables RUNTIME (cudaLaunchKernel, cudaMemcpyAsync...) and DRIVER (launches
// made through the driver directly: NCCL, Triton) too, as Kineto does; the converter turns their
// records into nothing. That is one more record per CUDA call, the price Kineto pays too.
#include "memcomm/profiler/cupti_capture.hpp"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "memcomm/trace/clock.hpp"
#include "memcomm/profiler/recorder.hpp"

namespace memcomm::prof {
namespace {

std::atomic<CuptiCapture*> g_active{nullptr};

constexpr CUpti_ActivityKind kCoreKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "CUPTI error " + std::to_string(int(r));
  return s;
}

std::string describe_failure(const char* call, CUptiResult r) {
  std::string why = std::string(call) + ": " + cupti_error(r);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    why += " (another CUPTI client, e.g. Nsight Systems or Kineto, holds the activity API)";
  return why;
}

// Note [NVTX injection]
// CUPTI sees NVTX ranges (MARKER records) only when NVTX loaded libcupti as its injection library,
// which NVTX decides once, at the process's first NVTX call, from NVTX_INJECTION64_PATH. So start()
// points that variable at the libcupti we are linked with, unless the user (or Nsight Systems) set
// it. If NVTX was already initialized without it, markers simply do not appear; start earlier, or
// export NVTX_INJECTION64_PATH=/path/to/libcupti.so. Once injected, NVTX calls keep going through
// libcupti after stop(); CUPTI then has no MARKER kind enabled and records nothing.
void point_nvtx_at_cupti() {
  if (std::getenv("NVTX_INJECTION64_PATH")) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) && info.dli_fname)
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
}

}  // namespace

struct CuptiCallbacks {
  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    if (CuptiCapture* c = g_active.load(std::memory_order_acquire)) return c->on_buffer_requested(buffer, size, max_records);
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;
  }
  static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    if (CuptiCapture* c = g_active.load(std::memory_order_acquire)) c->on_buffer_completed(ctx, stream, buffer, valid);
  }
  static uint64_t CUPTIAPI timestamp() { return uint64_t(now_ns()); }
  // Range hook: recorder phases become CUPTI external correlation ids (cheap: a per-thread stack push).
  static void phase_begin(void*, Phase p, const char*, uint64_t id) {
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, make_external_id(p, id));
  }
  static void phase_end(void*, Phase) {
    uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }
};

CuptiCapture::CuptiCapture(const CuptiOptions& options) : opt_(options) {
  if (opt_.buffer_bytes < 64 * 1024) opt_.buffer_bytes = 64 * 1024;
  if (opt_.max_buffers < 2) opt_.max_buffers = 2;
  if (opt_.flush_interval_ms < 1) opt_.flush_interval_ms = 1;
}

CuptiCapture::~CuptiCapture() {
  stop();
  for (uint8_t* b : free_buffers_) std::free(b);
}

bool CuptiCapture::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    last_error_ = why;
  }
  if (!opt_.quiet) std::fprintf(stderr, "memcomm: CUPTI capture unavailable: %s; recording host events only\n", why.c_str());
  return false;
}

std::string CuptiCapture::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

bool CuptiCapture::start(Recorder& recorder) {
  if (running()) return recorder_ == &recorder;
  CuptiCapture* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this))
    return fail("another CuptiCapture is already running in this process (Note [CUPTI callbacks are global])");

  // A clearer message than CUPTI's when there is no GPU or driver at all. Counting devices creates
  // no context.
  int devices = 0;
  const cudaError_t ce = cudaGetDeviceCount(&devices);
  if (ce != cudaSuccess || devices == 0) {
    g_active.store(nullptr, std::memory_order_release);
    return fail(ce != cudaSuccess ? std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(ce) + ")"
                                  : std::string("no CUDA device"));
  }

  {
    std::lock_guard<std::mutex> lock(convert_mu_);
    converter_ = std::make_unique<ActivityConverter>([&recorder](std::string_view s) { return recorder.intern(s); });
    converter_->set_skip_host_memory(!opt_.host_memory);
    stats_ = CuptiStats{};
  }
  recorder_ = &recorder;

  // Undo what was done so far. MULTIPLE_SUBSCRIBERS means another client owns CUPTI in this
  // process: finalizing would detach it too, so we leave CUPTI alone then.
  auto abort = [&](const char* call, CUptiResult r) {
    for (int k : enabled_kinds_) cuptiActivityDisable(CUpti_ActivityKind(k));
    enabled_kinds_.clear();
    if (r != CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) cuptiFinalize();
    g_active.store(nullptr, std::memory_order_release);
    recorder_ = nullptr;
    return fail(describe_failure(call, r));
  };

  CUptiResult r = cuptiActivityRegisterCallbacks(&CuptiCallbacks::requested, &CuptiCallbacks::completed);
  if (r != CUPTI_SUCCESS) return abort("cuptiActivityRegisterCallbacks", r);
  if (opt_.markers) point_nvtx_at_cupti();
  r = cuptiActivityRegisterTimestampCallback(&CuptiCallbacks::timestamp);
  bool on_our_clock = r == CUPTI_SUCCESS;
  if (!on_our_clock) {  // Note [CUPTI clock]: fallback
    uint64_t t = 0;
    if (cuptiGetTimestamp(&t) == CUPTI_SUCCESS) {
      std::lock_guard<std::mutex> lock(convert_mu_);
      converter_->set_clock_offset(now_ns() - int64_t(t));
    }
  }

  std::vector<CUpti_ActivityKind> kinds(std::begin(kCoreKinds), std::end(kCoreKinds));
  if (opt_.driver_memory) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
  if (opt_.phase_correlation)  // Note [Phase attribution]
    kinds.insert(kinds.end(), {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME,
                               CUPTI_ACTIVITY_KIND_DRIVER});
  if (opt_.markers) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
  for (CUpti_ActivityKind k : kinds) {
    r = cuptiActivityEnable(k);
    if (r != CUPTI_SUCCESS) return abort("cuptiActivityEnable", r);
    enabled_kinds_.push_back(int(k));
  }

  if (opt_.phase_correlation) {
    RangeHook hook;
    hook.on_begin = &CuptiCallbacks::phase_begin;
    hook.on_end = &CuptiCallbacks::phase_end;
    hook_slot_ = recorder.add_range_hook(hook);
    if (hook_slot_ < 0 && !opt_.quiet)
      std::fprintf(stderr, "memcomm: no free recorder range hook; GPU work will not be attributed to phases\n");
  }
  {
    std::lock_guard<std::mutex> lock(convert_mu_);
    stats_.timestamp_callback = on_our_clock;
  }
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    flush_stop_ = false;
  }
  running_.store(true, std::memory_order_release);
  flusher_ = std::thread([this] { flush_loop(); });
  return true;
}

void CuptiCapture::flush_loop() {
  std::unique_lock<std::mutex> lock(flush_mu_);
  while (!flush_cv_.wait_for(lock, std::chrono::milliseconds(opt_.flush_interval_ms), [this] { return flush_stop_; })) {
    lock.unlock();
    cuptiActivityFlushAll(0);
    lock.lock();
  }
}

void CuptiCapture::flush(bool forced) {
  if (running()) cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

void CuptiCapture::stop() {
  if (!running()) return;
  if (hook_slot_ >= 0) {
    recorder_->remove_range_hook(hook_slot_);
    hook_slot_ = -1;
  }
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    flush_stop_ = true;
  }
  flush_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();

  if (opt_.sync_on_stop) {  // Note [CUPTI teardown]: let running spans complete
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(convert_mu_);
      seen = converter_->devices_seen();
    }
    cuptiActivityFlushAll(0);  // reports devices used since the last periodic flush
    {
      std::lock_guard<std::mutex> lock(convert_mu_);
      seen |= converter_->devices_seen();
    }
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess) {
      for (int d = 0; d < 64; ++d)
        if (seen & (uint64_t(1) << d)) {
          cudaSetDevice(d);
          cudaDeviceSynchronize();
        }
      cudaSetDevice(current);
    }
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (int k : enabled_kinds_) cuptiActivityDisable(CUpti_ActivityKind(k));
  enabled_kinds_.clear();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiFinalize();  // Note [CUPTI teardown]
  running_.store(false, std::memory_order_release);
  g_active.store(nullptr, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(convert_mu_);
    stats_.convert = converter_->stats();
    stats_.attribution = converter_->attribution();
    converter_->reset();
  }
  recorder_ = nullptr;
}

void CuptiCapture::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  std::lock_guard<std::mutex> lock(pool_mu_);
  uint8_t* b = nullptr;
  if (!free_buffers_.empty()) {
    b = free_buffers_.back();
    free_buffers_.pop_back();
  } else if (buffers_allocated_ < opt_.max_buffers) {
    b = static_cast<uint8_t*>(std::aligned_alloc(8, opt_.buffer_bytes));  // CUPTI wants 8-byte alignment
    if (b) ++buffers_allocated_;
  }
  if (!b) {  // bounded memory: CUPTI drops and counts records until a buffer comes back
    std::lock_guard<std::mutex> slock(convert_mu_);
    ++stats_.buffers_denied;
    *buffer = nullptr;
    *size = 0;
    return;
  }
  ++buffers_in_flight_;
  *buffer = b;
  *size = opt_.buffer_bytes;
}

void CuptiCapture::on_buffer_completed(void* ctx, uint32_t stream, uint8_t* buffer, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(convert_mu_);
    Recorder* rec = recorder_;
    CUpti_Activity* record = nullptr;
    scratch_.clear();
    if (converter_ && buffer)
      while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) converter_->convert(*record, scratch_);
    const int64_t now = now_ns();
    for (Event& e : scratch_) {
      if (e.kind == EventKind::Meta) {  // names of streams and threads: never dropped
        e.ts = now;
        if (rec) rec->record_rare(e);
      } else if (rec && rec->enabled()) {
        rec->record(e);
      } else {
        ++stats_.lost_recorder_off;
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(ctx), stream, &dropped) == CUPTI_SUCCESS)
      stats_.cupti_dropped += dropped;
    ++stats_.buffers_completed;
  }
  if (buffer) {
    std::lock_guard<std::mutex> lock(pool_mu_);
    free_buffers_.push_back(buffer);
    --buffers_in_flight_;
  }
}

CuptiStats CuptiCapture::stats() const {
  std::lock_guard<std::mutex> lock(convert_mu_);
  CuptiStats s = stats_;
  if (converter_ && running()) {
    s.convert = converter_->stats();
    s.attribution = converter_->attribution();
  }
  return s;
}

}  // namespace memcomm::prof
