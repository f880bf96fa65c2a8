// The one atomic writer (write_file_atomic) and "same file" (io.h): a target that is not a regular
// file is refused and left as it was, a rewritten file keeps its mode, a symlink planted where a
// temporary file could be named is never written through, no temporary file is left behind; and
// the temporary files of dead writers on this host are removed by the next write and nothing else is;
// check_writable refuses at start what the writer would refuse at the end (sticky rule included);
// the XXH3-64 wrapper against the reference value of the empty input; the data directory's messages
// (data_dir.h) for $XTRAIN_DATA empty, missing, or a file.
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
#include <string>

#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "scratch_dir.h"

using namespace xtrain;
namespace fs = std::filesystem;

namespace {
mode_t mode_of(const std::string& p) {
  struct stat st{};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}
}  // namespace

TEST_CASE("write_file_atomic writes a new file and replaces an existing one, leaving no temporary file") {
  test::ScratchDir d;
  const std::string p = d.file("out.bin");
  write_file_atomic(p, "first");
  CHECK(read_file(p) == "first");
  write_file_atomic(p, std::string("sec\0ond", 7));
  CHECK(read_file(p) == std::string("sec\0ond", 7));
  CHECK(d.entries() == 1);
}

TEST_CASE("write_file_atomic keeps the mode of the file it replaces") {
  test::ScratchDir d;
  const std::string p = d.file("private.ckpt");
  write_file_atomic(p, "a");
  REQUIRE(::chmod(p.c_str(), 0600) == 0);
  write_file_atomic(p, "b");
  CHECK(mode_of(p) == 0600);
  REQUIRE(::chmod(p.c_str(), 0640) == 0);
  write_file_atomic(p, "c");
  CHECK(mode_of(p) == 0640);
  CHECK(read_file(p) == "c");
}

TEST_CASE("write_file_atomic refuses a target that is not a regular file and leaves it alone") {
  test::ScratchDir d;
  const std::string fifo = d.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(write_file_atomic(fifo, "x", "checkpoint"),
                       doctest::Contains("is not a regular file"), Error);
  struct stat st{};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  const std::string sub = d.file("subdir");
  fs::create_directory(sub);
  CHECK_THROWS_WITH_AS(write_file_atomic(sub, "x"), doctest::Contains("is not a regular file"), Error);
  CHECK(fs::is_directory(sub));
  CHECK(d.entries() == 2);  // no temporary file left behind
}

TEST_CASE("read_file refuses what is not a regular file at once (a FIFO would block, a device never end)") {
  test::ScratchDir d;
  const std::string fifo = d.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(read_file(fifo), doctest::Contains("pipe: not a regular file"), Error);
  CHECK_THROWS_WITH_AS(read_file("/dev/zero"), "cannot read /dev/zero: not a regular file", Error);
  CHECK_THROWS_WITH_AS(read_file(d.path.string()), doctest::Contains("not a regular file"), Error);
  CHECK_THROWS_WITH_AS(read_file(d.file("absent")), doctest::Contains("No such file"), Error);
}

TEST_CASE("replace_forbidden_by_sticky is rename(2)'s EPERM rule: sticky directory, neither it nor the file ours") {
  const uid_t me = 1000, other = 2000, root_dir = 0;
  CHECK(replace_forbidden_by_sticky(01777, root_dir, other, me, false));  // another user's file in /tmp
  CHECK_FALSE(replace_forbidden_by_sticky(01777, root_dir, me, me, false));  // our own file in /tmp
  CHECK_FALSE(replace_forbidden_by_sticky(01777, me, other, me, false));  // our sticky directory
  CHECK_FALSE(replace_forbidden_by_sticky(00777, root_dir, other, me, false));  // no sticky bit
  CHECK_FALSE(replace_forbidden_by_sticky(01777, root_dir, other, me, true));  // CAP_FOWNER
  CHECK(replace_forbidden_by_sticky(01770, other, other, me, false));  // any sticky mode, not only 1777
}

