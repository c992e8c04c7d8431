// MemorySink and FileSink.
#include "memcomm/profiler/sink.hpp"

#include <fmt/format.h>

#include "memcomm/trace/chunk_codec.hpp"

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

FileSink::FileSink(const std::string& path, const WriterOptions& options, size_t chunk_events, int compress_threads,
                   size_t max_pending)
    : writer_(path, options), chunk_events_(chunk_events ? chunk_events : 1), max_pending_(max_pending ? max_pending : 1) {
  pending_.reserve(chunk_events_);
  if (compress_threads <= 0) {
    inline_enc_ = std::make_unique<ChunkEncoder>(options.codec, options.zstd_level);
  } else {
    for (int i = 0; i < compress_threads; ++i) workers_.emplace_back([this] { worker(); });
  }
}

FileSink::~FileSink() {
  try {
    close();
  } catch (...) {
  }
}

void FileSink::consume(const Batch& b) {
  for (size_t i = 0; i < b.n_strings; ++i) {
    pending_text_.emplace_back(b.strings[i].text);
    pending_strings_.push_back({b.strings[i].id, {}});
  }
  size_t done = 0;
  while (done < b.n_events) {
    const size_t take = std::min(b.n_events - done, chunk_events_ - pending_.size());
    pending_.insert(pending_.end(), b.events + done, b.events + done + take);
    done += take;
    if (pending_.size() >= chunk_events_) write_pending();
  }
}

// Runs with mu_ held by the caller only for bookkeeping; encoding and the write happen unlocked,
// writes in sequence order (a chunk waits in encoded_ until its predecessors are written).
void FileSink::encode_and_write(Job& job, ChunkEncoder& enc, std::vector<char>& bytes) {
  bytes.clear();
  std::string err;
  try {
    for (size_t i = 0; i < job.strings.size(); ++i) job.strings[i].text = job.text[i];
    enc.encode(job.strings.data(), job.strings.size(), job.events.data(), job.events.size(), writer_.options().rank,
               bytes);
  } catch (const std::exception& e) {
    err = e.what();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!err.empty() && error_.empty()) error_ = err;
  encoded_[job.seq] = {err.empty() ? std::move(bytes) : std::vector<char>(), uint64_t(job.events.size())};
  // Whoever finds the next chunk ready writes it (and any that follow); one writer at a time,
  // because only the thread that owns next_write_ advances it.
  while (!encoded_.empty() && encoded_.begin()->first == next_write_) {
    auto node = encoded_.extract(encoded_.begin());
    ++next_write_;
    const bool ok = error_.empty() && !node.mapped().first.empty();
    if (!ok) {
      lost_ += node.mapped().second;
    } else {
      try {
        writer_.write_encoded(node.mapped().first.data(), node.mapped().first.size(), node.mapped().second);
      } catch (const std::exception& e) {
        error_ = e.what();
        lost_ += node.mapped().second;
      }
    }
    --in_flight_;
  }
  bytes.clear();
  cv_written_.notify_all();
  cv_space_.notify_all();
}

void FileSink::worker() {
  ChunkEncoder enc(writer_.options().codec, writer_.options().zstd_level);
  std::vector<char> bytes;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_jobs_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    encode_and_write(job, enc, bytes);
  }
}

void FileSink::write_pending() {
  if (pending_.empty() && pending_strings_.empty()) return;
  Job job;
  job.strings.swap(pending_strings_);
  job.text.swap(pending_text_);
  job.events.swap(pending_);
  pending_.reserve(chunk_events_);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_ || !error_.empty()) {
      lost_ += job.events.size();
      return;
    }
    cv_space_.wait(lock, [&] { return in_flight_ < max_pending_; });
    job.seq = next_seq_++;
    ++in_flight_;
    if (!inline_enc_) {
      jobs_.push_back(std::move(job));
      cv_jobs_.notify_one();
      return;
    }
  }
  encode_and_write(job, *inline_enc_, inline_bytes_);
}

void FileSink::flush() { write_pending(); }

void FileSink::close() {
  write_pending();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return;
    stopping_ = true;
  }
  cv_jobs_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  try {
    writer_.close();
  } catch (const std::exception& e) {
    if (error_.empty()) error_ = e.what();
    if (writer_.removed()) lost_ += writer_.events_written();
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
bool FileSink::removed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writer_.removed();
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
