#include <memcomm/view/loader.hpp>

#include <fmt/format.h>
#include <memcomm/common/input_file.hpp>
#include <memcomm/snapshot/snapshot.hpp>
#include <memcomm/trace/kineto.hpp>
#include <memcomm/trace/trace_format.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// Note [Reader seams]: the readers of every input format live in the trace layer (trace/: .mct and
// torch.profiler traces, and trace/snapshot: PyTorch snapshots); each has one small ingest file
// here that turns what the reader yields into TimelineBuilder calls, so the model never parses a
// format itself.
#include "ingest_kineto.hpp"
#include "ingest_trace.hpp"
#include "ingest_snapshot.hpp"

namespace memcomm::view {

InputKind detect_input(const std::string& path, std::string& error) {
  std::string text, why;
  if (!read_file_head(path, 8, text, why)) {  // Note [Inputs are regular files]
    error = fmt::format("{}: {}", path, why);
    return InputKind::Unknown;
  }
  if (text.empty()) {
    error = fmt::format("{}: empty file", path);
    return InputKind::Unknown;
  }
  const auto* head = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  // Pickles: PROTO (0x80) and the protocol number, or an older protocol's first opcode; the reader
  // says when one is not a snapshot.
  if (snapshot::is_pickle_start(head[0])) return InputKind::TorchSnapshot;
  if (prof::is_mct_start(head, n)) return InputKind::MemcommTrace;
  // torch.profiler traces: gzip or JSON by the trace layer's rule, as memcomm-trace opens them (a
  // legacy trace is a JSON array; leading white space may be long); the reader says when one is not a trace.
  if (prof::is_kineto_candidate(path)) return InputKind::KinetoTrace;
  error = fmt::format("{}: not a memcomm trace (.mct), a torch.profiler trace (.json, .json.gz) or a PyTorch memory "
                      "snapshot pickle (first bytes {:02x} {:02x} {:02x} {:02x})",
                      path, head[0], n > 1 ? head[1] : 0, n > 2 ? head[2] : 0, n > 3 ? head[3] : 0);
  return InputKind::Unknown;
}

std::string range_kept_nothing(const LoadOptions& o, std::int64_t first_ns, std::int64_t last_ns) {
  return fmt::format("--range {:g}:{:g} keeps no event: this file's events span 0..{:.3f} s from its first", o.range_lo_s,
                     o.range_hi_s, (static_cast<double>(last_ns) - static_cast<double>(first_ns)) / 1e9);  // from outside: no overflow
}

bool parse_time_range(const std::string& text, LoadOptions& o, std::string& error) {
  const auto colon = text.find(':');
  double lo = 0, hi = 0;
  bool ok = colon != std::string::npos;
  if (ok) {
    char* end = nullptr;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    lo = std::strtod(a.c_str(), &end);
    ok = !a.empty() && *end == '\0';
    hi = std::strtod(b.c_str(), &end);
    ok = ok && !b.empty() && *end == '\0';
  }
  if (!ok || !(lo >= 0) || !(hi > lo)) {
    error = fmt::format("--range '{}': expected T0:T1 in seconds from the start of the trace, with 0 <= T0 < T1", text);
    return false;
  }
  o.range_lo_s = lo;
  o.range_hi_s = hi;
  return true;
}

bool load_file(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
               const LoadOptions& options) {
  try {
    switch (detect_input(path, error)) {
      case InputKind::Unknown:
        return false;
      case InputKind::MemcommTrace:
        return ingest_trace(path, out, error, progress, options);
      case InputKind::TorchSnapshot:
        if (options.has_range()) {  // its history is one ring buffer, loaded whole
          error = path + ": --range loads a time range of traces; a PyTorch memory snapshot is loaded whole (open it "
                         "without --range)";
          return false;
        }
        return ingest_snapshot(path, out, error, progress);
      case InputKind::KinetoTrace:
        return ingest_kineto(path, out, error, progress, options);
    }
  } catch (const std::exception& e) {  // readers report by exception; the viewer keeps running
    error = fmt::format("{}: {}", path, e.what());
  }
  return false;
}

BackgroundLoad::BackgroundLoad(std::vector<std::string> paths, LoadOptions options)
    : paths_(std::move(paths)), options_(options) {
  thread_ = std::thread([this] { run(); });
}

BackgroundLoad::~BackgroundLoad() {
  if (thread_.joinable()) thread_.join();
}

double BackgroundLoad::progress() const {
  if (paths_.empty()) return 1.0;
  return (static_cast<double>(file_index_.load()) + file_progress_.load()) / static_cast<double>(paths_.size());
}

void BackgroundLoad::run() {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    file_index_ = i;
    file_progress_ = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = paths_[i];
    }
    Timeline one;
    std::string error;
    if (load_file(paths_[i], one, error, &file_progress_, options_)) {
      note_truncation(paths_[i], one);
      for (const std::string& w : one.load_warnings) {
        std::lock_guard<std::mutex> lock(mu_);
        warnings_.push_back(fmt::format("warning: {}: {}", paths_[i], w));
      }
      if (one.shows_nothing()) {  // a snapshot taken before any allocation, a trace of no events: say so, not "No data"
        std::lock_guard<std::mutex> lock(mu_);
        warnings_.push_back(fmt::format("warning: {}: nothing to show: it holds no timed events and no memory", paths_[i]));
      }
      for (RankData& rd : one.ranks) {  // for shown_elsewhere, once merging has renumbered some
        rd.source = paths_[i];
        rd.recorded_rank = rd.rank;
      }
      result_.merge(std::move(one));
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      errors_.push_back(error);
      failed_.push_back(paths_[i]);
    }
  }
  file_index_ = paths_.size();
  file_progress_ = 0;
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done_.store(true, std::memory_order_release);
}

// A file cut short loads up to its last complete chunk or event, and its source says where it
// stopped (" (truncated: DETAIL)"): that becomes a warning beside the errors.
void BackgroundLoad::note_truncation(const std::string& path, const Timeline& one) {
  static const std::string kMark = " (truncated: ";
  for (const std::string& s : one.sources) {
    const auto at = s.find(kMark);
    if (at == std::string::npos) continue;
    std::string detail = s.substr(at + kMark.size());
    if (!detail.empty() && detail.back() == ')') detail.pop_back();
    std::lock_guard<std::mutex> lock(mu_);
    warnings_.push_back(detail.compare(0, path.size(), path) == 0 ? "warning: " + detail
                                                                  : fmt::format("warning: {}: {}", path, detail));
  }
}

std::vector<std::string> BackgroundLoad::warnings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warnings_;
}

Timeline BackgroundLoad::take() {
  if (thread_.joinable()) thread_.join();
  return std::move(result_);
}

std::vector<std::string> BackgroundLoad::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

std::vector<std::string> BackgroundLoad::failed_paths() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

}  // namespace memcomm::view
