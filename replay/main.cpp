// memcomm-replay: replays recorded allocation traces (PyTorch memory snapshots, memcomm .mct traces,
// torch.profiler memory profiles) through allocator policies and reports peak reserved memory, fragmentation, OOMs and source calls
// per policy.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "memcomm/common/bytes.hpp"
#include "memcomm/common/cli_checks.hpp"
#include "memcomm/common/output_path.hpp"
#include "memcomm/common/replacing_file.hpp"
#include "memcomm/common/standard_output.hpp"
#include "memcomm/replay/replayer.hpp"
#include "memcomm/snapshot/error.hpp"

namespace {

constexpr int kExitBadInput = 2;  // usage errors, and input files that cannot be read or parsed
constexpr int kExitFailure = 1;   // a runtime failure: a broken invariant, a policy's error, unwritable output
constexpr std::uint64_t kLargeFile = 32u << 20;  // show progress from this size on

struct ProgressState {
  std::string file;
  bool tty = false;
  int last_decile = -1;
};

void show_progress(std::uint64_t done, std::uint64_t total, void* user) {
  auto* st = static_cast<ProgressState*>(user);
  int decile = total ? static_cast<int>(done * 10 / total) : 10;
  if (decile == st->last_decile) return;
  st->last_decile = decile;
  std::fprintf(stderr, "%sreading %s: %d%%%s", st->tty ? "\r" : "", st->file.c_str(), decile * 10, st->tty ? "" : "\n");
  std::fflush(stderr);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

namespace {

// --json FILE must be replaceable whole (Note [Outputs replaced whole]) and not an input (Note [Outputs
// that would destroy data]). Throws std::invalid_argument.
void check_json_out(const std::string& file, const std::vector<std::string>& inputs) {
  if (const std::string conflict = memcomm::output_conflict(file, inputs, false); !conflict.empty())
    throw std::invalid_argument("--json: " + conflict);
  if (const std::string problem = memcomm::replace_problem(file); !problem.empty())
    throw std::invalid_argument("cannot write --json " + file + ": " + problem);
}

using namespace memcomm::replay;

struct CommandLine {
  std::vector<std::string> files;
  std::string policy_list;
  std::string capacity_text;
  std::string json_out;
  bool check = false;
  bool quiet = false;
};

// The tool's help text and options, bound to `cl`.
void describe(CLI::App& app, CommandLine& cl, const std::string& default_policies) {
  app.description(
      "Replays allocation traces through allocator policies, online (each policy sees a request only when it\n"
      "happens), and prints per file, device (with its rank, for .mct and torch.profiler traces) and policy: peak\n"
      "live requested bytes, peak reserved bytes, reserved/live, fragmentation F = 1 - peak allocated / peak\n"
      "reserved, OOMs under --capacity, source calls (segment allocations + page maps), the ideal call bound\n"
      "at 1.03 x live, events and replay seconds.\n"
      "Reads PyTorch memory snapshot pickles (torch.cuda.memory._dump_snapshot) with a data-only reader that\n"
      "never runs code, memcomm's own .mct traces (each device is reported with its rank; a file cut\n"
      "short by a crash is read up to its last complete chunk, with a warning on stderr), and torch.profiler\n"
      "(Kineto) traces recorded with profile_memory=True (.json, .json.gz): their [memory] events, in time\n"
      "order, with the rank from distributedInfo. Bytes a profile's Total Allocated counts as live before its\n"
      "first event, and that no event frees, are replayed as one block allocated first (a note on stderr says\n"
      "how much), so peak live equals the trace's largest Total Allocated; `recorded` takes its peak from Total\n"
      "Reserved and counts its rises as source allocations (the same for one converted to .mct by memcomm-trace\n"
      "convert). A torch.profiler trace without [memory] events is an input error; one cut short is read up to\n"
      "its last complete event, with a warning.\n"
      "Reserved bytes are bytes backed by memory: an expandable segment's virtual range counts only as far\n"
      "as it is mapped.");
  app.footer(
      "JSON: a list of objects, one per file, device and policy: file, format (pytorch-snapshot | mct |\n"
      "torch-profiler), rank (null for PyTorch snapshots), device (255 = host memory), policy, peak_live, peak_reserved,\n"
      "peak_allocated, reserved_over_live, fragmentation, ooms, source_allocs, source_frees, events, requests,\n"
      "traced_allocs (allocations the trace made, blocks from before it not counted: 0 for an end state alone,\n"
      "whose replay only packs the live blocks in an order the run never had), seconds, starts_empty, call_bound (the ideal online call bound at 1.03 for the device's requests: the\n"
      "fewest source calls, allocations + maps, any online policy needs to keep reserved <= 1.03 x the peak live\n"
      "bytes so far; the same for every policy of a device; bench_call_bound --ratio R gives it at other ratios).\n"
      "Exit codes: 0 success; 1 a runtime failure (a broken invariant under --check, a policy's internal error,\n"
      "a --json file that fails while being written); 2 a usage error (a --json path that cannot be written is\n"
      "one: it is checked before any replay), or an input file that is missing, unreadable,\n"
      "empty or corrupt (the message names the file, and the byte offset where it applies).");
  cl.policy_list = default_policies;
  app.add_option("FILE", cl.files, "trace files: PyTorch memory snapshot pickles, memcomm .mct traces or torch.profiler\n"
                                    "traces with [memory] events")
      ->required();
  app.add_option("--policy", cl.policy_list,
                 "comma-separated policies to replay, in table order:\n" + policy_help())
      ->default_str(default_policies);
  app.add_option("--capacity", cl.capacity_text, "device memory per device, e.g. 8GiB, 512MiB, 80GB or bytes; "
                                                 "requests that do not fit count as OOMs (default: unlimited)");
  app.add_option("--json", cl.json_out, "also write the results as a JSON list to this file; with '-' the JSON goes to\n"
                                        "stdout alone and the table goes to stderr");
  app.add_flag("--check", cl.check, "verify while replaying that no two live blocks overlap and each policy's invariants hold");
  app.add_flag("-q,--quiet", cl.quiet, "no progress messages on stderr");
}

// Checked before any replay, so a bad --json path or policy name does not throw away minutes of
// work at the end. Returns the --capacity in bytes (0: unlimited). Throws std::invalid_argument.
std::uint64_t check_arguments(const CommandLine& cl, const std::vector<std::string>& policies) {
  if (!cl.json_out.empty() && cl.json_out != "-") check_json_out(cl.json_out, cl.files);
  const std::uint64_t capacity = cl.capacity_text.empty() ? 0 : memcomm::parse_size(cl.capacity_text);
  if (policies.empty()) throw std::invalid_argument("--policy: empty list");
  PolicyOptions probe;
  for (const auto& p : policies) {
    if (p != kRecordedPolicy) make_policy(p, probe);  // rejects unknown names before any work
  }
  return capacity;
}

// Loads one trace, showing progress on stderr for large files unless quiet.
TraceRequests load_with_progress(const std::string& file, bool quiet, std::size_t policy_count) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  ProgressState st{file, tty, -1};
  LoadProgress progress;
  std::error_code ec;  // no open: a FIFO would block it (Note [Inputs are regular files])
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  const bool large = !ec && size >= kLargeFile;
  if (large && !quiet) {
    progress.callback = show_progress;
    progress.user = &st;
  }
  TraceRequests trace = load_trace(file, progress);
  if (!trace.recovery.empty()) std::cerr << "memcomm-replay: warning: " << file << ": " << trace.recovery << "\n";
  for (const std::string& note : trace.notes) std::cerr << "memcomm-replay: note: " << file << ": " << note << "\n";
  if (trace.devices.empty())  // else the table holds no row for it, and nothing says why
    std::cerr << "memcomm-replay: note: " << file << ": nothing to replay: no device holds a block or an allocator "
                 "event\n";
  if (large && !quiet) {
    std::size_t events = 0;
    for (const auto& d : trace.devices) events += d.trace_events;
    std::fprintf(stderr, "%sread %s in %.2f s: %zu devices, %zu events; replaying %zu policies\n", tty ? "\r" : "",
                 file.c_str(), trace.load_seconds, trace.devices.size(), events, policy_count);
  }
  return trace;
}

// The table, and the JSON where --json asks for it. Returns the exit code.
int write_results(const std::vector<ReplayResult>& results, const std::string& json_out) {
  // With --json - stdout carries the JSON alone, so that it parses; the table moves to stderr.
  (json_out == "-" ? std::cerr : std::cout) << format_table(results);
  if (json_out.empty()) return 0;
  std::string json = format_json(results);
  if (json_out == "-") {
    std::cout << json;
    return 0;
  }
  try {
    memcomm::write_replacing(json_out, json);  // Note [Outputs replaced whole]
  } catch (const memcomm::OutputError& e) {
    std::cerr << "memcomm-replay: " << e.what() << "\n";
    return kExitFailure;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string default_policies = kRecordedPolicy;
  for (const auto& n : policy_names()) default_policies += "," + n;
  CLI::App app{"", "memcomm-replay"};
  CommandLine cl;
  describe(app, cl, default_policies);
  memcomm::refuse_empty_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return memcomm::stdout_checked(app.exit(e), "memcomm-replay");  // Note [Output that was not written]
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  std::uint64_t capacity = 0;
  const std::vector<std::string> policies = split_list(cl.policy_list);
  try {
    capacity = check_arguments(cl, policies);
  } catch (const std::invalid_argument& e) {
    std::cerr << "memcomm-replay: " << e.what() << "\n";
    return kExitBadInput;
  }

  std::vector<ReplayResult> results;
  ReplayOptions options;
  options.check = cl.check;
  for (const auto& file : cl.files) {
    try {
      const TraceRequests trace = load_with_progress(file, cl.quiet, policies.size());
      auto r = replay_all(trace, policies, capacity, options);
      results.insert(results.end(), r.begin(), r.end());
    } catch (const memcomm::snapshot::ReadError& e) {
      std::cerr << "memcomm-replay: " << e.what() << "\n";
      return kExitBadInput;
    } catch (const std::logic_error& e) {
      std::cerr << "memcomm-replay: " << file << ": internal check failed: " << e.what() << "\n";
      return kExitFailure;
    } catch (const std::exception& e) {  // a policy's own failure (e.g. its memory source)
      std::cerr << "memcomm-replay: " << file << ": internal error: " << e.what() << "\n";
      return kExitFailure;
    }
  }
  return memcomm::stdout_checked(write_results(results, cl.json_out), "memcomm-replay");  // Note [Output that was not written]
}
