// Bad input and faults: clear errors, exit codes, no orphans.
#include "trainer_runner.hpp"

#include <memcomm/train/launch.hpp>
#include <memcomm/train/options.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace memcomm::test;

namespace {

// What memcomm-train's first step, parse_train_options (LibTorch-free: options.cpp), does with
// `args`, run in a forked child so that its exit() ends only the child: the exit code (0 when it
// returns) and what it printed. Note [Usage errors in a forked parser] says why not the binary.
RunResult parse_in_child(const std::string& args) {
  std::vector<std::string> words{"memcomm-train"};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w == "''" ? std::string() : w);  // '' is an empty argument
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);  // nothing buffered is printed twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    memcomm::train::parse_train_options(int(words.size()), argv.data());
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(fds[1]);
  RunResult r;
  std::array<char, 4096> buf;
  for (ssize_t n; (n = ::read(fds[0], buf.data(), buf.size())) > 0;) r.output.append(buf.data(), std::size_t(n));
  ::close(fds[0]);
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace

// Note [Usage errors in a forked parser]
// memcomm-train checks every flag in parse_train_options, the first call of its main(), before any
// LibTorch code runs (Note [Range checks before LibTorch], Note [Outputs checked first]). Yet each
// start of the binary costs about 0.7 s of loading LibTorch's shared libraries, and this table has
// over fifty rows: 41 s of test time, the slowest test of the suite, spent loading libraries. So
// the table runs parse_train_options itself in forked children, and a few rows, one of each kind of
// check, go through the binary too, which shows that its main() does what the function does.
TEST_CASE("bad flags exit with code 2 and name the flag") {
  struct Case {
    std::string args, expect;
  };
  std::filesystem::create_directories("/tmp/memcomm-outs/data");  // a dataset's file that an output names
  std::filesystem::create_directories("/tmp/memcomm-outs/tdir.rank1.mct");  // a rank's trace file that is a folder
  { std::ofstream("/tmp/memcomm-outs/data/t10k-labels-idx1-ubyte.gz") << "labels"; }
  for (const auto& c : {Case{"--steps 0", "--steps"}, Case{"--model resnet", "--model"}, Case{"--accum 0", "--accum"},
                        Case{"--no-such-flag", "no-such-flag"}, Case{"--batch-size x", "--batch-size"},
                        Case{"--sync-every 2 --accum 2", "--sync-every"}, Case{"--cupti on", "--cupti"},
                        Case{"--mode dp --nproc 2", "--mode dp"}, Case{"--mode dp --amp bf16", "--amp"}, Case{"--mode dpp", "--mode"},
                        Case{"--cupti sometimes --trace t.mct", "--cupti"}, Case{"--momentum -1", "--momentum"},
                        Case{"--momentum 1.5", "--momentum"}, Case{"--weight-decay -0.1", "--weight-decay"},
                        Case{"--lr nan", "--lr"}, Case{"--synthetic-size 0", "--synthetic-size"},
                        Case{"--threads -3", "--threads"}, Case{"--eval-batches -5", "--eval-batches"},
                        Case{"--empty-cache -1", "--empty-cache"}, Case{"--checkpoint-every -2 --checkpoint-dir d", "--checkpoint-every"},
                        Case{"--timeout inf", "--timeout"}, Case{"--augment --model mlp --dataset tabular", "--augment"},
                        Case{"--nproc 3 --tail drop --synthetic-size 2 --dataset tabular --model mlp", "--synthetic-size"},
                        // 2 TiB of sample order: it swapped for minutes (2^31 samples on one rank took 17.6 GB).
                        Case{"--nproc 64 --synthetic-size 2147483648 --dataset tabular --model mlp",
                             "each epoch's sample order alone needs 2.00 TiB"},
                        // Values that would overflow later (milliseconds, bucket bytes, counts) or wrap.
                        Case{"--timeout 1e300", "--timeout"}, Case{"--timeout 1e-6", "--timeout"},
                        Case{"--bucket-mb 1e30", "--bucket-mb"}, Case{"--memory-limit 1e30", "--memory-limit"},
                        Case{"--memory-limit 200TiB", "--memory-limit"}, Case{"--nproc 100000", "--nproc"},
                        Case{"--workers 100000", "--workers"}, Case{"--prefetch 100000000", "--prefetch"},
                        Case{"--threads 100000", "--threads"}, Case{"--seed -1", "--seed"},
                        Case{"--seed=-5", "--seed"}, Case{"--steps 9223372036854775807", "--steps"},
                        Case{"--batch-size 9223372036854775807", "--batch-size"},
                        // Outputs and endpoints are checked before LibTorch starts (Note [Outputs checked first]).
                        Case{"--live 127.0.0.1:99999", "--live"}, Case{"--live viewerhost", "--live"},
                        Case{"--trace /proc/memcomm-no/t.mct", "--trace"},
                        // Outputs that would replace one another (the summary is written after the traces).
                        Case{"--trace /tmp/memcomm-outs/t.mct --summary-json /tmp/memcomm-outs/t.rank1.mct",
                             "--summary-json /tmp/memcomm-outs/t.rank1.mct is a rank's trace file"},
                        Case{"--trace /tmp/memcomm-outs/t --summary-json /tmp/memcomm-outs/../memcomm-outs/t.rank0.mct",
                             "is a rank's trace file"},
                        Case{"--summary-json /nonexistent-memcomm/s.json", "--summary-json"},
                        Case{"--nproc 2 --trace /tmp/memcomm-outs/tdir",
                             "--trace /tmp/memcomm-outs/tdir: rank 1's file, /tmp/memcomm-outs/tdir.rank1.mct, is a folder"},
                        // An input: the labels were replaced with the summary, exit 0.
                        Case{"--data-dir /tmp/memcomm-outs/data --summary-json /tmp/memcomm-outs/data/t10k-labels-idx1-ubyte.gz",
                             "--summary-json: output /tmp/memcomm-outs/data/t10k-labels-idx1-ubyte.gz is also an input"},
                        Case{"--checkpoint-dir /tmp --summary-json /tmp/ckpt.rank0.pt",
                             "--summary-json /tmp/ckpt.rank0.pt is a rank's checkpoint in --checkpoint-dir /tmp"},
                        Case{"--checkpoint-dir /tmp --dump-params /tmp/../tmp/ckpt.rank3.pt", "is a rank's checkpoint"},
                        Case{"--summary-json /", "--summary-json"},
                        // An empty value (an unset shell variable) is not the option left out.
                        Case{"--trace ''", "--trace: must not be empty"}, Case{"--summary-json ''", "--summary-json"},
                        // A folder: the ranks' files went beside it (/tmp.rank0.mct), named after it.
                        Case{"--trace /tmp", "--trace /tmp is a folder; name a file in it, such as /tmp/run"},
                        Case{"--model transformer --seq-len 100000", "kept for backward alone need"},
                        Case{"--hidden -3", "--hidden: must be a whole number of at least 1, got '-3'"},
                        // Named choices (Note [Choices are parsed once]): an unknown name is refused at parse
                        // time, naming the flag and the names it takes; names are case-sensitive, and the
                        // enum's numbers are not names.
                        Case{"--optimizer nosuch", "--optimizer: nosuch not in {sgd,adam,adamw}"},
                        Case{"--optimizer SGD", "--optimizer"}, Case{"--model 0", "--model: 0 not in {mlp,cnn,transformer}"},
                        Case{"--backend mpi", "{auto,gloo,nccl}"}, Case{"--device tpu", "{auto,cpu,cuda}"},
                        Case{"--dataset cifar", "{auto,fashion-mnist,tabular,tokens}"}, Case{"--tail keep", "{pad,drop}"},
                        Case{"--schedule linear", "{none,step,cosine}"}, Case{"--grad-compression int8", "{none,bf16,fp16}"},
                        Case{"--amp fp16", "{none,bf16}"}, Case{"--allocator jemalloc", "{memcomm,torch}"},
                        Case{"--cupti yes", "{auto,on,off}"},
                        // A seed past 2^64-1 or in hex was taken as another number.
                        Case{"--seed 18446744073709551616", "--seed: must be a whole number from 0 to 18446744073709551615"},
                        Case{"--seed 0x10", "--seed: must be a whole number"}}) {
    const auto r = parse_in_child(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
  }
  // The binary itself: an unknown flag (CLI11), a range, a rule between flags, an output, a choice.
  for (const auto& [args, expect] : {std::pair{"--no-such-flag", "no-such-flag"}, std::pair{"--steps 0", "--steps"},
                                     std::pair{"--mode dp --nproc 2", "--mode dp"},
                                     std::pair{"--summary-json /", "--summary-json"},
                                     std::pair{"--optimizer nosuch", "--optimizer: nosuch not in {sgd,adam,adamw}"}}) {
    const auto r = run_command(train_bin() + " " + args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(expect) != std::string::npos);
  }
  // A --trace path that cannot be looked at (a name too long) is a usage error, not an abort.
  const auto unreadable = parse_in_child("--trace /tmp/" + std::string(300, 'a') + "/run");
  INFO(unreadable.output);
  CHECK(unreadable.code == 2);
  CHECK(unreadable.output.find("File name too long") != std::string::npos);
  // And the forked parser returns (exit 0 here) for flags the binary runs with.
  CHECK(parse_in_child("--model mlp --dataset tabular --steps 3").code == 0);
  CHECK(parse_in_child("--seed 18446744073709551615").code == 0);
  CHECK(parse_in_child("--seed 007").code == 0);
}

TEST_CASE("flags at the edge of their ranges are accepted") {
  const auto d = scratch_dir("edge-ranges");
  const auto r = run_command(quick_train("--steps 1 --timeout 0.001 --bucket-mb 1e6 --seed 9223372036854775807 "
                                         "--memory-limit 2e9 --summary-json " + d + "/s.json"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(read_json(d + "/s.json")["steps"] == 1);
}

TEST_CASE("outputs are checked at the start, the trace's folder is made, and no probe file is left behind") {
  const auto d = scratch_dir("outputs-first");
  // A bad --summary-json is refused before training (nothing printed of a step), not after it.
  auto r = run_command(quick_train("--steps 3 --summary-json " + d + "/missing/s.json"));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find(d + "/missing") != std::string::npos);
  CHECK(r.output.find("step ") == std::string::npos);
  // --trace into a folder that does not exist yet: made, like --checkpoint-dir's.
  r = run_command(quick_train("--steps 2 --trace " + d + "/new/sub/t.mct --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(std::filesystem::exists(d + "/new/sub/t.rank0.mct"));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"new", "s.json"});  // no write probe, no .tmp
}

TEST_CASE("under Slurm, a node's tasks come from its tasks per node, also when nodes hold different numbers") {
  struct Task {
    const char* procid;
    const char* ntasks;
    const char* nodeid;
    const char* localid;
    const char* per_node;
    int local_world;
  };
  // srun -n 3 -N 2 puts 2 tasks on the first node and 1 on the second; -n 8 -N 3 gives 3(x2),2.
  for (const Task& t : {Task{"1", "3", "0", "1", "2,1", 2}, Task{"2", "3", "1", "0", "2,1", 1},
                        Task{"4", "8", "1", "1", "3(x2),2", 3}, Task{"7", "8", "2", "1", "3(x2),2", 2}}) {
    ::setenv("SLURM_PROCID", t.procid, 1);
    ::setenv("SLURM_NTASKS", t.ntasks, 1);
    ::setenv("SLURM_NNODES", t.ntasks[0] == '3' ? "2" : "3", 1);
    ::setenv("SLURM_NODEID", t.nodeid, 1);
    ::setenv("SLURM_LOCALID", t.localid, 1);
    ::setenv("SLURM_STEP_TASKS_PER_NODE", t.per_node, 1);
    INFO("rank " << t.procid << " of " << t.ntasks << ", tasks per node " << t.per_node);
    const memcomm::train::DistEnv e = memcomm::train::read_dist_env();
    CHECK(e.local_world == t.local_world);
    CHECK(e.local_rank == std::atoi(t.localid));
  }
  // A tasks per node that is not Slurm's form, or names fewer nodes than SLURM_NODEID, was passed over
  // for an even split (a run on one node of 2 tasks trained as if each node held 1).
  ::setenv("SLURM_NODEID", "1", 1);
  for (const auto& [per_node, said] : std::vector<std::pair<const char*, const char*>>{
           {"x", "SLURM_STEP_TASKS_PER_NODE=x is not Slurm's tasks per node (such as 2(x3),1)"},
           {"2abc", "SLURM_STEP_TASKS_PER_NODE=2abc is not Slurm's tasks per node"},
           {"2(x1", "SLURM_STEP_TASKS_PER_NODE=2(x1 is not Slurm's tasks per node"},
           {"2", "SLURM_STEP_TASKS_PER_NODE=2 names 1 node, and SLURM_NODEID is 1"},
           // Counts past any launcher's: sscanf's %d read them as undefined values, and runs of such
           // counts summed past INT_MAX (launch_env_fuzz).
           {"99999999999", "SLURM_STEP_TASKS_PER_NODE=99999999999 is not Slurm's tasks per node"},
           {"1(x2147483647),1(x2)", "SLURM_STEP_TASKS_PER_NODE=1(x2147483647),1(x2) is not Slurm's tasks per node"},
           {"+2", "SLURM_STEP_TASKS_PER_NODE=+2 is not Slurm's tasks per node"}}) {
    ::setenv("SLURM_STEP_TASKS_PER_NODE", per_node, 1);
    CHECK_THROWS_WITH(memcomm::train::read_dist_env(), Catch::Contains(said));
  }
  for (const char* name : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NNODES", "SLURM_NODEID", "SLURM_LOCALID",
                           "SLURM_STEP_TASKS_PER_NODE"})
    ::unsetenv(name);
}

TEST_CASE("a --nproc that another launcher overrides is said to be ignored, once") {
  // An sbatch script that runs memcomm-train --nproc 2 without srun: Slurm's one task is the run.
  const auto r = run_command("SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_NNODES=1 SLURM_LOCALID=0 " +
                             quick_train("--nproc 2 --steps 1"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("warning: --nproc 2 is ignored: slurm starts the ranks (world size 1)") != std::string::npos);
}

TEST_CASE("the help text (--help) describes the launch modes and exits 0") {
  const auto r = run_command(train_bin() + " --help");
  REQUIRE(r.code == 0);
  CHECK(r.output.find("torchrun") != std::string::npos);
  CHECK(r.output.find("--accum") != std::string::npos);
  // The launch variables each environment reads, and what the exit codes mean.
  for (const char* word : {"LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                           "SLURM_LOCALID", "Exit codes", "usage error", "--timeout; the message names the lost rank"}) {
    INFO(word);
    CHECK(r.output.find(word) != std::string::npos);
  }
}

TEST_CASE("CUPTI that cannot start (--cupti on) warns once and host events are recorded") {
  const auto d = scratch_dir("cupti-unavailable");
  const auto r = run_command(quick_train("--steps 3 --device cpu --cupti on --trace " + d + "/t.mct"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto trace = d + "/t.rank0.mct";
  REQUIRE(std::filesystem::exists(trace));
  CHECK(std::filesystem::file_size(trace) > 0);
  // Without a GPU (or with another CUPTI client) there is exactly one warning line; where a GPU
  // exists, CUPTI may start even though this run trains on the CPU.
  const std::string warning = "CUPTI capture unavailable";
  const auto first = r.output.find(warning);
  if (!std::filesystem::exists("/dev/nvidia0")) REQUIRE(first != std::string::npos);
  if (first != std::string::npos) CHECK(r.output.find(warning, first + 1) == std::string::npos);
}

TEST_CASE("a missing dataset says how to install it") {
  const auto r = run_command(train_bin() + " --data-dir /nonexistent/fmnist --steps 1");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  // --nproc's launcher says it once, before it starts any rank.
  const auto ranks = run_command(train_bin() + " --nproc 2 --data-dir /nonexistent/fmnist --steps 1");
  INFO(ranks.output);
  CHECK(ranks.code == 2);
  const auto said = ranks.output.find("Fashion-MNIST not found");
  CHECK(said != std::string::npos);
  CHECK(ranks.output.find("Fashion-MNIST not found", said + 1) == std::string::npos);
  CHECK(ranks.output.find("exited with code") == std::string::npos);
  // A folder with the training split only: said before training, not after it (the test split is read at the end).
  const std::string installed = memcomm::train::TrainOptions{}.data_dir;  // --data-dir's default
  if (!std::filesystem::exists(installed + "/train-images-idx3-ubyte.gz")) return;
  const auto d = scratch_dir("train-split-only");
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    std::filesystem::copy_file(installed + "/" + f, d + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  const auto half = run_command(train_bin() + " --model cnn --data-dir " + d + " --steps 3 --log-interval 1");
  INFO(half.output);
  CHECK(half.code == 2);
  CHECK(half.output.find("expected t10k-images-idx3-ubyte.gz") != std::string::npos);
  CHECK(half.output.find("step 1/") == std::string::npos);
}

TEST_CASE("a live stream without --trace and no viewer says its events are lost and counts them as dropped") {
  // Port 1 on the loopback: nothing listens there, so the stream never connects.
  const auto r = run_command(quick_train("--steps 5 --live 127.0.0.1:1"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("are lost (no trace file was asked for)") != std::string::npos);
  CHECK(r.output.find("in the trace file only") == std::string::npos);
  CHECK(r.output.find(", 0 dropped") == std::string::npos);
}

TEST_CASE("an evaluation that runs out of memory still leaves the training's summary, then fails the run") {
  // See Note [Evaluation fails together]: the test split (7.5 MiB) does not fit beside the model under 60 MiB.
  if (!std::filesystem::exists(memcomm::train::TrainOptions{}.data_dir + "/t10k-images-idx3-ubyte.gz")) return;
  const auto d = scratch_dir("eval-oom");
  const auto r = run_command(train_bin() + " --model mlp --memory-limit 60MiB --batch-size 100 --steps 3 --threads 1 "
                             "--summary-json " + d + "/s.json");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("evaluation failed: CPU out of memory") != std::string::npos);
  const auto s = read_json(d + "/s.json");
  CHECK(s["steps"] == 3);
  CHECK(s["eval_error"].get<std::string>().find("out of memory") != std::string::npos);
}

TEST_CASE("a run out of host memory says so and which flags need less") {
  // 2^28 synthetic samples: each epoch's order (4 GiB) cannot be had under a 3 GB address space
  // (more than half the machine's memory is refused before any work, a usage error).
  if (double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE)) < 8.0 * double(1ull << 30))
    MEMCOMM_SKIP_TEST("under 8 GiB of memory 2^28 samples are refused before any work");
  const auto r = run_command("ulimit -v 3000000 && " + train_bin() +
                             " --model mlp --dataset tabular --synthetic-size 268435456 --steps 1 --threads 1");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("rank 0: out of host memory (std::bad_alloc): a smaller --synthetic-size") != std::string::npos);
}

TEST_CASE("an unwritable checkpoint folder is an error before training starts") {
  const auto r = run_command(quick_train("--steps 50 --checkpoint-dir /proc/memcomm-ckpt --checkpoint-every 1"));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("/proc/memcomm-ckpt") != std::string::npos);
  CHECK(r.output.find("step 1/") == std::string::npos);
}

TEST_CASE("a corrupt checkpoint gives a clear error") {
  const auto d = scratch_dir("corrupt-ckpt");
  { std::ofstream(d + "/ckpt.rank0.pt") << "this is not a checkpoint"; }
  const auto r = run_command(quick_train("--steps 5 --resume --checkpoint-dir " + d));
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(r.output.find("corrupt") != std::string::npos);
  CHECK(r.output.find("ckpt.rank0.pt") != std::string::npos);
  const auto f = scratch_dir("folder-ckpt");
  std::filesystem::create_directories(f + "/ckpt.rank0.pt");
  const auto folder = run_command(quick_train("--steps 5 --resume --checkpoint-dir " + f));
  INFO(folder.output);
  CHECK(folder.code != 0);
  CHECK(folder.output.find("cannot read checkpoint " + f + "/ckpt.rank0.pt: is a folder, not a file") != std::string::npos);
  // A port out of range was bound as its low 16 bits, and named as given.
  const auto port = run_command("RANK=0 WORLD_SIZE=1 MASTER_PORT=70000 " + quick_train("--steps 1"));
  INFO(port.output);
  CHECK(port.code == 2);
  CHECK(port.output.find("MASTER_PORT='70000' is not a port (1-65535)") != std::string::npos);
}

TEST_CASE("a checkpoint with flipped bytes or cut short is refused as corrupt, not resumed") {
  // See Note [Checkpoint checksum]: LibTorch alone resumed such a file with NaN weights and exit 0.
  const auto d = scratch_dir("flipped-ckpt");
  REQUIRE(run_command(quick_train("--steps 2 --checkpoint-every 2 --checkpoint-dir " + d)).code == 0);
  const std::string path = d + "/ckpt.rank0.pt";
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  REQUIRE(bytes.size() > 4096);
  for (const auto& [what, damaged] : {std::pair{"flipped", bytes.substr(0, bytes.size() / 2) + "\x5a\xa5" +
                                                               bytes.substr(bytes.size() / 2 + 2)},
                                      std::pair{"cut", bytes.substr(0, bytes.size() - 100)}}) {
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged; }
    const auto r = run_command(quick_train("--steps 4 --resume --checkpoint-dir " + d));
    INFO(what << "\n" << r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("checkpoint " + path + " is corrupt") != std::string::npos);
  }
  // One corrupt rank of two: every rank exits 1 (the other exited 2, "could not load", and the
  // launcher passed on whichever ended first). A FIFO in the file's place is refused, not waited on.
  const auto two = scratch_dir("flipped-ckpt-2");
  REQUIRE(run_command(quick_train("--nproc 2 --steps 2 --checkpoint-every 2 --checkpoint-dir " + two)).code == 0);
  { std::ofstream(two + "/ckpt.rank1.pt", std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 100); }
  const auto r = run_command(quick_train("--nproc 2 --steps 4 --resume --checkpoint-dir " + two));
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("another rank could not read its checkpoint") != std::string::npos);
  std::filesystem::remove(path);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  const auto fifo = run_command("timeout 60 " + quick_train("--steps 4 --resume --checkpoint-dir " + d));
  INFO(fifo.output);
  CHECK(fifo.code == 1);
  CHECK(fifo.output.find("cannot read checkpoint " + path + ": not a regular file") != std::string::npos);
}

TEST_CASE("resume continues exactly like a run that never stopped") {
  const auto full = scratch_dir("resume-full"), part = scratch_dir("resume-part");
  const auto a = run_command(quick_train("--nproc 2 --steps 8 --optimizer adam --lr 0.01 --dump-params " + full + "/p.bin"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(quick_train("--nproc 2 --steps 3 --optimizer adam --lr 0.01 --checkpoint-every 3 "
                                         "--checkpoint-dir " + part));
  INFO(b.output);
  REQUIRE(b.code == 0);
  const auto c = run_command(quick_train("--nproc 2 --steps 8 --optimizer adam --lr 0.01 --resume --checkpoint-dir " +
                                         part + " --dump-params " + part + "/p.bin"));
  INFO(c.output);
  REQUIRE(c.code == 0);
  CHECK(c.output.find("resumed from step 3") != std::string::npos);
  CHECK(read_floats(full + "/p.bin") == read_floats(part + "/p.bin"));  // bitwise
}

TEST_CASE("a save cut short between the ranks' renames resumes, exactly, from the step every rank holds") {
  // See Note [A save cut short]. SIGTERM between rank 0's rename and rank 1's left rank 0 at step 6 and
  // rank 1 at step 3, which no resume could use. The folder such a save leaves now: rank 0's new file
  // and its previous one, rank 1's previous file still in place.
  const auto full = scratch_dir("cut-full"), d = scratch_dir("cut-save");
  const std::string flags = "--nproc 2 --optimizer adam --lr 0.01 ";
  const auto a = run_command(quick_train(flags + "--steps 9 --dump-params " + full + "/p.bin"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  REQUIRE(run_command(quick_train(flags + "--steps 3 --checkpoint-every 3 --checkpoint-dir " + d + "/at3")).code == 0);
  std::filesystem::copy(d + "/at3", d + "/at6");
  const auto b = run_command(quick_train(flags + "--steps 6 --checkpoint-every 3 --resume --checkpoint-dir " + d + "/at6"));
  INFO(b.output);
  REQUIRE(b.code == 0);
  CHECK(!std::filesystem::exists(d + "/at6/ckpt.rank0.prev.pt"));  // dropped once every rank committed
  std::filesystem::create_directories(d + "/cut");
  std::filesystem::copy_file(d + "/at6/ckpt.rank0.pt", d + "/cut/ckpt.rank0.pt");
  std::filesystem::copy_file(d + "/at3/ckpt.rank0.pt", d + "/cut/ckpt.rank0.prev.pt");
  std::filesystem::copy_file(d + "/at3/ckpt.rank1.pt", d + "/cut/ckpt.rank1.pt");
  const auto r = run_command(quick_train(flags + "--steps 9 --resume --checkpoint-dir " + d + "/cut --dump-params " + d +
                                         "/p.bin"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("the save of step 6 did not complete on every rank") != std::string::npos);
  CHECK(r.output.find("resumed from step 3") != std::string::npos);
  CHECK(read_floats(full + "/p.bin") == read_floats(d + "/p.bin"));  // bitwise
}

TEST_CASE("a rank's checkpoint copied over another rank's is refused, naming both ranks") {
  // Under local SGD the ranks' states differ between averages: rank 1 resumed from rank 0's file, and
  // exited 0 with weights other than the uninterrupted run's.
  const auto d = scratch_dir("copied-rank");
  REQUIRE(run_command(quick_train("--nproc 2 --steps 2 --checkpoint-every 2 --checkpoint-dir " + d)).code == 0);
  std::filesystem::copy_file(d + "/ckpt.rank0.pt", d + "/ckpt.rank1.pt", std::filesystem::copy_options::overwrite_existing);
  const auto r = run_command(quick_train("--nproc 2 --steps 4 --resume --checkpoint-dir " + d));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("ckpt.rank1.pt was written by rank 0, not rank 1") != std::string::npos);
}

TEST_CASE("a run without --resume does not replace the checkpoints in its folder, and a torchrun restart resumes them") {
  // See Note [Checkpoints a run would replace]. A forgotten --resume replaced a checkpoint (of any run), and a
  // group torchrun restarted trained from step 0 and replaced its own newer files with older steps.
  const auto d = scratch_dir("replace-ckpt");
  REQUIRE(run_command(quick_train("--nproc 2 --steps 2 --checkpoint-every 2 --checkpoint-dir " + d)).code == 0);
  const std::string torchrun = "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=";
  const std::string again = "--steps 4 --checkpoint-every 2 --checkpoint-dir " + d;
  for (const std::string& command : {quick_train("--nproc 2 " + again),
                                     torchrun + std::to_string(free_port()) + " " + quick_train(again)}) {
    const auto r = run_command(command);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("holds checkpoints that this run's saves would replace: give --resume") != std::string::npos);
  }
  // A restart of a one-rank group (torchrun's attempt 1) resumes from its own checkpoint.
  const auto one = scratch_dir("restart-ckpt");
  REQUIRE(run_command(torchrun + std::to_string(free_port()) + " " +
                      quick_train("--steps 2 --checkpoint-every 2 --checkpoint-dir " + one)).code == 0);
  const auto restarted = run_command(torchrun + std::to_string(free_port()) + " TORCHELASTIC_RESTART_COUNT=1 " +
                                     quick_train("--steps 4 --checkpoint-every 2 --checkpoint-dir " + one));
  INFO(restarted.output);
  CHECK(restarted.code == 0);
  CHECK(restarted.output.find("restart 1: resuming from " + one) != std::string::npos);
  CHECK(restarted.output.find("resumed from step 2") != std::string::npos);
}

TEST_CASE("a resumed run's trace holds its steps' collectives only, not the ranks' agreement on the step") {
  // The agreement is bookkeeping (TrainingRun::bookkeeping_allreduce): a trace of 5 resumed steps has
  // as many collectives as a fresh run's 5 steps.
  const auto d = scratch_dir("resume-trace");
  const auto collectives = [&](const std::string& args, const std::string& name) {
    const auto r = run_command(quick_train("--nproc 2 " + args + " --trace " + d + "/" + name + ".mct"));
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto report = run_command(bin_dir() + "/memcomm-trace report --json " + d + "/" + name + ".rank0.mct");
    REQUIRE(report.code == 0);
    return memcomm::test::parse_json(report.output)["collectives"].size();
  };
  const auto fresh = collectives("--steps 5", "fresh");
  REQUIRE(run_command(quick_train("--nproc 2 --steps 3 --checkpoint-every 3 --checkpoint-dir " + d + "/ckpt")).code == 0);
  const auto resumed = collectives("--steps 8 --resume --checkpoint-dir " + d + "/ckpt", "resumed");
  CHECK(fresh > 0);
  CHECK(resumed == fresh);
}

TEST_CASE("resuming from a checkpoint of another configuration names what differs and exits 2") {
  const auto d = scratch_dir("resume-mismatch");
  const std::string base = "--optimizer adam --lr 0.01 --checkpoint-dir " + d;
  const auto w = run_command(quick_train("--nproc 2 --steps 3 --checkpoint-every 3 " + base));
  INFO(w.output);
  REQUIRE(w.code == 0);
  // Every difference is named in one message (the fingerprint's keys, then parameter shapes), so one
  // two-rank run with six flags changed checks them all, and a one-rank run checks the world size.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"--nproc 2 --hidden 32 --seed 7 --batch-size 32 --accum 2 --optimizer sgd --synthetic-size 2048",
       {"--hidden 64 there, 32 here", "--seed 0 there, 7 here", "--batch-size 64 there, 32 here",
        "--accum 1 there, 2 here", "--optimizer adam there, sgd here", "--synthetic-size 4096 there, 2048 here",
        "parameter"}},
      {"--nproc 1", {"ranks (--nproc) 2 there, 1 here"}}};
  for (const auto& [args, expected] : cases) {
    const auto r = run_command(quick_train("--steps 8 --resume " + base + " " + args));
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    for (const auto& e : expected) CHECK(r.output.find(e) != std::string::npos);
    CHECK(r.output.find("ckpt.rank0.pt") != std::string::npos);
    CHECK(r.output.find("resumed from step") == std::string::npos);
  }
  // A checkpoint at or past --steps leaves nothing to run: a usage error, not "0 steps" and a made-up loss.
  for (const char* steps : {"3", "2"}) {
    const auto r = run_command(quick_train("--nproc 2 --resume " + base + " --steps " + steps));
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("is at step 3, and --steps is " + std::string(steps)) != std::string::npos);
    CHECK(r.output.find("loss") == std::string::npos);
  }
  // Flags that do not change the run's course may differ: more steps, another learning rate, more workers.
  const auto ok = run_command(quick_train("--nproc 2 --steps 4 --resume --workers 2 " + base + " --lr 0.02"));
  INFO(ok.output);
  CHECK(ok.code == 0);
  CHECK(ok.output.find("resumed from step 3") != std::string::npos);
  CHECK(ok.output.find("step 4/4 loss") != std::string::npos);
  CHECK(ok.output.find("lr 0.02 ") != std::string::npos);  // the last --lr given (it was base's 0.01)
  // ... and the rate that changes is said (See Note [A schedule resumed]).
  CHECK(ok.output.find("note: step 4 resumes at a learning rate of 0.02, where the run that saved the checkpoint "
                       "would have gone on at 0.01") != std::string::npos);
}

TEST_CASE("a cosine schedule resumed with more --steps says the rate it resumes at, and a constant rate says nothing") {
  // See Note [A schedule resumed]: a cosine run of 2 steps ends at a rate of 0; resumed for 8, step 3
  // runs at 0.0854, and nothing said so.
  const auto d = scratch_dir("resume-schedule");
  for (const char* schedule : {"cosine", "none"}) {
    const std::string dir = d + "/" + schedule, flags = "--nproc 2 --lr 0.1 --schedule " + std::string(schedule);
    const auto w = run_command(quick_train(flags + " --steps 2 --checkpoint-every 2 --checkpoint-dir " + dir));
    INFO(w.output);
    REQUIRE(w.code == 0);
    const auto r = run_command(quick_train(flags + " --steps 8 --resume --checkpoint-dir " + dir));
    INFO(r.output);
    CHECK(r.code == 0);
    const bool said = r.output.find("note: step 3 resumes at a learning rate of 0.0853553, where the run that saved "
                                    "the checkpoint would have gone on at 0 (its --lr, --schedule or --steps differ "
                                    "from this run's)") != std::string::npos;
    CHECK(said == (std::string(schedule) == "cosine"));
    if (std::string(schedule) == "none") CHECK(r.output.find("note: step") == std::string::npos);
  }
}

TEST_CASE("ranks whose checkpoints are at different steps refuse to resume, with exit 2 naming the steps") {
  // See Note [Ranks resume from one step]: a save that failed on one rank only leaves such a folder.
  const auto d = scratch_dir("resume-mixed-steps");
  for (const char* steps : {"4", "2"}) {
    const auto w = run_command(quick_train(std::string("--nproc 2 --checkpoint-every 2 --steps ") + steps +
                                           " --checkpoint-dir " + d + "/at" + steps));
    INFO(w.output);
    REQUIRE(w.code == 0);
  }
  std::filesystem::create_directories(d + "/mixed");
  std::filesystem::copy_file(d + "/at4/ckpt.rank0.pt", d + "/mixed/ckpt.rank0.pt");
  std::filesystem::copy_file(d + "/at2/ckpt.rank1.pt", d + "/mixed/ckpt.rank1.pt");
  const auto r = run_command(quick_train("--nproc 2 --steps 8 --resume --checkpoint-dir " + d + "/mixed"));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("no step is held by every rank's checkpoint in " + d + "/mixed (steps 2 to 4)") != std::string::npos);
  CHECK(r.output.find("signal") == std::string::npos);  // no rank aborted
  std::filesystem::remove(d + "/mixed/ckpt.rank1.pt");
  const auto one = run_command(quick_train("--nproc 2 --steps 8 --resume --checkpoint-dir " + d + "/mixed"));
  INFO(one.output);
  CHECK(one.code == 2);
  CHECK(one.output.find("no checkpoint for rank 1 in") != std::string::npos);
  CHECK(one.output.find("(it holds the checkpoint of rank 0: a run of 1 rank saved them, and resumes with as many)") !=
        std::string::npos);
  CHECK(one.output.find("exited with code") == std::string::npos);  // said once, by the launcher
  std::filesystem::remove(d + "/mixed/ckpt.rank0.pt");
  const auto none = run_command(quick_train("--nproc 2 --steps 8 --resume --checkpoint-dir " + d + "/mixed"));
  CHECK(none.code == 2);
  CHECK(none.output.find("no checkpoint for ranks 0, 1 in") != std::string::npos);
  CHECK(none.output.find("it holds") == std::string::npos);
  // A run with more ranks than the one that saved: it said only "no checkpoint for rank 2".
  const auto three = run_command(quick_train("--nproc 3 --steps 8 --resume --checkpoint-dir " + d + "/at4"));
  INFO(three.output);
  CHECK(three.code == 2);
  CHECK(three.output.find("no checkpoint for rank 2 in " + d + "/at4 (it holds the checkpoints of ranks 0, 1: a run of 2 "
                          "ranks saved them, and resumes with as many)") != std::string::npos);
}

namespace {

// Processes whose parent is `parent`, oldest (lowest pid) first, read from /proc/<pid>/stat.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), {});
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid && ppid == parent && state != 'Z') kids.push_back(std::stoi(name));
  }
  std::sort(kids.begin(), kids.end());
  return kids;
}

