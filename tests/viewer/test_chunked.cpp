// See Note [Chunked arrays]: the model's per-event arrays keep elements in fixed-size chunks, so that a
// live append never copies what is stored. Checked here: element order and values across chunk
// boundaries, stability of stored elements while the array grows, reserve/truncate/shrink, copies
// and moves, the std algorithms the views use (binary search, sort), span queries that straddle a
// boundary, and builder appends of several chunks in pieces against a one-shot build.
#include "memcomm_test.hpp"

#include <memcomm/view/builder.hpp>
#include <memcomm/view/chunked.hpp>
#include <memcomm/view/span_query.hpp>

#include <algorithm>
#include <random>
#include <vector>

using namespace memcomm::view;
using memcomm::prof::EventKind;

namespace {

using Ints = ChunkedArray<std::int64_t>;
constexpr std::size_t kC = Ints::kChunk;

Ints iota(std::size_t n) {
  Ints a;
  for (std::size_t i = 0; i < n; ++i) a.push_back(static_cast<std::int64_t>(i));
  return a;
}

void check_iota(const Ints& a, std::size_t n) {
  REQUIRE(a.size() == n);
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && a[i] == static_cast<std::int64_t>(i);
  CHECK(ok);
  if (n > 0) {
    CHECK(a.front() == 0);
    CHECK(a.back() == static_cast<std::int64_t>(n - 1));
  }
}

}  // namespace

TEST_CASE("chunked array: elements keep their order across chunk boundaries", "[unit][viewer]") {
  static_assert((kC & (kC - 1)) == 0, "chunks are a power of two");
  CHECK(kC * sizeof(std::int64_t) <= (std::size_t{1} << 20));
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, kC - 1, kC,
                        kC + 1, 3 * kC, 3 * kC + 5}) {
    INFO("n = " << n);
    const Ints a = iota(n);
    check_iota(a, n);
    CHECK(a.chunk_count() == (n + kC - 1) / kC);
    std::size_t seen = 0;
    bool contiguous = true;
    a.for_each_chunk([&](const std::int64_t* p, std::size_t k) {
      for (std::size_t i = 0; i < k; ++i) contiguous = contiguous && p[i] == static_cast<std::int64_t>(seen + i);
      seen += k;
    });
    CHECK(contiguous);
    CHECK(seen == n);
    CHECK(static_cast<std::size_t>(a.end() - a.begin()) == n);
  }
}

TEST_CASE("chunked array: small arrays stay small and growth never moves a full chunk", "[unit][viewer]") {
  Ints a;
  a.push_back(1);
  CHECK(a.capacity() == Ints::kFirst);  // not a whole chunk for one element
  CHECK(a.memory_bytes() < 1024);
  a = iota(kC);                         // chunk 0 full
  const std::int64_t* first = &a[0];
  const std::int64_t* mid = &a[kC / 2];
  for (std::size_t i = kC; i < 4 * kC + 3; ++i) a.push_back(static_cast<std::int64_t>(i));
  CHECK(&a[0] == first);  // stored elements were not copied by the growth
  CHECK(&a[kC / 2] == mid);
  check_iota(a, 4 * kC + 3);
  CHECK(a.capacity() == 5 * kC);  // full chunks after the first: one partly used
}

TEST_CASE("chunked array: append and reserve and truncate and shrink", "[unit][viewer]") {
  std::vector<std::int64_t> src(2 * kC + 100);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::int64_t>(i);
  Ints a;
  a.append(src.data(), 10);                       // inside chunk 0
  a.append(src.data() + 10, src.size() - 10);     // across two boundaries
  check_iota(a, src.size());

  Ints b;
  b.reserve(3 * kC + 1);
  CHECK(b.capacity() == 3 * kC + 1);  // exact, like vector::reserve
  const std::size_t reserved = b.capacity();
  b.append(a);
  for (std::size_t i = src.size(); i < 3 * kC + 1; ++i) b.push_back(static_cast<std::int64_t>(i));
  CHECK(b.capacity() == reserved);  // no allocation while within the reservation
  check_iota(b, 3 * kC + 1);

  b.truncate(kC + 3);
  check_iota(b, kC + 3);
  b.push_back(static_cast<std::int64_t>(kC + 3));  // continues where the truncation left off
  check_iota(b, kC + 4);
  b.shrink_to_fit();
  CHECK(b.capacity() == kC + 4);
  check_iota(b, kC + 4);
  b.truncate(kC);
  b.push_back(static_cast<std::int64_t>(kC));  // at a boundary after a truncation
  check_iota(b, kC + 1);
  b.clear();
  CHECK(b.empty());
  b.shrink_to_fit();
  CHECK(b.capacity() == 0);
  b.push_back(0);
  check_iota(b, 1);
}

