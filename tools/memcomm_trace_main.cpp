// memcomm-trace: inspect, export, merge, convert and analyse traces: memcomm's .mct files and
// torch.profiler (Kineto) traces (.json, .json.gz; kineto.hpp); memory, compare and advise read
// PyTorch memory snapshots too (memcomm/snapshot/memory.hpp, trace_memory.hpp).
// Every subcommand accepts per-rank files (NAME.rank0.mct ...), merged files and torch.profiler
// traces (one file per rank), in any mix.
// Exit codes (also in --help): 0 success; 1 a runtime failure, such as an output a full disk cuts
// short; 2 a usage error (an output whose folder does not exist, checked first), or an input trace
// that is missing, empty, foreign or corrupt -- the same meaning memcomm-replay gives them.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <memcomm/common/bytes.hpp>
#include <memcomm/common/cli_checks.hpp>
#include <memcomm/common/output_path.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <memcomm/common/standard_output.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "memcomm/advisor/advise.hpp"
#include "memcomm/advisor/advise_snapshot.hpp"
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/chrome_export.hpp"
#include "memcomm/trace/hta.hpp"
#include "memcomm/trace/kineto.hpp"
#include "memcomm/trace/merge.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "input_warnings.hpp"
#include "progress.hpp"
#include "trace_convert.hpp"
#include "trace_info.hpp"
#include "trace_memory.hpp"
#include "trace_events.hpp"
#include "trace_segments.hpp"
#include "memcomm/snapshot/error.hpp"

using namespace memcomm::prof;
using memcomm::output_conflict;
using memcomm::is_standard_output;
using memcomm::ReplacingFile;

namespace {

constexpr int kExitFailure = 1;   // a runtime failure (e.g. an output a full disk cuts short)
constexpr int kExitBadInput = 2;  // a usage error, or an input trace that cannot be read

// An input trace could not be read: a missing, empty, foreign or corrupt file (exit 2). Output
// failures stay TraceErrors (exit 1).
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `write(path)` writes an output at `path`; it goes to a temporary beside `destination`, renamed over
// it when complete (Note [Outputs replaced whole]). A writer's error names the destination.
template <class Write>
auto write_whole(const std::string& destination, Write write) {
  ReplacingFile out(destination);
  try {
    auto stats = write(out.path());
    out.commit();
    return stats;
  } catch (const TraceError& e) {
    throw TraceError(out.naming_destination(e.what()));
  }
}

// Loads the input traces, with progress when that takes long; any reading error becomes BadInput.
TraceSet load_inputs(const std::vector<std::string>& files, LoadOptions options = {}) {
  uint64_t total = 0, earlier = 0, current = 0;  // bytes: all files, files already read, the file being read
  std::string reading;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(f, ec);
    if (!ec) total += n;
  }
  std::optional<tool::Progress> progress(std::in_place, fmt::format("reading {} file{} ({})", files.size(),
                                                                    files.size() == 1 ? "" : "s", memcomm::format_bytes(total)));
  options.progress = [&](const std::string& path, uint64_t done, uint64_t size) {
    if (path != reading) earlier += current, reading = path;
    current = size;
    if (total) progress->update(double(earlier + done) / double(total));
  };
  try {
    TraceSet set = TraceSet::load(files, options);
    progress.reset();  // its last line before the warnings
    tool::warn_about_inputs(set);
    return set;
  } catch (const TraceError& e) {
    throw BadInput(e.what());
  }
}


// Every subcommand's options, filled by CLI11.
struct Args {
  std::vector<std::string> files;
  bool json = false;
  std::string chrome_out;
  std::string merge_out;
  bool no_offsets = false;
  bool force = false;
  size_t max_rows = 40;
  memcomm::advise::AdviseOptions advise;
  bool no_replay = false;
  std::string convert_in, convert_out;
  std::string codec = "zstd";
  bool hta = false;            // report: HTA's figures too (hta.hpp)
  HtaOptions hta_options;
  std::string comm_kernels;    // report: LoadOptions::comm_kernels
  tool::MemoryArgs memory;     // memory, compare
  std::string before, after;   // compare
};

struct Subcommands {
  CLI::App* info;
  CLI::App* exp;
  CLI::App* merge;
  CLI::App* report;
  CLI::App* advise;
  CLI::App* convert;
  CLI::App* memory;
  CLI::App* compare;
};

CLI::App* add_files(CLI::App* sub, Args& a) {
  sub->add_option("FILE", a.files, "trace files")->required()->check(memcomm::existing_file());
  return sub;
}

