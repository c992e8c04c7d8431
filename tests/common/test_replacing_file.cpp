// memcomm::ReplacingFile and write_replacing (Note [Outputs replaced whole]): a result replaces its
// destination whole or not at all, through symlinks, and in place where the destination is a device.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <memcomm/common/replacing_file.hpp>

namespace fs = std::filesystem;
using memcomm::OutputError;
using memcomm::ReplacingFile;
using memcomm::write_replacing;

namespace {
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "memcomm_replacing_file" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
std::string contents(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}
}  // namespace

TEST_CASE("a result replaces its destination whole, keeping its permissions", "[unit]") {
  const fs::path dir = fresh_dir("replace");
  const fs::path out = dir / "result.json";
  write_replacing(out.string(), "first\n");
  CHECK(contents(out) == "first\n");
  ::chmod(out.c_str(), 0640);
  write_replacing(out.string(), "second\n");
  CHECK(contents(out) == "second\n");
  struct stat st {};
  REQUIRE(::stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(entries(dir) == 1);  // no temporary left behind
}

TEST_CASE("a result that is never committed leaves the old file and no temporary", "[unit]") {
  const fs::path dir = fresh_dir("abandon");
  const fs::path out = dir / "trace.mct";
  write_replacing(out.string(), "old");
  {
    ReplacingFile file(out.string());
    CHECK(file.path() != out.string());
    std::ofstream(file.path()) << "half of a new one";
  }  // a writer that threw (a full disk) never reaches commit()
  CHECK(contents(out) == "old");
  CHECK(entries(dir) == 1);
}

TEST_CASE("a symlinked destination is written through, the link kept", "[unit]") {
  const fs::path dir = fresh_dir("symlink");
  const fs::path target = dir / "target.json", link = dir / "link.json";
  write_replacing(target.string(), "old");
  fs::create_symlink(target, link);
  write_replacing(link.string(), "new");
  CHECK(fs::is_symlink(fs::symlink_status(link)));
  CHECK(contents(target) == "new");
}

TEST_CASE("a symlink to a file not made yet is written through, the link kept", "[unit]") {
  const fs::path dir = fresh_dir("dangling");
  const fs::path link = dir / "link.json";
  fs::create_symlink("later.json", link);  // relative, and its target does not exist
  write_replacing(link.string(), "made");
  CHECK(fs::is_symlink(fs::symlink_status(link)));
  CHECK(contents(dir / "later.json") == "made");
}

TEST_CASE("a file name near the system's limit still gets a temporary", "[unit]") {
  const fs::path dir = fresh_dir("long");
  const fs::path out = dir / std::string(250, 'n');
  write_replacing(out.string(), "fits");
  CHECK(contents(out) == "fits");
  CHECK(entries(dir) == 1);
}

TEST_CASE("a destination that is not a regular file is written in place, its errors reported", "[unit]") {
  ReplacingFile null_device("/dev/null");
  CHECK(null_device.path() == "/dev/null");
  // /dev/stdout leads to whatever stdout is (a file the shell appends to): never renamed over.
  CHECK(ReplacingFile("/dev/stdout").path() == "/dev/stdout");
  CHECK(memcomm::replace_problem("/dev/stdout").empty());
  write_replacing("/dev/null", "discarded");
  CHECK(fs::is_character_file("/dev/null"));
  if (fs::exists("/dev/full")) CHECK_THROWS_AS(write_replacing("/dev/full", std::string(1 << 16, 'x')), OutputError);
}

TEST_CASE("what would stop a replacement is found before any work", "[unit]") {
  const fs::path dir = fresh_dir("problems");
  CHECK(memcomm::replace_problem((dir / "new.json").string()).empty());
  CHECK_THAT(memcomm::replace_problem(dir.string()), Catch::Contains("is a folder"));
  CHECK_THAT(memcomm::replace_problem((dir / "no" / "x.json").string()), Catch::Contains("does not exist"));
  fs::create_symlink(dir / "elsewhere" / "x.json", dir / "to-missing-folder.json");
  CHECK_THAT(memcomm::replace_problem((dir / "to-missing-folder.json").string()), Catch::Contains("elsewhere"));
}

TEST_CASE("a folder that does not exist is an error naming the file", "[unit]") {
  const std::string out = (fresh_dir("missing") / "no-such-folder" / "r.json").string();
  CHECK_THROWS_WITH(write_replacing(out, "x"), Catch::Contains(out) && Catch::Contains("No such file"));
}

TEST_CASE("a streamed result keeps its first error for commit, and a header can be written last", "[unit]") {
  const fs::path dir = fresh_dir("stream");
  const fs::path out = dir / "ckpt.pt";
  {
    memcomm::ReplacingStream s(out.string());
    s.write("....", 4);
    s.write("body", 4);
    CHECK(s.size() == 8);
    s.write_at(0, "HEAD", 4);
    s.commit();
  }
  CHECK(contents(out) == "HEADbody");
  CHECK(entries(dir) == 1);
  if (fs::exists("/dev/full")) {
    memcomm::ReplacingStream s("/dev/full");
    s.write(std::string(1 << 16, 'x').data(), 1 << 16);  // fails without throwing: the producer goes on
    s.write("more", 4);
    try {
      s.commit();
      FAIL("commit after a failed write did not throw");
    } catch (const OutputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("/dev/full") && Catch::Contains("No space left"));
    }
  }
}

