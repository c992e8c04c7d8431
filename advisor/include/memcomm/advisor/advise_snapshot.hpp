// The advisor on PyTorch memory snapshots (torch.cuda.memory._dump_snapshot() pickles): the
// snapshot's allocations replayed through the allocator policies (what reserving less would take),
// empty_cache churn (segments given back and taken again), and each OOM in the trace explained
// (fragmented or truly full), with the stack of the allocation that failed.
#pragma once

#include <string>
#include <vector>

#include "memcomm/advisor/advise.hpp"
#include "memcomm/snapshot/snapshot.hpp"

namespace memcomm::advise {

// Advice on a decoded snapshot. AdviseOptions: `replay` (the policy replay), nothing else yet.
// `notes`, when given, receives what could not be judged and why (a trace that allocates nothing).
std::vector<Advice> advise_snapshot(const snapshot::Snapshot& snap, const AdviseOptions& options = {},
                                    std::vector<std::string>* notes = nullptr);
// Loads `path` (snapshot::ReadError naming the file when it is not a readable snapshot) and advises;
// each piece of evidence, and each note, starts with the file's name.
std::vector<Advice> advise_snapshot(const std::string& path, const AdviseOptions& options = {},
                                    std::vector<std::string>* notes = nullptr);

}  // namespace memcomm::advise