void add_convert(CLI::App& app, Args& a, Subcommands& s) {
  s.convert = app.add_subcommand("convert", "Write one trace (a torch.profiler .json/.json.gz, or an .mct file of one "
                                            "rank) as a compact, crash-safe per-rank .mct file; prints the size ratio");
  s.convert->add_option("IN", a.convert_in, "input trace")->required()->check(memcomm::existing_file());
  s.convert->add_option("OUT", a.convert_out, "output .mct file")->required();
  s.convert->add_option("--codec", a.codec, "chunk compression: zstd (smaller) or lz4 (faster)")
      ->check(CLI::IsMember({"zstd", "lz4"}))
      ->capture_default_str();
  s.convert->add_flag("--force", a.force, "overwrite OUT if it exists (never when OUT is IN)");
}

void add_memory_options(CLI::App* sub, Args& a) {
  sub->add_option("--at", a.memory.at, "when: end, peak (the most live bytes: a block is live until its free is requested, when the program lets go of it; memcomm-replay counts it until the free completes, as the allocator cannot reuse it before), or seconds after the trace's first event (a snapshot that "
                   "records no times, torch <= 2.1, counts events: 1 us each)")
      ->capture_default_str();
  sub->add_flag("--json", a.memory.json, "print JSON (every site, whole stacks)");
  sub->add_flag("--all-frames", a.memory.all_frames, "show every frame, not only memory_viz's filtered ones");
  sub->add_option("--rows", a.memory.rows, "sites shown in text mode (at least 1)")->check(memcomm::whole_number(1))->capture_default_str();
  sub->add_option("--rank", a.memory.rank, "traces of several ranks: the rank to read (default: the first); snapshots have none")
      ->check(memcomm::whole_number(0));
  sub->add_option("--device", a.memory.device, "only this device's blocks, 255 for host memory (default: every device's, summed; a trace's host "
                  "memory is left out where it also has a GPU's)")
      ->check(CLI::Range(0, 255));
}

void add_segments_option(CLI::App* sub, Args& a) {
  sub->add_flag("--segments", a.memory.segments,
                "snapshots: each device's segments at the end state instead, largest first (--rows of them), as "
                "memory_viz's segsum sums them up: reserved, active blocks, requested, free and the largest free block (a "
                "block freed but waiting on a stream is active, said as pending free; segsum counts it free)");
}

void add_memory(CLI::App& app, Args& a, Subcommands& s) {
  s.memory = app.add_subcommand("memory", "Who holds memory: live bytes by allocation stack at a time, most first, in a "
                                          "PyTorch memory snapshot (.pickle; stacks as torch's memory_viz prints them: "
                                          "file:line:function, outermost first; a block allocated before the trace, "
                                          "known only by the stack of its free, is shown under that heading, as "
                                          "memory_viz does), or by block category in one rank of a .mct or "
                                          "torch.profiler trace (they record no stacks)");
  s.memory->add_option("FILE", a.files, "snapshot (torch.cuda.memory._dump_snapshot) or trace")->required()->expected(1)->check(memcomm::existing_file());
  add_memory_options(s.memory, a);
  add_segments_option(s.memory, a);
  s.memory->add_flag("--events", a.memory.events,
                     "snapshots: every event of each device's trace instead, in order, as memory_viz's trace lists "
                     "them (all of them: --rows does not apply), with the bytes live and reserved after each and "
                     "the innermost Python frame (and its compile context and user metadata, where recorded)");
  s.compare = app.add_subcommand("compare", "What grew between two PyTorch memory snapshots (or traces): live bytes "
                                            "by allocation stack in each, largest growth first");
  s.compare->add_option("BEFORE", a.before, "earlier snapshot or trace")->required()->check(memcomm::existing_file());
  s.compare->add_option("AFTER", a.after, "later snapshot or trace")->required()->check(memcomm::existing_file());
  add_memory_options(s.compare, a);
  s.compare->add_flag("--segments", a.memory.segments,
                      "snapshots: the segments (by address and size) only in BEFORE and only in AFTER instead, per "
                      "device, as memory_viz's compare lists them");
}