TEST_CASE("check_writable refuses at once what write_file_atomic would fail on, and leaves no probe behind") {
  test::ScratchDir d;
  const std::string fifo = d.file("pipe"), file = d.file("old.ckpt");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  write_file_atomic(file, "old");
  CHECK_NOTHROW(check_writable("", "--ckpt"));  // no output
  CHECK_NOTHROW(check_writable(d.file("new.ckpt"), "--ckpt"));
  CHECK_NOTHROW(check_writable(file, "--ckpt"));  // ours: replaced by the rename
  CHECK_THROWS_WITH_AS(check_writable(d.file("nodir/x.ckpt"), "--ckpt"), doctest::Contains("nodir does not exist"), Error);
  CHECK_THROWS_WITH_AS(check_writable(d.path.string(), "--metrics"), doctest::Contains(" is a directory"), Error);
  CHECK_THROWS_WITH_AS(check_writable(fifo, "--timeline"), doctest::Contains("pipe exists and is not a regular file"), Error);
  fs::create_symlink(d.file("missing/x"), d.file("dangling"));
  CHECK_THROWS_WITH_AS(check_writable(d.file("dangling"), "--ckpt"), doctest::Contains("missing does not exist"), Error);
  // a symlink is judged by the file it names, in that file's directory (write_file_atomic replaces it)
  test::ScratchDir other;
  fs::create_symlink(fifo, other.file("link"));
  CHECK_THROWS_WITH_AS(check_writable(other.file("link"), "--ckpt"), doctest::Contains("not a regular file"), Error);
  CHECK(d.entries() == 3);  // pipe, old.ckpt, dangling: no probe file left
}

TEST_CASE("write_file_atomic never writes through symlinks planted at the old predictable temp names") {
  test::ScratchDir d;
  const std::string victim = d.file("victim.txt"), target = d.file("out.ckpt");
  { std::ofstream(victim) << "precious"; }
  // The old writers used <path>.tmp.<pid>, <path>.tmp.<pid>.<n> and <path>.tmp: plant all of them.
  const std::string pid = std::to_string(::getpid());
  for (const std::string& name : {target + ".tmp." + pid, target + ".tmp." + pid + ".0", target + ".tmp"})
    fs::create_symlink(victim, name);
  write_file_atomic(target, "new contents");
  CHECK(read_file(victim) == "precious");
  CHECK(read_file(target) == "new contents");
  CHECK(fs::is_regular_file(fs::symlink_status(target)));
}

TEST_CASE("write_file_atomic through a symlinked target replaces the file it names") {
  test::ScratchDir d;
  const std::string real = d.file("real.jsonl"), link = d.file("link.jsonl");
  { std::ofstream(real) << "old"; }
  REQUIRE(::chmod(real.c_str(), 0600) == 0);
  fs::create_symlink(real, link);
  write_file_atomic(link, "new");
  CHECK(fs::is_symlink(link));
  CHECK(read_file(real) == "new");
  CHECK(mode_of(real) == 0600);
}

TEST_CASE("may_follow_output_symlink: only a symlink of this user or of root") {
  const uid_t me = 1000, other = 65534;
  CHECK(may_follow_output_symlink(me, me));
  CHECK(may_follow_output_symlink(0, me));  // /var/run -> /run and the like
  CHECK(may_follow_output_symlink(0, 0));
  CHECK_FALSE(may_follow_output_symlink(other, me));
  CHECK_FALSE(may_follow_output_symlink(other, 0));  // root never writes through a user's link
}

TEST_CASE("locate_output resolves this user's symlinks relative to the link, '..' and absolute targets") {
  test::ScratchDir d;
  fs::create_directories(d.path / "a" / "b");
  fs::create_symlink("../a/b/target.bin", d.file("a/rel.lnk"));   // relative to a/
  fs::create_symlink(d.file("a/b"), d.file("abs.dir"));            // absolute, a directory
  write_file_atomic(d.file("a/rel.lnk"), "one");
  CHECK(read_file(d.file("a/b/target.bin")) == "one");
  write_file_atomic(d.file("abs.dir/../b/x.bin"), "two");  // ".." after a followed link: the link's target's parent
  CHECK(read_file(d.file("a/b/x.bin")) == "two");
  CHECK(fs::is_symlink(d.file("a/rel.lnk")));
  fs::create_symlink("loop2", d.file("loop1"));
  fs::create_symlink("loop1", d.file("loop2"));
  CHECK_THROWS_WITH_AS(write_file_atomic(d.file("loop1"), "x", "--ckpt"), doctest::Contains("too many levels of symbolic links"), Error);
  CHECK_THROWS_WITH_AS(check_writable(d.file("a/b/target.bin/x"), "--ckpt"), doctest::Contains("target.bin is not a directory"), Error);
  CHECK_THROWS_WITH_AS(check_writable(d.file("a/.."), "--ckpt"), doctest::Contains("names a directory, not a file"), Error);
}

