#include "checkpoint.hpp"
#include "checkpoint_file.hpp"

#include <memcomm/train/errors.hpp>
#include <memcomm/train/options.hpp>

#include <memcomm/common/input_file.hpp>
#include <memcomm/common/output_path.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <memcomm/trace/trace_format.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace memcomm::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFingerprintKey = "memcomm_config";
// The learning rate the saving run's schedule gives the next step (Note [A schedule resumed]).
constexpr const char* kNextLrKey = "memcomm_next_lr";

// The whole file in one buffer of its size: the archive is read from it in place.
std::string read_file(const std::string& path) {
  // A FIFO in the checkpoint's place blocked --resume for ever (see Note [Inputs are regular files]).
  if (const std::string problem = memcomm::input_file_problem(path); !problem.empty())
    throw std::runtime_error("cannot read checkpoint " + path + ": " + problem);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = f ? std::streamoff(f.tellg()) : -1;
  std::string bytes;
  if (size > 0) {
    bytes.resize(size_t(size));
    f.seekg(0);
    f.read(bytes.data(), size);
  }
  if (size < 0 || !f) throw std::runtime_error("cannot read checkpoint " + path);
  return bytes;
}

std::string shape_text(c10::IntArrayRef sizes) {
  std::string s;
  for (const int64_t d : sizes) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

// Mirrors Module::load's walk (own parameters, then each child's archive) but only compares
// shapes: Module::load itself would replace a parameter by a tensor of any shape.
void check_shapes(torch::nn::Module& m, torch::serialize::InputArchive& ar, const std::string& prefix,
                  std::vector<std::string>& diffs) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    torch::Tensor t;
    if (!ar.try_read(p.key(), t)) {
      diffs.push_back("parameter " + prefix + p.key() + " is not in it");
    } else if (t.sizes() != p.value().sizes()) {
      diffs.push_back("parameter " + prefix + p.key() + " is " + shape_text(t.sizes()) + " there, " +
                      shape_text(p.value().sizes()) + " here");
    }
  }
  for (const auto& c : m.named_children()) {
    torch::serialize::InputArchive child;
    if (!ar.try_read(c.key(), child)) {
      diffs.push_back("module " + prefix + c.key() + " is not in it");
      continue;
    }
    check_shapes(*c.value(), child, prefix + c.key() + ".", diffs);
  }
}

}  // namespace

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("checkpoint folder " + dir + " cannot be created: " + ec.message());
  if (!memcomm::can_create_in(dir)) throw UsageError("checkpoint folder " + dir + " is not writable");
}

std::unique_ptr<ReplacingStream> write_checkpoint(const std::string& dir, int rank, int64_t step,
                                                  torch::nn::Module& model, torch::optim::Optimizer& opt,
                                                  const Fingerprint& fingerprint, double next_lr) {
  torch::serialize::OutputArchive ar, opt_ar;
  model.save(ar);
  opt.save(opt_ar);
  ar.write("optimizer", opt_ar);
  ar.write("memcomm_step", torch::tensor(step, torch::kInt64));
  ar.write(kFingerprintKey, c10::IValue(encode_fingerprint(fingerprint)));
  ar.write(kNextLrKey, torch::tensor(next_lr, torch::kFloat64));
  // Streamed to the file, replaced whole (Note [Outputs replaced whole]), its header written last
  // over the space kept for it (See Note [Checkpoint checksum] in checkpoint_file.cpp). The sink
  // never reports a failure to LibTorch, whose writer, failing (a full disk), throws again from its
  // destructor and ends the process: the stream keeps the error and sync() throws it.
  auto out = std::make_unique<ReplacingStream>(checkpoint_path(dir, rank));
  out->write(std::string(kCheckpointHeaderBytes, '\0').data(), kCheckpointHeaderBytes);
  prof::TraceHasher hash;
  ar.save_to([&](const void* data, size_t n) {
    hash.update(data, n);
    out->write(data, n);
    return n;
  });
  const std::string head = checkpoint_header(out->size() - kCheckpointHeaderBytes, hash.digest(), step, rank);
  out->write_at(0, head.data(), head.size());
  out->sync();
  return out;
}

