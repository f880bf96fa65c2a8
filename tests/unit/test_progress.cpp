// Progress lines (non-terminal and terminal modes, rate limit, rank 0 only) with an injected clock, so
// nothing here waits.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include <xtrain/core/error.h>
#include <xtrain/core/progress.h>

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

// Clocked: each test's captured stream and the clock it moves (a fresh one per TEST_CASE_FIXTURE).
struct Clocked {
  Capture cap;
  double t = 0.0;  // seconds, what the progress lines read as the time
  // options: write to cap, a line at most every 2 s, terminal = 1 / 0 / -1 (yes / no / ask the stream).
  ProgressOptions options(int terminal) {
    REQUIRE(cap.f);
    ProgressOptions o;
    o.out = cap.f;
    o.interval_s = 2.0;
    o.terminal = terminal;
    o.clock = [this] { return t; };
    return o;
  }
  // at: the clock moves to `s` seconds, then `done` bytes are reported.
  void at(Progress& p, double s, uint64_t done) {
    t = s;
    p.update(done);
  }
};

}  // namespace

TEST_CASE_FIXTURE(Clocked, "progress on a non-terminal: plain lines, at most one per interval, then the total") {
  t = 100.0;
  {
    Progress p("tokenize corpus.txt", 100'000'000, 0, options(0));
    at(p, 101.0, 10'000'000);  // 1 s < 2 s: silent
    at(p, 102.0, 20'000'000);  // 2 s: 20 MB in 2 s = 10 MB/s, 80 MB left = 8 s
    at(p, 103.0, 30'000'000);  // 1 s after the last line: silent
    at(p, 104.5, 45'000'000);  // 45 MB in 4.5 s = 10 MB/s, 55 MB left = 5.5 s -> 6 s
    t = 110.0;
    p.finish();
    p.finish();  // once only
  }
  CHECK(cap.text() ==
        "tokenize corpus.txt | 20.0 / 100.0 MB (20%) | 10.0 MB/s | eta 0m08s\n"
        "tokenize corpus.txt | 45.0 / 100.0 MB (45%) | 10.0 MB/s | eta 0m06s\n"
        "tokenize corpus.txt | 100.0 MB in 10.0 s | 10.0 MB/s\n");
}

TEST_CASE_FIXTURE(Clocked, "progress: short work prints only the final line; long ETAs in minutes") {
  {
    Progress p("read run.ckpt", 3'000'000'000, 0, options(0));
    at(p, 1.0, 1'000'000'000);
    t = 1.5;
    p.finish();
  }
  {
    Progress p("write run.ckpt", 1'000'000'000, 0, options(0));  // starts at t = 1.5
    at(p, 11.5, 10'000'000);  // 1 MB/s, 990 MB left = 16m30s
  }
  CHECK(cap.text() ==
        "read run.ckpt | 3000.0 MB in 1.5 s | 2000.0 MB/s\n"
        "write run.ckpt | 10.0 / 1000.0 MB (1%) | 1.0 MB/s | eta 16m30s\n");
}

TEST_CASE_FIXTURE(Clocked, "progress: nothing on ranks other than 0 or below min_total_bytes; no rate before any byte") {
  {
    Progress p("tokenize", 1000, 1, options(0));
    at(p, 5.0, 500);
    p.finish();
  }
  CHECK(cap.text().empty());
  {
    ProgressOptions o = options(0);
    o.min_total_bytes = 1001;  // small work: silent
    Progress p("write small.ckpt", 1000, 0, o);
    at(p, 7.0, 500);
    p.finish();
  }
  CHECK(cap.text().empty());
  {
    Progress p("tokenize", 1000, 0, options(0));
    at(p, 10.0, 0);
  }
  CHECK(cap.text() == "tokenize | 0.0 / 0.0 MB (0%) | 0.0 MB/s | eta --\n");
}

TEST_CASE_FIXTURE(Clocked, "progress on a terminal: one line rewritten with \\r, blanked, ended by the final line") {
  {
    Progress p("tok", 100'000'000, 0, options(1));
    at(p, 2.0, 50'000'000);
    at(p, 4.0, 100'000'000);  // longer than the first line: nothing to blank
    p.finish();
  }
  const std::string l1 = "tok | 50.0 / 100.0 MB (50%) | 25.0 MB/s | eta 0m02s";
  const std::string l2 = "tok | 100.0 / 100.0 MB (100%) | 25.0 MB/s | eta 0m00s";
  const std::string l3 = "tok | 100.0 MB in 4.0 s | 25.0 MB/s";
  CHECK(cap.text() == "\r" + l1 + "\r" + l2 + "\r" + l3 + std::string(l2.size() - l3.size(), ' ') + "\n");
}

TEST_CASE_FIXTURE(Clocked, "progress on a terminal: a line left open by abandoned work is ended") {
  {
    Progress p("tok", 100, 0, options(1));
    at(p, 3.0, 30);
  }
  CHECK(cap.text() == "\rtok | 0.0 / 0.0 MB (30%) | 0.0 MB/s | eta 0m07s\n");
}

TEST_CASE_FIXTURE(Clocked, "progress: a file is no terminal, so the default mode writes plain lines") {
  CHECK_FALSE(stream_is_terminal(cap.f));
  {
    Progress p("tok", 100, 0, options(-1));
    at(p, 3.0, 30);
  }
  CHECK(cap.text() == "tok | 0.0 / 0.0 MB (30%) | 0.0 MB/s | eta 0m07s\n");
}

TEST_CASE_FIXTURE(Clocked, "progress: done must grow and stay within the total") {
  Progress p("tok", 100, 0, options(0));
  p.update(50);
  CHECK_THROWS_AS(p.update(40), Error);
  CHECK_THROWS_AS(p.update(101), Error);
  p.update(100);
}