TEST_CASE("another user's symlink at an output path, or on the way to it, is never followed") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to give a symlink to another user (lchown)");
    return;
  }
  test::ScratchDir d;
  const uid_t nobody = 65534;
  const std::string victim = d.file("secret/victim");
  fs::create_directories(d.path / "secret");
  fs::create_directories(d.path / "sticky");
  fs::permissions(d.path / "sticky", fs::perms::all | fs::perms::sticky_bit);
  { std::ofstream(victim) << "precious"; }
  const std::string link = d.file("sticky/run.ckpt"), dir_link = d.file("sticky/runs");
  fs::create_symlink(victim, link);
  fs::create_symlink(d.file("secret"), dir_link);
  REQUIRE(::lchown(link.c_str(), nobody, nobody) == 0);
  REQUIRE(::lchown(dir_link.c_str(), nobody, nobody) == 0);
  for (const std::string& p : {link, dir_link + "/new.ckpt"}) {
    CAPTURE(p);
    CHECK_THROWS_WITH_AS(check_writable(p, "--ckpt"), doctest::Contains("is a symlink owned by uid 65534, neither this user (uid 0) nor root"), Error);
    CHECK_THROWS_WITH_AS(write_file_atomic(p, "checkpoint", "checkpoint"), doctest::Contains("not writing through it"), Error);
  }
  CHECK(read_file(victim) == "precious");
  CHECK_FALSE(fs::exists(d.file("secret/new.ckpt")));
  CHECK(fs::is_symlink(link));
  // the same links made by root are followed (this user's)
  REQUIRE(::lchown(link.c_str(), 0, 0) == 0);
  write_file_atomic(link, "ours");
  CHECK(read_file(victim) == "ours");
}

TEST_CASE("an output path ending in '/', '/.' or '/..' names a directory, not a file") {
  test::ScratchDir d;
  CHECK_THROWS_WITH_AS(write_file_atomic(d.file("newx") + "/", "x", "--ckpt"), doctest::Contains("names a directory, not a file"), Error);
  CHECK_THROWS_WITH_AS(check_writable(d.file("newx") + "/", "--ckpt"), doctest::Contains("names a directory, not a file"), Error);
  CHECK_THROWS_WITH_AS(write_file_atomic(d.file("newx") + "/.", "x", "--ckpt"), doctest::Contains("names a directory, not a file"), Error);
  CHECK_THROWS_WITH_AS(check_writable(d.file("newx") + "/..", "--ckpt"), doctest::Contains("names a directory, not a file"), Error);
  CHECK(d.entries() == 0);
}

TEST_CASE("write_file_atomic: a new file gets create_mode; a replaced file keeps only this user's permission bits") {
  test::ScratchDir d;
  ::umask(022);
  const std::string p = d.file("cache");
  write_file_atomic(p, "x", "cannot write", {}, 0600);
  CHECK(mode_of(p) == 0600);
  REQUIRE(::chmod(p.c_str(), 06755) == 0);  // ours, with set-user/group-ID bits: those are dropped
  write_file_atomic(p, "y");
  CHECK(mode_of(p) == 0755);
  if (::geteuid() == 0) {  // another user's world-writable file replaced by root: not its mode
    REQUIRE(::chown(p.c_str(), 65534, 65534) == 0);
    REQUIRE(::chmod(p.c_str(), 06777) == 0);
    write_file_atomic(p, "z");
    CHECK(mode_of(p) == 0644);
  }
}

TEST_CASE("open_output_directory creates what is missing, and nothing through another user's symlink") {
  test::ScratchDir d;
  const OutputLocation loc = open_output_directory(d.file("a/b/c"), "--out", true);
  CHECK(fs::is_directory(d.file("a/b/c")));
  write_file_atomic(loc.in("f.json"), "f.json", "{}");
  CHECK(read_file(d.file("a/b/c/f.json")) == "{}");
  CHECK_THROWS_WITH_AS(open_output_directory(d.file("x/y"), "--out", false), doctest::Contains("x does not exist"), Error);
  // a missing directory that a later ".." leaves again is not made: only the directory reached and its parents
  open_output_directory(d.file("a/nx/../side"), "--out", true);
  open_output_directory(d.file("a/n1/n2/../../n3/./../side2/"), "--out", true);
  open_output_directory(d.file("a/nx/.."), "--out", true);
  CHECK(fs::is_directory(d.file("a/side")));
  CHECK(fs::is_directory(d.file("a/side2")));
  CHECK(!fs::exists(d.file("a/nx")));
  CHECK(!fs::exists(d.file("a/n1")));
  CHECK(!fs::exists(d.file("a/n3")));
  open_output_directory(d.file("a/nx/y/.."), "--out", true);  // nx is left for y only: made
  CHECK(fs::is_directory(d.file("a/nx")));
  CHECK(!fs::exists(d.file("a/nx/y")));
  { std::ofstream(d.file("plain")) << "p"; }
  CHECK_THROWS_WITH_AS(open_output_directory(d.file("plain/y"), "--out", true), doctest::Contains("plain is not a directory"), Error);
  if (::geteuid() != 0) return;
  fs::create_directories(d.path / "secret");
  fs::create_symlink(d.file("secret"), d.file("link"));
  REQUIRE(::lchown(d.file("link").c_str(), 65534, 65534) == 0);
  CHECK_THROWS_WITH_AS(open_output_directory(d.file("link/new/deeper"), "--out", true), doctest::Contains("is a symlink owned by uid 65534"), Error);
  CHECK(fs::is_empty(d.path / "secret"));
}

