// ingest_kineto(): read_kineto(), the [memory] totals as active memory too, a stable sort by time,
// repeated samples dropped, then TraceIngest in batches (see ingest_kineto.hpp).
#include "ingest_kineto.hpp"

#include "ingest_trace.hpp"

#include <memcomm/trace/event_sort.hpp>
#include <memcomm/trace/kineto.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <utility>
#include <vector>

namespace memcomm::view {

namespace {
// Events per TraceIngest::add() call: progress moves, and the batch stays in cache.
constexpr std::size_t kBatch = 1 << 16;
// Shares of the progress bar: reading and converting the JSON is most of a load.
constexpr double kReadShare = 0.6, kIngestShare = 0.2;

// PyTorch's profiler reports a free when the caching allocator takes the block back, with no
// stream-ordered wait in between, so active memory is allocated memory: each "Total Allocated"
// sample is also the active one. Without it the active curve would come from the block events,
// whose fold misses whatever was allocated before profiling started (Note [Memory curves from
// block events] in memcomm/trace/allocator_fold.hpp), and sit below allocated.
bool is_allocated_sample(const prof::Event& e) {
  return e.kind == prof::EventKind::MemSample && e.as<prof::MemSampleEvent>().metric == prof::MemMetric::Allocated;
}
void add_active_samples(std::vector<prof::Event>& events) {
  const std::size_t n = events.size();
  const auto samples = static_cast<std::size_t>(std::count_if(events.begin(), events.end(), is_allocated_sample));
  if (samples == 0) return;
  events.reserve(n + samples);  // one growth, not a doubling
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_allocated_sample(events[i])) continue;
    auto m = events[i].as<prof::MemSampleEvent>();
    m.metric = prof::MemMetric::Active;
    events.push_back(prof::Event::from(m));
  }
}

// Every [memory] event carries both totals, so most of a trace's samples repeat the value before
// them (reserved moves rarely; on the host it is 0 throughout). A counter is a step function: a
// sample equal to the one before it, of its device and metric, draws nothing and is dropped (on a
// 1 GB CPU trace, 3.4 M samples become 1.2 M, and the memory pane's frames take half the time).
// `events` must be in time order.
void drop_repeated_samples(std::vector<prof::Event>& events) {
  std::map<std::pair<std::uint8_t, prof::MemMetric>, std::uint64_t> last;
  std::size_t out = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == prof::EventKind::MemSample) {
      const auto m = events[i].as<prof::MemSampleEvent>();
      const auto [it, fresh] = last.try_emplace({m.device, m.metric}, m.value);
      if (!fresh && it->second == m.value) continue;
      it->second = m.value;
    }
    events[out++] = events[i];
  }
  events.resize(out);
}
}  // namespace

bool ingest_kineto(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                   const LoadOptions& options) {
  try {
    prof::KinetoTrace k = prof::read_kineto(path);
    if (progress) *progress = kReadShare;
    std::vector<prof::Event>& events = k.trace.events;
    add_active_samples(events);
    prof::sort_by_time(events);  // ranges pair LIFO per thread, as TraceSet orders them
    drop_repeated_samples(events);
    TimelineBuilder b;
    TraceIngest ingest(b);
    if (options.has_range() && !events.empty()) set_range_from(ingest, events.front().ts, options);
    const auto strings = [&k](prof::StringId id) { return k.trace.name(id); };
    for (std::size_t i = 0; i < events.size(); i += kBatch) {
      ingest.add(events.data() + i, std::min(kBatch, events.size() - i), k.trace.rank, strings, false);
      if (progress) *progress = kReadShare + kIngestShare * static_cast<double>(i) / static_cast<double>(events.size());
    }
    events = std::vector<prof::Event>();  // before finish() builds beside the model
    out = b.finish(path);
    if (options.has_range())
      out.sources.back() += fmt::format(" (range {:.3f}..{:.3f} s)", options.range_lo_s, options.range_hi_s);
    if (k.info.truncated) out.sources.back() += " (truncated: " + k.info.truncation + ")";
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
