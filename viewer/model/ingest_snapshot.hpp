// PyTorch memory snapshot pickles into the viewer model, through memcomm_snapshot
// (Note [Reader seams] in loader.cpp).
#pragma once

#include <memcomm/view/timeline.hpp>

#include <atomic>
#include <string>

namespace memcomm::view {

bool ingest_snapshot(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress);

}  // namespace memcomm::view
