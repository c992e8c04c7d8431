#include "ingest_trace.hpp"

#include <memcomm/profiler/trace_reader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace memcomm::view {

namespace {
AllocOp alloc_op(prof::EventKind k) {
  switch (k) {
    case prof::EventKind::Alloc: return AllocOp::Alloc;
    case prof::EventKind::FreeRequested: return AllocOp::FreeRequested;
    case prof::EventKind::FreeCompleted: return AllocOp::FreeCompleted;
    case prof::EventKind::SegmentAlloc:
    case prof::EventKind::SegmentMap: return AllocOp::SegmentAlloc;
    default: return AllocOp::SegmentFree;
  }
}

// Kinds whose state spans chunks: scanned even in chunks outside a time range.
bool pairs_or_meta(prof::EventKind k) {
  using prof::EventKind;
  return k == EventKind::RangeBegin || k == EventKind::RangeEnd || k == EventKind::CollEnqueue ||
         k == EventKind::CollStart || k == EventKind::CollEnd || k == EventKind::Meta || k == EventKind::CommInfo ||
         k == EventKind::Drops;
}
}  // namespace

TraceIngest::TraceIngest(TimelineBuilder& b) : b_(b) {
  for (int p = 0; p < static_cast<int>(prof::Phase::Count); ++p) phase_ids_[p] = b_.intern(prof::phase_name(prof::Phase(p)));
}

TraceIngest::RankState& TraceIngest::state(std::uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return it->second;
  RankState& rs = ranks_[rank];
  rs.phases = &b_.lane_spans(rank, LaneKind::Phase, 0);
  rs.nvtx = &b_.lane_spans(rank, LaneKind::Nvtx, 0);
  rs.alloc = &b_.alloc_events(rank);
  return rs;
}

std::uint32_t TraceIngest::name(RankState& rs, prof::StringId id, Resolve resolve, const void* ctx) {
  if (id < rs.ids.size() && rs.ids[id] != kNoId) return rs.ids[id];
  const std::uint32_t v = b_.intern(resolve(ctx, id));
  if (id < (1u << 24)) {  // a flat table for the dense ids writers hand out; sparse ones are rare
    if (rs.ids.size() <= id) rs.ids.resize(std::max<std::size_t>(id + 1, rs.ids.size() * 2), kNoId);
    rs.ids[id] = v;
  }
  return v;
}

std::uint32_t TraceIngest::sized_name(prof::EventKind kind, std::uint8_t sub, std::uint32_t arg) {
  const std::uint64_t key = (static_cast<std::uint64_t>(kind) << 40) | (static_cast<std::uint64_t>(sub) << 32) | arg;
  auto it = sized_names_.find(key);
  if (it != sized_names_.end()) return it->second;
  const std::uint32_t v =
      kind == prof::EventKind::Memcpy
          ? b_.intern(fmt::format("memcpy {} {} B", prof::copy_kind_name(prof::CopyKind(sub)), prof::decode_bytes32(arg)))
          : b_.intern(fmt::format("memset {} B", prof::decode_bytes32(arg)));
  sized_names_.emplace(key, v);
  return v;
}

void TraceIngest::add_batch(const prof::Event* ev, std::size_t n, std::uint32_t rank, Resolve resolve, const void* ctx,
                            bool apply_offsets) {
  RankState& rs = state(rank);
  if (!apply_offsets) rs.offset = 0;
  bool skip = false;  // the whole batch lies outside the time range (Note [Time range load])
  if (lo_ != INT64_MIN || hi_ != INT64_MAX) {
    std::int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (std::size_t i = 0; i < n; ++i) {
      mn = std::min(mn, ev[i].ts);
      mx = std::max(mx, ev[i].ts);
    }
    // Compute spans start at ts and last at most ~4.3 s (kMaxDuration): pad the chunk's end.
    skip = n > 0 && (mx + rs.offset + static_cast<std::int64_t>(prof::kMaxDuration) < lo_ || mn + rs.offset > hi_);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const prof::Event& e = ev[i];
    if (skip && !pairs_or_meta(e.kind)) continue;
    if (apply_offsets && e.kind == prof::EventKind::Meta) {
      const auto m = e.as<prof::MetaEvent>();
      if (m.key == prof::MetaKey::ClockOffset) rs.offset = m.value;
    }
    add_one(e, rs, rank, resolve, ctx);
  }
}

