// Progress lines (non-terminal and terminal modes, rate limit, rank 0 only) with an injected clock, so
// nothing here waits. test_watch: this file holds main; also test_mfu.cpp, test_run_summary.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "xtrain/error.h"
#include "xtrain/progress.h"

using namespace xtrain;

namespace {

// A temporary FILE* whose contents can be read back.
struct Capture {
  std::FILE* f = std::tmpfile();
  ~Capture() {
    if (f) std::fclose(f);
  }
  std::string text() {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
    return s;
  }
};

ProgressOptions options(Capture& cap, double& t, int terminal) {
  ProgressOptions o;
  o.out = cap.f;
  o.interval_s = 2.0;
  o.terminal = terminal;
  o.clock = [&t] { return t; };
  return o;
}

}  // namespace

TEST_CASE("progress on a non-terminal: plain lines, at most one per interval, then the total") {
  Capture cap;
  REQUIRE(cap.f);
  double t = 100.0;
  {
    Progress p("tokenize corpus.txt", 100'000'000, 0, options(cap, t, 0));
    t = 101.0;
    p.update(10'000'000);  // 1 s < 2 s: silent
    t = 102.0;
    p.update(20'000'000);  // 2 s: 20 MB in 2 s = 10 MB/s, 80 MB left = 8 s
    t = 103.0;
    p.update(30'000'000);  // 1 s after the last line: silent
    t = 104.5;
    p.update(45'000'000);  // 45 MB in 4.5 s = 10 MB/s, 55 MB left = 5.5 s -> 6 s
    t = 110.0;
    p.finish();
    p.finish();  // once only
  }
  CHECK(cap.text() ==
        "tokenize corpus.txt | 20.0 / 100.0 MB (20%) | 10.0 MB/s | eta 0m08s\n"
        "tokenize corpus.txt | 45.0 / 100.0 MB (45%) | 10.0 MB/s | eta 0m06s\n"
        "tokenize corpus.txt | 100.0 MB in 10.0 s | 10.0 MB/s\n");
}

TEST_CASE("progress: short work prints only the final line; long ETAs in minutes") {
  Capture cap;
  double t = 0.0;
  {
    Progress p("read run.ckpt", 3'000'000'000, 0, options(cap, t, 0));
    t = 1.0;
    p.update(1'000'000'000);
    t = 1.5;
    p.finish();
  }
  {
    Progress p("write run.ckpt", 1'000'000'000, 0, options(cap, t, 0));  // starts at t = 1.5
    t = 11.5;
    p.update(10'000'000);  // 1 MB/s, 990 MB left = 16m30s
  }
  CHECK(cap.text() ==
        "read run.ckpt | 3000.0 MB in 1.5 s | 2000.0 MB/s\n"
        "write run.ckpt | 10.0 / 1000.0 MB (1%) | 1.0 MB/s | eta 16m30s\n");
}

TEST_CASE("progress: nothing on ranks other than 0 or below min_total_bytes; no rate before any byte") {
  Capture cap;
  double t = 0.0;
  {
    Progress p("tokenize", 1000, 1, options(cap, t, 0));
    t = 5.0;
    p.update(500);
    p.finish();
  }
  CHECK(cap.text().empty());
  {
    ProgressOptions o = options(cap, t, 0);
    o.min_total_bytes = 1001;  // small work: silent
    Progress p("write small.ckpt", 1000, 0, o);
    t = 7.0;
    p.update(500);
    p.finish();
  }
  CHECK(cap.text().empty());
  {
    Progress p("tokenize", 1000, 0, options(cap, t, 0));
    t = 10.0;
    p.update(0);
  }
  CHECK(cap.text() == "tokenize | 0.0 / 0.0 MB (0%) | 0.0 MB/s | eta --\n");
}

TEST_CASE("progress on a terminal: one line rewritten with \\r, blanked, ended by the final line") {
  Capture cap;
  double t = 0.0;
  {
    Progress p("tok", 100'000'000, 0, options(cap, t, 1));
    t = 2.0;
    p.update(50'000'000);
    t = 4.0;
    p.update(100'000'000);  // longer than the first line: nothing to blank
    t = 4.0;
    p.finish();
  }
  const std::string l1 = "tok | 50.0 / 100.0 MB (50%) | 25.0 MB/s | eta 0m02s";
  const std::string l2 = "tok | 100.0 / 100.0 MB (100%) | 25.0 MB/s | eta 0m00s";
  const std::string l3 = "tok | 100.0 MB in 4.0 s | 25.0 MB/s";
  CHECK(cap.text() == "\r" + l1 + "\r" + l2 + "\r" + l3 + std::string(l2.size() - l3.size(), ' ') + "\n");
}

TEST_CASE("progress on a terminal: a line left open by abandoned work is ended") {
  Capture cap;
  double t = 0.0;
  {
    Progress p("tok", 100, 0, options(cap, t, 1));
    t = 3.0;
    p.update(30);
  }
  CHECK(cap.text() == "\rtok | 0.0 / 0.0 MB (30%) | 0.0 MB/s | eta 0m07s\n");
}

TEST_CASE("progress: a file is no terminal, so the default mode writes plain lines") {
  Capture cap;
  double t = 0.0;
  CHECK_FALSE(stream_is_terminal(cap.f));
  {
    Progress p("tok", 100, 0, options(cap, t, -1));
    t = 3.0;
    p.update(30);
  }
  CHECK(cap.text() == "tok | 0.0 / 0.0 MB (30%) | 0.0 MB/s | eta 0m07s\n");
}

TEST_CASE("progress: done must grow and stay within the total") {
  Capture cap;
  double t = 0.0;
  Progress p("tok", 100, 0, options(cap, t, 0));
  p.update(50);
  CHECK_THROWS_AS(p.update(40), Error);
  CHECK_THROWS_AS(p.update(101), Error);
  p.update(100);
}
