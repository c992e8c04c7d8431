#include "memcomm/tuner/report.hpp"

#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/input_file.hpp>
#include <memcomm/common/json_output.hpp>
#include <memcomm/common/replacing_file.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>

namespace memcomm::tune {

std::string format_bytes(int64_t b) { return b < 0 ? "-" : memcomm::format_bytes(static_cast<uint64_t>(b)); }

std::string format_trials(const TuneResult& r) {
  std::string s = fmt::format("{:>3} {:<8} {:>6} {:>5} {:>6} {:>11} {:>11} {:>11} {:>6} {:>9} {:>10} {:>4}\n", "#",
                              "purpose", "b", "K", "bucket", "pred.alloc", "peak alloc", "peak resv", "frag",
                              "step ms", "samples/s", "OOM");
  int n = 0;
  for (const Trial& t : r.outcome.trials) {
    const auto& q = t.request;
    const auto& x = t.result;
    s += fmt::format("{:>3} {:<8} {:>6} {:>5} {:>6.0f} {:>11} {:>11} {:>11} {:>6} {:>9} {:>10} {:>4}\n", ++n,
                     purpose_name(t.purpose), q.micro_batch, q.accum, q.bucket_mb,
                     format_bytes(t.predicted_peak_allocated), x.oom ? "-" : format_bytes(x.peak_allocated),
                     x.oom ? "-" : format_bytes(x.peak_reserved),
                     x.oom ? "-" : fmt::format("{:.1f}%", 100 * x.fragmentation()),
                     x.oom ? "-" : fmt::format("{:.1f}", x.step_s * 1e3),
                     x.oom ? "-" : fmt::format("{:.0f}", t.samples_per_s),
                     x.oom ? (x.oom_where.empty() ? "yes" : x.oom_where.substr(0, 4)) : "no");
  }
  return s;
}

namespace {

// Where the recommendation's speed was measured, when its long run measured another: the search
// compares steady-state probes, and a long run that starts from an empty cache (or draws batches
// of other shapes) can be slower; printed bare, the probe's figure read as the run's.
std::string speed_source(const TuneResult& r) {
  const Recommendation& c = *r.outcome.recommendation;
  if (r.verifications.empty()) return "";
  const Verification& v = r.verifications.back();
  if (v.oom || v.micro_batch != c.micro_batch || v.samples_per_s <= 0 || v.samples_per_s == c.samples_per_s) return "";
  return fmt::format(" probed ({:.0f} in the {}-step verification)", v.samples_per_s, v.steps);
}

}  // namespace

std::string format_recommendation(const TuneResult& r) {
  const auto& o = r.outcome;
  std::string s;
  if (!o.batch_note.empty()) s += "note: " + o.batch_note + "\n";
  // Without the boundary (--max-trials ran out) the largest that fit is a lower bound, and says so.
  s += fmt::format(o.boundary_found ? "largest micro-batch that fits: {} (found in {} probes{}); safety margin {:.1f}% of {}\n"
                                    : "largest micro-batch tried that fits: {} ({} probes{}; --max-trials ended the search "
                                      "before the boundary was found, larger ones may fit); safety margin {:.1f}% of {}\n",
                   o.largest_feasible, o.boundary_probes,
                   o.smallest_infeasible ? fmt::format(", {} ran out of memory", o.smallest_infeasible) : "",
                   100 * o.safety_margin, format_bytes(r.config.memory_limit));
  for (const Verification& v : r.verifications)
    s += fmt::format("verification of b={}: {} steps, {}{}{}\n", v.micro_batch, v.steps,
                     v.oom ? "ran out of memory in " + v.oom_where : fmt::format("no OOM, {:.0f} samples/s", v.samples_per_s),
                     v.oom ? "" : fmt::format(", peak reserved {}", format_bytes(v.peak_reserved)),
                     v.oom || !v.evaluated ? "" : fmt::format(", eval accuracy {:.1f}%", 100 * v.eval_accuracy));
  if (!o.recommendation) return s + "no recommendation: " + o.failure + "\n";
  const Recommendation& c = *o.recommendation;
  s += fmt::format("recommendation: micro-batch {} x accumulation {} x {} rank(s) = global batch {}{}\n",
                   c.micro_batch, c.accum, c.world,
                   uint64_t(c.micro_batch) * uint64_t(c.accum) * uint64_t(c.world),  // wraps on a damaged cache, no UB
                   c.world > 1 ? fmt::format(", bucket {:g} MiB", c.bucket_mb) : "");
  s += fmt::format("  {:.0f} samples/s{}; peak allocated {} (reserved {}) of {}: {:.1f}% headroom\n", c.samples_per_s,
                   speed_source(r), format_bytes(c.peak_allocated), format_bytes(c.peak_reserved),
                   format_bytes(r.config.memory_limit), 100 * c.headroom);
  s += "  train with: " + r.command + "\n";
  s += fmt::format("tuning took {:.1f} s\n", r.tuning_wall_s);
  return s;
}

namespace {

nlohmann::json trial_json(const Trial& t) {
  const auto& q = t.request;
  const auto& x = t.result;
  return {{"purpose", purpose_name(t.purpose)}, {"micro_batch", q.micro_batch}, {"accum", q.accum},
          {"bucket_mb", q.bucket_mb}, {"measured_steps", q.measured_steps},
          {"predicted_peak_allocated", t.predicted_peak_allocated},
          {"predicted_peak_reserved", t.predicted_peak_reserved}, {"peak_allocated", x.peak_allocated},
          {"peak_reserved", x.peak_reserved}, {"fragmentation", x.fragmentation()}, {"step_s", x.step_s}, {"step_noise", x.step_noise},
          {"samples_per_s", t.samples_per_s}, {"exposed_comm_s", x.exposed_comm_s},
          {"measured_accum", x.measured_accum}, {"oom", x.oom}, {"oom_where", x.oom_where},
          {"oom_rank", x.oom_rank}, {"wall_s", x.wall_s}, {"loader_allowance", x.loader_allowance}};
}

TrialPurpose purpose_from(const std::string& s) {
  for (auto p : {TrialPurpose::Fit, TrialPurpose::Boundary, TrialPurpose::Speed, TrialPurpose::Bucket})
    if (s == purpose_name(p)) return p;
  throw std::runtime_error("unknown trial purpose '" + s + "'");
}

}  // namespace

nlohmann::json to_json(const TuneResult& r) {
  nlohmann::json j;
  j["key"] = r.key;
  j["global_batch"] = r.outcome.global_batch;
  j["batch_note"] = r.outcome.batch_note;
  j["world"] = r.config.world;
  j["memory_limit"] = r.config.memory_limit;
  j["safety_margin"] = r.outcome.safety_margin;
  j["largest_feasible"] = r.outcome.largest_feasible;
  j["smallest_infeasible"] = r.outcome.smallest_infeasible;
  j["boundary_probes"] = r.outcome.boundary_probes;
  j["boundary_found"] = r.outcome.boundary_found;
  j["tuning_wall_s"] = r.tuning_wall_s;
  j["trials"] = nlohmann::json::array();
  for (const Trial& t : r.outcome.trials) j["trials"].push_back(trial_json(t));
  j["verifications"] = nlohmann::json::array();
  for (const Verification& v : r.verifications)
    j["verifications"].push_back({{"micro_batch", v.micro_batch}, {"steps", v.steps}, {"oom", v.oom},
                                  {"oom_where", v.oom_where}, {"samples_per_s", v.samples_per_s},
                                  {"peak_reserved", v.peak_reserved}, {"peak_allocated", v.peak_allocated},
                                  {"eval_accuracy", v.eval_accuracy}, {"eval_loss", v.eval_loss},
                                  {"evaluated", v.evaluated}});
  if (const auto& c = r.outcome.recommendation) {
    const bool verified_oom = !r.verifications.empty() && r.verifications.back().oom;
    j["recommendation"] = {{"micro_batch", c->micro_batch}, {"accum", c->accum}, {"world", c->world},
                           {"bucket_mb", c->bucket_mb}, {"samples_per_s", c->samples_per_s},
                           {"peak_reserved", c->peak_reserved}, {"peak_allocated", c->peak_allocated},
                           {"headroom", c->headroom}, {"oom", verified_oom}, {"command", r.command}};
  } else {
    j["recommendation"] = nullptr;
    j["failure"] = r.outcome.failure;
  }
  return j;
}

namespace {

// Typed reads that reject what a damaged file may hold (a string for a number, 1e300 for a count).
int64_t int_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number_integer()) throw std::runtime_error(std::string("'") + key + "' is not an integer");
  return v.get<int64_t>();
}
double num_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number()) throw std::runtime_error(std::string("'") + key + "' is not a number");
  return v.get<double>();
}
bool bool_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_boolean()) throw std::runtime_error(std::string("'") + key + "' is not true or false");
  return v.get<bool>();
}
std::string str_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_string()) throw std::runtime_error(std::string("'") + key + "' is not a string");
  return v.get<std::string>();
}

}  // namespace

