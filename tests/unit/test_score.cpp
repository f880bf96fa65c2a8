// Multiple-choice files and their tokens (include/xtrain/score/multiple_choice.h): HellaSwag's JSON lines
// as published (ctx, or ctx_a/ctx_b joined as the dataset joins them; integer or text labels) and the
// generic form; one error naming file, line and field for each kind of bad item; the rows of tokenize_mc:
// context then " " + choice, cut from the left to the context + 1 tokens, a choice longer than the context
// and a tokenizer that is not the model's refused. The GPT-2 tokenizer of XTRAIN_DATA_DIR (scripts/setup.sh).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <xtrain/core/error.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/score/multiple_choice.h>

using namespace xtrain;

namespace {

const std::filesystem::path kDir = std::filesystem::temp_directory_path() / ("xtrain-test-score-" + std::to_string(::getpid()));
struct RemoveDir {
  ~RemoveDir() {
    std::error_code ec;
    std::filesystem::remove_all(kDir, ec);
  }
} remove_dir;

std::string write_temp(const std::string& name, const std::string& text) {
  const auto& dir = kDir;
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// error_of: the message read_mc_file throws for a file of `text` ("" when it throws none).
std::string error_of(const std::string& text) {
  const std::string path = write_temp("bad.jsonl", text);
  try {
    read_mc_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Tokenizer* gpt2() {
  static const Tokenizer* tok = [] () -> const Tokenizer* {
    const char* d = std::getenv("XTRAIN_DATA_DIR");
    const std::string dir = d ? d : "";
    if (!std::filesystem::exists(dir + "/gpt2/encoder.json")) return nullptr;
    return new Tokenizer(Tokenizer::from_gpt2_files(dir + "/gpt2/encoder.json", dir + "/gpt2/vocab.bpe"));
  }();
  return tok;
}

}  // namespace

TEST_CASE("read_mc_file: HellaSwag's forms and the generic one") {
  const std::string path = write_temp("items.jsonl",
      R"({"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow.", "ctx_b": "then", "ctx": "Then, the man writes over the snow. then", "endings": ["a", "b", "c", "d"], "label": 3, "split": "val"})" "\n"
      "\n"
      R"({"ctx_a": "A woman is outside.", "ctx_b": "she", "endings": ["x", "y"], "label": "1"})" "\n"
      R"({"ctx_a": "Alone.", "ctx_b": "", "endings": ["x", "y"], "label": 0})" "\n"
      R"({"context": "2 + 2 =", "choices": ["3", "4", "5"], "answer": 1, "extra": true})" "\n");
  const std::vector<McItem> items = read_mc_file(path);
  REQUIRE(items.size() == 4);
  CHECK(items[0].context == "Then, the man writes over the snow. then");
  CHECK(items[0].choices.size() == 4);
  CHECK(items[0].label == 3);
  CHECK(items[0].line == 1);
  CHECK(items[1].context == "A woman is outside. she");  // ctx_a + " " + ctx_b
  CHECK(items[1].label == 1);                            // a text label
  CHECK(items[1].line == 3);                             // the blank line counts
  CHECK(items[2].context == "Alone.");                   // an empty ctx_b adds nothing
  CHECK(items[3].context == "2 + 2 =");
  CHECK(items[3].choices[1] == "4");
  CHECK(items[3].label == 1);
}

TEST_CASE("read_mc_file: one line naming file, line and field") {
  const std::string ok = R"({"ctx": "c", "endings": ["a", "b"], "label": 0})" "\n";
  CHECK(error_of(ok + "{\"ctx\": \n").find("bad.jsonl:2: not valid JSON") != std::string::npos);
  CHECK(error_of(ok + "[1, 2]\n").find("bad.jsonl:2: the line must be a JSON object") != std::string::npos);
  CHECK(error_of(ok + R"({"ctx": "c", "endings": ["a", 3], "label": 0})").find("bad.jsonl:2: endings[1]: must be a string, got 3") !=
        std::string::npos);
  CHECK(error_of(R"({"ctx": "c", "endings": ["a", "b"], "label": 2})").find("bad.jsonl:1: label: 2 is not an index of the 2 endings") !=
        std::string::npos);
  CHECK(error_of(R"({"ctx": "c", "endings": ["a", "b"], "label": "x"})").find("bad.jsonl:1: label: must be an integer index") !=
        std::string::npos);
  CHECK(error_of(R"({"ctx": "c", "endings": ["a", "b"]})").find("bad.jsonl:1: label: missing") != std::string::npos);
  CHECK(error_of(R"({"ctx": "c", "endings": ["a"], "label": 0})").find("bad.jsonl:1: endings: needs at least 2 choices") !=
        std::string::npos);
  CHECK(error_of(R"({"ctx": "", "endings": ["a", "b"], "label": 0})").find("bad.jsonl:1: ctx: is empty") != std::string::npos);
  CHECK(error_of(R"({"ctx": "c", "endings": ["a", ""], "label": 0})").find("bad.jsonl:1: endings[1]: is empty") != std::string::npos);
  CHECK(error_of(R"({"endings": ["a", "b"], "label": 0})").find("bad.jsonl:1: ctx: missing") != std::string::npos);
  CHECK(error_of(R"({"context": "c", "choices": "ab", "answer": 0})").find("bad.jsonl:1: choices: must be an array of strings") !=
        std::string::npos);
  CHECK(error_of(R"({"question": "c"})").find("bad.jsonl:1: endings: missing") != std::string::npos);
  CHECK(error_of("\n\n").find("bad.jsonl: no items") != std::string::npos);
}

TEST_CASE("read_mc_file: a .zst file is decompressed (the items of its plain text); a damaged one is one line") {
  const std::string text = R"({"ctx": "c", "endings": ["a", "b"], "label": 1})" "\n\n"
                           R"({"context": "d", "choices": ["e", "f", "g"], "answer": 2})" "\n";
  std::string zst(ZSTD_compressBound(text.size()), '\0');
  zst.resize(ZSTD_compress(zst.data(), zst.size(), text.data(), text.size(), 3));
  const std::vector<McItem> items = read_mc_file(write_temp("items.jsonl.zst", zst));
  REQUIRE(items.size() == 2);
  CHECK(items[0].context == "c");
  CHECK(items[0].label == 1);
  CHECK(items[1].choices.size() == 3);
  CHECK(items[1].label == 2);
  CHECK(items[1].line == 3);  // lines counted in the decompressed text, the blank one too
  // read as JSON lines, not as zstd, without the suffix: its first line is not JSON
  CHECK_THROWS_WITH_AS(read_mc_file(write_temp("items.jsonl", zst)), doctest::Contains("items.jsonl:1: not valid JSON"), Error);
  CHECK_THROWS_WITH_AS(read_mc_file(write_temp("cut.jsonl.zst", zst.substr(0, zst.size() - 4))),
                       doctest::Contains("cut.jsonl.zst: zstd stream ends mid-frame (truncated)"), Error);
  CHECK_THROWS_WITH_AS(read_mc_file(write_temp("junk.jsonl.zst", "not zstd at all")),
                       doctest::Contains("junk.jsonl.zst: corrupt zstd stream"), Error);
}

TEST_CASE("tokenize_mc: context, then a space and the choice; cut from the left") {
  const Tokenizer* tok = gpt2();
  if (!tok) {
    MESSAGE("skipped: no data/gpt2 (scripts/setup.sh)");
    return;
  }
  GPTConfig cfg;
  cfg.V = tok->vocab_size(), cfg.maxT = 16;
  McItem it;
  it.context = "The quick brown fox jumps over the lazy dog and then runs far away into the dark forest at night";
  it.choices = {"quietly.", "with a very long tail that has many many words in it and more"};
  it.line = 7;
  const McTokens mc = tokenize_mc({it}, *tok, cfg, "f.jsonl");
  REQUIRE(mc.rows() == 2);
  const std::vector<int32_t> ctx = tok->encode(it.context);
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<int32_t> ch = tok->encode(" " + it.choices[r]);
    std::vector<int32_t> whole = ctx;
    whole.insert(whole.end(), ch.begin(), ch.end());
    REQUIRE(whole.size() > 17);  // the case: longer than the context
    CHECK(mc.ids[r].size() == 17);  // maxT + 1: maxT inputs and their targets
    CHECK(std::equal(mc.ids[r].begin(), mc.ids[r].end(), whole.end() - 17));  // the last 17 tokens
    CHECK(mc.choice_tokens[r] == static_cast<int>(ch.size()));
    CHECK(mc.choice_bytes[r] == it.choices[r].size());  // without the joining space
  }
  CHECK(mc.T == 16);
  CHECK(mc.first_row == std::vector<size_t>{0, 2});

  McItem shorter = it;
  shorter.context = "Hi";
  shorter.choices = {"there", "you"};
  const McTokens s = tokenize_mc({shorter}, *tok, cfg, "f.jsonl");
  std::vector<int32_t> want = tok->encode("Hi");
  for (int32_t id : tok->encode(" there")) want.push_back(id);
  CHECK(s.ids[0] == want);  // not cut
  CHECK(s.T == static_cast<int>(std::max(s.ids[0].size(), s.ids[1].size())) - 1);

  cfg.maxT = 4;  // a choice of more tokens than the context
  try {
    tokenize_mc({it}, *tok, cfg, "f.jsonl");
    FAIL("a choice longer than the context was taken");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("f.jsonl:7: choices[1]:") != std::string::npos);
  }
  cfg.maxT = 64, cfg.V = 1000;  // a vocabulary the GPT-2 ids do not fit
  try {
    tokenize_mc({it}, *tok, cfg, "f.jsonl");
    FAIL("ids outside the model's vocabulary were taken");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("f.jsonl:7: token id") != std::string::npos);
  }
}
