// ingest_trace(): one .mct file into a Timeline, through TraceIngest, optionally with
// decompression on a second thread (Note [Fast ingest] in ingest_trace.hpp).
#include "ingest_trace.hpp"

#include <memcomm/trace/trace_reader.hpp>
#include <memcomm/view/prefault.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace memcomm::view {

// Fresh memory a load writes per trace record, for the PrefaultPool's budget: the model's ~27.5
// B/event (Note [Viewer memory budget] in timeline.hpp) plus what finish() builds beside it.
constexpr std::size_t kPrefaultBytesPerEvent = 32;

namespace {
// The rank a chunk's events belong to: the chunk's own (merged files), else the file's, else 0.
std::uint32_t chunk_rank(const prof::TraceReader& reader, const prof::ChunkView& c) {
  const std::uint32_t rank = c.rank != prof::kUnknownRank ? c.rank : reader.header().rank;
  return rank == prof::kUnknownRank ? 0 : rank;
}
}  // namespace

// Note [Decode ahead]: the profiler's TraceReader decompresses and checks chunk k+1 on a second
// thread while chunk k is ingested here. Chunks travel through a small ring of reused buffers; the
// strings each chunk defines travel with it (the reader's table is not touched across threads).
class DecodeAhead {
 public:
  struct Chunk {
    std::vector<prof::Event> events;
    std::uint32_t rank = 0;
    std::vector<std::pair<prof::StringId, std::string>> new_strings;  // defined by this chunk (or before)
    double progress = 0;
  };

  explicit DecodeAhead(const std::string& path) : reader_(path) {
    thread_ = std::thread([this] { run(); });
  }
  ~DecodeAhead() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const prof::TraceReader& reader() const { return reader_; }  // header(), recovery() after the end
  // Next chunk, or nullptr at the end (rethrows the reader's error). Valid until the next call.
  Chunk* next() {
    std::unique_lock<std::mutex> lock(mu_);
    if (held_) {  // give back the previous one
      held_ = false;
      ++consumed_;
      cv_.notify_all();
    }
    cv_.wait(lock, [this] { return produced_ > consumed_ || finished_; });
    if (produced_ == consumed_) {
      if (error_) std::rethrow_exception(error_);
      return nullptr;
    }
    held_ = true;
    return &ring_[consumed_ % kRing];
  }

 private:
  static constexpr std::size_t kRing = 3;
  void run() {
    try {
      prof::ChunkView c;
      std::size_t synced = 0;           // reader strings already handed over
      std::vector<prof::StringId> holes;  // ids undefined when handed over (may be defined later)
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return produced_ - consumed_ < kRing - 1 || stop_; });
          if (stop_) break;
        }
        if (!reader_.next(c)) break;
        Chunk& out = ring_[produced_ % kRing];  // not visible to the consumer until produced_ moves
        out.events.assign(c.begin(), c.end());
        out.rank = chunk_rank(reader_, c);
        out.new_strings.clear();
        const auto& strs = reader_.strings();
        for (std::size_t k = 0; k < holes.size();) {
          if (!strs[holes[k]].empty()) {
            out.new_strings.emplace_back(holes[k], strs[holes[k]]);
            holes[k] = holes.back();
            holes.pop_back();
          } else {
            ++k;
          }
        }
        for (; synced < strs.size(); ++synced) {
          if (strs[synced].empty()) holes.push_back(static_cast<prof::StringId>(synced));
          else out.new_strings.emplace_back(static_cast<prof::StringId>(synced), strs[synced]);
        }
        const auto& info = reader_.recovery();
        out.progress = info.file_bytes ? static_cast<double>(info.bytes_used) / static_cast<double>(info.file_bytes) : 0;
        std::lock_guard<std::mutex> lock(mu_);
        ++produced_;
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    cv_.notify_all();
  }

  prof::TraceReader reader_;
  Chunk ring_[kRing];
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t produced_ = 0, consumed_ = 0;  // chunks decoded / given back
  bool held_ = false, finished_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Note [Clock offsets found first]
// A rank's ClockOffset record (Note [Merging ranks] in event.hpp) is written when the rank learns its
// offset, at rendezvous, after the allocator has already reported the model's first blocks. TraceSet
// shifts every event of the rank by it; an ingest that shifted only the events after the record
// would put those first blocks out of order against the rest, and the memory fold would then see a
// contradiction and fall back to the samples (Note [Memory curves from block events]). So before
// ingesting a per-rank file, the reader reads its first chunks up to the first Step range and takes
// the last ClockOffset record of each rank there (the recorder writes one when it starts, the
// trainer the rendezvous estimate after it; TraceSet too keeps the last). A rank syncs its clock
// before it trains, so the extra decoding stays within the setup chunks; a file without steps is
// read to its end. A record after the first step still shifts the events after it, as before.
namespace {
struct FoundOffset {
  std::int64_t offset = 0;
  std::uint32_t records = 0;  // ClockOffset records of the rank it sums up
};
std::map<std::uint32_t, FoundOffset> find_clock_offsets(const std::string& path) {
  std::map<std::uint32_t, FoundOffset> found;
  prof::TraceReader reader(path);
  if (reader.merged()) return found;  // already on one timeline
  prof::ChunkView c;
  while (reader.next(c)) {
    const std::uint32_t rank = chunk_rank(reader, c);
    for (const prof::Event& e : c) {
      if (e.kind == prof::EventKind::Meta && e.as<prof::MetaEvent>().key == prof::MetaKey::ClockOffset) {
        FoundOffset& f = found[rank];
        f.offset = e.as<prof::MetaEvent>().value;
        ++f.records;
      } else if (e.kind == prof::EventKind::RangeBegin && e.as<prof::RangeEvent>().phase == prof::Phase::Step) {
        return found;
      }
    }
  }
  return found;
}
}  // namespace