void TraceIngest::add_one(const prof::Event& e, RankState& rs, std::uint32_t rank, Resolve resolve, const void* ctx) {
  using prof::EventKind;
  const std::int64_t off = rs.offset;
  const auto keep_span = [this](std::int64_t s, std::int64_t t) { return t >= lo_ && s <= hi_; };
  const auto keep_at = [this](std::int64_t t) { return t >= lo_ && t <= hi_; };
  switch (e.kind) {
    case EventKind::Kernel:
    case EventKind::Memcpy:
    case EventKind::Memset: {
      const auto c = e.as<prof::ComputeEvent>();
      const std::int64_t start = c.ts + off, end = c.end() + off;
      if (!keep_span(start, end)) return;
      const int k = e.kind == EventKind::Kernel ? 0 : e.kind == EventKind::Memcpy ? 1 : 2;
      std::vector<Span>*& lane = rs.lanes[k][c.stream];
      if (lane == nullptr) {
        static constexpr LaneKind kinds[3] = {LaneKind::Kernel, LaneKind::Memcpy, LaneKind::Memset};
        lane = &b_.lane_spans(rank, kinds[k], c.stream);
      }
      const std::uint32_t nm = k == 0 ? name(rs, c.arg, resolve, ctx) : sized_name(e.kind, c.sub, c.arg);
      lane->push_back({start, std::max(start, end), nm, 0});
      b_.add_events(1);
      return;
    }
    case EventKind::RangeBegin: {
      const auto r = e.as<prof::RangeEvent>();
      const std::uint32_t nm = r.name ? name(rs, r.name, resolve, ctx)
                                      : phase_ids_[static_cast<int>(r.phase) % static_cast<int>(prof::Phase::Count)];
      rs.open[r.thread].push_back({r.ts + off, r.phase, nm, r.id});
      return;
    }
    case EventKind::RangeEnd: {
      const auto r = e.as<prof::RangeEvent>();
      auto& st = rs.open[r.thread];
      if (st.empty()) return;  // its begin was before the trace started
      const RangeOpen begin = st.back();
      st.pop_back();
      const std::int64_t end = std::max(begin.ts, r.ts + off);
      if (!keep_span(begin.ts, end)) return;
      if (begin.phase == prof::Phase::Custom || static_cast<int>(begin.phase) >= static_cast<int>(prof::Phase::Count))
        rs.nvtx->push_back({begin.ts, end, begin.name, 0});
      else  // phases are named by their kind, so the views can colour and the step table find them
        rs.phases->push_back({begin.ts, end, phase_ids_[static_cast<int>(begin.phase)], static_cast<std::uint32_t>(begin.id)});
      b_.add_events(1);
      return;
    }
    case EventKind::CollEnqueue:
    case EventKind::CollStart:
    case EventKind::CollEnd: {
      const auto c = e.as<prof::CollectiveEvent>();
      const std::uint64_t key = (static_cast<std::uint64_t>(c.comm) << 32) | c.seq;
      if (e.kind != EventKind::CollEnd) {
        auto [it, fresh] = rs.colls.emplace(key, c);
        if (!fresh && e.kind == EventKind::CollStart) it->second = c;  // start beats enqueue
        return;
      }
      auto it = rs.colls.find(key);
      const std::int64_t start = it != rs.colls.end() ? it->second.ts : c.ts;
      if (it != rs.colls.end()) rs.colls.erase(it);
      if (!keep_span(start + off, c.ts + off)) return;
      auto cs = rs.comm_size.find(c.comm);
      b_.collective(rank, prof::coll_op_name(c.op), c.bytes(), c.comm, c.seq, start + off, c.ts + off,
                    cs != rs.comm_size.end() ? cs->second : 0);
      return;
    }
    case EventKind::Alloc:
    case EventKind::FreeRequested:
    case EventKind::FreeCompleted:
    case EventKind::SegmentAlloc:
    case EventKind::SegmentFree:
    case EventKind::SegmentMap:
    case EventKind::SegmentUnmap: {
      const auto m = e.as<prof::MemBlockEvent>();
      if (!keep_at(m.ts + off)) return;
      rs.alloc->push_back({m.ts + off, m.addr(), m.size(), m.stream, alloc_op(e.kind), m.category});
      b_.add_events(1);
      return;
    }
    case EventKind::Oom: {
      const auto o = e.as<prof::OomEvent>();
      if (!keep_at(o.ts + off)) return;
      rs.alloc->push_back({o.ts + off, 0, o.requested, o.stream, AllocOp::Oom});
      b_.add_events(1);
      return;
    }
    case EventKind::MemSample: {
      const auto m = e.as<prof::MemSampleEvent>();
      if (!keep_at(m.ts + off)) return;
      const int metric = static_cast<int>(m.metric);
      const bool ppm = m.metric == prof::MemMetric::Fragmentation;
      CounterSeries* series = metric < static_cast<int>(prof::MemMetric::Count) ? rs.metrics[metric] : nullptr;
      if (series == nullptr) {
        series = &b_.counter_series(rank, prof::mem_metric_name(m.metric), ppm ? "" : "B");
        if (metric < static_cast<int>(prof::MemMetric::Count)) rs.metrics[metric] = series;
      }
      series->add(m.ts + off, ppm ? static_cast<double>(m.value) * 1e-6 : static_cast<double>(m.value));
      b_.add_events(1);
      return;
    }
    case EventKind::Counter: {
      const auto c = e.as<prof::CounterEvent>();
      if (!keep_at(c.ts + off)) return;
      CounterSeries*& series = rs.counters[c.name];
      if (series == nullptr) series = &b_.counter_series(rank, resolve(ctx, c.name));
      series->add(c.ts + off, c.value);
      b_.add_events(1);
      return;
    }
    case EventKind::CommInfo: {
      const auto c = e.as<prof::CommInfoEvent>();
      rs.comm_size[c.comm] = c.size;
      return;
    }
    case EventKind::Drops:
      b_.dropped(rank, e.as<prof::DropEvent>().count);
      return;
    case EventKind::Meta: {
      const auto m = e.as<prof::MetaEvent>();
      if (m.key == prof::MetaKey::Host) b_.host(rank, resolve(ctx, m.str));
      return;
    }
    default:
      return;  // launches and syncs are not drawn yet
  }
}