namespace {

// The step a checkpoint's archive was saved at.
int64_t step_in(torch::serialize::InputArchive& ar) {
  torch::Tensor step;
  ar.read("memcomm_step", step);
  return step.item<int64_t>();
}

// LibTorch's message without its backtrace and context lines.
std::string first_line(const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

// The step in checkpoint `path`'s header, else (written before headers held it) in its archive; -1
// when there is no file.
int64_t step_of(const std::string& path) {
  if (!fs::exists(path)) return -1;
  // A FIFO in the checkpoint's place blocked --resume for ever (see Note [Inputs are regular files]).
  if (const std::string problem = memcomm::input_file_problem(path); !problem.empty())
    throw std::runtime_error("cannot read checkpoint " + path + ": " + problem);
  std::ifstream f(path, std::ios::binary);
  std::string head(kCheckpointHeaderBytes, '\0');
  f.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(std::max<std::streamsize>(0, f.gcount())));
  const CheckpointHeader h = parse_checkpoint_header(path, head);
  if (h.step >= 0) return h.step;
  try {
    const std::string bytes = read_file(path);
    torch::serialize::InputArchive ar;
    const std::string_view archive = checkpoint_archive(path, bytes, parse_checkpoint_header(path, bytes));
    ar.load_from(archive.data(), archive.size());
    return step_in(ar);
  } catch (const c10::Error& e) {
    throw std::runtime_error("checkpoint " + path + " is corrupt: " + first_line(e));
  }
}

}  // namespace

CheckpointSteps checkpoint_steps(const std::string& dir, int rank) {
  return {step_of(checkpoint_path(dir, rank)), step_of(previous_checkpoint_path(dir, rank))};
}

std::string CheckpointSteps::path_of(const std::string& dir, int rank, int64_t step) const {
  return step == newest ? checkpoint_path(dir, rank) : previous_checkpoint_path(dir, rank);
}

void keep_previous(const std::string& dir, int rank) {
  const std::string now = checkpoint_path(dir, rank), before = previous_checkpoint_path(dir, rank);
  if (fs::exists(now) && std::rename(now.c_str(), before.c_str()) != 0)
    throw std::runtime_error(fmt::format("cannot keep checkpoint {} as {}: {}", now, before, std::strerror(errno)));
}

void drop_previous(const std::string& dir, int rank) {
  std::error_code ec;
  fs::remove(previous_checkpoint_path(dir, rank), ec);  // a file left is only space: resume prefers the newer
}

int64_t load_checkpoint(const std::string& p, int rank, torch::nn::Module& model, torch::optim::Optimizer& opt,
                        const Fingerprint& fingerprint, std::string* warn, std::optional<double>* next_lr) {
  if (!fs::exists(p)) return -1;
  try {
    torch::serialize::InputArchive ar, opt_ar;
    const std::string bytes = read_file(p);
    const CheckpointHeader h = parse_checkpoint_header(p, bytes);
    const std::string_view archive = checkpoint_archive(p, bytes, h);
    if (h.rank >= 0 && h.rank != rank)
      throw UsageError("--resume: checkpoint " + p + " was written by rank " + std::to_string(h.rank) + ", not rank " +
                       std::to_string(rank) + " (files copied or renamed?): each rank resumes from its own file");
    ar.load_from(archive.data(), archive.size());
    // See Note [Checkpoint fingerprint]: compare before anything is loaded into the model.
    std::vector<std::string> diffs;
    c10::IValue saved;
    if (ar.try_read(kFingerprintKey, saved) && saved.isString()) {
      const Fingerprint there = decode_fingerprint(saved.toStringRef());
      for (const auto& [key, here] : fingerprint) {
        const auto it = std::find_if(there.begin(), there.end(), [&key = key](const auto& kv) { return kv.first == key; });
        const std::string was = it == there.end() ? "(not recorded)" : it->second;
        if (was != here) diffs.push_back(key + " " + was + " there, " + here + " here");
      }
    } else if (warn) {
      *warn = "checkpoint " + p + " predates configuration fingerprints: its parameter shapes match, but whether "
              "it was written with the same --nproc, --seed, --batch-size and --accum cannot be checked";
    }
    check_shapes(model, ar, "", diffs);
    if (!diffs.empty()) {
      std::string msg = "--resume: checkpoint " + p + " was written by a different configuration: ";
      for (size_t i = 0; i < diffs.size() && i < 8; ++i) msg += (i ? "; " : "") + diffs[i];
      if (diffs.size() > 8) msg += "; and " + std::to_string(diffs.size() - 8) + " more";
      throw UsageError(msg + ". Resume with the flags it was written with, or give another --checkpoint-dir");
    }
    model.load(ar);
    ar.read("optimizer", opt_ar);
    opt.load(opt_ar);
    if (torch::Tensor lr; next_lr && ar.try_read(kNextLrKey, lr)) *next_lr = lr.item<double>();  // older files: none
    return step_in(ar);
  } catch (const c10::Error& e) {
    throw std::runtime_error("checkpoint " + p + " is corrupt or does not match this model: " + first_line(e));
  }
}

}  // namespace memcomm::train
