// MemorySink and FileSink.
#include "memcomm/profiler/sink.hpp"

#include <fmt/format.h>

namespace memcomm::prof {

void MemorySink::consume(const Batch& b) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < b.n_strings; ++i) {
    if (b.strings[i].id >= strings_.size()) strings_.resize(b.strings[i].id + 1);
    strings_[b.strings[i].id] = std::string(b.strings[i].text);
  }
  events_.insert(events_.end(), b.events, b.events + b.n_events);
}
std::vector<Event> MemorySink::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}
std::vector<std::string> MemorySink::strings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return strings_;
}
size_t MemorySink::event_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}
void MemorySink::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

FileSink::FileSink(const std::string& path, const WriterOptions& options, size_t chunk_events)
    : writer_(path, options), chunk_events_(chunk_events ? chunk_events : 1) {
  pending_.reserve(chunk_events_);
}

FileSink::~FileSink() {
  try {
    close();
  } catch (...) {
  }
}

void FileSink::consume(const Batch& b) {
  for (size_t i = 0; i < b.n_strings; ++i) pending_text_.emplace_back(b.strings[i].text);
  for (size_t i = 0; i < b.n_strings; ++i) pending_strings_.push_back({b.strings[i].id, {}});
  size_t done = 0;
  while (done < b.n_events) {
    const size_t take = std::min(b.n_events - done, chunk_events_ - pending_.size());
    pending_.insert(pending_.end(), b.events + done, b.events + done + take);
    done += take;
    if (pending_.size() >= chunk_events_) write_pending();
  }
}

void FileSink::write_pending() {
  if (pending_.empty() && pending_strings_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || !error_.empty()) {
    lost_ += pending_.size();
  } else {
    for (size_t i = 0; i < pending_strings_.size(); ++i) pending_strings_[i].text = pending_text_[i];
    try {
      writer_.write_chunk(pending_strings_, pending_);
    } catch (const std::exception& e) {
      error_ = e.what();
      lost_ += pending_.size();
    }
  }
  pending_.clear();
  pending_strings_.clear();
  pending_text_.clear();
}

void FileSink::flush() { write_pending(); }

void FileSink::close() {
  write_pending();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  try {
    writer_.close();
  } catch (const std::exception& e) {
    if (error_.empty()) error_ = e.what();
  }
}

std::string FileSink::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}
uint64_t FileSink::events_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writer_.events_written();
}
uint64_t FileSink::events_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}
uint64_t FileSink::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writer_.bytes_written();
}

std::string rank_trace_path(const std::string& base, int rank) {
  std::string stem = base;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".mct") == 0) stem.resize(stem.size() - 4);
  return fmt::format("{}.rank{}.mct", stem, rank);
}

}  // namespace memcomm::prof
