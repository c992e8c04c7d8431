// CuptiCapture: GPU activity (kernels, copies, memsets, driver memory, syncs, NVTX) into a Recorder.
//
//   prof::CuptiCapture cupti;                  // one active capture per process
//   rec.start();
//   const bool gpu = cupti.start(rec);         // false + one warning line: host events go on
//   ... train ...
//   cupti.stop();                              // flushes, disables everything, cuptiFinalize()
//   rec.stop();
//
// What it enables: CONCURRENT_KERNEL, MEMCPY, MEMSET, MEMORY2, SYNCHRONIZATION, EXTERNAL_CORRELATION
// and MARKER. Records become events as Note [CUPTI record mapping] (cupti_convert.hpp) describes.
// GPU timestamps come out on now_ns()'s clock (Note [CUPTI clock] in cupti_capture.cpp). While it
// runs, each recorder phase pushes an external correlation id, so GPU work is charged to the phase
// that launched it (stats().attribution).
//
// Buffers: at most max_buffers buffers of buffer_bytes each are ever handed to CUPTI. When all are
// in flight CUPTI gets none and drops records; it counts them, and stats().cupti_dropped adds them
// up. A thread calls cuptiActivityFlushAll every flush_interval_ms, so buffers come back and the
// events reach the trace with that delay.
//
// start() and stop() are not thread-safe against each other: call them from one control thread.
//
// Unavailable CUPTI (no GPU or driver, or another CUPTI client such as Nsight Systems holding the
// activity API): start() prints one line to stderr (unless quiet), leaves the reason in
// last_error(), returns false and changes nothing; the recorder keeps recording host events.
//
// Note [CUPTI teardown]
// stop() leaves nothing hooked: it removes the range hook, synchronizes the devices it saw (so that
// running kernels complete and are reported; sync_on_stop = false skips this), force-flushes,
// disables every kind, flushes again and calls cuptiFinalize(), which detaches CUPTI from the process
// so the profiled code runs at its unprofiled speed again. Caveats:
//  - cuptiFinalize() is process-wide: it also detaches any other CUPTI user loaded through the same
//    libcupti (we only call it when our own start() succeeded, so never while Nsight Systems refused
//    us the activity API).
//  - Spans still running at stop() when sync_on_stop is false are reported incomplete and skipped.
//  - CUPTI's kernel name pointers die with cuptiFinalize(), so the name cache is dropped and a later
//    start() (allowed: CUPTI re-initializes) interns names again.
//  - Phase scopes opened before start() and closed after it pop an id they never pushed; CUPTI
//    reports the empty stack as an error, which is ignored.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcomm/profiler/cupti_convert.hpp"

namespace memcomm::prof {

class Recorder;

struct CuptiOptions {
  size_t buffer_bytes = 4u << 20;   // one activity buffer (CUPTI's default is 8 MiB)
  int max_buffers = 8;              // bound on buffers in flight: total memory <= max_buffers * buffer_bytes
  int flush_interval_ms = 100;      // periodic cuptiActivityFlushAll
  bool driver_memory = true;        // MEMORY2. Turn off when the caching allocator already records its
                                    // segments, or they are counted twice in "reserved".
  bool host_memory = false;         // MEMORY2 records of pinned/pageable host memory (device kHostDevice).
                                    // Off by default: the analysis would add them to GPU "reserved".
  bool markers = true;              // MARKER: the application's own NVTX ranges (needs NVTX to load
                                    // libcupti: Note [NVTX injection] in cupti_capture.cpp)
  bool phase_correlation = true;    // EXTERNAL_CORRELATION (and the RUNTIME, DRIVER records it needs)
                                    // + the range hook pushing phase ids (Note [Phase attribution])
  bool sync_on_stop = true;         // cudaDeviceSynchronize() in stop() (Note [CUPTI teardown])
  bool quiet = false;               // no warning line on stderr when CUPTI is unavailable
};

struct CuptiStats {
  ConvertStats convert;             // records seen, events produced, ignored, incomplete, NCCL kernels
  PhaseAttribution attribution;     // GPU time per launching phase
  uint64_t buffers_completed = 0;   // buffers CUPTI handed back
  uint64_t buffers_denied = 0;      // requests refused because max_buffers were in flight
  uint64_t cupti_dropped = 0;       // records CUPTI dropped (cuptiActivityGetNumDroppedRecords)
  uint64_t lost_recorder_off = 0;   // events produced while the recorder was stopped (not recorded)
  bool timestamp_callback = false;  // CUPTI uses now_ns() (else clock offset estimated at start)
};

class CuptiCapture {
 public:
  explicit CuptiCapture(const CuptiOptions& options = {});
  ~CuptiCapture();  // stop()s
  CuptiCapture(const CuptiCapture&) = delete;
  CuptiCapture& operator=(const CuptiCapture&) = delete;

  // Attaches to `recorder` (which must outlive the capture or stop()). Returns false, with one
  // warning line and last_error(), when CUPTI cannot be used; true when already running on it.
  bool start(Recorder& recorder);
  void stop();
  bool running() const { return running_.load(std::memory_order_acquire); }
  // Asks CUPTI for its completed buffers now (the flush thread does this periodically).
  void flush(bool forced = false);

  CuptiStats stats() const;
  std::string last_error() const;
  const CuptiOptions& options() const { return opt_; }

 private:
  friend struct CuptiCallbacks;
  void on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  void on_buffer_completed(void* ctx, uint32_t stream, uint8_t* buffer, size_t valid);
  bool fail(const std::string& why);
  void flush_loop();

  CuptiOptions opt_;
  std::atomic<bool> running_{false};
  Recorder* recorder_ = nullptr;
  int hook_slot_ = -1;
  std::vector<int> enabled_kinds_;  // CUpti_ActivityKind values we enabled, to disable in stop()

  mutable std::mutex convert_mu_;   // converter, scratch and stats (completion can come from 2 threads)
  std::unique_ptr<ActivityConverter> converter_;
  std::vector<Event> scratch_;
  CuptiStats stats_;

  std::mutex pool_mu_;              // buffer pool
  std::vector<uint8_t*> free_buffers_;
  int buffers_allocated_ = 0;
  int buffers_in_flight_ = 0;

  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  bool flush_stop_ = false;
  std::thread flusher_;

  mutable std::mutex error_mu_;
  std::string last_error_;
};

}  // namespace memcomm::prof
