// Live event-to-pixels latency: a rank streams batches of kernels to an in-process memcomm-view
// (through the profiler's StreamSink, as memcomm-train --live does) while the viewer runs its live
// loop (a frame per 50 ms wait, as App::run does when live). A batch's latency is the time from
// handing it to the sink to the end of the first frame that drew it (its events counted in the
// model the frame was built from). Reported for the first and the last tenth of the batches, since
// the cost of publishing new events may grow with what was received before (Note [Live rebuild]).
// With MIXED = 1, each batch also carries allocator events (an Alloc, FreeRequested, FreeCompleted
// per 4 kernels, in one pool segment), from which the viewer derives its memory curves: the
// allocator-event and counter arrays then grow during the run as well as the kernel lane.
//
//   xvfb-run -a build/bin/bench_live_latency [BATCHES [KERNELS_PER_BATCH [INTERVAL_MS [MIXED]]]]
#include <memcomm/profiler/stream_sink.hpp>
#include <memcomm/view/app/app.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace prof = memcomm::prof;
using Clock = std::chrono::steady_clock;

namespace {
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}
}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 100;
  const int per_batch = argc > 2 ? std::atoi(argv[2]) : 5000;
  const int interval_ms = argc > 3 ? std::atoi(argv[3]) : 20;
  const bool mixed = argc > 4 && std::atoi(argv[4]) != 0;
  if (batches < 10 || per_batch < 1 || interval_ms < 0) {
    std::fprintf(stderr, "usage: bench_live_latency [BATCHES>=10 [KERNELS_PER_BATCH>=1 [INTERVAL_MS>=0 [MIXED 0|1]]]]\n");
    return 2;
  }
  memcomm::view::AppOptions opt;
  opt.hidden = true;
  opt.listen = "127.0.0.1:0";
  memcomm::view::App app(opt);
  std::string error;
  if (!app.open_window(error) || !app.listen(error)) {
    std::fprintf(stderr, "bench_live_latency: %s (run under xvfb-run -a)\n", error.c_str());
    return 1;
  }
  const std::uint16_t port = app.live_port();
  std::vector<Clock::time_point> sent(static_cast<std::size_t>(batches));
  std::vector<std::uint64_t> sent_events(static_cast<std::size_t>(batches));  // events in batches 0..b
  std::atomic<int> n_sent{0};
  std::thread sender([&] {
    prof::StreamOptions so;
    so.endpoint = prof::parse_endpoint("127.0.0.1:" + std::to_string(port));
    so.rank = 0;
    so.world_size = 1;
    so.quiet = true;
    so.max_queued_events = std::size_t{1} << 24;
    prof::StreamSink sink(so);
    const std::vector<prof::StringDef> strings = {{1, "gemm_live"}};
    std::vector<prof::Event> ev;
    std::int64_t t = 0;
    std::uint64_t n_kernels = 0, total = 0;
    const std::uint64_t seg = 0x7f0000000000ull, seg_size = 1ull << 30;
    if (mixed) {  // one pool segment that the blocks live in
      ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::SegmentAlloc, 0, seg, seg_size)));
    }
    for (int b = 0; b < batches; ++b) {
      if (b > 0) ev.clear();
      for (int k = 0; k < per_batch; ++k, t += 1000, ++n_kernels) {
        ev.push_back(prof::Event::from(prof::make_compute(prof::EventKind::Kernel, t, t + 800, 7, 1)));
        if (!mixed) continue;
        if (n_kernels % 4 == 0) {  // a block allocated, freed and reused within the kernel
          const std::uint64_t addr = seg + (n_kernels / 4 % 1024) * (1u << 20);
          ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::Alloc, t + 100, addr, 1u << 20)));
          ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeRequested, t + 600, addr, 1u << 20)));
          ev.push_back(prof::Event::from(prof::make_mem_block(prof::EventKind::FreeCompleted, t + 700, addr, 1u << 20)));
        }
      }
      total += ev.size();
      sent_events[static_cast<std::size_t>(b)] = total;
      prof::Batch batch;
      batch.strings = b == 0 ? strings.data() : nullptr;
      batch.n_strings = b == 0 ? strings.size() : 0;
      batch.events = ev.data();
      batch.n_events = ev.size();
      sent[static_cast<std::size_t>(b)] = Clock::now();
      n_sent.store(b + 1, std::memory_order_release);
      sink.consume(batch);
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    sink.close(10000);
  });
  std::vector<double> latency(static_cast<std::size_t>(batches), -1), frame_ms;
  std::vector<std::pair<std::uint64_t, double>> publish;  // (events shown after it, CPU ms)
  int seen = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (seen < batches && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // App::run waits <= 50 ms while live
    const auto f0 = Clock::now();
    app.frame();
    const auto drawn = Clock::now();
    frame_ms.push_back(std::chrono::duration<double, std::milli>(drawn - f0).count());
    const std::uint64_t shown = app.state().tl.event_count;
    if (app.state().publish_cpu_ms > 0) publish.emplace_back(shown, app.state().publish_cpu_ms);
    const int sent_now = n_sent.load(std::memory_order_acquire);
    while (seen < sent_now && sent_events[static_cast<std::size_t>(seen)] <= shown) {
      latency[static_cast<std::size_t>(seen)] = std::chrono::duration<double, std::milli>(drawn - sent[static_cast<std::size_t>(seen)]).count();
      ++seen;
    }
  }
  sender.join();
  const int tenth = std::max(1, batches / 10);
  const std::vector<double> first(latency.begin(), latency.begin() + tenth), last(latency.end() - tenth, latency.end());
  std::printf("bench_live_latency: %d batches x %d kernels%s every %d ms = %llu events (%d drawn)\n", batches, per_batch,
              mixed ? " + allocator events" : "", interval_ms, static_cast<unsigned long long>(sent_events.back()), seen);
  std::printf("  event-to-pixels, first %d batches: p50 %.1f ms  p95 %.1f ms  max %.1f ms\n", tenth, pct(first, 0.5),
              pct(first, 0.95), pct(first, 1.0));
  std::printf("  event-to-pixels, last %d batches:  p50 %.1f ms  p95 %.1f ms  max %.1f ms\n", tenth, pct(last, 0.5),
              pct(last, 0.95), pct(last, 1.0));
  std::printf("  event-to-pixels, all:              p50 %.1f ms  p95 %.1f ms  max %.1f ms\n", pct(latency, 0.5),
              pct(latency, 0.95), pct(latency, 1.0));
  std::printf("  frame (poll + publish + build + GL), ms: p50 %.1f  p95 %.1f  max %.1f\n", pct(frame_ms, 0.5),
              pct(frame_ms, 0.95), pct(frame_ms, 1.0));
  // Publishing new events into the model (Note [Live rebuild]) should cost O(new events), the
  // same late in the run as early: CPU time, so other processes on the machine do not inflate it.
  const std::size_t pt = std::max<std::size_t>(1, publish.size() / 10);
  std::vector<double> early, late;
  for (std::size_t i = 0; i < publish.size(); ++i) (i < pt ? early : late).push_back(publish[i].second);
  if (late.size() > pt) late.erase(late.begin(), late.end() - static_cast<std::ptrdiff_t>(pt));
  std::printf("  publish (append + indexes), CPU ms: first %zu p50 %.2f p95 %.2f | last %zu (at %.2f M events) p50 %.2f p95 %.2f\n",
              early.size(), pct(early, 0.5), pct(early, 0.95), late.size(),
              publish.empty() ? 0.0 : static_cast<double>(publish.back().first) / 1e6, pct(late, 0.5), pct(late, 0.95));
  std::vector<double> all_pub;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < publish.size(); ++i) {
    all_pub.push_back(publish[i].second);
    if (publish[i].second > publish[worst].second) worst = i;
  }
  if (app.state().allocations_rebuilds > 0) {
    const auto& last_rank = app.state().tl.ranks.back();
    std::printf("  allocation lifetimes rebuilt %llu times (Note [Live allocations]); the last: %.2f CPU ms for %zu "
                "allocations from %zu block events\n",
                static_cast<unsigned long long>(app.state().allocations_rebuilds), app.state().allocations_cpu_ms,
                last_rank.allocations.list.size(), last_rank.alloc_events.size());
  }
  if (!publish.empty())
    std::printf("  publish, all %zu: p50 %.2f p95 %.2f max %.2f CPU ms (the max at %.2f M events)\n", all_pub.size(),
                pct(all_pub, 0.5), pct(all_pub, 0.95), pct(all_pub, 1.0), static_cast<double>(publish[worst].first) / 1e6);
  return seen == batches ? 0 : 1;
}
