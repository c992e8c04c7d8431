// The public face of the Kineto reader: bytes -> splitter -> converter (kineto.hpp).
#include "memcomm/trace/kineto.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "converter.hpp"
#include "memcomm/common/input_file.hpp"
#include "json_blocks.hpp"
#include "json_splitter.hpp"
#include "parallel_parse.hpp"

namespace memcomm::prof {

namespace {

// See Note [One simdjson translation unit]: the parser's file may need AVX2.
void check_cpu(const std::string& name) {
#if defined(MEMCOMM_KINETO_AVX2)
  __builtin_cpu_init();
  // LZCNT came with AVX2 and BMI1 on every x86 CPU that has them (and clang cannot name it here).
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("bmi") || !__builtin_cpu_supports("pclmul") ||
      !__builtin_cpu_supports("popcnt"))
    throw TraceError(fmt::format("{}: this build reads torch.profiler traces with AVX2, which this CPU lacks; "
                                 "rebuild with -DMEMCOMM_KINETO_AVX2=OFF", name));
#else
  (void)name;
#endif
}

KinetoTrace read_blocks(kineto::JsonBlocks& blocks, const std::string& name, bool gzip, const KinetoOptions& opt) {
  check_cpu(name);
  kineto::Converter converter(name, opt);
  kineto::SplitResult split;
  if (const unsigned workers = kineto::parse_workers()) {  // Note [Parsing beside the converter]
    kineto::ParallelParse parallel(converter, workers);
    split = kineto::split_trace(blocks, parallel, name);
    parallel.drain();
  } else {
    split = kineto::split_trace(blocks, converter, name);
  }
  KinetoTrace out = converter.finish(split);
  out.info.gzip = gzip;
  if (blocks.cut_short() && !out.info.truncated) {
    out.info.truncated = true;
    out.info.truncation = fmt::format("{}: the gzip stream ends early (cut short?); its JSON was complete", name);
  }
  return out;
}

}  // namespace

KinetoTrace read_kineto(const std::string& path, const KinetoOptions& opt) {
  bool gzip = false;
  auto blocks = kineto::open_json_blocks(path, gzip);
  return read_blocks(*blocks, path, gzip, opt);
}

KinetoTrace read_kineto_buffer(std::string_view json, const std::string& name, const KinetoOptions& opt) {
  auto blocks = kineto::buffer_blocks(json);
  return read_blocks(*blocks, name, false, opt);
}

// A file whose first byte past whitespace (and a UTF-8 byte order mark) starts a JSON value goes to
// the torch.profiler reader, which says what JSON that is not a trace is; .mct files start with 'M'.
// So does JSON in UTF-16 or UTF-32 (a byte order mark of those, or a NUL beside a JSON start byte), so
// that the error names the encoding, not an .mct magic number.
bool is_kineto_candidate(const std::string& path) {
  if (!input_file_problem(path).empty()) return false;  // Note [Inputs are regular files]: the reader says why
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // the .mct reader reports the error
  char head[4096];
  off_t at = 0;
  ssize_t n = pread(fd, head, sizeof(head), 0);
  bool candidate = false;
  if (n >= 2 && uint8_t(head[0]) == 0x1f && uint8_t(head[1]) == 0x8b) candidate = true;  // gzip
  if (n >= 2 && kineto::wide_json(std::string_view(head, size_t(n)))) candidate = true;
  const bool bom = n >= 3 && uint8_t(head[0]) == 0xEF && uint8_t(head[1]) == 0xBB && uint8_t(head[2]) == 0xBF;
  if (bom && n >= 6 && std::string_view(head + 3, 3) == "\xEF\xBB\xBF") candidate = true;  // a second mark, named
  for (ssize_t i = bom ? 3 : 0; !candidate && n > 0 && at < (off_t(1) << 20);) {
    if (i == n) {  // the block held only leading white space (or the mark): read on (up to 1 MiB of it)
      at += n;
      n = pread(fd, head, sizeof(head), at);
      i = 0;
      continue;
    }
    const char c = head[i];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
      const std::string_view rest(head + i, size_t(n - i));
      candidate = (c != '\0' && std::strchr("{[\"-0123456789", c) != nullptr) || rest.rfind("null", 0) == 0 ||
                  rest.rfind("true", 0) == 0 || rest.rfind("false", 0) == 0;
      break;
    }
    ++i;
  }
  close(fd);
  return candidate;  // otherwise (empty, only spaces, binary): the .mct reader names it
}

std::string kineto_info_text(const KinetoInfo& i) {
  std::string s = fmt::format("  format: torch.profiler trace{}, schema {}, {} JSON bytes, {} traceEvents -> {} events\n",
                              i.gzip ? " (gzip)" : "", i.schema_version, i.json_bytes, i.trace_events, i.converted);
  s += fmt::format("  timestamps: {}{}{}\n", i.float_timestamps ? "sub-microsecond" : "whole microseconds",
                   i.display_time_unit.empty() ? "" : ", displayTimeUnit " + i.display_time_unit,
                   i.base_time_ns ? fmt::format(", baseTimeNanoseconds {}", i.base_time_ns) : "");
  for (const auto& [cat, n] : i.categories) s += fmt::format("  category {:<24} {:>10}\n", cat, n);
  for (const auto& [cat, n] : i.generic) s += fmt::format("  kept as generic ranges: {} ({})\n", cat, n);
  for (const auto& [cat, n] : i.device_generic) s += fmt::format("  kept as kernels on their stream: {} ({})\n", cat, n);
  s += fmt::format("  flows {}, communication kernels {}, [memory] events {}\n", i.flows, i.comm_kernels, i.memory_events);
  if (i.host_collectives) s += fmt::format("  host collectives (gloo:) {}\n", i.host_collectives);
  if (i.data_waits) s += fmt::format("  DataLoader __next__ spans (data wait) {}\n", i.data_waits);
  if (i.memory_events_without_addr)
    s += fmt::format("  [memory] events without Addr (2021 schema): {}, each free paired with the latest live "
                     "allocation of its size\n", i.memory_events_without_addr);
  if (i.clamped_ranges) s += fmt::format("  ranges cut to fit inside their parent: {}\n", i.clamped_ranges);
  if (i.saturated_durations) s += fmt::format("  spans longer than 12.4 days (kept at 12.4 days): {}\n", i.saturated_durations);
  for (const auto& [why, n] : i.skipped) s += fmt::format("  skipped: {} ({})\n", why, n);
  if (i.truncated) s += "  warning: " + i.truncation + "\n";
  return s;
}

}  // namespace memcomm::prof
