// sort_by_time and merge_sorted_runs: Note [Nearly sorted] in event_sort.hpp.
#include "memcomm/trace/event_sort.hpp"

#include <algorithm>

namespace memcomm::prof {

namespace {
bool by_ts(const Event& a, const Event& b) { return a.ts < b.ts; }
}  // namespace

// Sorted runs this few or fewer are merged rather than sorted (Note [Nearly sorted]).
constexpr size_t kFewRuns = 16;

void sort_by_time(std::vector<Event>& v) {
  const size_t n = v.size();
  std::vector<size_t> runs{0};
  for (size_t i = 1; i < n && runs.size() <= kFewRuns; ++i)
    if (v[i].ts < v[i - 1].ts) runs.push_back(i);
  if (runs.size() <= kFewRuns) {
    runs.push_back(n);
    merge_sorted_runs(v, runs);  // one run: nothing to do
    return;
  }
  size_t budget = 16 * n + 1024;  // element moves allowed before giving up on insertion
  for (size_t i = 1; i < n; ++i) {
    if (v[i].ts >= v[i - 1].ts) continue;
    const Event tmp = v[i];
    size_t j = i;
    while (j > 0 && v[j - 1].ts > tmp.ts && budget > 0) {
      v[j] = v[j - 1];
      --j;
      --budget;
    }
    v[j] = tmp;
    if (budget == 0) {
      std::stable_sort(v.begin(), v.end(), by_ts);
      return;
    }
  }
}

void merge_sorted_runs(std::vector<Event>& v, const std::vector<size_t>& bounds) {
  // bounds: b0=0 < b1 < ... < bk = size. Bottom-up pairwise merging.
  std::vector<size_t> b = bounds;
  while (b.size() > 2) {
    std::vector<size_t> next;
    next.push_back(b[0]);
    for (size_t i = 0; i + 2 < b.size(); i += 2) {
      std::inplace_merge(v.begin() + long(b[i]), v.begin() + long(b[i + 1]), v.begin() + long(b[i + 2]), by_ts);
      next.push_back(b[i + 2]);
    }
    if (b.size() % 2 == 0) next.push_back(b.back());  // odd number of runs: the last one waits
    b.swap(next);
  }
}

}  // namespace memcomm::prof
