// The tuner's search against synthetic memory and speed models, each checked against an exhaustive
// search computed here.
#include "memcomm/tuner/report.hpp"
#include "memcomm/tuner/search.hpp"
#include "memcomm/tuner/verify.hpp"
#include "memcomm_test.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace memcomm::tune;

namespace {

// A model whose allocated peak is a + c*b + q*b^2 bytes, reserved adds 6% and rounds up to 2 MiB,
// and whose micro-step takes t0 + t1*b seconds, slowed beyond `knee` (cache pressure).
struct Synthetic {
  double a = 200e6, c = 3e6, q = 0;
  int64_t limit = 1LL << 30;
  double t0 = 2e-3, t1 = 1e-4, knee = 1e9, penalty = 0;
  int64_t loader = 0;  // each probe's loader allowance (bytes its prefetched batches would hold)
  double noise = 0;     // each probe's step_noise
  double bucket_5_speedup = 1;  // a step with 5 MiB buckets takes 1/this of the time
  int probes = 0;

  int64_t allocated(int64_t b) const { return static_cast<int64_t>(a + c * double(b) + q * double(b) * double(b)); }
  int64_t reserved(int64_t b) const {
    const double r = double(allocated(b)) * 1.06;
    return static_cast<int64_t>(std::ceil(r / double(2 << 20)) * double(2 << 20));
  }
  bool fits(int64_t b) const { return reserved(b) <= limit; }
  double micro_s(int64_t b) const { return t0 + t1 * double(b) + (double(b) > knee ? penalty * (double(b) - knee) : 0); }

  ProbeResult operator()(const ProbeRequest& r) {
    ++probes;
    ProbeResult x;
    x.measured_accum = static_cast<int>(r.accum);
    if (!fits(r.micro_batch)) {
      x.oom = true;
      x.oom_where = "backward";
      x.oom_rank = 0;
      return x;
    }
    x.peak_allocated = allocated(r.micro_batch);
    x.peak_reserved = reserved(r.micro_batch);
    x.loader_allowance = loader;
    x.step_noise = noise;
    x.step_s = (double(r.accum) * micro_s(r.micro_batch) + 1e-3) / (r.bucket_mb == 5 ? bucket_5_speedup : 1);
    return x;
  }
};

int64_t exhaustive_largest(const Synthetic& m, const std::vector<int64_t>& cand) {
  int64_t best = 0;
  for (int64_t b : cand)
    if (m.fits(b)) best = b;
  return best;
}

int log2_ceil(size_t n) { return static_cast<int>(std::ceil(std::log2(double(std::max<size_t>(n, 2))))); }

// A search for `global_batch` over `world` ranks under a memory limit, the rest left at its defaults.
SearchConfig capped(int64_t global_batch, int64_t memory_limit, int world = 1) {
  SearchConfig cfg;
  cfg.global_batch = global_batch;
  cfg.world = world;
  cfg.memory_limit = memory_limit;
  return cfg;
}

}  // namespace

TEST_CASE("divisors and the peak fit") {
  CHECK(divisors(12) == std::vector<int64_t>{1, 2, 3, 4, 6, 12});
  CHECK(divisors(1) == std::vector<int64_t>{1});
  CHECK(divisors(97) == std::vector<int64_t>{1, 97});
  const PeakFit f = fit_peak({{1, 110}, {4, 140}, {8, 180}});
  REQUIRE(f.valid);
  CHECK(f.a == Approx(100));
  CHECK(f.c == Approx(10));
  CHECK_FALSE(fit_peak({{4, 100}}).valid);
}

TEST_CASE("the boundary matches an exhaustive search, within ceil(log2 n) + 3 probes") {
  for (double c : {1e6, 3e6, 7.5e6})
    for (int64_t limit : {int64_t(300) << 20, int64_t(1) << 30, int64_t(3) << 30})
      for (int64_t per_rank : {int64_t(256), int64_t(360), int64_t(1000)}) {
        Synthetic m;
        m.c = c;
        m.limit = limit;
        SearchConfig cfg = capped(per_rank * 2, limit, 2);
        cfg.fit_only = true;
        cfg.any_micro_batch = true;
        std::vector<int64_t> cand;
        for (int64_t b = 1; b <= per_rank; ++b) cand.push_back(b);
        const auto out = run_search(cfg, std::ref(m));
        INFO("c=" << c << " limit=" << limit << " per_rank=" << per_rank);
        CHECK(out.largest_feasible == exhaustive_largest(m, cand));
        CHECK(out.boundary_probes <= log2_ceil(cand.size()) + 3);

        SearchConfig lightning = cfg;
        lightning.strategy = Strategy::Lightning;
        Synthetic m2 = m;
        const auto lo = run_search(lightning, std::ref(m2));
        CHECK(lo.largest_feasible == out.largest_feasible);
        CHECK(out.boundary_probes <= lo.boundary_probes);
      }
}

