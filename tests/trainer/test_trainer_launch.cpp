// The launch story: torchrun --no-python, Slurm's variables, and two hosts joined by a real link.
#include "trainer_runner.hpp"

using namespace memcomm::test;

namespace {

std::string torchrun_bin() { return source_dir() + "/.venv/bin/torchrun"; }

}  // namespace

TEST_CASE("runs under torchrun --no-python with ranks from the environment") {
  if (!std::filesystem::exists(torchrun_bin())) MEMCOMM_SKIP_TEST("no torchrun in .venv (run scripts/setup.sh)");
  const auto r = run_command("timeout 120 " + torchrun_bin() + " --standalone --nproc-per-node 2 --no-python " +
                             quick_train("--steps 3 --print-checksums --timeout 60"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("via torchrun") != std::string::npos);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 3);
  for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
}

// See Note [A restart under torchrun's agent store]: rank 1 of the first attempt fails once rank 0 has
// written its Gloo keys; the second attempt must not read them. Its trace files are its own
// (NAME.restart1.rankR.mct): the restart wrote over the failed attempt's.
TEST_CASE("a torchrun restart after a failed rank trains to the end, and keeps the failed attempt's traces") {
  if (!std::filesystem::exists(torchrun_bin())) MEMCOMM_SKIP_TEST("no torchrun in .venv (run scripts/setup.sh)");
  const auto d = scratch_dir("torchrun-restart");
  const std::string script = d + "/rank.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/bash\n"
         "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then sleep 3; exit 7; fi\n"
         "exec " << quick_train("--steps 3 --print-checksums --timeout 30 --trace " + d + "/t.mct") << "\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  const auto r = run_command("timeout 180 " + torchrun_bin() + " --standalone --nproc-per-node 2 --max-restarts 1 --no-python " + script);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 3);
  for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
  CHECK(std::filesystem::exists(d + "/t.restart1.rank0.mct"));
  CHECK(std::filesystem::exists(d + "/t.restart1.rank1.mct"));
  CHECK(r.output.find(d + "/t.restart1.rank*.mct") != std::string::npos);
}

TEST_CASE("runs under Slurm's variables SLURM_PROCID and SLURM_NTASKS and SLURM_LOCALID") {
  const std::string port = std::to_string(20000 + (::getpid() % 20000));
  std::string cmd;
  for (int r = 0; r < 2; ++r)
    cmd += "SLURM_PROCID=" + std::to_string(r) + " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(r) +
           " SLURM_NTASKS_PER_NODE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " timeout 120 " +
           quick_train("--steps 3 --print-checksums") + (r == 0 ? " & " : "; wait");
  const auto r = run_command("(" + cmd + ")");
  INFO(r.output);
  CHECK(r.output.find("via slurm") != std::string::npos);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 3);
  for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
}

TEST_CASE("two hosts in network namespaces joined by a veth pair train together") {
  // Our own test hosts: two namespaces on this machine, addresses only they use.
  const std::string tag = std::to_string(::getpid() % 100000);
  const std::string a = "mcA" + tag, b = "mcB" + tag;
  const std::string setup = "ip netns add " + a + " && ip netns add " + b + " && ip link add va" + tag +
                            " type veth peer name vb" + tag + " && ip link set va" + tag + " netns " + a +
                            " && ip link set vb" + tag + " netns " + b + " && ip -n " + a +
                            " addr add 10.231.7.1/24 dev va" + tag + " && ip -n " + b + " addr add 10.231.7.2/24 dev vb" +
                            tag + " && ip -n " + a + " link set va" + tag + " up && ip -n " + b + " link set vb" + tag +
                            " up && ip -n " + a + " link set lo up && ip -n " + b + " link set lo up";
  const auto s = run_command(setup);
  if (s.code != 0) {
    run_command("ip netns del " + a + "; ip netns del " + b);
    MEMCOMM_SKIP_TEST("cannot create network namespaces here (needs root and iproute2): " + s.output);
  }
  std::string cmd;
  for (int r = 0; r < 2; ++r)
    cmd += "ip netns exec " + std::string(r == 0 ? a : b) + " env RANK=" + std::to_string(r) +
           " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.231.7.1 MASTER_PORT=29611 timeout 120 " +
           quick_train("--steps 3 --print-checksums --timeout 30") + (r == 0 ? " & " : "; wait");
  const auto r = run_command("(" + cmd + ")");
  run_command("ip netns del " + a + "; ip netns del " + b);
  INFO(r.output);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 3);
  for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
}

TEST_CASE("ranks on one host record clock offset 0 and a forced probe measures a small one") {
  // See Note [One clock per host]: with CLOCK_MONOTONIC read directly (MEMCOMM_CLOCK=monotonic), same boot
  // and time namespace mean one clock, so no estimate (and no noise). The TSC path always probes.
  const auto d = scratch_dir("clock_offset");
  const auto merge = bin_dir() + "/memcomm-trace merge --force " + d + "/m.mct " + d + "/t.rank0.mct " + d + "/t.rank1.mct";
  const auto train = quick_train("--nproc 2 --steps 3 --trace " + d + "/t.mct");
  const auto one_clock = run_command("MEMCOMM_CLOCK=monotonic " + train + " && " + merge);
  INFO(one_clock.output);
  REQUIRE(one_clock.code == 0);
  CHECK(one_clock.output.find("clock offset") == std::string::npos);  // merge names only non-zero offsets

  const auto probed = run_command("MEMCOMM_CLOCK=monotonic MEMCOMM_CLOCK_PROBE=1 " + train + " && " + merge);
  INFO(probed.output);
  REQUIRE(probed.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(probed.output, m, std::regex(R"(rank 1: clock offset (-?\d+) ns)")));
  CHECK(std::abs(std::stoll(m[1])) < 50'000'000);  // the truth is 0; round trips here take microseconds
}