bool alive(pid_t p) { return ::kill(p, 0) == 0; }

// Kills p if it is still a memcomm-train: a reaped rank's pid may belong to another process by now.
void kill_if_train(pid_t p) {
  std::ifstream cmdline("/proc/" + std::to_string(p) + "/cmdline");
  const std::string cmd((std::istreambuf_iterator<char>(cmdline)), {});
  if (alive(p) && cmd.find("memcomm-train") != std::string::npos) ::kill(p, SIGKILL);
}

// A launcher (our child) and its ranks. Whatever a test's checks did, nothing of the run outlives
// it: the destructor kills leftover ranks and the launcher, and reaps the launcher.
struct Launched {
  pid_t launcher = -1;
  std::vector<pid_t> ranks;
  bool reaped = false;
  Launched() = default;
  Launched(const Launched&) = delete;
  Launched& operator=(const Launched&) = delete;
  ~Launched() {
    for (pid_t p : ranks) kill_if_train(p);
    if (launcher > 0 && !reaped) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, nullptr, 0);
    }
  }
};

// memcomm-train with `args`, its output to `log`, as a child launcher whose ranks are its children
// (`shell` runs first in the shell that starts it). Returns once the log shows step 3 and all `nranks`
// ranks run (ranks in fork order), or after 60 s.
void launch_until_step_3(Launched& l, const std::string& args, const std::string& log, size_t nranks,
                         const std::string& shell = "") {
  l.launcher = ::fork();
  REQUIRE(l.launcher >= 0);
  if (l.launcher == 0) {
    const std::string cmd = quick_train(args) + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", (shell + "exec " + cmd).c_str(), nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream f(log);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    l.ranks = children_of(l.launcher);
    if (text.find("step 3/") != std::string::npos && l.ranks.size() == nranks) break;
  }
}