namespace {

// Per-rank event totals from the chunk headers alone (no checksum, no decompression): sizes the
// final arrays (Note [Fast ingest]). Stops quietly at anything odd; the reader reports it.
std::map<std::uint32_t, std::uint64_t> events_per_rank(const std::string& path, std::uint32_t file_rank) {
  std::map<std::uint32_t, std::uint64_t> out;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return out;
  long pos = sizeof(prof::FileHeader);
  prof::ChunkHeader h{};
  while (std::fseek(f.get(), pos, SEEK_SET) == 0 && std::fread(&h, sizeof h, 1, f.get()) == 1 && h.magic == prof::kChunkMagic) {
    std::uint32_t rank = h.rank != prof::kUnknownRank ? h.rank : file_rank;
    if (rank == prof::kUnknownRank) rank = 0;
    out[rank] += h.event_count;
    pos += static_cast<long>(sizeof h) + static_cast<long>(h.stored_size);
  }
  return out;
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
        const std::uint32_t file_rank = reader_.header().rank;
        out.rank = c.rank != prof::kUnknownRank ? c.rank : file_rank;
        if (out.rank == prof::kUnknownRank) out.rank = 0;
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

bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                  const LoadOptions& options) {
  try {
    TimelineBuilder b;
    TraceIngest ingest(b);
    std::unique_ptr<DecodeAhead> ahead;
    std::unique_ptr<prof::TraceReader> plain;
    if (options.decode_ahead) ahead = std::make_unique<DecodeAhead>(path);
    else plain = std::make_unique<prof::TraceReader>(path);
    const prof::TraceReader& reader = ahead ? ahead->reader() : *plain;
    const bool merged = reader.merged();
    std::map<std::uint32_t, std::uint64_t> left = events_per_rank(path, reader.header().rank);
    std::map<std::uint32_t, bool> sized;
    bool first = true;
    const auto chunk = [&](const prof::Event* ev, std::size_t n, std::uint32_t rank, const auto& strings) {
      if (first && options.has_range() && n > 0) {
        std::int64_t t0 = INT64_MAX;
        for (std::size_t i = 0; i < n; ++i) t0 = std::min(t0, ev[i].ts);
        ingest.set_range(t0 + static_cast<std::int64_t>(options.range_lo_s * 1e9),
                         t0 + static_cast<std::int64_t>(options.range_hi_s * 1e9));
      }
      first = false;
      ingest.add(ev, n, rank, strings, !merged);
      if (!sized[rank] && n > 0) {  // one chunk seen: its mix times the rank's total sizes the arrays
        sized[rank] = true;
        const double total = static_cast<double>(left[rank]);
        if (total > 2.0 * static_cast<double>(n) && !options.has_range())
          b.reserve_scaled(rank, 1.05 * total / static_cast<double>(n));
      }
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
        std::uint32_t rank = c.rank != prof::kUnknownRank ? c.rank : reader.header().rank;
        if (rank == prof::kUnknownRank) rank = 0;
        chunk(c.events, c.count, rank, strings);
        const auto& info = reader.recovery();
        if (progress && info.file_bytes) *progress = 0.8 * static_cast<double>(info.bytes_used) / static_cast<double>(info.file_bytes);
      }
    }
    out = b.finish(path);
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
