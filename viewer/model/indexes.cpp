#include <memcomm/view/indexes.hpp>

#include <atomic>
#include <exception>
#include <system_error>
#include <thread>

namespace memcomm::view {

// Note [Parallel indexes]: after a load, memcomm-view folds each rank's allocator events into
// checkpoints, computes the step table and the summary: ~0.13 s of one core for 10 M events in a
// fresh process (bench_load: 0.05 s checkpoints, 0.08 s step table + summary), a fifth of the
// load. Each rank's checkpoints and each rank's step rows read only that rank's arrays, so they
// are separate jobs, taken in order (step rows first, the largest) by this thread and a second
// one; the step rows are concatenated in slot order afterwards, which is step_table()'s order.
// The summary, the cheapest, is the last job. Measured with 2 ranks and the second core idle:
// 0.045-0.07 s wall (this thread ~0.045 s). memcomm-view used to run only the step table beside
// the checkpoints, and the summary after both.
TimelineIndexes build_indexes(const Timeline& tl) {
  TimelineIndexes out;
  const std::size_t ranks = tl.ranks.size();
  out.alloc.resize(ranks);
  const std::vector<prof::Phase> kind_of = phase_kinds(tl);
  std::vector<std::vector<StepRow>> steps(ranks);
  // Jobs 0..ranks-1: step rows of a slot; ranks..2*ranks-1: checkpoints of a slot; 2*ranks: summary.
  const std::size_t jobs = 2 * ranks + 1;
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < jobs;) {
      if (j < ranks) step_rows(tl, j, kind_of, steps[j]);
      else if (j < 2 * ranks) out.alloc[j - ranks] = std::make_unique<AllocatorTimeline>(&tl.ranks[j - ranks].alloc_events);
      else out.summary = summarize(tl);
    }
  };
  // An exception in either thread must not reach std::terminate: the helper's is caught into
  // helper_error and rethrown here after the join, and the join also runs (Join) when this
  // thread's work() throws. Without a thread to spare, this thread does every job.
  std::exception_ptr helper_error;
  std::thread helper;
  if (jobs > 2 && std::thread::hardware_concurrency() > 1) {
    try {
      helper = std::thread([&] {
        try {
          work();
        } catch (...) {
          helper_error = std::current_exception();
        }
      });
    } catch (const std::system_error&) {
    }
  }
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{helper};
  work();
  if (helper.joinable()) helper.join();
  if (helper_error) std::rethrow_exception(helper_error);
  std::size_t n = 0;
  for (const auto& s : steps) n += s.size();
  out.steps.reserve(n);
  for (const auto& s : steps) out.steps.insert(out.steps.end(), s.begin(), s.end());
  return out;
}

}  // namespace memcomm::view