// Waits up to 60 s for the launcher; false (with the launcher and its ranks killed) if it did not exit.
bool wait_launcher(Launched& l, int& status) {
  const auto t0 = std::chrono::steady_clock::now();
  pid_t done = 0;
  while ((done = ::waitpid(l.launcher, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (done != 0) {
    l.reaped = true;
    return true;
  }
  for (pid_t p : l.ranks) kill_if_train(p);
  ::kill(l.launcher, SIGKILL);
  ::waitpid(l.launcher, &status, 0);
  l.reaped = true;
  return false;
}

// Sends `sig` to the launcher, waits for it (at most 60 s) and returns what the run printed.
std::string log_after_signal(Launched& l, int sig, const std::string& log) {
  REQUIRE(::kill(l.launcher, sig) == 0);
  int status = 0;
  if (!wait_launcher(l, status)) FAIL("the launcher did not exit within 60 s of signal " << sig);
  std::ifstream f(log);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

}  // namespace

TEST_CASE("kill -9 of one rank ends the others within the timeout naming the lost rank and leaves no orphans") {
  const auto d = scratch_dir("kill-rank");
  const std::string log = d + "/out.log";
  // Wait until training is under way, then kill rank 1 (the second rank forked).
  Launched l;
  launch_until_step_3(l, "--nproc 3 --steps 100000 --timeout 20 --log-interval 1", log, 3);
  const std::vector<pid_t>& ranks = l.ranks;
  REQUIRE(ranks.size() == 3);
  REQUIRE(::kill(ranks[1], SIGKILL) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  if (!wait_launcher(l, status)) FAIL("the launcher did not exit within 60 s of the kill");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), {});
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(waited < 20 + 15 + 5);
  CHECK(out.find("rank 1 was killed by signal 9") != std::string::npos);  // the launcher's view
  CHECK(out.find("lost rank 1") != std::string::npos);                    // a surviving rank's view
  CHECK(out.find("frame #") == std::string::npos);  // Note [c10d's logs on a failing job]
  for (pid_t p : ranks) CHECK_FALSE(alive(p));
}

TEST_CASE("SIGTERM to the launcher ends every rank by it, each with its trace flushed") {
  // See Note [Closing on SIGTERM]: what the ranks recorded up to the signal is in their files. A live
  // stream whose viewer missed events says so, as at a run's end (a SIGTERM'd rank said nothing).
  const auto d = scratch_dir("sigterm");
  const std::string log = d + "/out.log";
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 100000 --log-interval 1 --trace " + d + "/t.mct --live 127.0.0.1:" +
                             std::to_string(free_port()), log, 2);
  REQUIRE(l.ranks.size() == 2);
  const std::string out = log_after_signal(l, SIGTERM, log);
  INFO(out);
  CHECK(out.find("rank 0: SIGTERM: its trace flushed, ending") != std::string::npos);
  CHECK(out.find("rank 1: SIGTERM: its trace flushed, ending") != std::string::npos);
  CHECK(out.find("rank 0: live stream: no viewer connected") != std::string::npos);
  CHECK(out.find("rank 0 was killed by signal 15") != std::string::npos);
  for (int rank = 0; rank < 2; ++rank) {
    const auto info = run_command(bin_dir() + "/memcomm-trace report " + d + "/t.rank" + std::to_string(rank) + ".mct");
    INFO(info.output);
    CHECK(info.code == 0);
    const size_t steps = info.output.find("Steps (");
    REQUIRE(steps != std::string::npos);
    CHECK(std::stoi(info.output.substr(steps + 7)) >= 3);  // up to the signal, not the last flush before it
  }
}

TEST_CASE("SIGINT to a launcher started with SIGINT ignored (a script's background job) still ends the ranks") {
  const auto d = scratch_dir("sigint-ignored");
  const std::string log = d + "/out.log";
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 100000 --log-interval 1", log, 2, "trap '' INT; ");
  REQUIRE(l.ranks.size() == 2);
  const std::string out = log_after_signal(l, SIGINT, log);
  INFO(out);
  CHECK(out.find("was killed by signal 2") != std::string::npos);
  CHECK(out.find("step 100000/") == std::string::npos);
}

TEST_CASE("SIGTERM to the launcher ends a stopped rank 10 s later, not --timeout + 15 s later") {
  // See Note [No orphans]: with --timeout 60 a stopped rank held the job 75 s after the SIGTERM, past
  // the 30 s Slurm leaves before its SIGKILL.
  const auto d = scratch_dir("sigterm-stopped");
  const std::string log = d + "/out.log";
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 100000 --log-interval 1 --timeout 60", log, 2);
  REQUIRE(l.ranks.size() == 2);
  REQUIRE(::kill(l.ranks[1], SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = log_after_signal(l, SIGTERM, log);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(out);
  CHECK(out.find("rank 1 did not exit within 10 s of the SIGTERM passed on to it; killing it") != std::string::npos);
  CHECK(waited < 40);  // a bound for a loaded machine; the launcher's own is 10 s
  for (pid_t p : l.ranks) CHECK_FALSE(alive(p));
}

TEST_CASE("a rank that hangs (SIGSTOP) ends the run after --timeout with exit 3 naming it and leaves no orphans") {
  const auto d = scratch_dir("stop-rank");
  const std::string log = d + "/out.log";
  const int timeout_s = 3;
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 100000 --log-interval 1 --timeout " + std::to_string(timeout_s), log, 2);
  const std::vector<pid_t>& ranks = l.ranks;
  REQUIRE(ranks.size() == 2);
  // A stopped process keeps its sockets open: its peers see no error, only a collective that never
  // completes, so this is the timeout path, not the lost-connection one.
  REQUIRE(::kill(ranks[1], SIGSTOP) == 0);
  // The survivor gives up after --timeout; the launcher then gives the stopped rank the grace
  // period (timeout + 15 s) before it kills it.
  int status = 0;
  if (!wait_launcher(l, status)) FAIL("the launcher did not exit within 60 s of the stop");
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), {});
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);  // the surviving rank's collective timed out
  CHECK(out.find("lost rank 1") != std::string::npos);
  CHECK(out.find("rank 1 did not exit after the failure; killing it") != std::string::npos);
  for (pid_t p : ranks) CHECK_FALSE(alive(p));  // ~Launched kills any that is, even if a check failed
}

