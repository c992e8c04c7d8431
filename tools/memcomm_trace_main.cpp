// memcomm-trace: inspect, export, merge and analyse memcomm traces (.mct).
// Every subcommand accepts per-rank files (NAME.rank0.mct ...) and merged files, in any mix.
// Exit codes (also in --help): 0 success; 1 a runtime failure, such as an output file that cannot be
// written; 2 a usage error, or an input trace that is missing, empty, foreign or corrupt -- the same
// meaning memcomm-replay gives them.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <memcomm/common/cli_size.hpp>

#include <filesystem>

#include "memcomm/advisor/advise.hpp"
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/chrome_export.hpp"
#include "memcomm/trace/merge.hpp"
#include "memcomm/trace/trace_set.hpp"
#include "trace_info.hpp"

using namespace memcomm::prof;

namespace {

constexpr int kExitFailure = 1;   // a runtime failure (e.g. an output file that cannot be written)
constexpr int kExitBadInput = 2;  // a usage error, or an input trace that cannot be read

// An input trace could not be read: a missing, empty, foreign or corrupt file (exit 2). Output
// failures stay TraceErrors (exit 1).
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void warn_recovery(const TraceSet& set) {
  for (const FileLoadInfo& f : set.files)
    if (f.recovery.truncated)
      fmt::print(stderr, "memcomm-trace: warning: {}: {}\n", f.path, f.recovery.detail);
}

// Loads the input traces; any reading error becomes BadInput.
TraceSet load_inputs(const std::vector<std::string>& files, const LoadOptions& options = {}) {
  try {
    TraceSet set = TraceSet::load(files, options);
    warn_recovery(set);
    return set;
  } catch (const TraceError& e) {
    throw BadInput(e.what());
  }
}

// Note [Outputs that would destroy data]: merge takes its output as the first positional argument,
// so `memcomm-trace merge run.rank0.mct run.rank1.mct` (OUT forgotten) would replace rank 0's trace
// with a merge of rank 1 alone. An output that is one of the inputs is therefore always refused, and
// merge refuses any existing OUT unless --force; export's --chrome is named, so only the first rule
// applies to it. Returns the reason to refuse, or "" to go ahead.
std::string output_conflict(const std::string& out, const std::vector<std::string>& inputs, bool refuse_existing) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return "";
  for (const std::string& in : inputs)
    if (std::filesystem::equivalent(out, in, ec))
      return "output " + out + " is also an input; it would be overwritten (did you forget OUT?)";
  if (refuse_existing) return "output " + out + " already exists; pass --force to overwrite it (or did you forget OUT?)";
  return "";
}

