// Checking an input path before it is opened: every reader of traces, snapshots and torch.profiler
// files asks the same question, and says the same words.
#pragma once

#include <cstddef>
#include <string>

namespace memcomm {

// Note [Inputs are regular files]
// memcomm's readers map a file, or read its size first, and some read it twice (the format probe,
// then the reader). A pipe or a device breaks each of those in its own way: /dev/zero was read into
// memory until the machine ran out (memcomm-replay), a pipe's trace was "an empty file (0 bytes)"
// (memcomm-trace), and a FIFO with no writer blocked open() for ever (every tool). So a path that
// exists and is not a regular file is refused before it is opened: a folder as "is a folder, not a
// file", anything else as not a regular file. Returns that reason, or "" (a regular file, or a path
// that does not exist, which opening it reports).
std::string input_file_problem(const std::string& path);

// Up to `n` first bytes of the file at `path`, to tell formats apart without reading it whole. False
// with `error` saying why where it cannot be read: input_file_problem's reason, "cannot open: ..." or
// "cannot read: ..." (errno's words).
bool read_file_head(const std::string& path, std::size_t n, std::string& head, std::string& error);

}  // namespace memcomm