TuneResult from_json(const nlohmann::json& j) {
  try {
    TuneResult r;
    r.key = j.at("key");
    r.outcome.global_batch = int_at(j, "global_batch");
    r.outcome.batch_note = str_at(j, "batch_note");
    r.config.world = static_cast<int>(std::clamp<int64_t>(int_at(j, "world"), 1, 1 << 20));
    r.config.global_batch = r.outcome.global_batch;
    r.config.memory_limit = int_at(j, "memory_limit");
    r.outcome.safety_margin = num_at(j, "safety_margin");
    r.outcome.largest_feasible = int_at(j, "largest_feasible");
    r.outcome.smallest_infeasible = int_at(j, "smallest_infeasible");
    r.outcome.boundary_probes = static_cast<int>(int_at(j, "boundary_probes"));
    // Caches from before the field existed were written only by searches that found it.
    if (const auto it = j.find("boundary_found"); it != j.end() && it->is_boolean()) r.outcome.boundary_found = it->get<bool>();
    r.tuning_wall_s = num_at(j, "tuning_wall_s");
    for (const auto& t : j.at("trials")) {
      Trial x;
      x.purpose = purpose_from(str_at(t, "purpose"));
      x.request = {int_at(t, "micro_batch"), int_at(t, "accum"), num_at(t, "bucket_mb"),
                   static_cast<int>(int_at(t, "measured_steps"))};
      x.predicted_peak_allocated = int_at(t, "predicted_peak_allocated");
      x.predicted_peak_reserved = int_at(t, "predicted_peak_reserved");
      x.result.peak_allocated = int_at(t, "peak_allocated");
      x.result.peak_reserved = int_at(t, "peak_reserved");
      x.result.step_s = num_at(t, "step_s");
      x.result.step_noise = num_at(t, "step_noise");
      x.samples_per_s = num_at(t, "samples_per_s");
      x.result.exposed_comm_s = num_at(t, "exposed_comm_s");
      x.result.measured_accum = static_cast<int>(int_at(t, "measured_accum"));
      x.result.oom = bool_at(t, "oom");
      x.result.oom_where = str_at(t, "oom_where");
      x.result.oom_rank = static_cast<int>(int_at(t, "oom_rank"));
      x.result.wall_s = num_at(t, "wall_s");
      x.result.loader_allowance = int_at(t, "loader_allowance");
      r.outcome.trials.push_back(x);
    }
    for (const auto& v : j.at("verifications"))
      r.verifications.push_back({int_at(v, "steps"), bool_at(v, "oom"), str_at(v, "oom_where"),
                                 num_at(v, "samples_per_s"), int_at(v, "peak_reserved"), int_at(v, "peak_allocated"),
                                 num_at(v, "eval_accuracy"), num_at(v, "eval_loss"), int_at(v, "micro_batch"),
                                 !v.contains("evaluated") || bool_at(v, "evaluated")});  // older caches: evaluated
    const auto& c = j.at("recommendation");
    if (c.is_null()) {
      r.outcome.failure = j.contains("failure") && j["failure"].is_string() ? j["failure"].get<std::string>() : "";
    } else {
      Recommendation x;
      x.micro_batch = int_at(c, "micro_batch");
      x.accum = int_at(c, "accum");
      x.world = static_cast<int>(std::clamp<int64_t>(int_at(c, "world"), 1, 1 << 20));
      x.bucket_mb = num_at(c, "bucket_mb");
      x.samples_per_s = num_at(c, "samples_per_s");
      x.peak_reserved = int_at(c, "peak_reserved");
      x.peak_allocated = int_at(c, "peak_allocated");
      x.headroom = num_at(c, "headroom");
      // A recommendation must make the batch it was tuned for (an edited or damaged file may not).
      if (x.micro_batch < 1 || x.accum < 1 || x.world != r.config.world ||
          x.micro_batch > r.outcome.global_batch / x.accum / x.world ||
          x.micro_batch * x.accum * x.world != r.outcome.global_batch)
        throw std::runtime_error(fmt::format("its recommendation {} x {} x {} ranks is not its global batch {}",
                                             x.micro_batch, x.accum, x.world, r.outcome.global_batch));
      r.command = str_at(c, "command");
      r.outcome.recommendation = x;
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed tuning result: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("malformed tuning result: ") + e.what());
  }
}