// --rows: a count of at least 1, with a message that says so (CLI::PositiveNumber's names a
// floating-point range).
// CLI11 prefixes the option's name: "--rows: must be at least 1 (got '0')".
CLI::Validator at_least_one() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long n = 0;
        const bool number = CLI::detail::lexical_cast(text, n);
        return number && n >= 1 ? std::string() : "must be at least 1 (got '" + text + "')";
      },
      "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcomm-trace: inspect, export, merge and analyse memcomm traces (.mct).\n"
               "FILE... may be per-rank files (NAME.rank0.mct, NAME.rank1.mct, ...) or merged files.\n"
               "A file cut short by a crash is read up to its last complete chunk, with a warning."};
  app.footer("Exit codes: 0 success; 1 a runtime failure (e.g. an output file that cannot be written);\n"
             "2 a usage error, or an input trace that is missing, empty, not a memcomm trace, or corrupt\n"
             "(bad checksum, bad chunk), with a message naming the file and byte offset.");
  app.require_subcommand(1);

  std::vector<std::string> files;
  bool json = false;
  auto* info = app.add_subcommand("info", "Per file: event counts per kind, duration, ranks, drops, recovered chunks");
  info->add_option("FILE", files, "trace files")->required()->check(CLI::ExistingFile);
  info->add_flag("--json", json, "print JSON instead of text");

  std::string chrome_out;
  auto* exp = app.add_subcommand("export", "Export to Chrome/Perfetto JSON (load it in ui.perfetto.dev)");
  exp->add_option("--chrome", chrome_out, "output JSON file")->required();
  exp->add_option("FILE", files, "trace files")->required()->check(CLI::ExistingFile);

  std::string merge_out;
  bool no_offsets = false;
  auto* merge = app.add_subcommand("merge", "Merge ranks onto one timeline (applying each rank's recorded clock offset) "
                                            "into one .mct file");
  merge->add_option("OUT", merge_out, "merged output file")->required();
  merge->add_option("FILE", files, "trace files")->required()->check(CLI::ExistingFile);
  merge->add_flag("--no-offsets", no_offsets, "do not apply the ranks' clock offsets");
  bool force = false;
  merge->add_flag("--force", force, "overwrite OUT if it exists (never when OUT is one of the FILEs)");

  size_t max_rows = 40;
  auto* report = app.add_subcommand("report", "Temporal breakdown, overlap, exposed communication, collective "
                                              "bandwidth and skew, step table, memory peaks");
  report->add_option("FILE", files, "trace files")->required()->check(CLI::ExistingFile);
  report->add_flag("--json", json, "print the full analysis as JSON");
  report->add_option("--rows", max_rows, "rows per table in text mode (at least 1)")->check(at_least_one());

  memcomm::advise::AdviseOptions advise_opt;
  bool no_replay = false;
  auto* adv = app.add_subcommand("advise", "What to change, with the evidence: allocator policy (replaying the trace's "
                                           "allocations), buckets/accumulation, loader, micro-batch, stragglers");
  adv->add_option("FILE", files, "trace files")->required()->check(CLI::ExistingFile);
  adv->add_option("--memory-limit", advise_opt.memory_limit,
                  "Bytes per rank the run may use (e.g. 80GiB); default: the allocator's recorded capacity")
      ->transform(memcomm::size_transform());
  adv->add_flag("--no-replay", no_replay, "Skip replaying the allocations through the allocator policies");
  adv->add_flag("--json", json, "print the advice as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  }

  const std::string conflict = *merge ? output_conflict(merge_out, files, !force)
                              : *exp  ? output_conflict(chrome_out, files, false)
                                      : "";
  if (!conflict.empty()) {
    fmt::print(stderr, "memcomm-trace: {}\n", conflict);
    return kExitBadInput;
  }

  try {
    if (*info) return tool::print_info(files, json) ? 0 : kExitBadInput;
    if (*exp) {
      const TraceSet set = load_inputs(files);
      const ChromeExportStats st = export_chrome(set, chrome_out);
      fmt::print("wrote {}: {} ranks, {} slices, {} counter samples, {} flows, {} instants\n", chrome_out, set.ranks.size(),
                 st.slices, st.counters, st.flows, st.instants);
      return 0;
    }
    if (*merge) {
      LoadOptions lo;
      lo.apply_clock_offsets = !no_offsets;
      const TraceSet set = load_inputs(files, lo);
      for (const RankTrace& r : set.ranks)
        if (r.clock_offset_ns != 0) fmt::print("rank {}: clock offset {} ns applied\n", r.rank, r.clock_offset_ns);
      const MergeStats st = write_merged(set, merge_out);
      fmt::print("wrote {}: {} ranks, {} events, {} chunks, {} bytes\n", merge_out, st.ranks, st.events, st.chunks, st.bytes);
      return 0;
    }
    if (*adv) {
      const TraceSet set = load_inputs(files);
      advise_opt.replay = !no_replay;
      const auto advice = memcomm::advise::advise(set, analyze(set), files, advise_opt);
      if (json) fmt::print("{}\n", memcomm::advise::advice_to_json(advice));
      else fmt::print("{}", memcomm::advise::advice_to_text(advice));
      return 0;
    }
    if (*report) {
      const TraceSet set = load_inputs(files);
      const Analysis a = analyze(set);
      if (json) fmt::print("{}\n", analysis_to_json(a));
      else fmt::print("{}", analysis_to_text(a, max_rows));
      return 0;
    }
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
