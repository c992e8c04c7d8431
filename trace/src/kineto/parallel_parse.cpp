#include "parallel_parse.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace memcomm::prof::kineto {
namespace {

constexpr size_t kBatchBytes = size_t(1) << 20;
constexpr size_t kInFlight = 8;

}  // namespace

unsigned parse_workers() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 ? 0 : std::min(cores - 1, 3u);
}

struct ParallelParse::Impl {
  struct Batch {
    std::string bytes;                              // the elements back to back, then padding
    std::vector<std::pair<size_t, size_t>> spans;   // offset and length of each element
    std::vector<RawEvent> parsed;
    std::vector<std::string> errors;                // "" where the element parsed
    std::string arena;                              // texts the parsed events point at
    std::exception_ptr failure;
    bool done = false;
  };

  static void parse_batch(EventParser& parser, Batch& b) {
    if (b.parsed.size() < b.spans.size()) b.parsed.resize(b.spans.size());  // kept across reuse
    b.errors.resize(b.spans.size());
    b.arena.reserve(b.bytes.size());
    for (size_t i = 0; i < b.spans.size(); ++i) {
      const auto [at, len] = b.spans[i];
      const std::string_view raw(b.bytes.data() + at, len);
      if (parser.parse(raw, b.bytes.size() - at - len, b.parsed[i], b.errors[i])) {
        EventParser::own_strings(b.parsed[i], b.arena);
        b.errors[i].clear();
      } else if (b.errors[i].empty()) {
        b.errors[i] = "unknown error";
      }
    }
  }

  explicit Impl(Converter& c) : converter(c) {}
  Converter& converter;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<std::shared_ptr<Batch>> todo;   // waiting for a worker
  std::deque<std::shared_ptr<Batch>> order;  // every batch not yet converted, in file order
  std::shared_ptr<Batch> filling;
  bool stop = false;

  void work() {
    EventParser parser;
    while (true) {
      std::shared_ptr<Batch> b;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stop || !todo.empty(); });
        if (todo.empty()) return;
        b = todo.front();
        todo.pop_front();
      }
      try {
        parse_batch(parser, *b);
      } catch (...) {
        b->failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      b->done = true;
      done_cv.notify_all();
    }
  }

  void submit() {
    if (!filling || filling->spans.empty()) return;
    filling->bytes.append(kParsePadding, ' ');
    {
      std::lock_guard<std::mutex> lock(mu);
      todo.push_back(filling);
      order.push_back(filling);
    }
    work_cv.notify_one();
    filling.reset();
    convert_ready(false);
  }

  // Converts finished batches at the front of the order; waits while too many are in flight
  // (all of them when `all`).
  void convert_ready(bool all) {
    while (true) {
      std::shared_ptr<Batch> b;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (order.empty()) return;
        const bool must_wait = all || order.size() >= kInFlight;
        if (!order.front()->done && !must_wait) return;
        done_cv.wait(lock, [&] { return order.front()->done; });
        b = order.front();
        order.pop_front();
      }
      if (b->failure) std::rethrow_exception(b->failure);
      for (size_t i = 0; i < b->spans.size(); ++i) {
        if (b->errors[i].empty()) converter.convert(b->parsed[i]);
        else converter.malformed(b->errors[i]);
      }
      recycle(std::move(b));
    }
  }

  // Batches are reused, so their buffers' pages are touched once per reader, not once per batch.
  std::vector<std::shared_ptr<Batch>> spare;
  void recycle(std::shared_ptr<Batch> b) {
    b->bytes.clear();
    b->spans.clear();
    b->arena.clear();
    b->done = false;
    spare.push_back(std::move(b));
  }
  std::shared_ptr<Batch> fresh_batch() {
    if (spare.empty()) return std::make_shared<Batch>();
    std::shared_ptr<Batch> b = std::move(spare.back());
    spare.pop_back();
    return b;
  }
};

ParallelParse::ParallelParse(Converter& converter, unsigned workers) : impl_(std::make_unique<Impl>(converter)) {
  for (unsigned i = 0; i < std::max(workers, 1u); ++i) impl_->threads.emplace_back([this] { impl_->work(); });
}

ParallelParse::~ParallelParse() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->todo.clear();
  }
  impl_->work_cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

void ParallelParse::member(std::string_view key, std::string_view raw_value) { impl_->converter.member(key, raw_value); }

void ParallelParse::event(std::string_view raw, size_t) {
  if (!impl_->filling) {
    impl_->filling = impl_->fresh_batch();
    impl_->filling->bytes.reserve(kBatchBytes + raw.size() + kParsePadding);
  }
  Impl::Batch& b = *impl_->filling;
  b.spans.emplace_back(b.bytes.size(), raw.size());
  b.bytes.append(raw);
  if (b.bytes.size() >= kBatchBytes) impl_->submit();
}

void ParallelParse::drain() {
  impl_->submit();
  impl_->convert_ready(true);
}

}  // namespace memcomm::prof::kineto
