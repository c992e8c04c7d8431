// stdout_checked (Note [Output that was not written]), in forked children whose standard output is
// /dev/full or a file, so the test's own standard output is left alone.
#include "memcomm/common/standard_output.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

struct Outcome {
  int exit_status = -1;
  std::string said;  // what the child wrote to standard error
};

// A child that prints a line to standard output `to` and ends with stdout_checked(code, "tool").
Outcome print_and_check(const std::string& to, int code) {
  const std::string err_file =
      (std::filesystem::temp_directory_path() / ("stdout-checked-" + std::to_string(::getpid()))).string();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) ::_exit(98);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    std::printf("a result\n");
    ::_exit(memcomm::stdout_checked(code, "tool"));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Outcome o;
  o.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  o.said.assign(std::istreambuf_iterator<char>(in), {});
  std::filesystem::remove(err_file);
  return o;
}

}  // namespace

TEST_CASE("output that standard output did not take turns success into exit 1, with a message", "[unit]") {
  if (!std::filesystem::exists("/dev/full")) return;
  const Outcome lost = print_and_check("/dev/full", 0);
  CHECK(lost.exit_status == 1);
  CHECK(lost.said.find("tool: standard output could not be written (No space left on device)") != std::string::npos);
  const Outcome failed = print_and_check("/dev/full", 3);  // a failure's own code stands
  CHECK(failed.exit_status == 3);
}

TEST_CASE("output that was written leaves the exit code as it was and says nothing", "[unit]") {
  const std::string file = (std::filesystem::temp_directory_path() / "stdout-checked-ok").string();
  const Outcome ok = print_and_check(file, 0);
  CHECK(ok.exit_status == 0);
  CHECK(ok.said.empty());
  std::ifstream in(file);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "a result\n");
  std::filesystem::remove(file);
}

TEST_CASE("every tool's --help that standard output did not take exits 1", "[unit]") {
  // CLI11 printed the help and the tools exited 0, the text lost.
  if (!std::filesystem::exists("/dev/full")) return;
  int tools = 0;
  for (const char* tool : {"memcomm-trace", "memcomm-replay", "memcomm-train", "memcomm-tune", "memcomm-view"}) {
    const std::string bin = std::string(MEMCOMM_BINARY_DIR) + "/bin/" + tool;
    if (!std::filesystem::exists(bin)) continue;  // a build without it (no LibTorch, no viewer)
    ++tools;
    const int status = std::system((bin + " --help > /dev/full 2> /dev/null").c_str());
    INFO(tool);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
  }
  CHECK(tools >= 2);
}
