// Loads files into a Timeline on a background thread, with progress and errors that name the file
// and what was wrong. Detects the input by content: memcomm traces (.mct, through the trace
// layer's reader), torch.profiler (Kineto) traces (.json, .json.gz, through its read_kineto) and
// PyTorch memory snapshot pickles (through memcomm_snapshot); anything else is refused with a message.
#pragma once

#include <memcomm/view/timeline.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace memcomm::view {

enum class InputKind { MemcommTrace, KinetoTrace, TorchSnapshot, Unknown };
InputKind detect_input(const std::string& path, std::string& error);

// How to load (memcomm traces; snapshots are always loaded whole).
struct LoadOptions {
  // Keep only events overlapping [range_lo_s, range_hi_s], seconds from the first event of each
  // file (Note [Time range load] in ingest_trace.hpp); off when range_hi_s <= range_lo_s.
  double range_lo_s = 0, range_hi_s = 0;
  // Decompress the next chunk on a second thread while this one is ingested (Note [Decode
  // ahead]). Off on machines with 2 cores or fewer: measured there (shared with other work) it
  // cost more than it saved.
  bool decode_ahead = std::thread::hardware_concurrency() > 2;
  // Map the model's fresh pages on a second thread while this one decodes and ingests (Note
  // [Prefaulting on the second core] in prefault.cpp). On with more than one core; not used for
  // time-range loads.
  bool prefault_ahead = std::thread::hardware_concurrency() > 1;
  bool has_range() const { return range_hi_s > range_lo_s; }
};
// Why a file whose events span [first_ns, last_ns] loaded nothing under `o`'s range: the range's
// message for a load error, as memcomm-trace memory --at past a trace's end is one.
std::string range_kept_nothing(const LoadOptions& o, std::int64_t first_ns, std::int64_t last_ns);
// Parses "T0:T1" (seconds, T0 < T1, both >= 0) into `o`; false with a message otherwise.
bool parse_time_range(const std::string& text, LoadOptions& o, std::string& error);
// Files at least this large get the "choose a time range first" prompt in the UI.
inline constexpr std::uint64_t kRangePromptBytes = 1ull << 30;

// Loads one file synchronously; on failure returns false and sets `error` (never throws).
bool load_file(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress = nullptr,
               const LoadOptions& options = {});

// One background load of a set of files. The GUI polls done() each frame and takes the result.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(std::vector<std::string> paths, LoadOptions options = {});
  ~BackgroundLoad();
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  double progress() const;                 // 0..1 over all files
  std::string current_file() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  // After done(): the merged result and one message per failed file.
  Timeline take();
  std::vector<std::string> errors() const;
  std::vector<std::string> failed_paths() const;  // the paths whose load failed (errors() says why)
  std::vector<std::string> warnings() const;  // files loaded only up to where they were cut short, or empty
  double seconds() const { return seconds_; }

 private:
  void run();
  void note_truncation(const std::string& path, const Timeline& one);
  std::vector<std::string> paths_;
  LoadOptions options_;
  Timeline result_;
  std::vector<std::string> errors_, warnings_, failed_;
  mutable std::mutex mu_;
  std::atomic<double> file_progress_{0};
  std::atomic<std::size_t> file_index_{0};
  std::string current_;
  std::atomic<bool> done_{false};
  double seconds_ = 0;
  std::thread thread_;
};

}  // namespace memcomm::view