TEST_CASE("Lightning's doubling reaches divisor candidates that a power of two skips") {
  // 98's divisors are 1, 2, 7, 14, 49, 98: doubling from 2 lands on 4, no candidate, and stopped there.
  for (const int64_t limit : {int64_t(300) << 20, int64_t(3) << 30}) {
    Synthetic m;
    m.limit = limit;
    SearchConfig cfg = capped(98, limit);
    cfg.fit_only = true;
    cfg.strategy = Strategy::Lightning;
    const auto out = run_search(cfg, std::ref(m));
    INFO("limit " << limit);
    CHECK(out.largest_feasible == exhaustive_largest(m, {1, 2, 7, 14, 49, 98}));
  }
}

TEST_CASE("Lightning's search whose first size runs out ends at micro-batch 1 when 1 fits") {
  // It started at 2, ran out there and said "no micro-batch fits" (exit 1) without running 1, which
  // the first step before the probes had just run; Lightning itself ends at 1.
  Synthetic m;
  m.limit = m.reserved(1);
  REQUIRE_FALSE(m.fits(2));
  SearchConfig cfg = capped(8, m.limit);
  cfg.strategy = Strategy::Lightning;
  for (const bool fit_only : {true, false}) {
    cfg.fit_only = fit_only;
    const auto out = run_search(cfg, std::ref(m));
    INFO("fit_only " << fit_only << ": " << out.failure);
    CHECK(out.largest_feasible == 1);
    REQUIRE(out.recommendation);
    CHECK(out.recommendation->micro_batch == 1);
  }
  m.limit = m.reserved(1) - 1;  // and where 1 does not fit either, none does
  cfg.memory_limit = m.limit;
  const auto none = run_search(cfg, std::ref(m));
  CHECK(none.largest_feasible == 0);
  CHECK(none.failure == "no micro-batch fits under the limit");
}

TEST_CASE("a budget of one trial (--max-trials 1) runs one probe and does not claim a boundary it did not find") {
  Synthetic m;
  SearchConfig cfg = capped(512, m.limit);
  cfg.fit_only = true;
  cfg.max_trials = 1;
  for (const Strategy s : {Strategy::Memcomm, Strategy::Lightning}) {
    m.probes = 0;
    cfg.strategy = s;
    const auto out = run_search(cfg, std::ref(m));
    CHECK(m.probes == 1);
    CHECK(out.trials.size() == 1);
    CHECK_FALSE(out.boundary_found);
    TuneResult r;
    r.config = cfg;
    r.outcome = out;
    const std::string text = format_recommendation(r);
    INFO(text);
    CHECK(text.find("largest micro-batch that fits") == std::string::npos);
    CHECK(text.find("--max-trials ended the search before the boundary was found") != std::string::npos);
    // The flag survives the cache, and a cache without it (older) reads as a finished search.
    CHECK_FALSE(from_json(to_json(r)).outcome.boundary_found);
    auto j = to_json(r);
    j.erase("boundary_found");
    CHECK(from_json(j).outcome.boundary_found);
  }
  // With room to finish, the boundary is found and reported as such.
  cfg.max_trials = 24;
  cfg.strategy = Strategy::Memcomm;
  const auto out = run_search(cfg, std::ref(m));
  CHECK(out.boundary_found);
}

TEST_CASE("divisors of the largest --global-batch are found quickly and exactly") {
  // The walk stops at d <= n / d (d * d would overflow for n near INT64_MAX); the CLI caps G at 2^40.
  const auto d = divisors(kMaxGlobalBatch);
  CHECK(d.size() == 41);
  CHECK(d.front() == 1);
  CHECK(d.back() == kMaxGlobalBatch);
}

