// Data-parallel semantics on CPU with Gloo: consistency, equivalence, accumulation, local SGD.
#include "trainer_runner.hpp"

#include <map>
#include <vector>

#include <nlohmann/json.hpp>

using namespace memcomm::test;

namespace {

void require_identical_across_ranks(int world) {
  const auto r = run_command(quick_train("--nproc " + std::to_string(world) + " --steps 6 --print-checksums"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 6);
  for (const auto& [step, by_rank] : sums) {
    REQUIRE(static_cast<int>(by_rank.size()) == world);
    for (const auto& [rank, sum] : by_rank) CHECK(sum == by_rank.begin()->second);
  }
}

}  // namespace

TEST_CASE("two ranks hold bitwise identical parameters after every step") { require_identical_across_ranks(2); }

TEST_CASE("three ranks hold bitwise identical parameters after every step") { require_identical_across_ranks(3); }

TEST_CASE("W ranks x batch b equals one process with batch W*b after 10 steps") {
  const auto d = scratch_dir("equiv-ranks");
  const auto a = run_command(quick_train("--nproc 2 --batch-size 16 --steps 10 --dump-params " + d + "/ddp.bin"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(quick_train("--nproc 1 --batch-size 32 --steps 10 --dump-params " + d + "/single.bin"));
  INFO(b.output);
  REQUIRE(b.code == 0);
  CHECK(relative_difference(read_floats(d + "/ddp.bin"), read_floats(d + "/single.bin")) <= 1e-5);
}

TEST_CASE("accumulation of K micro-batches of b equals one batch of K*b") {
  const auto d = scratch_dir("equiv-accum");
  const auto a = run_command(quick_train("--batch-size 8 --accum 4 --steps 10 --dump-params " + d + "/accum.bin"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(quick_train("--batch-size 32 --steps 10 --dump-params " + d + "/big.bin"));
  REQUIRE(b.code == 0);
  CHECK(relative_difference(read_floats(d + "/accum.bin"), read_floats(d + "/big.bin")) <= 1e-5);
}

TEST_CASE("with --accum K gradients are all-reduced on the last micro-batch only") {
  const auto d = scratch_dir("accum-calls");
  const int steps = 6, accum = 4;
  const auto r = run_command(quick_train("--nproc 2 --batch-size 8 --accum " + std::to_string(accum) + " --steps " +
                                         std::to_string(steps) + " --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto s = read_json(d + "/s.json");
  const int buckets = s["buckets"];
  REQUIRE(buckets >= 1);
  // steps*accum micro-batches, one synchronisation per step: exactly 1/K of the micro-batches.
  CHECK(s["allreduce_calls"].get<int>() == steps * buckets);
}

TEST_CASE("the logged and summary losses are the global batch's, whatever the ranks") {
  // See Note [Run-wide figures]: 2 ranks of 32 and 1 of 64 train the same model on the same batches.
  std::map<std::string, std::vector<double>> losses;  // the last log line's, the summary's first and last
  for (const std::string ranks : {"--nproc 2 --batch-size 32", "--batch-size 64"}) {
    const auto r = run_command(quick_train(ranks + " --steps 6 --log-interval 3"));
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto step = r.output.find("step 6/6 loss "), summary = r.output.find("  loss ");
    REQUIRE((step != std::string::npos && summary != std::string::npos));
    const auto arrow = r.output.find("-> ", summary);
    losses[ranks] = {std::stod(r.output.substr(step + 14)), std::stod(r.output.substr(summary + 7)),
                     std::stod(r.output.substr(arrow + 3))};
  }
  for (size_t i = 0; i < 3; ++i)
    CHECK(losses["--nproc 2 --batch-size 32"][i] == Approx(losses["--batch-size 64"][i]).margin(2e-4));
}

TEST_CASE("local SGD averages parameters exactly every K steps") {
  const auto d = scratch_dir("local-sgd");
  const auto r = run_command(
      quick_train("--nproc 2 --sync-every 3 --steps 9 --print-checksums --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 9);
  for (const auto& [step, by_rank] : sums) {
    const bool averaged = step % 3 == 0;
    INFO("step " << step);
    CHECK((by_rank.at(0) == by_rank.at(1)) == averaged);  // ranks drift apart between averages
  }
  const auto s = read_json(d + "/s.json");
  CHECK(s["param_syncs"].get<int>() == 3);
  CHECK(s["allreduce_calls"].get<int>() == 3);  // the summary counts the averages' communication
  CHECK(s["bytes_on_wire"].get<int64_t>() > 0);
  // --steps not a multiple of K: one more average after the last step, so the ranks end with one model.
  const auto odd = run_command(quick_train("--nproc 2 --sync-every 3 --steps 8 --summary-json " + d + "/odd.json"));
  INFO(odd.output);
  REQUIRE(odd.code == 0);
  CHECK(read_json(d + "/odd.json")["param_syncs"].get<int>() == 3);
}

TEST_CASE("bucket order and gradient-as-bucket-view keep results identical to a single bucket") {
  const auto d = scratch_dir("buckets");
  // Tiny buckets (many all-reduces) and one huge bucket must train identically.
  // A transformer has many parameters of varied sizes, and more than the first 1 MiB bucket holds.
  const std::string lm = train_bin() + " --model transformer --synthetic-size 512 --seq-len 16 --width 128 --layers 2 "
                                       "--threads 1 --workers 1 --batch-size 4 --eval-batches 1 --log-interval 1000 ";
  const auto a = run_command(lm + "--nproc 2 --steps 3 --bucket-mb 0.05 --summary-json " + d + "/a.json --dump-params " +
                             d + "/a.bin");
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(lm + "--nproc 2 --steps 3 --bucket-mb 100 --no-overlap --summary-json " + d +
                             "/b.json --dump-params " + d + "/b.bin");
  REQUIRE(b.code == 0);
  CHECK(read_json(d + "/a.json")["buckets"].get<int>() > 2);
  // Without overlap every transfer happens after backward, inside the time the step waits for it.
  CHECK(read_json(d + "/b.json")["overlap_pct"].get<double>() == 0.0);
  CHECK(relative_difference(read_floats(d + "/a.bin"), read_floats(d + "/b.bin")) <= 1e-6);
}

TEST_CASE("gradient compression to bf16 or fp16 still trains and keeps ranks identical") {
  const auto d = scratch_dir("compression");
  const auto plain = run_command(quick_train("--nproc 2 --steps 4 --dump-params " + d + "/none.bin"));
  REQUIRE(plain.code == 0);
  for (const std::string wire : {"bf16", "fp16"}) {
    const auto r = run_command(quick_train("--nproc 2 --steps 4 --print-checksums --grad-compression " + wire +
                                           " --dump-params " + d + "/" + wire + ".bin"));
    INFO(wire << "\n" << r.output);
    REQUIRE(r.code == 0);
    const auto sums = parse_checksums(r.output);
    REQUIRE(sums.size() == 4);
    for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
    // Rounded gradients: close to the uncompressed run, yet not equal to it (compression happened).
    const double diff = relative_difference(read_floats(d + "/" + wire + ".bin"), read_floats(d + "/none.bin"));
    CHECK(diff > 0);
    CHECK(diff < 1e-2);
  }
}

TEST_CASE("AdamW keeps ranks identical and decays weights apart from the gradient unlike Adam") {
  const auto d = scratch_dir("adamw");
  const auto w = run_command(quick_train("--nproc 2 --steps 4 --lr 0.01 --optimizer adamw --weight-decay 0.1 "
                                         "--print-checksums --dump-params " + d + "/adamw.bin"));
  INFO(w.output);
  REQUIRE(w.code == 0);
  const auto sums = parse_checksums(w.output);
  REQUIRE(sums.size() == 4);
  for (const auto& [step, by_rank] : sums) CHECK(by_rank.at(0) == by_rank.at(1));
  const auto a = run_command(quick_train("--nproc 2 --steps 4 --lr 0.01 --optimizer adam --weight-decay 0.1 "
                                         "--dump-params " + d + "/adam.bin"));
  REQUIRE(a.code == 0);
  // Decoupled decay (AdamW) and L2 in the gradient (Adam) give different parameters.
  CHECK(relative_difference(read_floats(d + "/adamw.bin"), read_floats(d + "/adam.bin")) > 1e-6);
}

TEST_CASE("rank 0's initial parameters reach every rank even when the ranks start different") {
  // --test-perturb-init makes rank 1 start from other values (Note [Testing the broadcast]).
  const auto r = run_command(quick_train("--nproc 2 --steps 2 --print-checksums --test-perturb-init"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::regex re(R"(init checksum rank (\d) before-broadcast ([0-9a-f]+) after-broadcast ([0-9a-f]+))");
  std::map<int, std::pair<std::string, std::string>> init;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it)
    init[std::stoi((*it)[1])] = {(*it)[2], (*it)[3]};
  REQUIRE(init.size() == 2);
  CHECK(init[0].first != init[1].first);    // the hook did make them differ
  CHECK(init[0].second == init[1].second);  // the broadcast made them equal
  CHECK(init[0].second == init[0].first);   // to rank 0's values
  for (const auto& [step, by_rank] : parse_checksums(r.output)) CHECK(by_rank.at(0) == by_rank.at(1));
}

TEST_CASE("LibTorch's own CPU allocator (--allocator torch) trains bitwise like memcomm's") {
  const auto d = scratch_dir("allocator-torch");
  const auto t = run_command(quick_train("--nproc 2 --steps 4 --allocator torch --log-interval 2 --summary-json " + d +
                                         "/s.json --dump-params " + d + "/torch.bin"));
  INFO(t.output);
  REQUIRE(t.code == 0);
  const auto m = run_command(quick_train("--nproc 2 --steps 4 --dump-params " + d + "/memcomm.bin"));
  REQUIRE(m.code == 0);
  CHECK(read_floats(d + "/torch.bin") == read_floats(d + "/memcomm.bin"));
  const auto s = read_json(d + "/s.json");
  CHECK(s["allocator"] == "torch");
  CHECK(s["peak_reserved"].get<int64_t>() == -1);  // LibTorch's CPU allocator keeps no statistics
  CHECK(s["peak_rss"].get<int64_t>() > 0);         // so the resident set stands in, in the log too
  CHECK(t.output.find("peak rss") != std::string::npos);
}

TEST_CASE("data_parallel mode (--mode dp) on one device trains exactly like a plain single-process run") {
  const auto d = scratch_dir("mode-dp");
  const auto dp = run_command(quick_train("--mode dp --steps 6 --dump-params " + d + "/dp.bin"));
  INFO(dp.output);
  REQUIRE(dp.code == 0);
  CHECK(dp.output.find("data_parallel") != std::string::npos);
  const auto plain = run_command(quick_train("--steps 6 --dump-params " + d + "/plain.bin"));
  REQUIRE(plain.code == 0);
  CHECK(read_floats(d + "/dp.bin") == read_floats(d + "/plain.bin"));  // bitwise
}

TEST_CASE("the CNN trains on synthetic tabular rows read as images") {
  const auto r = run_command(train_bin() + " --model cnn --dataset tabular --synthetic-size 512 --threads 1 --workers 0 "
                             "--batch-size 32 --steps 3 --eval-batches 1 --log-interval 1000");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("cnn (") != std::string::npos);
}

TEST_CASE("a bucket closes with the parameter that takes it to its cap as in DDP") {
  // The MLP's gradients in reverse order: out (40 B + 10 KiB), fc2, then fc1's bias and weight.
  // hidden 256: 1,077,288 bytes in all, and only fc1's weight takes the first bucket past 1 MiB, so
  //   DDP's rule makes one bucket (closing before the overflowing parameter would make two);
  // hidden 512: fc2's weight takes it to 1,071,144 bytes, so fc1 starts a second bucket.
  for (const auto& [hidden, buckets] : {std::pair<int, int>{256, 1}, {512, 2}}) {
    const auto d = scratch_dir("bucket-rule-" + std::to_string(hidden));
    const auto r = run_command(train_bin() + " --model mlp --dataset tabular --synthetic-size 256 --threads 1 "
                               "--workers 0 --steps 2 --eval-batches 1 --hidden " + std::to_string(hidden) +
                               " --summary-json " + d + "/s.json");
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(read_json(d + "/s.json")["buckets"].get<int>() == buckets);
  }
}