Subcommands add_subcommands(CLI::App& app, Args& a) {
  Subcommands s{};
  s.info = add_files(app.add_subcommand("info", "Per file: event counts per kind, duration, ranks, drops, recovered chunks; for a "
                                                   "torch.profiler trace also its categories, what was kept as generic "
                                                   "ranges or skipped (and why), flows, communication kernels, [memory] "
                                                   "events"), a);
  s.info->add_flag("--json", a.json, "print JSON instead of text");

  s.exp = app.add_subcommand("export", "Export to Chrome/Perfetto JSON (load it in ui.perfetto.dev)");
  s.exp->add_option("--chrome", a.chrome_out, "output JSON file ('-': stdout, with the summary line on stderr)")
      ->required();
  add_files(s.exp, a);

  s.merge = app.add_subcommand("merge", "Merge ranks onto one timeline (applying each rank's recorded clock offset) "
                                        "into one .mct file");
  s.merge->add_option("OUT", a.merge_out, "merged output file")->required();
  add_files(s.merge, a);
  s.merge->add_flag("--no-offsets", a.no_offsets, "do not apply the ranks' clock offsets");
  s.merge->add_flag("--force", a.force, "overwrite OUT if it exists (never when OUT is one of the FILEs)");

  s.report = add_files(app.add_subcommand("report", "Temporal breakdown, overlap, exposed communication, collective "
                                                    "bandwidth and skew, step table, memory peaks; --hta adds "
                                                    "HolisticTraceAnalysis's figures"), a);
  s.report->add_flag("--json", a.json, "print the full analysis as JSON");
  s.report->add_option("--rows", a.max_rows, "rows per table in text mode (at least 1)")->check(memcomm::whole_number(1));
  CLI::Option* hta = s.report->add_flag("--hta", a.hta, "also HolisticTraceAnalysis 0.5.0's figures per rank (idle, "
                                                        "compute, non-compute %, comm/comp overlap %; ^nccl.*Kernel is "
                                                        "communication) and memcomm's whole-trace variant of them");
  s.report->add_flag("--include-last-step", a.hta_options.include_last_step,
                     "with --hta: HTA's include_last_profiler_step=True (keep the last ProfilerStep)")
      ->needs(hta);
  s.report->add_option("--comm-kernels", a.comm_kernels,
                       fmt::format("torch.profiler traces: regex (RE2, as Python's re without lookaround; searched in "
                                   "kernel names; at most 1000 characters) of the communication kernels of memcomm's "
                                   "own analysis, not --hta's (default: {})",
                                   kDefaultCommKernels))
      ->check(CLI::Validator([](std::string& p) { return memcomm::prof::comm_kernels_problem(p); }, "REGEX"));

  s.advise = add_files(app.add_subcommand("advise", "What to change, with the evidence: allocator policy (replaying the "
                                                    "trace's allocations), buckets/accumulation, loader, micro-batch, "
                                                    "stragglers. FILE may also be a PyTorch memory snapshot (.pickle "
                                                    "from _dump_snapshot): its allocations replayed through the "
                                                    "policies (expandable_segments:True or memcomm's allocator, bytes "
                                                    "saved), empty_cache churn (segments freed and allocated again), "
                                                    "and each OOM: fragmented or full, with the failed allocation's "
                                                    "stack"), a);
  s.advise->add_option("--memory-limit", a.advise.memory_limit,
                       "Bytes per rank the run may use (e.g. 80GiB); default (or 0): the allocator's recorded capacity. "
                       "Traces only: a snapshot's advice does not use it")
      ->transform(memcomm::size_transform());
  s.advise->add_flag("--no-replay", a.no_replay, "Skip replaying the allocations through the allocator policies");
  s.advise->add_flag("--json", a.json, "print the advice as JSON");
  add_convert(app, a, s);
  add_memory(app, a, s);
  return s;
}

int run_export(const Args& a) {
  const TraceSet set = load_inputs(a.files);
  const bool to_stdout = is_standard_output(a.chrome_out);  // the JSON alone on stdout, the summary on stderr
  std::optional<tool::Progress> progress(std::in_place, "writing " + (to_stdout ? std::string("to stdout") : a.chrome_out));
  const auto report = [&progress](double f) { progress->update(f); };
  ChromeExportStats st;
  if (to_stdout) {
    st = export_chrome(set, stdout, report);
    if (std::fflush(stdout) != 0) throw TraceError(fmt::format("writing to stdout failed: {}", std::strerror(errno)));
  } else {
    st = write_whole(a.chrome_out, [&](const std::string& path) { return export_chrome(set, path, report); });
  }
  progress.reset();
  fmt::print(to_stdout ? stderr : stdout, "wrote {}: {} ranks, {} slices, {} counter samples, {} flows, {} instants\n",
             to_stdout ? "stdout" : a.chrome_out, set.ranks.size(), st.slices, st.counters, st.flows, st.instants);
  return 0;
}

