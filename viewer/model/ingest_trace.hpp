// memcomm traces (.mct) into the viewer model, through the profiler's TraceSet (Note [Reader seams]).
#pragma once

#include <memcomm/profiler/trace_set.hpp>
#include <memcomm/view/builder.hpp>

#include <atomic>
#include <string>

namespace memcomm::view {

// Adds one rank's events (already on the common timeline) to `b`.
void ingest_rank_trace(const prof::RankTrace& rt, TimelineBuilder& b, std::atomic<double>* progress = nullptr);
bool ingest_trace(const std::string& path, Timeline& out, std::string& error, std::atomic<double>* progress);

}  // namespace memcomm::view