std::string cache_path(const nlohmann::json& key) {
  std::filesystem::path dir;
  if (const char* d = std::getenv("MEMCOMM_CACHE_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::filesystem::path(x) / "memcomm";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::filesystem::path(h) / ".cache" / "memcomm";
  else dir = std::filesystem::temp_directory_path() / "memcomm-cache";
  const size_t h = std::hash<std::string>{}(key.dump());
  return (dir / fmt::format("tune-{:016x}.json", h)).string();
}

std::optional<TuneResult> load_cached(const nlohmann::json& key) {
  const std::string path = cache_path(key);
  if (!memcomm::input_file_problem(path).empty()) return std::nullopt;  // a FIFO there blocked open() for ever: a miss
  std::ifstream f(path);
  if (!f) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(f);
    if (j.at("key") != key) return std::nullopt;
    return from_json(j);
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged cache entry is a miss, not an error
  }
}

bool store_cached(const TuneResult& r) {
  const std::filesystem::path path = cache_path(r.key);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {  // its own reason (a read-only mount), not the write's "No such file or directory"
    std::fprintf(stderr, "memcomm-tune: warning: the cache: cannot make the folder %s: %s\n",
                 path.parent_path().c_str(), ec.message().c_str());
    return false;
  }
  if (const std::string problem = memcomm::input_file_problem(path.string()); !problem.empty()) {  // a FIFO would block
    std::fprintf(stderr, "memcomm-tune: warning: the cache: %s: %s\n", path.c_str(), problem.c_str());
    return false;
  }
  try {
    write_replacing(path.string(), json_text(to_json(r), 1) + "\n");  // Note [Outputs replaced whole]
    return true;
  } catch (const OutputError& e) {
    std::fprintf(stderr, "memcomm-tune: warning: the cache: %s\n", e.what());
    return false;
  }
}

}  // namespace memcomm::tune