int run_merge(const Args& a) {
  LoadOptions lo;
  lo.apply_clock_offsets = !a.no_offsets;
  const TraceSet set = load_inputs(a.files, lo);
  std::FILE* say = is_standard_output(a.merge_out) ? stderr : stdout;  // the trace alone where it goes
  for (const RankTrace& r : set.ranks)
    if (r.clock_offset_ns != 0) fmt::print(say, "rank {}: clock offset {} ns applied\n", r.rank, r.clock_offset_ns);
  const MergeStats st = write_whole(a.merge_out, [&](const std::string& path) { return write_merged(set, path); });
  fmt::print(say, "wrote {}: {} ranks, {} events, {} chunks, {} bytes\n", a.merge_out, st.ranks, st.events, st.chunks, st.bytes);
  return 0;
}

int run_convert(const Args& a) {
  LoadOptions lo;
  lo.apply_clock_offsets = false;  // the copy keeps the trace's own clock and its ClockOffset record
  const TraceSet set = load_inputs({a.convert_in}, lo);
  if (set.ranks.size() != 1)
    throw BadInput(fmt::format("{}: holds {} ranks; convert writes one rank per file (merge writes several)",
                               a.convert_in, set.ranks.size()));
  WriterOptions o;
  o.codec = a.codec == "lz4" ? Codec::Lz4 : Codec::Zstd;
  o.zstd_level = 3;
  const tool::ConvertStats st =
      write_whole(a.convert_out, [&](const std::string& path) { return tool::write_rank(set.ranks.front(), path, o); });
  fmt::print(is_standard_output(a.convert_out) ? stderr : stdout, "{}",
             tool::convert_summary(a.convert_in, set.files.front(), a.convert_out, st));
  return 0;
}

// Snapshots (by their first byte) and traces may be mixed; the traces are advised on together.
int run_advise(Args a) {
  namespace adv = memcomm::advise;
  a.advise.replay = !a.no_replay;
  std::vector<std::string> traces, snapshots;
  for (const auto& f : a.files) (memcomm::snapshot::is_snapshot_file(f) ? snapshots : traces).push_back(f);
  std::vector<adv::Advice> advice;
  if (!traces.empty()) {
    const TraceSet set = load_inputs(traces);
    tool::Progress progress(fmt::format("analysing {} events", set.event_count()));
    advice = adv::advise(set, analyze(set), traces, a.advise);
  }
  for (const auto& f : snapshots) {
    try {
      std::vector<std::string> notes;
      for (auto& x : adv::advise_snapshot(f, a.advise, &notes)) advice.push_back(std::move(x));
      for (const auto& n : notes) fmt::print(stderr, "warning: {}\n", n);
    } catch (const memcomm::snapshot::ReadError& e) {  // a corrupt or cut pickle: bad input, exit 2
      throw BadInput(e.what());
    }
  }
  if (a.json) fmt::print("{}\n", memcomm::advise::advice_to_json(advice));
  else fmt::print("{}", memcomm::advise::advice_to_text(advice));
  return 0;
}

int run_report(const Args& a) {
  LoadOptions lo;
  lo.comm_kernels = a.comm_kernels;
  const TraceSet set = load_inputs(a.files, lo);
  std::optional<tool::Progress> progress(std::in_place, fmt::format("analysing {} events", set.event_count()));
  const Analysis analysis = analyze(set);
  const std::vector<HtaRank> hta = a.hta ? hta_analyze(set, a.hta_options) : std::vector<HtaRank>{};
  progress.reset();  // its last line before the report
  if (!a.json) fmt::print("{}{}", analysis_to_text(analysis, a.max_rows), a.hta ? hta_to_text(hta, a.hta_options) : "");
  else if (a.hta) fmt::print("{}\n", add_hta_json(analysis_to_json(analysis), hta, a.hta_options));
  else fmt::print("{}\n", analysis_to_json(analysis));
  return 0;
}