TEST_CASE("a synced stream leaves the destination as it was until commit, and dropped, leaves nothing", "[unit]") {
  // What each rank's checkpoint does: written and synced, then committed or dropped with the others'.
  const fs::path dir = fresh_dir("synced");
  const fs::path out = dir / "ckpt.rank0.pt";
  memcomm::write_replacing(out.string(), "step 2");
  {
    memcomm::ReplacingStream s(out.string());
    s.write("step 4", 6);
    s.sync();
    CHECK(contents(out) == "step 2");
    CHECK(entries(dir) == 2);  // the destination and the synced temporary
  }
  CHECK(contents(out) == "step 2");
  CHECK(entries(dir) == 1);
  memcomm::ReplacingStream s(out.string());
  s.write("step 4", 6);
  s.sync();
  s.commit();
  CHECK(contents(out) == "step 4");
  CHECK(entries(dir) == 1);
}

TEST_CASE("a later write removes the temporaries of dead writers on this machine, and only those", "[unit]") {
  // Note [Abandoned temporaries]. Writers killed before their commit: each leaves its temporary.
  const fs::path dir = fresh_dir("abandoned");
  const fs::path out = dir / "ckpt.rank0.pt";
  const auto killed_writer = [&](const fs::path& destination) {
    const pid_t child = ::fork();
    if (child == 0) {
      memcomm::ReplacingFile file(destination.string());
      ::_exit(0);  // no destructor: the temporary stays, as after a kill
    }
    REQUIRE(child > 0);
    ::waitpid(child, nullptr, 0);
  };
  killed_writer(out);
  REQUIRE(entries(dir) == 1);
  const fs::path dead = fs::directory_iterator(dir)->path();
  const std::string name = dead.filename().string();
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(dead, hour_ago);
  // Another machine's (the host replaced), another destination's, and one written just now.
  const std::string pid_and_n = name.substr(name.rfind('.', name.rfind('.') - 1));  // ".PID.N"
  const fs::path elsewhere = dir / ("ckpt.rank0.pt.tmp.elsewhere" + pid_and_n);
  fs::copy_file(dead, elsewhere);
  fs::last_write_time(elsewhere, hour_ago);
  killed_writer(dir / "ckpt.rank1.pt");
  killed_writer(out);
  std::vector<fs::path> kept = {elsewhere};
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path() != dead && e.path() != elsewhere) kept.push_back(e.path());
  REQUIRE(kept.size() == 3);
  for (const auto& k : kept)
    if (k.filename().string().rfind("ckpt.rank1.pt", 0) == 0) fs::last_write_time(k, hour_ago);
  write_replacing(out.string(), "whole");
  CHECK(contents(out) == "whole");
  CHECK_FALSE(fs::exists(dead));
  for (const auto& k : kept) CHECK(fs::exists(k));
}