TEST_CASE("any-micro-batch refuses a per-rank batch with more candidates than it can hold") {
  Synthetic m;
  SearchConfig cfg = capped(kMaxAnyMicroBatchCandidates * 2, m.limit);
  cfg.fit_only = true;
  cfg.any_micro_batch = true;
  CHECK_THROWS_AS(run_search(cfg, std::ref(m)), std::invalid_argument);
  CHECK(m.probes == 0);
}

TEST_CASE("fit-only on a prime per-rank batch says that what fits divides nothing, not that nothing fits") {
  Synthetic m;  // b = 2..50 fit; b = 1 cannot step (BatchNorm), and 97 is prime
  m.limit = 373'000'000;
  REQUIRE((m.fits(50) && !m.fits(51)));
  SearchConfig cfg = capped(97, m.limit);
  cfg.fit_only = true;
  cfg.any_micro_batch = true;
  cfg.min_micro_batch = 2;
  const auto out = run_search(cfg, std::ref(m));
  INFO(out.failure);
  CHECK(out.failure.find("none of those probed divides the per-rank batch 97") != std::string::npos);
  CHECK(out.failure.find("micro-batches up to") != std::string::npos);
}

TEST_CASE("fit-only with any micro-batch recommends the largest divisor below the boundary, probed if need be") {
  Synthetic m;  // b <= 105 fit; the boundary search probes non-divisors of 1000 (127, 67, 97...)
  m.limit = 548'000'000;
  REQUIRE((m.fits(105) && !m.fits(106)));
  SearchConfig cfg = capped(1000, m.limit);
  cfg.fit_only = true;
  cfg.any_micro_batch = true;
  const auto out = run_search(cfg, std::ref(m));
  INFO(out.failure);
  REQUIRE(out.recommendation);
  CHECK(out.recommendation->micro_batch == 100);  // not a small divisor probed on the way (8)
  CHECK(out.recommendation->accum == 10);
}

TEST_CASE("a fit that is right but cautious does not crawl, and fit-only keeps a trial for the divisor it recommends") {
  // Memory that grows more slowly than linearly (activations that stop growing): a line through the
  // probes overestimates larger b, so each prediction fits and gains little. The search crawled up
  // (22 probes of the 24 allowed on one MLP), and with the budget spent fit-only recommended a small
  // divisor probed on the way (8 x 512 where 1024 x 4 fits).
  Synthetic m;
  m.q = -300;
  std::vector<int64_t> cand;
  for (int64_t b = 1; b <= 4096; ++b) cand.push_back(b);
  for (int64_t limit : {int64_t(4) << 30, int64_t(5) << 30, int64_t(7) << 30}) {
    m.limit = limit;
    SearchConfig cfg = capped(4096, limit);
    cfg.fit_only = true;
    cfg.any_micro_batch = true;
    const auto out = run_search(cfg, std::ref(m));
    const int64_t largest = exhaustive_largest(m, cand);
    std::string seq;
    for (const auto& t : out.trials) seq += std::to_string(t.request.micro_batch) + (t.result.oom ? "x " : " ");
    INFO("limit " << limit << ": largest " << largest << ", " << out.boundary_probes << " probes: " << seq);
    REQUIRE((largest > 1024 && largest < 4096));
    CHECK(out.largest_feasible == largest);
    CHECK(out.boundary_probes <= log2_ceil(cand.size()) + 3);
    REQUIRE(out.recommendation);
    CHECK(out.recommendation->micro_batch == (largest >= 2048 ? 2048 : 1024));
    cfg.max_trials = out.boundary_probes;  // a budget that the boundary search alone would spend
    const auto tight = run_search(cfg, std::ref(m));
    REQUIRE(tight.recommendation);
    CHECK(tight.recommendation->micro_batch >= 1024);
  }
}

TEST_CASE("no search runs more probes than --max-trials") {
  // The speed search ran the largest safe micro-batch below the boundary after the boundary search had
  // spent the budget: --max-trials 4 ran 5 probes.
  // (--search grid runs every candidate: it is the exhaustive reference.)
  for (const Strategy s : {Strategy::Memcomm, Strategy::Lightning})
    for (const int64_t loader : {int64_t(0), int64_t(64) << 20})
      for (int64_t limit = int64_t(220) << 20; limit <= int64_t(4) << 30; limit = limit * 5 / 4)
        for (int max_trials = 1; max_trials <= 12; ++max_trials) {
          Synthetic m;
          m.loader = loader;  // a largest feasible without room for it is no speed candidate
          m.limit = limit;
          SearchConfig cfg = capped(1024, limit);
          cfg.strategy = s;
          cfg.max_trials = max_trials;
          const auto out = run_search(cfg, std::ref(m));
          INFO("strategy " << int(s) << ", loader " << loader << ", limit " << limit << ", --max-trials " << max_trials);
          CHECK(m.probes <= max_trials);
          CHECK(static_cast<int>(out.trials.size()) <= max_trials);
        }
}