TEST_CASE("read_output_file reads the file at a location, refusing a FIFO without blocking") {
  test::ScratchDir d;
  { std::ofstream(d.file("m.jsonl")) << "{}\n"; }
  REQUIRE(::mkfifo(d.file("fifo").c_str(), 0644) == 0);
  CHECK(read_output_file(locate_output(d.file("m.jsonl"), "--metrics"), "m.jsonl") == "{}\n");
  CHECK_THROWS_WITH_AS(read_output_file(locate_output(d.file("fifo"), "--metrics"), "fifo"), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("same_file compares device and inode, and paths of files not yet created") {
  test::ScratchDir d;
  const std::string a = d.file("corpus.txt"), hard = d.file("hard.txt"), other = d.file("other.txt");
  { std::ofstream(a) << "text"; }
  { std::ofstream(other) << "text"; }
  fs::create_hard_link(a, hard);
  CHECK(same_file(a, hard));
  CHECK_FALSE(same_file(a, other));
  CHECK(same_file(d.file("new.ckpt"), (d.path / "." / "new.ckpt").string()));
  CHECK_FALSE(same_file(d.file("new.ckpt"), d.file("new.jsonl")));
  CHECK_FALSE(same_file("", ""));
  // A relative name whose first component does not exist yet, spelled two ways (weakly_canonical
  // alone keeps the first relative and makes the second absolute).
  const std::string rel = "xt-same-file-not-created.ckpt";
  CHECK(same_file(rel, "./" + rel));
  CHECK(same_file(rel, (fs::current_path() / rel).string()));
  CHECK_FALSE(same_file(rel, "./other-" + rel));
  // Not yet created, through a symlinked directory and through "sub/.." (the anchor is the deepest
  // existing directory by device and inode, as for a bind mount of the same directory).
  fs::create_directory(d.path / "sub");
  fs::create_directory_symlink(d.path / "sub", d.path / "alias");
  CHECK(same_file(d.file("sub/h.ckpt"), d.file("alias/h.ckpt")));
  CHECK(same_file(d.file("sub/deeper/h.ckpt"), d.file("alias/deeper/h.ckpt")));
  CHECK(same_file(d.file("h.ckpt"), d.file("sub/../h.ckpt")));
  CHECK_FALSE(same_file(d.file("sub/h.ckpt"), d.file("alias/g.ckpt")));
  CHECK_FALSE(same_file(d.file("sub/h.ckpt"), d.file("h.ckpt")));
}

TEST_CASE("xxh3_64 is XXH3-64 with seed 0") {
  // Reference: XXH3_64bits of the empty input (xxHash's own test vector, 0x2D06800538D394C2).
  CHECK(xxh3_64("", 0) == 0x2D06800538D394C2ull);
  CHECK(xxh3_64("a", 1) != xxh3_64("b", 1));
}

TEST_CASE("Xxh3Stream over pieces equals xxh3_64 of the whole (the data hash of a stream of views)") {
  std::string bytes(1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 31 + 7);
  // pieces shorter and longer than XXH3's 256-byte stripe buffer, and an empty one
  for (size_t cut : {size_t(0), size_t(1), size_t(100), size_t(300), size_t(999), size_t(1000)}) {
    CAPTURE(cut);
    Xxh3Stream h;
    h.update(bytes.data(), cut);
    h.update(bytes.data() + cut, bytes.size() - cut);
    CHECK(h.digest() == xxh3_64(bytes.data(), bytes.size()));
  }
  CHECK(Xxh3Stream().digest() == xxh3_64("", 0));
}

namespace {
std::string hostname() {
  char h[256] = {};
  REQUIRE(::gethostname(h, sizeof h - 1) == 0);
  return std::string(h).substr(0, 64);
}
// dead_pid: the pid of a child that has exited and been reaped (no process has it now).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}
}  // namespace

TEST_CASE("the next write removes the temporary files of dead writers on this host, and nothing else") {
  test::ScratchDir d;
  const std::string target = d.file("run.ckpt"), host = hostname();
  const std::string dead = std::to_string(dead_pid());
  auto temp = [&](const std::string& h, const std::string& pid) {
    const std::string p = target + ".tmp." + h + "." + pid + ".0123456789abcdef";
    std::ofstream(p) << "partial checkpoint";
    return p;
  };
  const std::string debris = temp(host, dead);
  const std::string other_host = temp("another-node", dead);        // its writer may be alive there
  const std::string live = temp(host, std::to_string(::getppid()));  // the test's parent: alive
  const std::string locked = target + ".tmp." + host + "." + dead + ".fedcba9876543210";
  std::ofstream(locked) << "x";
  const int lock_fd = ::open(locked.c_str(), O_RDONLY);  // a writer (this process) holds its lock
  REQUIRE(lock_fd >= 0);
  REQUIRE(::flock(lock_fd, LOCK_EX) == 0);
  const std::string unrelated = d.file("run.ckpt.tmp.notes");
  std::ofstream(unrelated) << "mine";

  write_file_atomic(target, "new");
  CHECK_FALSE(fs::exists(debris));
  CHECK(fs::exists(other_host));
  CHECK(fs::exists(live));
  CHECK(fs::exists(locked));
  CHECK(fs::exists(unrelated));
  CHECK(read_file(target) == "new");
  ::close(lock_fd);  // the lock is free now, the pid still dead: debris
  CHECK(remove_stale_temp_files(target) == 1);
  CHECK_FALSE(fs::exists(locked));
}

TEST_CASE("the data directory: $XTRAIN_DATA empty is not 'unset', and a path that is no directory says why") {
  const test::ScratchDir t;
  const std::string exe = t.file("bin/xtrain_mpi");  // no share/xtrain beside it, no build tree above it
  const std::string give = "; set XTRAIN_DATA to the folder scripts/setup.sh fills, or give --data FILE";
  const DataDir unset = find_data_dir(nullptr, exe);
  CHECK(unset.path.empty());
  CHECK(data_dir_note(unset, "--data FILE") ==
        "no data directory found; looked in $XTRAIN_DATA (unset), " + t.file("share/xtrain") + " (absent)" + give);
  const DataDir empty = find_data_dir("", exe);
  CHECK(empty.path.empty());
  CHECK(data_dir_note(empty, "--data FILE") == "no data directory found; looked in $XTRAIN_DATA (set but empty: passed over), " +
                                                   t.file("share/xtrain") + " (absent)" + give);
  // set: taken as given, and the note says what is wrong with it
  std::ofstream(t.file("a_file")) << "x";
  const DataDir file = find_data_dir(t.file("a_file/").c_str(), exe);
  CHECK(file.path == t.file("a_file"));
  CHECK(data_dir_note(file, "--data FILE") ==
        "data directory " + t.file("a_file") + ", from $XTRAIN_DATA, is not a directory (a file or device)" + give);
  CHECK(data_dir_note(find_data_dir(t.file("none").c_str(), exe), "--data FILE") ==
        "data directory " + t.file("none") + ", from $XTRAIN_DATA, does not exist" + give);
  CHECK(data_dir_note(find_data_dir(t.file("a_file/below").c_str(), exe), "--data FILE") ==
        "data directory " + t.file("a_file/below") + ", from $XTRAIN_DATA, does not exist" + give);
  CHECK(data_dir_note(find_data_dir(t.path.c_str(), exe), "--data FILE") == "data directory " + t.path.string() + ", from $XTRAIN_DATA" + give);
  // a newline or tab in the value is escaped as echo_value writes it: the note stays one line
  CHECK(data_dir_note(find_data_dir((t.file("a") + "\nb\tc").c_str(), exe), "--data FILE") ==
        "data directory " + t.file("a") + "\\nb\\tc, from $XTRAIN_DATA, does not exist" + give);
  // the install prefix's share/xtrain, once it exists
  fs::create_directories(t.file("share/xtrain"));
  const DataDir prefix = find_data_dir("", exe);
  CHECK(prefix.path == t.file("share/xtrain"));
  CHECK(prefix.origin == "the install prefix");
}
