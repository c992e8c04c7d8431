// The data path through memcomm-train: evaluation scores every test sample once, the run says
// what the sampler and the partial batch leave out, epochs are crossed consistently, and loader
// workers never change the result (with or without seeded augmentation).
#include "trainer_runner.hpp"

#include <nlohmann/json.hpp>

using namespace memcomm::test;

TEST_CASE("evaluation scores a test split smaller than one batch") {
  // 256 training rows give a test split of 42: less than one batch of 64, which used to score nothing.
  const auto d = scratch_dir("eval-small");
  const auto r = run_command(quick_train("--synthetic-size 256 --steps 1 --eval-batches 0 --summary-json " + d + "/s.json"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(read_json(d + "/s.json")["eval_samples"].get<int>() == 256 / 6);
  CHECK(r.output.find("on 42 samples") != std::string::npos);
}

TEST_CASE("the transformer's evaluation counts the tokens it predicts, and says tokens") {
  // 600 windows of 16 tokens give a test split of 100 windows: 1,600 predictions ("samples", it said).
  const auto d = scratch_dir("eval-tokens");
  const auto r = run_command(train_bin() + " --model transformer --dataset tokens --synthetic-size 600 --seq-len 16 "
                             "--steps 1 --threads 1 --eval-batches 0 --summary-json " + d + "/s.json");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(read_json(d + "/s.json")["eval_samples"].get<int>() == 100 * 16);
  CHECK(r.output.find("on 1600 tokens") != std::string::npos);
}

TEST_CASE("evaluation over uneven shards scores every test sample exactly once") {
  // 1000 rows: a test split of 166, which 3 ranks split 56/55/55 and batches of 16 do not divide.
  // The same model (3 ranks x 16 trains like 1 x 48) must get the same loss from 3 ranks as from 1:
  // a sample scored twice or skipped would move it.
  const auto d = scratch_dir("eval-uneven");
  const auto a = run_command(quick_train("--synthetic-size 1000 --nproc 3 --batch-size 16 --steps 2 --eval-batches 0 "
                                         "--summary-json " + d + "/three.json"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(quick_train("--synthetic-size 1000 --batch-size 48 --steps 2 --eval-batches 0 "
                                         "--summary-json " + d + "/one.json"));
  INFO(b.output);
  REQUIRE(b.code == 0);
  const auto three = read_json(d + "/three.json"), one = read_json(d + "/one.json");
  CHECK(three["eval_samples"].get<int>() == 1000 / 6);
  CHECK(one["eval_samples"].get<int>() == 1000 / 6);
  CHECK(three["eval_loss"].get<double>() == Approx(one["eval_loss"].get<double>()).epsilon(1e-4));
  CHECK(std::abs(three["eval_accuracy"].get<double>() - one["eval_accuracy"].get<double>()) <= 1.0 / 166 + 1e-12);
}

TEST_CASE("the run says what --tail pad and --tail drop do and what the partial batch leaves out") {
  // 1000 rows over 3 ranks: pad repeats 2 (334 each), drop leaves out 1 (333 each); batches of 64
  // then leave 14 (pad) or 13 (drop) of each rank's epoch unused.
  struct Case {
    std::string tail;
    int per_rank, adjust, unused;
    std::string says;
  };
  for (const auto& c : {Case{"pad", 334, 2, 14, "--tail pad repeated 2 sample(s)"},
                        Case{"drop", 333, -1, 13, "--tail drop left out 1 sample(s)"}}) {
    const auto d = scratch_dir("tail-" + c.tail);
    const auto r = run_command(quick_train("--synthetic-size 1000 --nproc 3 --batch-size 64 --steps 1 --tail " +
                                           c.tail + " --summary-json " + d + "/s.json"));
    INFO(c.tail << "\n" << r.output);
    REQUIRE(r.code == 0);
    const auto s = read_json(d + "/s.json");
    CHECK(s["samples_per_rank_epoch"].get<int>() == c.per_rank);
    CHECK(s["tail_adjust"].get<int>() == c.adjust);
    CHECK(s["unused_per_epoch"].get<int>() == c.unused);
    CHECK(s["batches_per_epoch"].get<int>() == c.per_rank / 64);
    CHECK(r.output.find(c.says) != std::string::npos);
    CHECK(r.output.find("the last " + std::to_string(c.unused) + " sample(s) of each rank's epoch are unused") !=
          std::string::npos);
  }
}

TEST_CASE("balanced shards keep three ranks in step and identical across an epoch boundary") {
  // 200 rows over 3 ranks, padded to 67 each: 4 batches of 16 per epoch, so 6 steps cross into
  // epoch 1 (set_epoch reshuffles) on every rank at the same step.
  const auto r = run_command(quick_train("--synthetic-size 200 --nproc 3 --batch-size 16 --steps 6 --log-interval 1 "
                                         "--print-checksums"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto sums = parse_checksums(r.output);
  REQUIRE(sums.size() == 6);
  for (const auto& [step, by_rank] : sums) {
    REQUIRE(by_rank.size() == 3);
    for (const auto& [rank, sum] : by_rank) CHECK(sum == by_rank.begin()->second);
  }
  CHECK(r.output.find("epoch 0 step 4/6") != std::string::npos);
  CHECK(r.output.find("epoch 1 step 5/6") != std::string::npos);
}

TEST_CASE("W ranks x batch b equals one process with batch W*b across an epoch boundary") {
  // 256 rows: 8 steps per epoch either way, so 10 steps run 2 into epoch 1 with its new permutation.
  const auto d = scratch_dir("equiv-epochs");
  const auto a = run_command(quick_train("--synthetic-size 256 --nproc 2 --batch-size 16 --steps 10 --dump-params " +
                                         d + "/ddp.bin"));
  INFO(a.output);
  REQUIRE(a.code == 0);
  const auto b = run_command(quick_train("--synthetic-size 256 --batch-size 32 --steps 10 --dump-params " + d +
                                         "/single.bin"));
  REQUIRE(b.code == 0);
  CHECK(relative_difference(read_floats(d + "/ddp.bin"), read_floats(d + "/single.bin")) <= 1e-5);
}

TEST_CASE("loader worker counts 0 and 1 and 3 train bitwise identically") {
  const auto d = scratch_dir("workers");
  std::vector<std::vector<float>> params;
  for (const int w : {0, 1, 3}) {
    const auto path = d + "/w" + std::to_string(w) + ".bin";
    const auto r = run_command(quick_train("--steps 6 --batch-size 16 --prefetch 2 --workers " + std::to_string(w) +
                                           " --dump-params " + path));
    INFO(w << " workers\n" << r.output);
    REQUIRE(r.code == 0);
    params.push_back(read_floats(path));
  }
  CHECK(params[0] == params[1]);
  CHECK(params[0] == params[2]);
}

TEST_CASE("seeded augmentation (--augment) changes training yet not with the worker count") {
  const std::string fmnist = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(fmnist + "/train-images-idx3-ubyte.gz"))
    MEMCOMM_SKIP_TEST("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
  const auto d = scratch_dir("augment");
  const std::string base = train_bin() + " --model mlp --hidden 32 --threads 1 --steps 4 --batch-size 32 "
                                         "--eval-batches 1 --log-interval 1000 --data-dir " + fmnist + " ";
  const auto a0 = run_command(base + "--augment --workers 0 --dump-params " + d + "/a0.bin");
  INFO(a0.output);
  REQUIRE(a0.code == 0);
  const auto a3 = run_command(base + "--augment --workers 3 --dump-params " + d + "/a3.bin");
  REQUIRE(a3.code == 0);
  const auto plain = run_command(base + "--workers 2 --dump-params " + d + "/plain.bin");
  REQUIRE(plain.code == 0);
  CHECK(read_floats(d + "/a0.bin") == read_floats(d + "/a3.bin"));
  CHECK(read_floats(d + "/a0.bin") != read_floats(d + "/plain.bin"));
}
