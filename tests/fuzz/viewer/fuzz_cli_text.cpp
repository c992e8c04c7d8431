// libFuzzer target for memcomm-view's text inputs: --script files (parse_script), the advice a
// memcomm-trace found on PATH prints (parse_advice_json), and the small command-line parsers every
// tool shares (parse_size in common, parse_endpoint in the profiler) or one has (the viewer's
// parse_time_range and parse_panes, memcomm-trace memory's --at). The first byte picks the parser;
// each must accept or refuse with its documented error, never crash, hang or throw anything else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <memcomm/common/bytes.hpp>
#include <memcomm/profiler/stream_protocol.hpp>
#include <memcomm/trace/trace_error.hpp>
#include <memcomm/snapshot/memory.hpp>
#include <memcomm/view/app/advice.hpp>
#include <memcomm/view/app/app_state.hpp>
#include <memcomm/view/app/input_script.hpp>
#include <memcomm/view/loader.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memcomm;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string error;
  switch (data[0] % 7) {
    case 0: {
      std::vector<view::ScriptCommand> cmds;
      if (view::parse_script(text, "fuzz", cmds, error)) {
        for (const auto& c : cmds) {
          // What apply_script relies on: a valid button and key, counts in range, a finite timeout.
          if (c.button < 0 || c.button > 1 || c.frames < 0 || c.frames > 1'000'000) std::abort();
          if (c.op == view::ScriptCommand::Op::Key && c.key < 0) std::abort();
          if (!std::isfinite(c.timeout_s) || c.timeout_s < 0) std::abort();
        }
      } else if (error.empty()) {
        std::abort();  // a refusal must say why
      }
      break;
    }
    case 1:
      for (bool zero : {false, true}) {
        try {
          (void)parse_size(text, zero);
        } catch (const std::invalid_argument&) {
        }
      }
      break;
    case 2:
      try {
        (void)prof::parse_endpoint(text);
      } catch (const prof::TraceError&) {
      }
      try {  // an address to connect to: a port from 1 to 65535, always
        if (prof::parse_connect_endpoint(text).port == 0) std::abort();
      } catch (const prof::TraceError&) {
      }
      break;
    case 3: {
      view::LoadOptions o;
      if (view::parse_time_range(text, o, error)) {
        if (!(o.range_lo_s >= 0) || !(o.range_hi_s > o.range_lo_s)) std::abort();
      } else if (error.empty()) {
        std::abort();
      }
      break;
    }
    case 5: {
      std::vector<view::AdviceItem> items;
      if (!view::parse_advice_json(text, items, error) && error.empty()) std::abort();
      break;
    }
    case 6: {  // --at against a trace of one allocation from 1 s to 3 s
      prof::Allocations a;
      a.begin = 1'000'000'000;
      a.end = 3'000'000'000;
      prof::Allocation one{};
      one.alloc_ns = a.begin;
      one.free_ns = a.end;
      one.size = 512;
      a.list.push_back(one);
      std::int64_t t = 0;
      if (snapshot::resolve_at(a, text, t, error)) {
        if (t < a.begin || t > a.end) std::abort();
      } else if (error.empty()) {
        std::abort();
      }
      break;
    }
    default: {
      view::Panes p;
      if (!view::parse_panes(text, p, error) && error.empty()) std::abort();
      break;
    }
  }
  return 0;
}
