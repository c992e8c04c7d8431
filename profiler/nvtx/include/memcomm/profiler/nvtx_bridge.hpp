// Mirrors the recorder's phase ranges as NVTX ranges, so Nsight Systems (or any NVTX tool) shows the
// same step / forward / backward / optimizer structure that memcomm's traces hold. Without a tool
// attached, NVTX calls return at once.
#pragma once

namespace memcomm::prof {

class Recorder;

// Registers the NVTX range hook on `recorder`; returns false when it was already installed or no
// hook slot was free. uninstall_nvtx_bridge() removes it.
bool install_nvtx_bridge(Recorder& recorder);
void uninstall_nvtx_bridge(Recorder& recorder);

}  // namespace memcomm::prof