TEST_CASE("a probe's step noise is half its steps' range over their median") {
  CHECK(step_noise({3, 1, 2}) == Approx(0.5));  // (3 - 1) / (2 x 2), in any order
  CHECK(step_noise({4, 4, 4}) == 0);
  CHECK(step_noise({5}) == 0);  // one timed step says nothing of its spread
  CHECK(step_noise({}) == 0);
}

TEST_CASE("a speed counts as higher only past both probes' noise") {
  // See Note [Speeds within noise]: a bucket size 3% faster on one measurement amid 5% noise won, and
  // identical tune() calls recommended different bucket sizes and micro-batches.
  for (const double noise : {0.0, 0.05}) {
    Synthetic m;
    m.noise = noise;
    m.bucket_5_speedup = 1.03;
    SearchConfig cfg = capped(512, m.limit, 2);
    cfg.bucket_candidates = {1, 5, 25, 100};
    const auto out = run_search(cfg, std::ref(m));
    REQUIRE(out.recommendation);
    INFO("noise " << noise);
    CHECK(out.recommendation->bucket_mb == (noise > 0 ? 25 : 5));
  }
  // Micro-batches: within the noise the larger one stays (fewer steps per sample), past it the faster.
  for (const double noise : {0.0, 0.3}) {
    Synthetic m;
    m.noise = noise;
    m.t0 = 0;
    m.t1 = 1e-4;
    m.knee = 64;
    m.penalty = 2e-5;  // past b = 64 a step is slower: 10% at 128, 14% at 256
    SearchConfig cfg = capped(256, m.limit);
    const auto out = run_search(cfg, std::ref(m));
    REQUIRE(out.recommendation);
    INFO("noise " << noise);
    if (noise > 0) CHECK(out.recommendation->micro_batch > 64);
    else CHECK(out.recommendation->micro_batch <= 64);
  }
}

TEST_CASE("memory that is not linear in b still gives the right boundary") {
  Synthetic m;
  m.q = 2e4;  // the fit underestimates large b: predictions fail and the search bisects
  m.limit = int64_t(1) << 30;
  SearchConfig cfg = capped(512, m.limit);
  cfg.fit_only = true;
  cfg.any_micro_batch = true;
  std::vector<int64_t> cand;
  for (int64_t b = 1; b <= 512; ++b) cand.push_back(b);
  const auto out = run_search(cfg, std::ref(m));
  CHECK(out.largest_feasible == exhaustive_largest(m, cand));
  CHECK(out.smallest_infeasible == out.largest_feasible + 1);
  CHECK(out.boundary_probes <= log2_ceil(cand.size()) + 3);
}

TEST_CASE("the recommendation is within 5% of the grid's best throughput") {
  Synthetic m;
  m.c = 1e6;
  m.limit = int64_t(2) << 30;
  m.knee = 48;  // throughput peaks near b = 48: neither the largest nor a power of two
  m.penalty = 4e-5;
  SearchConfig cfg = capped(480, m.limit);
  const auto out = run_search(cfg, std::ref(m));
  SearchConfig grid = cfg;
  grid.strategy = Strategy::Grid;
  Synthetic m2 = m;
  const auto ref = run_search(grid, std::ref(m2));
  REQUIRE(out.recommendation);
  REQUIRE(ref.recommendation);
  CHECK(out.recommendation->samples_per_s >= 0.95 * ref.recommendation->samples_per_s);
  CHECK(out.recommendation->micro_batch * out.recommendation->accum == 480);
  CHECK(out.trials.size() < ref.trials.size());
  CHECK(out.recommendation->peak_reserved <= m.limit);
  CHECK(double(out.recommendation->peak_allocated) <= double(m.limit) * (1 - out.safety_margin));
}