TEST_CASE("rank 0 hanging (SIGSTOP) with the store ends the run after --timeout too") {
  // See Note [A store that does not answer]: the survivor asked the stopped store which rank was lost,
  // and waited for its answer forever.
  const auto d = scratch_dir("stop-rank0");
  const std::string log = d + "/out.log";
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 100000 --log-interval 1 --timeout 3", log, 2);
  REQUIRE(l.ranks.size() == 2);
  REQUIRE(::kill(l.ranks[0], SIGSTOP) == 0);
  int status = 0;
  if (!wait_launcher(l, status)) FAIL("the launcher did not exit within 60 s of the stop");
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), {});
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(out.find("lost rank 0") != std::string::npos);
  for (pid_t p : l.ranks) CHECK_FALSE(alive(p));
}

TEST_CASE("a rank that never joins is named when the others' setup times out") {
  // See Note [Naming the ranks that never joined]: Gloo said "keys: /0/1" and printed a backtrace.
  const std::string port = std::to_string(free_port());
  const auto r = run_command("RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             port + " timeout 120 " + quick_train("--steps 2 --timeout 3"));
  INFO(r.output);
  CHECK(r.code == 3);
  CHECK(r.output.find("rank 1 never joined within --timeout 3 s") != std::string::npos);
  CHECK(r.output.find("frame #") == std::string::npos);
}

TEST_CASE("a rank that cannot reach rank 0's store says why: nothing listens, or the address does not resolve") {
  // A rank whose rank 0 had not started (or a wrong MASTER_PORT) was told that rank 0's store "took the
  // connection and did not answer ... is rank 0 stopped?", though nothing listened there.
  for (const auto& [addr, said] : {std::pair<std::string, std::string>{"127.0.0.1", "nothing listens on 127.0.0.1:"},
                                   {"no.such.host.invalid", "MASTER_ADDR no.such.host.invalid does not resolve"}}) {
    const auto r = run_command("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=" + addr +
                               " MASTER_PORT=" + std::to_string(free_port()) + " timeout 120 " +
                               quick_train("--steps 2 --timeout 3"));
    INFO(r.output);
    CHECK(r.code == 3);
    CHECK(r.output.find(said) != std::string::npos);
    CHECK(r.output.find("took the connection") == std::string::npos);
  }
}

namespace {
// Runs `command` (sh) with a 16 KiB tmpfs mounted at `dir` in a private mount namespace, so the full
// disk vanishes with the command whatever happens to it; skips the test where that needs root.
RunResult on_full_disk(const std::string& dir, const std::string& command) {
  const std::string mount = "mount -t tmpfs -o size=16k memcomm-full-disk " + dir;
  const auto probe = run_command("unshare -m sh -c '" + mount + "'");
  if (probe.code != 0) MEMCOMM_SKIP_TEST("cannot mount a small tmpfs in a mount namespace here (needs root): " + probe.output);
  return run_command("unshare -m sh -c '" + mount + " && " + command + "'");
}
}  // namespace

TEST_CASE("ranks started with different world sizes say so, not a lost rank") {
  // See Note [Naming the ranks that never joined]: WORLD_SIZE 2 beside 3 in one store.
  const std::string port = std::to_string(free_port());
  const auto rank = [&](int r, int world) {
    return "(RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " timeout 120 " + quick_train("--steps 2 --timeout 3") +
           "; echo rank" + std::to_string(r) + "-exit=$?) 2>&1";
  };
  const auto r = run_command(rank(0, 2) + " & " + rank(1, 3) + "; wait");
  INFO(r.output);
  CHECK(r.output.find("rank1-exit=2") != std::string::npos);
  CHECK(r.output.find("rank 0 was started with a world size of 2, this rank (rank 1) with 3") != std::string::npos);
  CHECK(r.output.find("rank 1 was started with a world size of 3, this rank with 2") != std::string::npos);
  CHECK(r.output.find("lost rank") == std::string::npos);
  CHECK(r.output.find("frame #") == std::string::npos);
}

TEST_CASE("a full disk under the checkpoints ends the run with a message and leaves no partial file") {
  const auto d = scratch_dir("full-disk-checkpoint");
  // LibTorch's file writer, failing, threw again from its destructor: the ranks aborted and left
  // ckpt.rankR.pt.tmp filling the disk. Note [Outputs replaced whole] in memcomm/common/replacing_file.hpp.
  const auto r = on_full_disk(d, quick_train("--nproc 2 --steps 4 --checkpoint-dir " + d + "/ck --checkpoint-every 2") +
                                     "; echo train-exit=$?; ls -A " + d + "/ck");
  INFO(r.output);
  CHECK(r.output.find("train-exit=1") != std::string::npos);
  CHECK(r.output.find("cannot write " + d + "/ck/ckpt.rank0.pt: No space left on device") != std::string::npos);
  CHECK(r.output.find("Aborted") == std::string::npos);
  CHECK(r.output.find(".tmp") == std::string::npos);
}

TEST_CASE("a checkpoint that one rank cannot write is saved by none, and the folder stays at one step") {
  // See Note [Checkpoints saved together]: rank 1's files may not pass 4 KiB (SIGXFSZ ignored, so its
  // write fails with EFBIG); rank 0 saved its file alone, and resume refused the folder.
  const auto d = scratch_dir("checkpoint-one-rank-fails");
  const std::string port = std::to_string(free_port());
  const auto rank = [&](int r, const std::string& limit) {
    return "(" + limit + "RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) +
           " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " timeout 120 " +
           quick_train("--steps 4 --checkpoint-every 2 --timeout 20 --checkpoint-dir " + d) + "; echo rank" +
           std::to_string(r) + "-exit=$?) 2>&1";
  };
  const auto r = run_command(rank(0, "") + " & " + rank(1, "trap '' XFSZ; ulimit -f 8; ") + "; wait; ls -A " + d);
  INFO(r.output);
  CHECK(r.output.find("rank0-exit=1") != std::string::npos);
  CHECK(r.output.find("rank1-exit=1") != std::string::npos);
  CHECK(r.output.find("cannot write " + d + "/ckpt.rank1.pt: File too large") != std::string::npos);
  CHECK(r.output.find("the checkpoint of step 2 was not saved: another rank could not write its file") != std::string::npos);
  // The run's first save: no previous checkpoint to keep (it said every rank's was kept).
  CHECK(r.output.find(d + " holds no checkpoint yet") != std::string::npos);
  CHECK(r.output.find("previous checkpoint") == std::string::npos);
  CHECK(r.output.find("ckpt.rank") == r.output.find("ckpt.rank1.pt: File too large"));  // no file, no temporary
}

TEST_CASE("a trace file removed while the run writes it is said lost, not offered to open") {
  const auto d = scratch_dir("trace-removed");
  const std::string log = d + "/out.log";
  Launched l;
  launch_until_step_3(l, "--nproc 2 --steps 800 --log-interval 1 --trace " + d + "/t/t.mct --summary-json " + d + "/s.json",
                      log, 2);
  std::filesystem::remove_all(d + "/t");
  int status = 0;
  if (!wait_launcher(l, status)) FAIL("the run did not end within 60 s");
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), {});
  INFO(out);
  CHECK(out.find("t.rank0.mct' was removed (or replaced) while it was written") != std::string::npos);
  CHECK(out.find("open them with") == std::string::npos);
  const auto s = read_json(d + "/s.json");
  CHECK(s["trace_drops"] == s["trace_events"]);
}

TEST_CASE("a full disk under the trace ends the run cleanly and says how much was kept in a readable file") {
  const auto d = scratch_dir("full-disk");
  const auto r = on_full_disk(d, quick_train("--steps 200 --trace " + d + "/t.mct") + "; echo train-exit=$?; " + bin_dir() +
                                     "/memcomm-trace info " + d + "/t.rank0.mct");
  INFO(r.output);
  CHECK(r.output.find("train-exit=0") != std::string::npos);  // training does not depend on its trace
  CHECK(r.output.find("No space left on device") != std::string::npos);
  CHECK(r.output.find("lost") != std::string::npos);
  CHECK(r.output.find("recovered") != std::string::npos);    // memcomm-trace read what was kept
  CHECK(r.output.find(", 0 dropped") == std::string::npos);  // the summary counts what the file lost
  CHECK(r.output.find("1 of 1 ranks could not write their trace file") != std::string::npos);
  CHECK(r.output.find("open them with") == std::string::npos);  // not as if the files were whole
}