TEST_CASE("chunked array: copies are deep and moves take the chunks", "[unit][viewer]") {
  Ints a = iota(2 * kC + 7);
  const std::int64_t* p = &a[kC];
  Ints copy = a;
  copy[kC] = -1;
  CHECK(a[kC] == static_cast<std::int64_t>(kC));
  Ints moved = std::move(a);
  CHECK(&moved[kC] == p);  // O(1): the same chunks
  CHECK(a.empty());        // NOLINT(bugprone-use-after-move): a moved-from array is empty and usable
  a.push_back(0);
  check_iota(a, 1);
  check_iota(moved, 2 * kC + 7);
  Ints self = iota(kC + 2);
  self.append(self);  // appending itself doubles it
  REQUIRE(self.size() == 2 * kC + 4);
  CHECK(self[kC + 2] == 0);
  CHECK(self.back() == static_cast<std::int64_t>(kC + 1));
}

TEST_CASE("chunked array: binary search and sort across chunks", "[unit][viewer]") {
  const Ints a = iota(3 * kC);
  for (std::size_t i : {std::size_t{0}, kC - 1, kC, kC + 1, 2 * kC, 3 * kC - 1}) {
    auto it = std::lower_bound(a.begin(), a.end(), static_cast<std::int64_t>(i));
    CHECK(static_cast<std::size_t>(it - a.begin()) == i);
    CHECK(*it == static_cast<std::int64_t>(i));
  }
  CHECK(std::lower_bound(a.begin(), a.end(), static_cast<std::int64_t>(3 * kC)) == a.end());
  Ints r;
  std::mt19937 rng(1);
  for (std::size_t i = 0; i < 2 * kC + 9; ++i) r.push_back(static_cast<std::int64_t>(rng() % 100000));
  std::vector<std::int64_t> ref(r.begin(), r.end());
  std::sort(r.begin(), r.end());
  std::sort(ref.begin(), ref.end());
  CHECK(std::equal(r.begin(), r.end(), ref.begin(), ref.end()));
}

TEST_CASE("chunked lower_bound_index agrees with std::lower_bound on any subrange", "[unit][viewer]") {
  // Sorted with runs of equal values, some of them across chunk boundaries.
  Ints a;
  for (std::size_t i = 0; i < 3 * kC + 77; ++i) a.push_back(static_cast<std::int64_t>(i / 5));
  const std::vector<std::int64_t> v(a.begin(), a.end());
  const auto less = [](std::int64_t x, std::int64_t y) { return x < y; };
  const auto less_eq = [](std::int64_t x, std::int64_t y) { return x <= y; };  // upper bound
  std::mt19937 rng(9);
  for (int trial = 0; trial < 500; ++trial) {
    std::size_t lo = rng() % (v.size() + 1), hi = rng() % (v.size() + 1);
    if (lo > hi) std::swap(lo, hi);
    if (trial % 5 == 0) lo = (rng() % 3) * kC;  // ranges starting on a boundary
    if (trial % 7 == 0) hi = std::min(v.size(), ((rng() % 3) + 1) * kC);
    if (lo > hi) std::swap(lo, hi);
    const auto x = static_cast<std::int64_t>(rng() % (v.size() / 5 + 3)) - 1;
    const auto d = static_cast<std::ptrdiff_t>(lo), e = static_cast<std::ptrdiff_t>(hi);
    INFO("[" << lo << ", " << hi << ") value " << x);
    CHECK(lower_bound_index(a, lo, hi, x, less) ==
          static_cast<std::size_t>(std::lower_bound(v.begin() + d, v.begin() + e, x) - v.begin()));
    CHECK(lower_bound_index(a, lo, hi, x, less_eq) ==
          static_cast<std::size_t>(std::upper_bound(v.begin() + d, v.begin() + e, x) - v.begin()));
  }
  CHECK(lower_bound_index(a, std::int64_t{-1}, less) == 0);
  CHECK(lower_bound_index(a, a.back() + 1, less) == a.size());
  CHECK(lower_bound_index(Ints(), std::int64_t{0}, less) == 0);
}