// Runs the chosen subcommand; reading and writing errors become exit codes here.
int run(const Subcommands& s, const Args& a) {
  try {
    if (*s.info) return tool::print_info(a.files, a.json) ? 0 : kExitBadInput;
    if (*s.exp) return run_export(a);
    if (*s.merge) return run_merge(a);
    if (*s.advise) return run_advise(a);
    if (*s.report) return run_report(a);
    if (*s.convert) return run_convert(a);
    if (*s.memory && a.memory.events) return tool::print_events(a.files.front(), a.memory, stdout), 0;
    if (*s.memory && a.memory.segments) return fmt::print("{}", tool::segments_report(a.files.front(), a.memory)), 0;
    if (*s.memory) return fmt::print("{}", tool::memory_report(a.files.front(), a.memory)), 0;
    if (*s.compare && a.memory.segments)
      return fmt::print("{}", tool::segments_compare_report(a.before, a.after, a.memory)), 0;
    if (*s.compare) return fmt::print("{}", tool::compare_report(a.before, a.after, a.memory)), 0;
  } catch (const memcomm::snapshot::ReadError& e) {  // memory, compare: the snapshot cannot be read
    fmt::print(stderr, "memcomm-trace: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {  // memory, compare: an unreadable trace, a bad --at or --rank
    fmt::print(stderr, "memcomm-trace: {}\n", e.what());
    return kExitBadInput;
  } catch (const BadInput& e) {
    fmt::print(stderr, "memcomm-trace: {}\n", e.what());
    return kExitBadInput;
  } catch (const TraceError& e) {  // writing the output
    fmt::print(stderr, "memcomm-trace: {}\n", e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "memcomm-trace: error: {}\n", e.what());
    return kExitFailure;
  }
  return kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcomm-trace: inspect, export, merge, convert and analyse traces: memcomm's .mct files and\n"
               "torch.profiler (Kineto) traces (*.pt.trace.json, .json.gz).\n"
               "FILE... may be per-rank files (NAME.rank0.mct, NAME.rank1.mct, ...), merged files, and torch.profiler\n"
               "traces, one file per rank (its rank from distributedInfo, rank 0 without it), in any mix.\n"
               "A file cut short (a crash, a killed job) is read up to its last complete chunk (.mct) or event\n"
               "(torch.profiler), with a warning on stderr saying where it stopped.\n"
               "memory, compare and advise also read PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles)."};
  app.footer("Exit codes: 0 success; 1 a runtime failure (e.g. an output a full disk cuts short);\n"
             "2 a usage error (an output whose folder does not exist, checked first), or an input trace that is missing, empty, corrupt (bad checksum, bad chunk, broken\n"
             "JSON or gzip), not a memcomm trace, or JSON that is not a torch.profiler trace, with a message\n"
             "naming the file and byte offset.");
  app.require_subcommand(1);
  Args args;
  const Subcommands subs = add_subcommands(app, args);
  // CLI11 would answer a mistyped subcommand with "A subcommand is required".
  const auto known = [&app](const std::string& name) {
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->check_name(name)) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    fmt::print(stderr, "memcomm-trace: unknown subcommand '{}' (one of: {})\nRun 'memcomm-trace --help' for more.\n", argv[1],
               names);
    return kExitBadInput;
  }
  memcomm::refuse_empty_values(app);
  if (const std::string bad = memcomm::unknown_option(app, argc, argv); !bad.empty()) {
    fmt::print(stderr, "memcomm-trace {}: unknown option '{}'\nRun 'memcomm-trace {} --help' for its options.\n",
               argc > 1 ? argv[1] : "", bad, argc > 1 ? argv[1] : "");
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // --help: exit 0, unless its text was lost (Note [Output that was not written])
    return rc == 0 ? memcomm::stdout_checked(0, "memcomm-trace") : kExitBadInput;
  }

  const std::string conflict = *subs.merge   ? output_conflict(args.merge_out, args.files, !args.force)
                              : *subs.exp     ? output_conflict(args.chrome_out, args.files, false)
                              : *subs.convert ? output_conflict(args.convert_out, {args.convert_in}, !args.force)
                                              : "";
  if (!conflict.empty()) {
    fmt::print(stderr, "memcomm-trace: {}\n", conflict);
    return kExitBadInput;
  }
  // An output that cannot be written at all (its folder missing, its name too long) is a usage error
  // before any work, as in the other tools; a full disk is found while writing (exit 1).
  const std::string out = *subs.merge ? args.merge_out : *subs.exp ? args.chrome_out : *subs.convert ? args.convert_out : "";
  if (const std::string problem = out.empty() || out == "-" ? "" : memcomm::replace_problem(out); !problem.empty()) {
    fmt::print(stderr, "memcomm-trace: output {}: {}\n", out, problem);
    return kExitBadInput;
  }
  return memcomm::stdout_checked(run(subs, args), "memcomm-trace");  // Note [Output that was not written]
}