TEST_CASE("bucket sizes are tried with the winner when there are several ranks") {
  Synthetic m;
  m.limit = int64_t(2) << 30;
  SearchConfig cfg = capped(256, m.limit, 2);
  cfg.bucket_candidates = {1, 5, 25, 100};
  std::vector<double> seen;
  const auto out = run_search(cfg, [&](const ProbeRequest& r) {
    ProbeResult x = m(r);
    if (r.bucket_mb == 5 && !x.oom) x.step_s *= 0.8;  // 5 MiB hides the most communication
    if (!x.oom) seen.push_back(r.bucket_mb);
    return x;
  });
  REQUIRE(out.recommendation);
  CHECK(out.recommendation->bucket_mb == 5);
  CHECK(std::count(seen.begin(), seen.end(), 100.0) == 1);
}

TEST_CASE("an unachievable global batch is rounded and said and nothing fitting is a failure") {
  Synthetic m;
  SearchConfig cfg = capped(101, m.limit, 2);
  auto out = run_search(cfg, std::ref(m));
  CHECK(out.global_batch == 102);
  CHECK(out.batch_note.find("nearest achievable, 102") != std::string::npos);

  m.limit = 100 << 20;  // below a alone
  cfg.memory_limit = m.limit;
  out = run_search(cfg, std::ref(m));
  CHECK_FALSE(out.recommendation);
  CHECK(out.failure.find("even micro-batch 1") != std::string::npos);

  cfg.global_batch = 1;
  CHECK_THROWS_WITH(run_search(cfg, std::ref(m)), Catch::Contains("smaller than the 2 ranks"));
}

TEST_CASE("results survive the JSON round trip and the cache") {
  Synthetic m;
  SearchConfig cfg = capped(64, m.limit);
  TuneResult r;
  r.config = cfg;
  r.outcome = run_search(cfg, std::ref(m));
  r.command = "memcomm-train --batch-size 64 --accum 1";
  r.key = {{"model", "synthetic"}, {"n", 1}};
  r.verifications.push_back({50, false, "", 123.0, 456, 400, 0.8, 0.5, 64});
  const auto j = to_json(r);
  REQUIRE(j["recommendation"]["micro_batch"] == r.outcome.recommendation->micro_batch);
  CHECK(j["recommendation"]["oom"] == false);
  CHECK(j["trials"].size() == r.outcome.trials.size());
  CHECK(to_json(from_json(j)) == j);

  const auto dir = std::filesystem::temp_directory_path() / ("memcomm-tune-cache-" + std::to_string(::getpid()));
  ::setenv("MEMCOMM_CACHE_DIR", dir.c_str(), 1);
  CHECK_FALSE(load_cached(r.key));
  REQUIRE(store_cached(r));
  const auto back = load_cached(r.key);
  REQUIRE(back);
  CHECK(to_json(*back) == j);
  CHECK_FALSE(load_cached({{"model", "other"}}));
  std::filesystem::remove_all(dir);
  ::unsetenv("MEMCOMM_CACHE_DIR");
  CHECK_THROWS_WITH(from_json(nlohmann::json{{"key", 1}}), Catch::Contains("malformed tuning result"));
}

TEST_CASE("every seed of the cache's fuzz target is a result the reader takes") {
  // The seed lacked fields added since (step_noise, loader_allowance): from_json refused it, and five
  // million fuzzed inputs never reached the formatting past it.
  const auto dir = std::filesystem::path(MEMCOMM_SOURCE_DIR) / "tests/fuzz/corpus/tuner_cache_fuzz";
  int seeds = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    INFO(f.path());
    std::ifstream in(f.path());
    const auto r = from_json(nlohmann::json::parse(in));
    CHECK_FALSE(format_trials(r).empty());
    ++seeds;
  }
  CHECK(seeds > 0);
}