void set_range_from(TraceIngest& ingest, std::int64_t t0, const LoadOptions& options) {
  // A range from 0 keeps everything before the first chunk's first event too (other ranks of a
  // merged file, out-of-order events), so no rank's block events count as cut. Times are
  // bounded (Note [Bounded timestamps] in timeline.hpp) so the sums cannot overflow.
  const auto at = [t0 = bounded_time(t0)](double s) {
    return bounded_time(t0 + static_cast<std::int64_t>(std::clamp(s, -4e9, 4e9) * 1e9));
  };
  ingest.set_range(options.range_lo_s <= 0 ? INT64_MIN : at(options.range_lo_s), at(options.range_hi_s));
}

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                  const LoadOptions& options) {
  try {
    std::unique_ptr<DecodeAhead> ahead;
    std::unique_ptr<prof::TraceReader> plain;
    if (options.decode_ahead) ahead = std::make_unique<DecodeAhead>(path);
    else plain = std::make_unique<prof::TraceReader>(path);
    const prof::TraceReader& reader = ahead ? ahead->reader() : *plain;
    // The model's pages are mapped by a second thread while this one decodes and ingests (Note
    // [Prefaulting on the second core] in prefault.cpp), up to about what the model will hold. Not
    // for a time range: how much of the file it keeps is unknown, and the budget would be mapped
    // in vain.
    std::unique_ptr<PrefaultPool> pool;
    if (options.prefault_ahead && !options.has_range()) {
      const std::uint64_t records = ahead ? prof::TraceReader(path).estimate_events() : plain->estimate_events();
      pool = std::make_unique<PrefaultPool>(static_cast<std::size_t>(records) * kPrefaultBytesPerEvent,
                                            std::initializer_list<std::size_t>{SpanRow::kChunkBytes, AllocEvents::kChunkBytes,
                                                                               ChunkedArray<std::int64_t>::kChunkBytes});
    }
    TimelineBuilder b;
    TraceIngest ingest(b);
    const bool merged = reader.merged();
    ingest.set_header_world(merged ? 0 : reader.header().world_size);
    if (!merged)
      for (const auto& [rank, f] : find_clock_offsets(path)) ingest.preset_offset(rank, f.offset, f.records);
    bool first = true;
    std::int64_t first_ns = INT64_MAX, last_ns = INT64_MIN;  // with a range: the span it is measured from
    const auto chunk = [&](const prof::Event* ev, std::size_t n, std::uint32_t rank, const auto& strings) {
      if (options.has_range())
        for (std::size_t i = 0; i < n; ++i) {
          if (!prof::is_known_kind(ev[i].kind)) continue;  // ingest drops it: its time (a corrupt file's) says nothing
          if (first) first_ns = std::min(first_ns, ev[i].ts);
          last_ns = std::max(last_ns, ev[i].ts);
        }
      if (first && options.has_range() && n > 0) set_range_from(ingest, first_ns, options);
      first = false;
      ingest.add(ev, n, rank, strings, !merged);
    };
    if (ahead) {
      std::vector<std::string> strs;  // this thread's copy of the trace's string table
      const auto strings = [&strs](prof::StringId id) { return id < strs.size() ? std::string_view(strs[id]) : std::string_view(); };
      while (DecodeAhead::Chunk* c = ahead->next()) {
        for (auto& [id, text] : c->new_strings) {
          if (strs.size() <= id) strs.resize(id + 1);
          strs[id] = std::move(text);
        }
        chunk(c->events.data(), c->events.size(), c->rank, strings);
        if (progress) *progress = 0.8 * c->progress;
      }
    } else {
      const auto strings = [&reader](prof::StringId id) { return reader.string(id); };
      prof::ChunkView c;
      while (plain->next(c)) {
        chunk(c.events, c.count, chunk_rank(reader, c), strings);
        const auto& info = reader.recovery();
        if (progress && info.file_bytes) *progress = 0.8 * static_cast<double>(info.bytes_used) / static_cast<double>(info.file_bytes);
      }
    }
    out = b.finish(path);
    if (options.has_range() && out.event_count == 0 && first_ns <= last_ns) {
      error = path + ": " + range_kept_nothing(options, first_ns, last_ns);
      return false;
    }
    out.runs = ingest.run_facts(path, merged ? 0 : reader.header().world_size);
    if (options.has_range())
      out.sources.back() += fmt::format(" (range {:.3f}..{:.3f} s)", options.range_lo_s, options.range_hi_s);
    const auto& info = reader.recovery();
    if (info.truncated) out.sources.back() += " (truncated: " + info.detail + ")";
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
