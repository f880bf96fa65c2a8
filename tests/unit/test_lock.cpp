// DirLock (core/lock.h): a lock file is created, recorded and removed; a stale lock of this user is
// taken over; anything else already under the lock's name (another file, a hard-linked file, a
// symlink, a FIFO, a directory, another user's stale lock) is refused in one line and left exactly as
// it was; a lock held elsewhere is refused naming its holder, by a user who cannot write it too.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <xtrain/core/error.h>
#include "core/lock.h"
#include "scratch_dir.h"

using namespace xtrain;
namespace fs = std::filesystem;

namespace {
// TempDir: a scratch directory and a descriptor of it, which DirLock takes
struct TempDir : test::ScratchDir {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TempDir() { REQUIRE(fd >= 0); }
  ~TempDir() { ::close(fd); }
};

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_all(const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string host_name() {
  char host[256] = "?";
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  host[sizeof host - 1] = '\0';
  return host;
}

const char* const kNotOurs = "out.lock: exists and is not an xtrain lock file (remove it or choose another output name)";

DirLock lock_out(const TempDir& d, double max_wait_s = 0) {
  return DirLock(d.fd, "out.lock", d.file("out.lock"), "--metrics lock", "xtrain", "another run writing this file", max_wait_s);
}
}  // namespace

TEST_CASE("is_lock_record: empty, or one line <program> pid <pid> on host <host>") {
  CHECK(is_lock_record(""));
  CHECK(is_lock_record("xtrain pid 42 on host h1\n"));
  CHECK(is_lock_record("xtrain pid 42 on host h1"));
  CHECK(is_lock_record("xtrain_export pid 4242 on host node-7.cluster\n"));
  CHECK_FALSE(is_lock_record("notes\n"));
  CHECK_FALSE(is_lock_record("xtrain pid 42 on host h1\nmore\n"));  // a second line
  CHECK_FALSE(is_lock_record("xtrain pid 42 on host h1\n\n"));
  CHECK_FALSE(is_lock_record("xtrain pid 42 on host \n"));  // no host
  CHECK_FALSE(is_lock_record("xtrain pid 4x2 on host h1\n"));
  CHECK_FALSE(is_lock_record("xtrain pid  on host h1\n"));
  CHECK_FALSE(is_lock_record("xtrain pid 42 on host h 1\n"));  // the host is one word
  CHECK_FALSE(is_lock_record("other pid 42 on host h1\n"));    // not one of our programs
  CHECK_FALSE(is_lock_record("xtrain_ pid 42 on host h1\n"));
  CHECK_FALSE(is_lock_record("xtrainer pid 42 on host h1\n"));
  CHECK_FALSE(is_lock_record(std::string("xtrain pid 42 on host h\0", 24)));
}

TEST_CASE("a new lock file records its holder and is removed at the release") {
  TempDir d;
  {
    const DirLock lock = lock_out(d);
    CHECK(read_all(d.file("out.lock")) == "xtrain pid " + std::to_string(::getpid()) + " on host " + host_name() + "\n");
  }
  CHECK_FALSE(fs::exists(d.file("out.lock")));
}

TEST_CASE("a stale lock of this user (recorded or empty) is taken over, then removed") {
  for (const std::string stale : {"xtrain pid 999999 on host elsewhere\n", "xtrain_export pid 7 on host h", ""}) {
    CAPTURE(stale);
    TempDir d;
    write_all(d.file("out.lock"), stale);
    {
      const DirLock lock = lock_out(d);
      CHECK(read_all(d.file("out.lock")).find("xtrain pid " + std::to_string(::getpid()) + " on host ") == 0);
    }
    CHECK_FALSE(fs::exists(d.file("out.lock")));
  }
}

TEST_CASE("a file under the lock's name that is not a lock of ours is refused and left as it was") {
  SUBCASE("another file") {
    TempDir d;
    write_all(d.file("out.lock"), "my notes\n");
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
    CHECK(read_all(d.file("out.lock")) == "my notes\n");
  }
  SUBCASE("a lock record followed by more") {
    TempDir d;
    write_all(d.file("out.lock"), "xtrain pid 42 on host h1\nmy notes\n");
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
    CHECK(read_all(d.file("out.lock")) == "xtrain pid 42 on host h1\nmy notes\n");
  }
  SUBCASE("a file with another hard link, even one holding a lock record or nothing") {
    for (const std::string bytes : {"notes\n", "xtrain pid 42 on host h1\n", ""}) {
      CAPTURE(bytes);
      TempDir d;
      write_all(d.file("keep.txt"), bytes);
      fs::create_hard_link(d.file("keep.txt"), d.file("out.lock"));
      CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
      CHECK(read_all(d.file("keep.txt")) == bytes);
      CHECK(fs::hard_link_count(d.file("out.lock")) == 2);
    }
  }
  SUBCASE("a symlink, to a file or dangling") {
    TempDir d;
    write_all(d.file("target"), "xtrain pid 42 on host h1\n");  // even to what looks like a lock
    fs::create_symlink(d.file("target"), d.file("out.lock"));
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
    CHECK(fs::is_symlink(d.file("out.lock")));
    CHECK(read_all(d.file("target")) == "xtrain pid 42 on host h1\n");
    fs::remove(d.file("target"));
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
    CHECK(fs::is_symlink(d.file("out.lock")));
    CHECK_FALSE(fs::exists(d.file("target")));
  }
  SUBCASE("a FIFO (never opened: it would block) and a directory") {
    TempDir d;
    REQUIRE(::mkfifo(d.file("out.lock").c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(lock_out(d, 600), doctest::Contains(kNotOurs), Error);
    CHECK(fs::is_fifo(d.file("out.lock")));
    fs::remove(d.file("out.lock"));
    fs::create_directory(d.file("out.lock"));
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains(kNotOurs), Error);
    CHECK(fs::is_directory(d.file("out.lock")));
  }
}

TEST_CASE("a lock held by another process is refused naming it, and left in place") {
  TempDir d;
  write_all(d.file("out.lock"), "xtrain pid 42 on host h1\n");
  const int other = ::open(d.file("out.lock").c_str(), O_RDONLY | O_CLOEXEC);  // another open file: another holder
  REQUIRE(other >= 0);
  REQUIRE(::flock(other, LOCK_EX | LOCK_NB) == 0);
  CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains("out.lock: held by another run writing this file (xtrain pid 42 on host h1; remove the lock file if none runs)"), Error);
  CHECK_THROWS_WITH_AS(lock_out(d, 0.3), doctest::Contains("out.lock: held by another process for 0.3 s (another run writing this file: xtrain pid 42 on host h1;"), Error);
  CHECK(read_all(d.file("out.lock")) == "xtrain pid 42 on host h1\n");
  ::close(other);
}

TEST_CASE("the release removes the lock file only while its name still names the file held") {
  TempDir d;
  {
    const DirLock lock = lock_out(d);
    write_all(d.file("new"), "someone else's\n");
    fs::rename(d.file("new"), d.file("out.lock"));  // the name now names another file
  }
  CHECK(read_all(d.file("out.lock")) == "someone else's\n");
}

TEST_CASE("another user's stale lock is refused naming its owner; one they cannot write is locked read-only") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to make another user's file and to run as another user");
    return;
  }
  const uid_t nobody = 65534;
  TempDir d;
  SUBCASE("root meets another user's stale lock") {
    write_all(d.file("out.lock"), "xtrain pid 42 on host h1\n");
    REQUIRE(::chown(d.file("out.lock").c_str(), nobody, nobody) == 0);
    CHECK_THROWS_WITH_AS(lock_out(d), doctest::Contains("out.lock: a stale lock owned by uid 65534, not this user (uid 0)"), Error);
    CHECK(read_all(d.file("out.lock")) == "xtrain pid 42 on host h1\n");
  }
  SUBCASE("another user meets root's lock (mode 0644) in a sticky directory: stale, then held") {
    fs::create_directory(d.path / "sticky");
    fs::permissions(d.path / "sticky", fs::perms::all | fs::perms::sticky_bit);
    const std::string lock = d.file("sticky/out.lock");
    write_all(lock, "xtrain pid 42 on host h1\n");
    REQUIRE(::chmod(lock.c_str(), 0644) == 0);
    const int sticky = ::open(d.file("sticky").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(sticky >= 0);
    // as_nobody: the message DirLock throws in a child process running as uid 65534 ("" if none)
    const auto as_nobody = [&] {
      int pipe_fds[2];
      REQUIRE(::pipe(pipe_fds) == 0);
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        std::string said;
        if (::setresgid(nobody, nobody, nobody) != 0 || ::setresuid(nobody, nobody, nobody) != 0) {
          said = "setresuid failed";
        } else {
          try {
            DirLock l(sticky, "out.lock", lock, "--metrics lock", "xtrain", "another run writing this file", 0);
          } catch (const Error& e) {
            said = e.what();
          }
        }
        (void)!::write(pipe_fds[1], said.data(), said.size());
        ::_exit(0);
      }
      ::close(pipe_fds[1]);
      std::string said;
      char buf[512];
      for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
      ::close(pipe_fds[0]);
      int status = 0;
      ::waitpid(child, &status, 0);
      return said;
    };
    CHECK(as_nobody().find("out.lock: a stale lock owned by uid 0, not this user (uid 65534)") != std::string::npos);
    const int held = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(held >= 0);
    REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);
    CHECK(as_nobody().find("out.lock: held by another run writing this file (xtrain pid 42 on host h1;") != std::string::npos);
    ::close(held);
    ::close(sticky);
    CHECK(read_all(lock) == "xtrain pid 42 on host h1\n");
  }
}
