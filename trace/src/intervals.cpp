// Interval arithmetic for the breakdown (Note [Breakdown definitions] in analysis.hpp).
#include <algorithm>

#include "memcomm/trace/intervals.hpp"

namespace memcomm::prof {

void merge_intervals(std::vector<Interval>& v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.begin; }), v.end());
  const auto by_begin = [](const Interval& a, const Interval& b) { return a.begin < b.begin; };
  if (!std::is_sorted(v.begin(), v.end(), by_begin)) std::sort(v.begin(), v.end(), by_begin);
  size_t out = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (out > 0 && v[i].begin <= v[out - 1].end) {
      v[out - 1].end = std::max(v[out - 1].end, v[i].end);
    } else {
      v[out++] = v[i];
    }
  }
  v.resize(out);
}

int64_t merged_length(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const Interval& i : v) n += i.end - i.begin;
  return n;
}

int64_t union_length(std::vector<Interval> v) {
  merge_intervals(v);
  return merged_length(v);
}

int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) n += hi - lo;
    if (a[i].end < b[j].end) ++i; else ++j;
  }
  return n;
}

std::vector<Interval> clip(const std::vector<Interval>& v, int64_t lo, int64_t hi) {
  std::vector<Interval> out;
  auto it = std::lower_bound(v.begin(), v.end(), lo, [](const Interval& i, int64_t t) { return i.end <= t; });
  for (; it != v.end() && it->begin < hi; ++it) {
    const Interval c{std::max(it->begin, lo), std::min(it->end, hi)};
    if (c.end > c.begin) out.push_back(c);
  }
  return out;
}

std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (const Interval& x : a) {
    int64_t cur = x.begin;
    while (j < b.size() && b[j].end <= cur) ++j;
    size_t k = j;
    while (k < b.size() && b[k].begin < x.end) {
      if (b[k].begin > cur) out.push_back({cur, b[k].begin});
      cur = std::max(cur, b[k].end);
      if (cur >= x.end) break;
      ++k;
    }
    if (cur < x.end) out.push_back({cur, x.end});
  }
  return out;
}

}  // namespace memcomm::prof