TEST_CASE("span queries across a chunk boundary see every span once", "[unit][viewer]") {
  constexpr std::size_t kSpanChunk = SpanRow::kChunk;
  SpanRow row;
  for (std::size_t i = 0; i < 2 * kSpanChunk + 10; ++i) {
    const auto s = static_cast<TimeNs>(i) * 100;
    row.push_back({s, s + 60, 0, static_cast<std::uint32_t>(i)});
  }
  // Wide spans (min 1 ns) in a window around the boundary: drawn one by one, in order.
  const auto b = static_cast<TimeNs>(kSpanChunk) * 100;
  std::vector<DrawSpan> out;
  query_spans(row, b - 1'000, b + 1'000, 1, out);
  REQUIRE(out.size() == 20);
  for (std::size_t k = 0; k < out.size(); ++k) {
    CHECK(out[k].first == kSpanChunk - 10 + k);
    CHECK(out[k].count == 1);
  }
  // Narrow spans merge into marks that straddle the boundary and still count every span.
  out.clear();
  query_spans(row, 0, static_cast<TimeNs>(row.size()) * 100, 10'000, out);
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (k) CHECK(out[k].first == out[k - 1].first + out[k - 1].count);
    total += out[k].count;
  }
  CHECK(total == row.size());
  CHECK(span_at(row, b + 30, 0) == static_cast<std::int64_t>(kSpanChunk));
  CHECK(span_at(row, b - 70, 0) == static_cast<std::int64_t>(kSpanChunk - 1));
  CHECK(span_at(row, b - 20, 0) == -1);
}

TEST_CASE("builder appends of several chunks in pieces match a one-shot build", "[unit][viewer]") {
  // Kernels, allocator events and counter samples, each more than two chunks, published in pieces
  // of random sizes (as live mode does), then compared with finish() over the same events.
  const std::size_t n = 2 * SpanRow::kChunk + 333;
  const auto feed = [&](TimelineBuilder& b, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      const auto t = static_cast<TimeNs>(i) * 1000;
      b.kernel(0, 7, i % 3 ? "gemm" : "softmax", t, t + 600);
      b.alloc_event(0, {t + 1, 0x1000 + (i % 64) * 256, 256, 0, i % 2 ? EventKind::FreeCompleted : EventKind::Alloc});
      b.counter(0, "loss", t + 2, static_cast<double>(i % 977));
    }
  };
  TimelineBuilder once;
  feed(once, 0, n);
  const Timeline whole = once.finish("whole");

  TimelineBuilder live;
  Timeline tl;
  std::mt19937 rng(3);
  const Span* first_span = nullptr;
  for (std::size_t at = 0; at < n;) {
    const std::size_t k = std::min(n - at, std::size_t{1} + rng() % 9000);
    feed(live, at, at + k);
    at += k;
    live.append_to(tl);
    const auto& row = tl.ranks.at(0).lanes.at(0).rows.at(0);
    if (first_span == nullptr && row.size() >= SpanRow::kChunk) first_span = &row[0];
    if (first_span != nullptr) CHECK(&row[0] == first_span);  // published spans are never copied again
  }
  REQUIRE(tl.ranks.size() == 1);
  const RankData &x = tl.ranks[0], &y = whole.ranks[0];
  CHECK(tl.event_count == whole.event_count);
  REQUIRE(x.lanes.size() == y.lanes.size());
  const auto& rx = x.lanes[0].rows;
  const auto& ry = y.lanes[0].rows;
  REQUIRE(rx.size() == ry.size());
  REQUIRE(rx[0].size() == n);
  bool same_spans = rx[0].size() == ry[0].size();
  for (std::size_t i = 0; same_spans && i < n; ++i)
    same_spans = rx[0][i].start == ry[0][i].start && rx[0][i].end == ry[0][i].end && rx[0][i].name == ry[0][i].name;
  CHECK(same_spans);
  REQUIRE(x.alloc_events.size() == y.alloc_events.size());
  bool same_alloc = true;
  for (std::size_t i = 0; i < x.alloc_events.size(); ++i)
    same_alloc = same_alloc && x.alloc_events[i].t == y.alloc_events[i].t && x.alloc_events[i].op == y.alloc_events[i].op;
  CHECK(same_alloc);
  const CounterSeries *cx = x.counter("loss"), *cy = y.counter("loss");
  REQUIRE((cx != nullptr && cy != nullptr));
  REQUIRE(cx->size() == cy->size());
  CHECK(cx->level_count() == cy->level_count());
  double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  const TimeNs mid = static_cast<TimeNs>(SpanRow::kChunk) * 1000;
  CHECK(cx->range_min_max(mid - 50'000, mid + 50'000, a0, a1));
  CHECK(cy->range_min_max(mid - 50'000, mid + 50'000, b0, b1));
  CHECK((a0 == b0 && a1 == b1));
  const auto* derived = x.counter("allocated");  // curves derived from the allocator events
  REQUIRE(derived != nullptr);
  CHECK(derived->size() == y.counter("allocated")->size());
  CHECK(derived->global_max() == y.counter("allocated")->global_max());
}