TEST_CASE("a winner whose long run runs out of memory gives way to the next fastest") {
  Synthetic m;
  m.limit = int64_t(2) << 30;
  TuneResult r;
  r.config.global_batch = 256;
  r.config.memory_limit = m.limit;
  r.outcome = run_search(r.config, std::ref(m));
  REQUIRE(r.outcome.recommendation);
  const int64_t first = r.outcome.recommendation->micro_batch;
  std::vector<int64_t> verified;
  verify_recommendation(r, [&](const Recommendation& rec) {
    verified.push_back(rec.micro_batch);
    Verification v;
    v.micro_batch = rec.micro_batch;
    v.oom = rec.micro_batch == first;  // the long run of the winner creeps over the limit
    v.peak_allocated = v.oom ? -1 : m.allocated(rec.micro_batch) + 1;
    v.peak_reserved = v.oom ? -1 : m.reserved(rec.micro_batch);
    v.steps = v.oom ? 0 : 50;
    return v;
  });
  REQUIRE(verified.size() == 2);
  CHECK(verified[0] == first);
  REQUIRE(r.outcome.recommendation);
  CHECK(r.outcome.recommendation->micro_batch == verified[1]);
  CHECK(r.outcome.recommendation->micro_batch < first);  // a larger one would run out of memory too
  CHECK(r.outcome.recommendation->peak_allocated == m.allocated(verified[1]) + 1);  // the long run's larger peak
  CHECK(r.verifications.size() == 2);

  verify_recommendation(r, [](const Recommendation& rec) {  // every long run fails: no recommendation
    Verification v;
    v.micro_batch = rec.micro_batch;
    v.oom = true;
    return v;
  });
  CHECK_FALSE(r.outcome.recommendation);
  CHECK(r.outcome.failure.find("every verified candidate") != std::string::npos);
}

TEST_CASE("after a long run runs out of memory, an unprobed divisor above every probed one goes first") {
  // --fit-only probed b = 100 (the boundary) and b = 5 (the fit): 50 was never probed, and fits.
  TuneResult r;
  r.config.global_batch = 100;
  r.config.memory_limit = int64_t(1) << 30;
  r.outcome.global_batch = 100;
  for (const auto& [b, speed] : {std::pair<int64_t, double>{5, 100}, {100, 3000}}) {
    Trial t;
    t.request.micro_batch = b;
    t.request.accum = 100 / b;
    t.result.peak_allocated = t.result.peak_reserved = b << 20;
    t.samples_per_s = speed;
    r.outcome.trials.push_back(t);
  }
  r.outcome.recommendation = Recommendation{100, 1, 1, 25, 3000, 100 << 20, 100 << 20, 0};
  std::vector<int64_t> verified;
  verify_recommendation(r, [&](const Recommendation& rec) {
    verified.push_back(rec.micro_batch);
    Verification v;
    v.micro_batch = rec.micro_batch;
    v.oom = rec.micro_batch == 100;  // the long run's evaluation pass needs more than the probes saw
    v.steps = v.oom ? 0 : 5;
    v.samples_per_s = 2500;
    v.peak_allocated = v.peak_reserved = v.oom ? -1 : rec.micro_batch << 20;
    return v;
  });
  CHECK(verified == std::vector<int64_t>{100, 50});  // not b = 5, twenty times slower
}

TEST_CASE("an evaluation of its own that runs out of memory ends the verification and is named") {
  // memcomm.tune's evaluate(model) ran out of memory after each long run's steps fitted: three long runs
  // went down to b = 32, and the failure blamed the training.
  for (const EvaluationBatches batches : {EvaluationBatches::Own, EvaluationBatches::MicroBatch}) {
    TuneResult r;
    r.config.global_batch = 1024;
    r.config.memory_limit = int64_t(8) << 20;
    r.outcome.global_batch = 1024;
    r.outcome.recommendation = Recommendation{256, 4, 2, 25, 900, 6 << 20, 6 << 20, 0};
    int runs = 0;
    verify_recommendation(r, [&](const Recommendation& rec) {
      ++runs;
      Verification v;
      v.micro_batch = rec.micro_batch;
      v.steps = 5;
      v.oom = true;
      v.oom_where = "rank 1 evaluation";
      return v;
    }, batches);
    CHECK_FALSE(r.outcome.recommendation);
    if (batches == EvaluationBatches::Own) {
      CHECK(runs == 1);
      CHECK_THAT(r.outcome.failure, Catch::Contains("then the evaluation ran out of memory (rank 1 evaluation)"));
    } else {  // memcomm-tune evaluates in batches of the micro-batch: a smaller one is tried
      CHECK(runs == 3);
    }
  }
}

