// memcomm._memcomm's tuner part: memcomm-tune's search (run_search) and verification
// (verify_recommendation) driven by Python callables, so memcomm.tune (memcomm/tuner.py) probes
// with the user's own train step and returns what memcomm-tune --json writes, as a dict.
//
// Note [Probes from Python]: the search runs with the GIL released and takes it back for each
// probe, so the C++ side never holds Python objects without it. A Python exception raised inside
// a probe (the user's step failing, KeyboardInterrupt) leaves the search as pybind11's
// error_already_set, which unwinds through run_search (it only holds standard containers) and is
// restored on the way out: the caller sees the very exception the probe raised. Values that come
// back from Python are checked here, so a malformed probe result is a TypeError, not a bad search.
#include "bindings.hpp"

#include <memcomm/common/bytes.hpp>
#include <memcomm/common/json_output.hpp>
#include <memcomm/common/oom_message.hpp>
#include "memcomm/tuner/report.hpp"
#include "memcomm/tuner/search.hpp"
#include "memcomm/tuner/verify.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace memcomm::py {

namespace pyb = pybind11;
using namespace memcomm::tune;

namespace {

// Whether a Python value converts to T without surprises: bool is not an int here, an int is a float.
template <typename T>
bool holds(const pyb::handle& v) {
  const bool is_bool = pyb::isinstance<pyb::bool_>(v);
  if constexpr (std::is_same_v<T, bool>) return is_bool;
  else if constexpr (std::is_same_v<T, std::string>) return pyb::isinstance<pyb::str>(v);
  else if constexpr (std::is_floating_point_v<T>)
    return !is_bool && (pyb::isinstance<pyb::float_>(v) || pyb::isinstance<pyb::int_>(v));
  else
    return !is_bool && pyb::isinstance<pyb::int_>(v);
}

// A typed entry of a dict from Python: a missing key is a KeyError, a wrong type a TypeError.
template <typename T>
T entry(const pyb::dict& d, const char* key, const char* what) {
  if (!d.contains(key)) throw pyb::key_error(std::string(what) + " has no '" + key + "'");
  const pyb::handle v = d[key];
  if (!holds<T>(v))
    throw pyb::type_error(std::string(what) + "['" + key + "'] has the wrong type: " +
                          std::string(pyb::str(pyb::type::of(v).attr("__name__"))));
  return v.cast<T>();
}

std::vector<double> numbers(const pyb::dict& d, const char* key, const char* what) {
  if (!d.contains(key)) throw pyb::key_error(std::string(what) + " has no '" + key + "'");
  const pyb::handle v = d[key];
  if (!pyb::isinstance<pyb::list>(v) && !pyb::isinstance<pyb::tuple>(v))
    throw pyb::type_error(std::string(what) + "['" + key + "'] must be a list of numbers");
  std::vector<double> out;
  for (const pyb::handle x : v) {
    if (!holds<double>(x))
      throw pyb::type_error(std::string(what) + "['" + key + "'] must be a list of numbers");
    out.push_back(x.cast<double>());
  }
  return out;
}

Strategy strategy_from(const std::string& s) {
  if (s == "memcomm") return Strategy::Memcomm;
  if (s == "lightning") return Strategy::Lightning;
  if (s == "grid") return Strategy::Grid;
  throw std::invalid_argument("search must be 'memcomm', 'lightning' or 'grid', got '" + s + "'");
}

SearchConfig config_from(const pyb::dict& d) {
  SearchConfig c;
  c.global_batch = entry<int64_t>(d, "global_batch", "config");
  c.world = entry<int>(d, "world", "config");
  c.memory_limit = entry<int64_t>(d, "memory_limit", "config");
  c.max_trials = entry<int>(d, "max_trials", "config");
  c.strategy = strategy_from(entry<std::string>(d, "search", "config"));
  c.fit_only = entry<bool>(d, "fit_only", "config");
  c.any_micro_batch = entry<bool>(d, "any_micro_batch", "config");
  c.bucket_mb = entry<double>(d, "bucket_mb", "config");
  c.bucket_candidates = numbers(d, "bucket_candidates", "config");
  c.measured_steps = entry<int>(d, "measured_steps", "config");
  if (d.contains("min_micro_batch")) c.min_micro_batch = entry<int64_t>(d, "min_micro_batch", "config");
  // What memcomm-tune's flags check before it starts, so a direct call cannot start a bad search.
  if (c.memory_limit <= 0) throw std::invalid_argument("memory_limit must be a positive number of bytes");
  if (c.global_batch < 1 || c.global_batch > kMaxGlobalBatch)
    throw std::invalid_argument("global_batch must be between 1 and 2^40");
  if (c.max_trials < 1) throw std::invalid_argument("max_trials must be >= 1");
  if (c.any_micro_batch && !c.fit_only) throw std::invalid_argument("any_micro_batch needs fit_only");
  return c;
}

pyb::dict request_dict(const ProbeRequest& q) {
  pyb::dict d;
  d["micro_batch"] = q.micro_batch;
  d["accum"] = q.accum;
  d["bucket_mb"] = q.bucket_mb;
  d["measured_steps"] = q.measured_steps;
  return d;
}

ProbeResult result_from(const pyb::handle& h) {
  if (!pyb::isinstance<pyb::dict>(h)) throw pyb::type_error("a probe must return a dict");
  const auto d = pyb::reinterpret_borrow<pyb::dict>(h);
  ProbeResult x;
  x.oom = entry<bool>(d, "oom", "probe result");
  x.oom_where = entry<std::string>(d, "oom_where", "probe result");
  x.oom_rank = entry<int>(d, "oom_rank", "probe result");
  x.peak_allocated = entry<int64_t>(d, "peak_allocated", "probe result");
  x.peak_reserved = entry<int64_t>(d, "peak_reserved", "probe result");
  x.step_s = entry<double>(d, "step_s", "probe result");
  x.step_noise = entry<double>(d, "step_noise", "probe result");
  x.exposed_comm_s = entry<double>(d, "exposed_comm_s", "probe result");
  x.measured_accum = entry<int>(d, "measured_accum", "probe result");
  x.wall_s = entry<double>(d, "wall_s", "probe result");
  x.loader_allowance = entry<int64_t>(d, "loader_allowance", "probe result");
  return x;
}

pyb::dict recommendation_dict(const Recommendation& c) {
  pyb::dict d;
  d["micro_batch"] = c.micro_batch;
  d["accum"] = c.accum;
  d["world"] = c.world;
  d["bucket_mb"] = c.bucket_mb;
  return d;
}

Verification verification_from(const pyb::handle& h, int64_t micro_batch) {
  if (!pyb::isinstance<pyb::dict>(h)) throw pyb::type_error("a verification must return a dict");
  const auto d = pyb::reinterpret_borrow<pyb::dict>(h);
  Verification v;
  v.micro_batch = micro_batch;
  v.steps = entry<int64_t>(d, "steps", "verification");
  v.oom = entry<bool>(d, "oom", "verification");
  v.oom_where = entry<std::string>(d, "oom_where", "verification");
  v.samples_per_s = entry<double>(d, "samples_per_s", "verification");
  v.peak_reserved = entry<int64_t>(d, "peak_reserved", "verification");
  v.peak_allocated = entry<int64_t>(d, "peak_allocated", "verification");
  v.eval_accuracy = entry<double>(d, "eval_accuracy", "verification");
  v.eval_loss = entry<double>(d, "eval_loss", "verification");
  v.evaluated = entry<bool>(d, "evaluated", "verification");
  return v;
}

// Each call takes the GIL and lets every Python object go before it gives it back
// (Note [Probes from Python]).
ProbeFn python_probe(const pyb::function& probe) {
  return [&probe](const ProbeRequest& q) {
    pyb::gil_scoped_acquire gil;
    return result_from(probe(request_dict(q)));
  };
}

// The recommendation and its verification plan (Note [A verification that would take hours]): the
// steps to run, and the notes memcomm-tune's announcement carries, in Python's parameter names.
VerifyFn python_verify(const pyb::function& verify, int64_t asked) {
  return [&verify, asked](const Recommendation& c) {
    const VerificationPlan plan = plan_verification(c, asked);
    if (plan.too_long())
      throw std::invalid_argument("memcomm.tune: " + too_long_reason(plan, c) + "; use a smaller global_batch");
    pyb::gil_scoped_acquire gil;
    pyb::dict d = recommendation_dict(c);
    d["verify_steps"] = plan.steps;
    d["cut_note"] = cut_note(plan, asked, "verify_steps=");
    d["time_note"] = time_note(plan);
    return verification_from(verify(d), c.micro_batch);
  };
}

// What to change in the script, in the parameter names of a PyTorch training loop. (No fmt here:
// torch's include tree would bring its fmt headers ahead of the fmt library linked, Note [Two fmts]
// in trainer/CMakeLists.txt.)
std::string python_command(const Recommendation& c) {
  std::ostringstream s;
  s << "micro_batch=" << c.micro_batch << " accum=" << c.accum;
  if (c.world > 1) s << " bucket_cap_mb=" << c.bucket_mb;  // the default stream format is %g's
  return s.str();
}

pyb::object to_dict(const nlohmann::json& j) { return pyb::module_::import("json").attr("loads")(json_text(j)); }

nlohmann::json from_dict(const pyb::handle& d) {
  const std::string text = pyb::str(pyb::module_::import("json").attr("dumps")(d));
  return nlohmann::json::parse(text);
}

// The search, then the winner's verification when `verify` is not None; the result as to_json()
// writes it (memcomm-tune --json's document).
pyb::object tune_search(const pyb::dict& config, const pyb::function& probe, const pyb::object& verify,
                        const pyb::dict& key) {
  TuneResult r;
  r.config = config_from(config);
  r.key = from_dict(key);
  if (!verify.is_none() && !pyb::isinstance<pyb::function>(verify))
    throw pyb::type_error("verify must be a callable or None");
  const pyb::function verify_fn = verify.is_none() ? pyb::function() : verify.cast<pyb::function>();
  const ProbeFn probe_fn = python_probe(probe);
  const int64_t verify_steps = verify_fn ? entry<int64_t>(config, "verify_steps", "config") : 0;
  const VerifyFn verify_call = verify_fn ? python_verify(verify_fn, verify_steps) : VerifyFn();
  {
    pyb::gil_scoped_release released;
    const auto t0 = std::chrono::steady_clock::now();
    r.outcome = run_search(r.config, probe_fn);
    if (verify_call) verify_recommendation(r, verify_call, EvaluationBatches::Own);  // evaluate(model)'s own
    r.tuning_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (r.outcome.recommendation) r.command = python_command(*r.outcome.recommendation);
  return to_dict(to_json(r));
}

// memcomm-tune's printout of a result: the trial table and the recommendation.
std::string format_result(const pyb::dict& result) {
  const TuneResult r = from_json(from_dict(result));
  return format_trials(r) + format_recommendation(r);
}

}  // namespace

void bind_tuner(pyb::module_& m) {
  m.def("tune_search", &tune_search, pyb::arg("config"), pyb::arg("probe"), pyb::arg("verify"), pyb::arg("key"),
        "memcomm-tune's search over probe(request) -> result, then verify(recommendation) -> verification; "
        "returns memcomm-tune --json's document as a dict.");
  m.def("format_result", &format_result, pyb::arg("result"),
        "memcomm-tune's trial table and recommendation for a tune_search() result.");
  m.def("is_oom_message", &is_oom_message, pyb::arg("message"),
        "Whether an error message is an out-of-memory (the allocators', cuBLAS's and cuDNN's in disguise).");
  m.def("probe_step_time", &probe_step_time, pyb::arg("early_total"), pyb::arg("last"), pyb::arg("accum"),
        pyb::arg("measured"), "A step's time at K micro-steps from a probe that ran `measured` per step: memcomm-tune's.");
  m.def("step_noise", &step_noise, pyb::arg("step_times"),
        "Half the timed steps' range over their median (0 for fewer than two): memcomm-tune's step_noise.");
  m.def("divisors", &divisors, pyb::arg("per_rank_batch"), "The candidate micro-batches for a per-rank batch.");
  m.def("format_bytes", &memcomm::tune::format_bytes, pyb::arg("bytes"), "Bytes as every memcomm tool prints them (\"-\" when < 0).");
  m.def("parse_size", [](const std::string& text) { return memcomm::parse_size(text); }, pyb::arg("text"),
        "A size as every memcomm tool reads one (\"8GiB\", \"512MiB\", \"2e9\"); ValueError saying what is wrong.");
}

}  // namespace memcomm::py
