#include "checkpoint.hpp"

#include "errors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace memcomm::train {

namespace fs = std::filesystem;

namespace {

std::string path_for(const std::string& dir, int rank) { return dir + "/ckpt.rank" + std::to_string(rank) + ".pt"; }

void fsync_path(const std::string& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + p + " to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("fsync of " + p + " failed");
}

}  // namespace

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("checkpoint folder " + dir + " cannot be created: " + ec.message());
  const std::string probe = dir + "/.memcomm-write-test";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw UsageError("checkpoint folder " + dir + " is not writable");
  ::close(fd);
  ::unlink(probe.c_str());
}

void save_checkpoint(const std::string& dir, int rank, int64_t step, torch::nn::Module& model,
                     torch::optim::Optimizer& opt) {
  const std::string final_path = path_for(dir, rank);
  const std::string tmp = final_path + ".tmp";
  torch::serialize::OutputArchive ar, opt_ar;
  model.save(ar);
  opt.save(opt_ar);
  ar.write("optimizer", opt_ar);
  ar.write("memcomm_step", torch::tensor(step, torch::kInt64));
  ar.save_to(tmp);
  fsync_path(tmp, false);
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + final_path);
  fsync_path(dir, true);
}

int64_t load_checkpoint(const std::string& dir, int rank, torch::nn::Module& model, torch::optim::Optimizer& opt) {
  const std::string p = path_for(dir, rank);
  if (!fs::exists(p)) return -1;
  try {
    torch::serialize::InputArchive ar, opt_ar;
    ar.load_from(p);
    model.load(ar);
    ar.read("optimizer", opt_ar);
    opt.load(opt_ar);
    torch::Tensor step;
    ar.read("memcomm_step", step);
    return step.item<int64_t>();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw std::runtime_error("checkpoint " + p + " is corrupt or does not match this model: " + msg);
  }
}

}  // namespace memcomm::train
