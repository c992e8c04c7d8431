#include "memcomm/profiler/nvtx_bridge.hpp"

#include "memcomm/profiler/recorder.hpp"

#include <nvtx3/nvToolsExt.h>

#include <mutex>

namespace memcomm::prof {

namespace {

std::mutex g_mu;
int g_slot = -1;
Recorder* g_owner = nullptr;  // the recorder whose hook slot g_slot is

// One NVTX domain keeps memcomm's ranges apart from the application's own.
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("memcomm");
  return d;
}

void on_begin(void*, Phase phase, const char* name, uint64_t id) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = (name && *name) ? name : phase_name(phase);
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = id;
  a.category = static_cast<uint32_t>(phase);
  nvtxDomainRangePushEx(domain(), &a);
}

void on_end(void*, Phase) { nvtxDomainRangePop(domain()); }

}  // namespace

bool install_nvtx_bridge(Recorder& recorder) {
  std::lock_guard<std::mutex> lk(g_mu);
  // A bridge on a recorder this forked child inherited never fires: a renewed recorder gets its own
  // (Note [Recording across fork] in recorder.cpp).
  if (g_slot >= 0 && !g_owner->inherited()) return false;
  RangeHook hook;
  hook.on_begin = &on_begin;
  hook.on_end = &on_end;
  g_slot = recorder.add_range_hook(hook);
  g_owner = g_slot >= 0 ? &recorder : nullptr;
  return g_slot >= 0;
}

void uninstall_nvtx_bridge(Recorder& recorder) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_slot < 0 || g_owner != &recorder) return;
  recorder.remove_range_hook(g_slot);
  g_slot = -1;
  g_owner = nullptr;
}

}  // namespace memcomm::prof
