// ingest_kineto(): read_kineto(), the [memory] totals as active memory too, a stable sort by time,
// repeated samples and immediate free requests dropped, then TraceIngest in batches (see
// ingest_kineto.hpp).
#include "ingest_kineto.hpp"

#include "ingest_trace.hpp"

#include <memcomm/trace/event_sort.hpp>
#include <memcomm/trace/kineto.hpp>

#include <fmt/format.h>

#include <malloc.h>

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

// A free the reader wrote as a request and its completion at once (Note [Kineto events as memcomm
// events]): the completion alone ends the block as both do (Note [Allocator fold rules]).
bool request_completed_at_once(const prof::Event& e, const prof::Event& next) {
  if (e.kind != prof::EventKind::FreeRequested || next.kind != prof::EventKind::FreeCompleted || e.ts != next.ts) return false;
  const auto a = e.as<prof::MemBlockEvent>(), b = next.as<prof::MemBlockEvent>();
  return a.device == b.device && a.addr() == b.addr();
}

// What the model need not hold of a converted trace, dropped in one pass over `events` (in time order):
//   - every [memory] event carries both totals, so most samples repeat the value before them
//     (reserved moves rarely; on the host it is 0 throughout). A counter is a step function: a
//     sample equal to the one before it, of its device and metric, draws nothing;
//   - a free's request, completed at once (request_completed_at_once).
// On a 1 GB CPU trace with 1.1 M [memory] events: 3.4 M samples become 1.2 M, 2.3 M block events
// 1.7 M; the memory pane's frames take half the time, allocator seeks fold a quarter fewer events.
void drop_redundant(std::vector<prof::Event>& events) {
  std::map<std::pair<std::uint8_t, prof::MemMetric>, std::uint64_t> last;
  std::size_t out = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == prof::EventKind::MemSample) {
      const auto m = events[i].as<prof::MemSampleEvent>();
      const auto [it, fresh] = last.try_emplace({m.device, m.metric}, m.value);
      if (!fresh && it->second == m.value) continue;
      it->second = m.value;
    } else if (i + 1 < events.size() && request_completed_at_once(events[i], events[i + 1])) {
      continue;
    }
    events[out++] = events[i];
  }
  events.resize(out);
}

// One file's converted events into `b`, in time order, what they say about their run into `runs`,
// and their first and last times into `span` (unchanged when there are none). Returns the reader's
// warning when the file was cut short ("" otherwise). `k` (events, strings) is freed on return.
std::string ingest_events(prof::KinetoTrace k, TimelineBuilder& b, std::atomic<double>* progress,
                          const LoadOptions& options, const std::string& path, std::vector<prof::RunFacts>& runs,
                          std::pair<std::int64_t, std::int64_t>& span) {
  std::vector<prof::Event>& events = k.trace.events;
  add_active_samples(events);
  prof::sort_by_time(events);  // ranges pair LIFO per thread, as TraceSet orders them
  drop_redundant(events);
  TraceIngest ingest(b);
  // The range is measured from the first event the view shows: the file's metadata stand at the
  // recording window's start, which the view leaves out (converter.cpp: Kind::Window), up to a second
  // before it on a sampled trace.
  const auto shown = [](const prof::Event& e) { return e.kind != prof::EventKind::Meta; };
  const auto first = std::find_if(events.begin(), events.end(), shown);
  const auto last = std::find_if(events.rbegin(), events.rend(), shown);
  if (first != events.end()) span = {first->ts, last->ts};
  if (options.has_range() && first != events.end()) set_range_from(ingest, first->ts, options);
  const auto strings = [&k](prof::StringId id) { return k.trace.name(id); };
  for (std::size_t i = 0; i < events.size(); i += kBatch) {
    ingest.add(events.data() + i, std::min(kBatch, events.size() - i), k.trace.rank, strings, false);
    if (progress) *progress = kReadShare + kIngestShare * static_cast<double>(i) / static_cast<double>(events.size());
  }
  runs = ingest.run_facts(path, 0);
  return k.info.truncated ? k.info.truncation : std::string();
}
}  // namespace

bool ingest_kineto(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress,
                   const LoadOptions& options) {
  try {
    TimelineBuilder b;
    prof::KinetoTrace k = prof::read_kineto(path);
    if (progress) *progress = kReadShare;
    std::vector<prof::RunFacts> runs;
    const bool rank_given = k.info.rank_given;
    std::pair<std::int64_t, std::int64_t> span{INT64_MAX, INT64_MIN};  // a range is measured from its first
    const std::string truncation = ingest_events(std::move(k), b, progress, options, path, runs, span);
    out = b.finish(path);
    if (options.has_range() && out.event_count == 0 && span.first <= span.second) {
      error = path + ": " + range_kept_nothing(options, span.first, span.second);
      return false;
    }
    for (RankData& rd : out.ranks) rd.stand_in_id = !rank_given;  // Note [Rank ids across files]
    out.runs = std::move(runs);
    // What the reader and the build freed (JSON windows and events, parsed on several threads;
    // the builder's sort buffers) stays in glibc's arenas: hand it back, so the process holds the
    // model (on a 1 GB trace ~70 MB of RSS).
    malloc_trim(0);
    if (options.has_range())
      out.sources.back() += fmt::format(" (range {:.3f}..{:.3f} s)", options.range_lo_s, options.range_hi_s);
    if (!truncation.empty()) out.sources.back() += " (truncated: " + truncation + ")";
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace memcomm::view