TEST_CASE("a recommendation whose long run was slower than its probe says which speed it prints") {
  // An LSTM's b = 16 probed at 509 samples/s and verified at 342: the recommendation printed 509 bare.
  TuneResult r;
  r.config.global_batch = 128;
  r.config.memory_limit = int64_t(48) << 20;
  r.outcome.recommendation = Recommendation{16, 8, 1, 25, 509, 36 << 20, 32 << 20, 0.3};
  Verification v;
  v.micro_batch = 16;
  v.steps = 10;
  v.samples_per_s = 342;
  r.verifications.push_back(v);
  CHECK_THAT(format_recommendation(r), Catch::Contains("509 samples/s probed (342 in the 10-step verification)"));
  r.verifications.back().samples_per_s = 509;  // the same figure (an unprobed winner takes its long run's)
  CHECK_THAT(format_recommendation(r), Catch::Contains("509 samples/s; peak allocated"));
}

TEST_CASE("a winner whose long run runs out of memory gives way to a smaller micro-batch, probed or not") {
  TuneResult r;
  r.config.global_batch = 64;
  r.config.memory_limit = int64_t(1) << 30;
  r.outcome.global_batch = 64;
  for (const auto& [b, speed] : {std::pair<int64_t, double>{32, 900}, {64, 800}}) {
    Trial t;
    t.request.micro_batch = b;
    t.request.accum = 64 / b;
    t.result.peak_allocated = t.result.peak_reserved = b << 20;
    t.samples_per_s = speed;
    r.outcome.trials.push_back(t);
  }
  r.outcome.recommendation = Recommendation{32, 2, 1, 25, 900, 32 << 20, 32 << 20, 0};
  std::vector<int64_t> verified;
  verify_recommendation(r, [&](const Recommendation& rec) {
    verified.push_back(rec.micro_batch);
    Verification v;
    v.micro_batch = rec.micro_batch;
    v.oom = rec.micro_batch >= 32;  // the long run needs more than the probes saw
    v.steps = v.oom ? 0 : 50;
    v.samples_per_s = 700;
    v.peak_allocated = v.peak_reserved = v.oom ? -1 : rec.micro_batch << 21;
    return v;
  });
  // b = 64 fit its probe and is the next fastest, but it is larger than the one that failed; no probe
  // is below 32, so the largest divisor below it runs, and its speed is the long run's.
  CHECK(verified == std::vector<int64_t>{32, 16});
  REQUIRE(r.outcome.recommendation);
  CHECK(r.outcome.recommendation->micro_batch == 16);
  CHECK(r.outcome.recommendation->accum == 4);
  CHECK(r.outcome.recommendation->samples_per_s == 700);
  CHECK(r.outcome.recommendation->peak_allocated == 32 << 20);

  verified.clear();  // at most three long runs: 8, 4 and 2 would all fail here
  r.verifications.clear();
  r.outcome.recommendation = Recommendation{8, 8, 1, 25, 900, 8 << 20, 8 << 20, 0};
  verify_recommendation(r, [&](const Recommendation& rec) {
    verified.push_back(rec.micro_batch);
    Verification v;
    v.micro_batch = rec.micro_batch;
    v.oom = true;
    return v;
  });
  CHECK(verified == std::vector<int64_t>{8, 4, 2});
  CHECK_FALSE(r.outcome.recommendation);
}

TEST_CASE("a model that runs out whenever it accumulates gets the whole batch in one step") {
  // See Note [Accumulation needs a gradient more]: any K > 1 runs out, b = 64 with K = 1 fits.
  for (const Strategy strategy : {Strategy::Memcomm, Strategy::Lightning, Strategy::Grid}) {
    INFO(static_cast<int>(strategy));
    Synthetic m;
    m.limit = 400 << 20;
    SearchConfig cfg = capped(64, m.limit);
    cfg.strategy = strategy;
    auto probe = [&m](const ProbeRequest& r) {
      ProbeResult x = m(r);
      if (r.accum > 1) {
        x = ProbeResult{};
        x.measured_accum = static_cast<int>(r.accum);
        x.oom = true;
        x.oom_where = "backward";
        x.oom_rank = 0;
      }
      return x;
    };
    const auto out = run_search(cfg, probe);
    REQUIRE(out.recommendation);
    CHECK(out.recommendation->micro_batch == 64);
    CHECK(out.recommendation->accum == 1);
    CHECK(out.failure.empty());
    CHECK(out.batch_note.find("the whole per-rank batch of 64") != std::string::npos);
  }
}
