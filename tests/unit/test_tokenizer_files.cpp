// Tokenizer file handling: small synthetic vocabularies in both formats (merge semantics, specials,
// fingerprints), loader error messages, and encode's progress reports. The test_tokenizer_files executable,
// with test_token_cache.cpp and test_tokenizer_cache.cpp: GPT-2's BPE files from $XTRAIN_DATA_DIR/gpt2
// (scripts/setup.sh), no shared data; exits 77 (skipped) without them. main is here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>

#include <algorithm>
#include <fstream>
#include <functional>

#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "data/bpe.h"
#include "data/hf_pipeline.h"
#include "data/tokenizer_options.h"
#include "error_test_util.h"
#include "test_tokenizer_util.h"

using namespace xtrain;
using namespace xtrain::test;

namespace {

std::string utf8(char32_t cp) {
  return cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A tiny vocabulary: the 256 bytes (id = byte value), then merges "b c", "a b", "ab c" and
// <|endoftext|>. Its "abc" shows tiktoken's rule: after "b c" (rank 0) the pair (a, bc) is not a
// listed merge, but its concatenation "abc" is a mergeable token, so tiktoken merges it (tokenizers,
// which reads the tokenizer.json form, does not).
nlohmann::json tiny_vocab() {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[utf8(bpe::byte_to_unicode()[b])] = b;
  v["bc"] = 256, v["ab"] = 257, v["abc"] = 258, v["<|endoftext|>"] = 259;
  return v;
}
const char* kTinyMerges = "#version: 0.2\nb c\na b\nab c\n";

void write_tiny_gpt2(const ScratchDir& d) {
  write_file(d.file("encoder.json"), tiny_vocab().dump());
  write_file(d.file("vocab.bpe"), kTinyMerges);
}

// The tiny vocabulary as a Hugging Face tokenizer.json with GPT-2's settings (what encode() implements).
nlohmann::json tiny_hf() {
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", tiny_vocab()}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
                      {"added_tokens", {{{"id", 259}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  j["model"]["merges"] = {"b c", "a b", "ab c"};
  return j;
}

}  // namespace

TEST_CASE("byte alphabet is GPT-2's bytes_to_unicode") {
  const auto& t = bpe::byte_to_unicode();
  CHECK(t['!'] == U'!');
  CHECK(t['~'] == U'~');
  CHECK(t[0] == 0x100);     // first non-printable byte
  CHECK(t[' '] == 0x120);   // 'Ġ'
  CHECK(t['\n'] == 0x10A);  // 'Ċ'
  CHECK(t[0x7F] == 0x121);  // after the 33 bytes 0..32
  CHECK(t[0xAD] == 0x143);  // the soft hyphen is the 68th and last shifted byte
  std::string bytes;
  for (int b = 0; b < 256; ++b) {
    REQUIRE(bpe::token_text_to_bytes(utf8(t[b]), &bytes));
    CHECK(bytes == std::string(1, char(b)));
  }
  CHECK(!bpe::token_text_to_bytes("\t", &bytes));          // a raw tab is not in the alphabet
  CHECK(!bpe::token_text_to_bytes("\xC3", &bytes));        // malformed UTF-8
}

TEST_CASE("tiny vocabulary: tiktoken merge rule, specials, both formats, fingerprint") {
  ScratchDir d;
  write_tiny_gpt2(d);
  const Tokenizer t = Tokenizer::from_gpt2_files(d.file("encoder.json"), d.file("vocab.bpe"));
  CHECK(t.vocab_size() == 260);
  CHECK(t.eot_id() == 259);
  CHECK(t.encode("abc") == std::vector<int32_t>{258});  // via (a, bc), see tiny_vocab()
  CHECK(t.encode("abab") == std::vector<int32_t>{257, 257});
  CHECK(t.encode("cab") == std::vector<int32_t>{'c', 257});
  CHECK(t.encode("ab<|endoftext|>bc") == std::vector<int32_t>{257, 259, 256});
  CHECK(t.decode({258, 32, 259}) == "abc <|endoftext|>");

  nlohmann::json hf_json = tiny_hf();
  write_file(d.file("strings.json"), hf_json.dump());
  // json::array explicitly: a braced list of string pairs would be deduced as an object.
  hf_json["model"]["merges"] = nlohmann::json::array(
      {nlohmann::json::array({"b", "c"}), nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})});
  write_file(d.file("arrays.json"), hf_json.dump());
  const Tokenizer s = Tokenizer::from_hf_json(d.file("strings.json"));
  const Tokenizer a = Tokenizer::from_hf_json(d.file("arrays.json"));
  // tokenizer.json follows tokenizers' rule: only listed pairs merge, so "abc" stays (a, bc); GPT-2's
  // merges give the same ids under both rules (test_tokenizer's corpora), and the fingerprint covers
  // the vocabulary, merges and specials, which are the same here.
  CHECK(s.encode("abc") == std::vector<int32_t>{'a', 256});
  CHECK(a.encode("abcab<|endoftext|>") == std::vector<int32_t>{'a', 256, 257, 259});
  CHECK(s.fingerprint() == t.fingerprint());
  CHECK(a.fingerprint() == t.fingerprint());
  CHECK(t.fingerprint() != gpt2().fingerprint());
  // messages and the run log name the kind, then its files (a tokenizer.json's kind is not its file name)
  CHECK(t.describe() == "GPT-2 BPE " + d.file("encoder.json") + " + " + d.file("vocab.bpe"));
  CHECK(s.describe() == "Hugging Face BPE " + d.file("strings.json"));

  // Another merge order is another tokenizer.
  write_file(d.file("vocab2.bpe"), "#version: 0.2\na b\nb c\nab c\n");
  CHECK(Tokenizer::from_gpt2_files(d.file("encoder.json"), d.file("vocab2.bpe")).fingerprint() != t.fingerprint());
  // load_tokenizer picks the format, and needs one.
  CHECK(load_tokenizer(d.file("arrays.json"), "", "").fingerprint() == t.fingerprint());
  CHECK(load_tokenizer("", d.file("encoder.json"), d.file("vocab.bpe")).fingerprint() == t.fingerprint());
  CHECK_THROWS_AS(load_tokenizer("", "", ""), UsageError);
  CHECK_THROWS_AS(load_tokenizer("", d.file("encoder.json"), ""), UsageError);
}

TEST_CASE("loader errors name the file and the cause") {
  ScratchDir d;
  write_tiny_gpt2(d);
  const std::string enc = d.file("encoder.json"), bpe_file = d.file("vocab.bpe");
  std::string e = error_of([&] { Tokenizer::from_gpt2_files(d.file("missing.json"), bpe_file); });
  CHECK(e.find(d.file("missing.json")) != std::string::npos);
  CHECK(e.find("No such file") != std::string::npos);
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("missing.bpe")); });
  CHECK(e.find(d.file("missing.bpe")) != std::string::npos);

  write_file(d.file("bad.json"), "{\"a\": 1,");
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("bad.json"), bpe_file); });
  CHECK(e.find(d.file("bad.json") + ": not valid JSON") != std::string::npos);

  write_file(d.file("unknown.bpe"), "#version: 0.2\nb c\nzz c\n");
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("unknown.bpe")); });
  CHECK(e.find(d.file("unknown.bpe") + ":3") != std::string::npos);
  CHECK(e.find("unknown left token \"zz\"") != std::string::npos);

  write_file(d.file("noresult.bpe"), "#version: 0.2\nc a\n");  // "ca" is not in the vocabulary
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("noresult.bpe")); });
  CHECK(e.find("unknown merged token \"ca\"") != std::string::npos);

  write_file(d.file("malformed.bpe"), "#version: 0.2\nabc\n");
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("malformed.bpe")); });
  CHECK(e.find(d.file("malformed.bpe") + ":2: expected a merge") != std::string::npos);

  nlohmann::json v = tiny_vocab();
  v.erase(utf8(bpe::byte_to_unicode()['q']));
  v["\xC3\xB0q"] = 'q';  // keep ids dense
  write_file(d.file("nobyte.json"), v.dump());
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("nobyte.json"), bpe_file); });
  CHECK(e.find("no token for byte 113") != std::string::npos);

  v = tiny_vocab();
  v["\t"] = 260;  // a raw tab is outside the byte alphabet
  write_file(d.file("alphabet.json"), v.dump());
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("alphabet.json"), bpe_file); });
  CHECK(e.find("not in GPT-2's byte alphabet") != std::string::npos);

  v = tiny_vocab();
  v["zz"] = 300;  // ids 260..299 missing: 300 is beyond the number of entries, refused before allocating
  write_file(d.file("gap.json"), v.dump());
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("gap.json"), bpe_file); });
  CHECK(e.find("\"zz\" has id 300, outside 0..") != std::string::npos);

  v = tiny_vocab();
  v["zz"] = 2147483647;  // would overflow id + 1
  write_file(d.file("maxid.json"), v.dump());
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("maxid.json"), bpe_file); });
  CHECK(e.find("has id 2147483647, outside") != std::string::npos);

  write_file(d.file("wordpiece.json"), R"({"model": {"type": "WordPiece", "vocab": {}}})");
  e = error_of([&] { Tokenizer::from_hf_json(d.file("wordpiece.json")); });
  CHECK(e.find(d.file("wordpiece.json") + ": model.type is \"WordPiece\"") != std::string::npos);
  nlohmann::json hf_json = tiny_hf();
  hf_json["model"]["merges"] = {"b c", 5};
  write_file(d.file("badmerge.json"), hf_json.dump());
  e = error_of([&] { Tokenizer::from_hf_json(d.file("badmerge.json")); });
  CHECK(e.find("model.merges[1] is neither") != std::string::npos);

  // one string, two ids: tokenizers keeps the first entry and drops the second id; refused, naming both
  hf_json = tiny_hf();
  hf_json["added_tokens"].push_back({{"id", 260}, {"content", "<dup>"}, {"special", true}});
  hf_json["added_tokens"].push_back({{"id", 261}, {"content", "<dup>"}, {"special", true}});
  write_file(d.file("dup.json"), hf_json.dump());
  e = error_of([&] { Tokenizer::from_hf_json(d.file("dup.json")); });
  CHECK(e == d.file("dup.json") + ": added_tokens lists \"<dup>\" twice, with ids 260 and 261 (tokenizers keeps 260 and drops 261; "
             "give each string one id)");
  // the same entry twice names one id: nothing is dropped, and it loads
  hf_json["added_tokens"][2]["id"] = 260;
  write_file(d.file("dup_same.json"), hf_json.dump());
  const Tokenizer same = Tokenizer::from_hf_json(d.file("dup_same.json"));
  CHECK(same.vocab_size() == 261);
  CHECK(same.encode("a<dup>b") == std::vector<int32_t>{'a', 260, 'b'});
}

// tiktoken's rule finds a merged token's pairs from its bytes, work quadratic in its length: vocab.bpe's
// merges may make tokens of at most kMaxTokenBytes, as rank files may hold (test_tiktoken).
TEST_CASE("vocab.bpe: a merge that makes a token longer than kMaxTokenBytes is refused by file:line") {
  ScratchDir d;
  auto write_runs = [&](size_t longest) {  // tokens "aa", "aaa", ... up to `longest` a's, one merge each
    nlohmann::json v = tiny_vocab();
    std::string merges = kTinyMerges;
    for (size_t k = 2; k <= longest; ++k) {
      v[std::string(k, 'a')] = int(260 + k - 2);
      merges += std::string(k - 1, 'a') + " a\n";
    }
    write_file(d.file("runs.json"), v.dump());
    write_file(d.file("runs.bpe"), merges);
  };
  write_runs(bpe::kMaxTokenBytes);
  CHECK(Tokenizer::from_gpt2_files(d.file("runs.json"), d.file("runs.bpe")).encode(std::string(bpe::kMaxTokenBytes, 'a')) ==
        std::vector<int32_t>{int32_t(260 + bpe::kMaxTokenBytes - 2)});
  write_runs(bpe::kMaxTokenBytes + 1);
  const std::string e = error_of([&] { Tokenizer::from_gpt2_files(d.file("runs.json"), d.file("runs.bpe")); });
  INFO(e);
  // kTinyMerges holds lines 1..4, the merge making k a's is on line k + 3
  CHECK(e.find(d.file("runs.bpe") + ":" + std::to_string(bpe::kMaxTokenBytes + 4) + ": merge \"") == 0);
  CHECK(e.find("makes a token of " + std::to_string(bpe::kMaxTokenBytes + 1) + " bytes; at most " +
               std::to_string(bpe::kMaxTokenBytes) + " are read") != std::string::npos);
}

TEST_CASE("tokenizer.json fields that change ids are implemented or refused by name") {
  ScratchDir d;
  int n = 0;
  // refused(edit, field): tiny_hf() changed by `edit` is refused with one line naming `field`
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& field) {
    nlohmann::json j = tiny_hf();
    edit(j);
    const std::string path = d.file("edit" + std::to_string(n++) + ".json");
    write_file(path, j.dump());
    const std::string e = error_of([&] { Tokenizer::from_hf_json(path); });
    INFO(e);
    CHECK(e.find(path + ": " + field + " = ") == 0);
    CHECK(e.find("is not supported") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  };
  refused([](auto& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer");
  refused([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer");
  refused([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; }, "pre_tokenizer");
  refused([](auto& j) {  // a Split after ByteLevel would see ByteLevel's characters
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {j["pre_tokenizer"], {{"type", "Split"}, {"pattern", {{"String", "a"}}},
                                                                  {"behavior", "Isolated"}, {"invert", false}}}}};
  }, "pre_tokenizer");
  refused([](auto& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}};
  }, "pre_tokenizer");  // no ByteLevel step at all
  refused([](auto& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
                                             j["pre_tokenizer"]}}};
  }, "pre_tokenizer.pretokenizers[0].behavior");
  refused([](auto& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer");
  {  // a pattern that backtracks without bound: one line naming the pattern, not an internal check
    nlohmann::json j = tiny_hf();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}},
                                              {"behavior", "Isolated"}, {"invert", false}}, j["pre_tokenizer"]}}};
    const std::string path = d.file("runaway.json");
    write_file(path, j.dump());
    const Tokenizer tok = Tokenizer::from_hf_json(path);
    const std::string e = error_of([&] { tok.encode(std::string(40, 'a') + "!"); });
    INFO(e);
    CHECK(e.find(path + ": pre_tokenizer.pretokenizers[0].pattern: the pattern failed on the text at byte") == 0);
  }
  {  // the refused object is named by its type
    nlohmann::json j = tiny_hf();
    j["pre_tokenizer"] = {{"type", "Banana"}};
    const std::string path = d.file("typed.json");
    write_file(path, j.dump());
    CHECK(error_of([&] { Tokenizer::from_hf_json(path); }).find("of type \"Banana\" is not supported") != std::string::npos);
  }
  refused([](auto& j) {
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
  }, "normalizer.normalizers[1]");
  refused([](auto& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation");
  refused([](auto& j) { j["padding"] = {{"length", 8}}; }, "padding");
  refused([](auto& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, "post_processor.single");
  refused([](auto& j) {  // a template for pairs only: its single template has no sequence A
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", nlohmann::json::array()},
                           {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                           {"special_tokens", nlohmann::json::object()}};
  }, "post_processor.single");
  refused([](auto& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "post_processor");
  refused([](auto& j) { j["model"]["dropout"] = 0.1; }, "model.dropout");
  refused([](auto& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback");
  refused([](auto& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix");
  refused([](auto& j) { j["added_tokens"][0]["lstrip"] = "yes"; }, "added_tokens[0].lstrip");
  refused([](auto& j) { j["added_tokens"][0]["new_flag"] = 1; }, "added_tokens[0].new_flag");
  refused([](auto& j) { j["model"]["new_flag"] = 1; }, "model.new_flag");
  refused([](auto& j) { j["new_section"] = {{"type", "X"}}; }, "tokenizer.new_section");

  // GPT-2's own settings are accepted: null normalizer/truncation/padding, ByteLevel post-processor,
  // empty affixes, normalized added tokens (no normalizer: the same text either way).
  nlohmann::json j = tiny_hf();
  j["normalizer"] = nullptr, j["truncation"] = nullptr, j["padding"] = nullptr;
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"]["dropout"] = nullptr, j["model"]["continuing_subword_prefix"] = "", j["model"]["end_of_word_suffix"] = "";
  j["added_tokens"][0]["normalized"] = true, j["added_tokens"][0]["lstrip"] = false;
  write_file(d.file("gpt2like.json"), j.dump());
  CHECK(Tokenizer::from_hf_json(d.file("gpt2like.json")).encode("abc<|endoftext|>") == std::vector<int32_t>{'a', 256, 259});
}

// The pipeline pieces on the tiny vocabulary (bytes are their own ids; "b c" -> 256, "a b" -> 257,
// "ab c" -> 258, <|endoftext|> 259): a merge shows that two bytes ended in one pre-token, so the ids
// show where each step cut, as tokenizers' rules (hf_pipeline.h) say it cuts.
TEST_CASE("tokenizer.json pipeline: splits, prefix space, templates, added-token flags, normalizer, ignore_merges") {
  ScratchDir d;
  int n = 0;
  auto load = [&](const nlohmann::json& j) {
    const std::string path = d.file("p" + std::to_string(n++) + ".json");
    write_file(path, j.dump());
    return Tokenizer::from_hf_json(path);
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  auto split = [&](const char* pattern, const char* behavior, bool invert) {
    nlohmann::json j = tiny_hf();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", behavior},
                                              {"invert", invert}}, byte_level}}};
    return load(j);
  };
  using Ids = std::vector<int32_t>;
  CHECK(split("b", "Isolated", false).encode("ab") == Ids{'a', 'b'});
  CHECK(split("b", "MergedWithPrevious", false).encode("ab") == Ids{257});
  CHECK(split("a", "MergedWithPrevious", false).encode("ab") == Ids{'a', 'b'});  // nothing before the match
  CHECK(split("a", "MergedWithNext", false).encode("ab") == Ids{257});
  CHECK(split("b", "MergedWithNext", false).encode("ab") == Ids{'a', 'b'});  // nothing after the match
  CHECK(split("b", "Removed", false).encode("abab") == Ids{'a', 'a'});
  CHECK(split("b", "Removed", true).encode("abab") == Ids{'b', 'b'});  // inverted: the "a"s are removed
  CHECK(split("[bc]", "Contiguous", false).encode("abca") == Ids{'a', 256, 'a'});
  CHECK(split("[bc]", "Isolated", false).encode("abca") == Ids{'a', 'b', 'c', 'a'});

  nlohmann::json j = tiny_hf();
  j["pre_tokenizer"]["add_prefix_space"] = true;  // " abc": (a, bc) is not a listed pair
  CHECK(load(j).encode("abc") == Ids{' ', 'a', 256});
  CHECK(load(j).encode(" ab") == Ids{' ', 257});  // a space already there: none added

  // TemplateProcessing: ids around the text; in a Sequence, a later template wraps an earlier one.
  auto templ = [](const char* token, int32_t id) {
    nlohmann::json t = {{"type", "TemplateProcessing"}};
    t["single"] = nlohmann::json::array({nlohmann::json{{"SpecialToken", {{"id", token}, {"type_id", 0}}}},
                                         nlohmann::json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
    t["special_tokens"][token] = {{"id", token}, {"ids", nlohmann::json::array({id})}, {"tokens", nlohmann::json::array({token})}};
    return t;
  };
  j = tiny_hf();
  j["post_processor"] = {{"type", "Sequence"}, {"processors", nlohmann::json::array({{{"type", "ByteLevel"}}, templ("<|endoftext|>", 259), templ("c", 'c')})}};
  CHECK(load(j).encode("ab") == Ids{'c', 259, 257});
  CHECK(load(j).encode("") == Ids{'c', 259});
  j = tiny_hf();  // a template id outside the vocabulary is refused as the file is read
  j["post_processor"] = templ("<|endoftext|>", 999999);
  CHECK(error_of([&] { load(j); }).find("post_processor: TemplateProcessing's id 999999 is outside the vocabulary") !=
        std::string::npos);

  // Added-token flags (an added "<x>", id 260).
  auto with_x = [&](const char* flag) {
    nlohmann::json k = tiny_hf();
    k["added_tokens"].push_back({{"id", 260}, {"content", "<x>"}, {"special", false}, {"normalized", false}});
    if (flag) k["added_tokens"][1][flag] = true;
    return load(k);
  };
  CHECK(with_x("lstrip").encode("a  <x>b") == Ids{'a', 260, 'b'});
  CHECK(with_x("rstrip").encode("a<x>  b") == Ids{'a', 260, 'b'});
  CHECK(with_x("single_word").encode("a<x>b") == Ids{'a', '<', 'x', '>', 'b'});  // inside a word: not the token
  CHECK(with_x("single_word").encode("a <x> b") == Ids{'a', ' ', 260, ' ', 'b'});
  CHECK(with_x(nullptr).encode("a<x>b") == Ids{'a', 260, 'b'});
  CHECK(with_x(nullptr).eot_id() == 259);

  // NFC: a decomposed é is composed before the pre-tokenizer; a byte that is not UTF-8 stays as it is;
  // a "normalized" added token is matched in the normalized text.
  j = tiny_hf();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  j["added_tokens"].push_back({{"id", 260}, {"content", "e\u0301"}, {"special", false}, {"normalized", true}});
  const Tokenizer nfc = load(j);
  CHECK(nfc.encode("\xff" "e\u0301") == Ids{0xff, 260});
  CHECK(nfc.encode("\u00e9") == Ids{260});
  j["normalizer"] = nullptr;
  CHECK(load(j).encode("\u00e9") == Ids{0xc3, 0xa9});

  // ignore_merges: a piece that is a vocabulary token is that token, merges or not.
  j = tiny_hf();
  CHECK(load(j).encode("abc") == Ids{'a', 256});
  j["model"]["ignore_merges"] = true;
  CHECK(load(j).encode("abc") == Ids{258});
  CHECK(load(j).encode("abca") == Ids{'a', 256, 'a'});  // not a token: merged as usual

  // The end-of-text token by name: Llama 3's <|end_of_text|> when there is no <|endoftext|>.
  j = tiny_hf();
  j["model"]["vocab"].erase("<|endoftext|>");  // id 259 only as an added token
  j["added_tokens"][0]["content"] = "<|end_of_text|>";
  CHECK(load(j).eot_id() == 259);
  j["added_tokens"][0]["content"] = "<|eot_id|>";
  CHECK(load(j).eot_id() == -1);
}

TEST_CASE("numbers and truncation in tokenizer files are checked") {
  ScratchDir d;
  write_tiny_gpt2(d);
  const std::string enc = d.file("encoder.json");
  // an id beyond int32 would wrap to a small valid id with get<int32_t>()
  nlohmann::json v = tiny_vocab();
  v["zz"] = 4294967556ull;  // 2^32 + 260: wraps to 260, the next dense id
  write_file(d.file("wrap.json"), v.dump());
  std::string e = error_of([&] { Tokenizer::from_gpt2_files(d.file("wrap.json"), d.file("vocab.bpe")); });
  CHECK(e.find("\"zz\" has id 4294967556, outside the 32-bit range") != std::string::npos);
  nlohmann::json j = tiny_hf();
  j["added_tokens"][0]["id"] = -4294967037ll;  // wraps to 259
  write_file(d.file("wrap_hf.json"), j.dump());
  e = error_of([&] { Tokenizer::from_hf_json(d.file("wrap_hf.json")); });
  CHECK(e.find("outside the 32-bit range") != std::string::npos);
  // a number too large for any JSON integer type: the file is named
  write_file(d.file("overflow.json"), "{\"a\": 1e999}");
  e = error_of([&] { Tokenizer::from_gpt2_files(d.file("overflow.json"), d.file("vocab.bpe")); });
  CHECK(e.find(d.file("overflow.json") + ": not valid JSON") == 0);
  // an empty or cut vocab.bpe would train silently with fewer merges
  write_file(d.file("empty.bpe"), "");
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("empty.bpe")); });
  CHECK(e.find(d.file("empty.bpe") + ": 0 merges, but " + enc + " has 3 tokens that only merges make") == 0);
  write_file(d.file("cut.bpe"), "#version: 0.2\nb c\na b\n");
  e = error_of([&] { Tokenizer::from_gpt2_files(enc, d.file("cut.bpe")); });
  CHECK(e.find("2 merges, but") != std::string::npos);
  // --tokenizer-json with --encoder-json or --vocab-bpe also given: one rule for trainer and tool
  CHECK_THROWS_AS(check_tokenizer_choice("t.json", true, false), UsageError);
  CHECK_THROWS_AS(check_tokenizer_choice("t.json", false, true), UsageError);
  CHECK_NOTHROW(check_tokenizer_choice("t.json", false, false));
  CHECK_NOTHROW(check_tokenizer_choice("", true, true));
}

// parse_tokenizer_options: argv (without the program name) through add_tokenizer_options +
// read_tokenizer_options, as every program parses them.
static TokenizerFiles parse_tokenizer_options(std::vector<std::string> args, const TokenizerOptionNotes& notes = {}) {
  namespace po = boost::program_options;
  TokenizerFiles f;
  po::options_description desc;
  add_tokenizer_options(desc, f, notes);
  std::vector<const char*> argv = {"prog"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  po::variables_map vm;
  po::store(po::parse_command_line(int(argv.size()), argv.data(), desc), vm);
  po::notify(vm);
  read_tokenizer_options(vm, f);
  return f;
}

TEST_CASE("tokenizer options: defaults, given flags, the choice rule, one loader") {
  const std::string dd = xtrain::default_data_dir().path;
  TokenizerFiles f = parse_tokenizer_options({});
  CHECK(f.encoder_json == dd + "/gpt2/encoder.json");
  CHECK(f.vocab_bpe == dd + "/gpt2/vocab.bpe");
  CHECK(f.tokenizer_json.empty());
  CHECK(f.gpt2_defaults());
  f = parse_tokenizer_options({"--vocab-bpe", "v.bpe"});
  CHECK(f.vocab_bpe == "v.bpe");
  CHECK(f.vocab_bpe_given);
  CHECK(!f.encoder_json_given);
  CHECK(!f.gpt2_defaults());
  // a default value given explicitly still counts as given: it is on the command line
  f = parse_tokenizer_options({"--encoder-json", dd + "/gpt2/encoder.json"});
  CHECK(f.encoder_json_given);
  CHECK(parse_tokenizer_options({"--tokenizer-json", "t.json"}).tokenizer_json == "t.json");
  CHECK_THROWS_AS(parse_tokenizer_options({"--tokenizer-json", "t.json", "--encoder-json", "e.json"}), UsageError);
  CHECK_THROWS_AS(parse_tokenizer_options({"--tokenizer-json", "t.json", "--vocab-bpe", "v.bpe"}), UsageError);
  // xtrain_export's set: no --tokenizer-json, and its notes in the help
  TokenizerFiles g;
  boost::program_options::options_description desc;
  add_tokenizer_options(desc, g, {"written as vocab.json", "written as merges.txt", false});
  CHECK(desc.find_nothrow("tokenizer-json", false) == nullptr);
  CHECK(desc.find("encoder-json", false).description() == "OpenAI GPT-2 encoder.json (token -> id); written as vocab.json");
  CHECK(desc.find("vocab-bpe", false).description() == "OpenAI GPT-2 vocab.bpe (merges in rank order); written as merges.txt");
  CHECK_THROWS_AS(parse_tokenizer_options({"--tokenizer-json", "t.json"}, {"", "", false}),
                  boost::program_options::unknown_option);

  // load_tokenizer(TokenizerFiles) reads the files the options name
  ScratchDir d;
  write_tiny_gpt2(d);
  write_file(d.file("tiny.json"), tiny_hf().dump());
  const uint64_t tiny = Tokenizer::from_gpt2_files(d.file("encoder.json"), d.file("vocab.bpe")).fingerprint();
  CHECK(load_tokenizer(parse_tokenizer_options({"--encoder-json", d.file("encoder.json"), "--vocab-bpe", d.file("vocab.bpe")}))
            .fingerprint() == tiny);
  CHECK(load_tokenizer(parse_tokenizer_options({"--tokenizer-json", d.file("tiny.json")})).fingerprint() == tiny);
}

TEST_CASE("fnv1a64 matches the published FNV-1a 64 test vectors") {
  CHECK(fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
  CHECK(fnv1a64("bar", 3, fnv1a64("foo", 3)) == fnv1a64("foobar", 6));  // chaining
}

TEST_CASE("encode reports bytes done from inside its loop; the ids do not change") {
  // ~2.6 MB with special tokens inside, so progress crosses both kinds of segment.
  std::string text;
  while (text.size() < 2'600'000) text += "First Citizen:\nBefore we proceed any further, hear me speak.<|endoftext|>\n";
  const std::vector<int32_t> want = gpt2().encode(text);
  std::vector<size_t> done;
  CHECK(gpt2().encode(text, [&](size_t d) { done.push_back(d); }) == want);
  REQUIRE(done.size() >= 3);  // about one report per Tokenizer::kEncodeProgressBytes, then the end
  CHECK(done.size() <= text.size() / Tokenizer::kEncodeProgressBytes + 1);
  CHECK(done.back() == text.size());
  CHECK(done.front() >= Tokenizer::kEncodeProgressBytes);
  for (size_t i = 1; i + 1 < done.size(); ++i) CHECK(done[i] >= done[i - 1] + Tokenizer::kEncodeProgressBytes);

  // encode_with_progress on a non-terminal: plain "tokenize <name>" lines, then the total; other ranks
  // print nothing.
  ScratchDir d;
  double t = 0;
  ProgressOptions opt;
  opt.interval_s = 0;  // every report prints
  opt.terminal = 0;
  opt.clock = [&t] { return t += 1.0; };
  for (int rank : {0, 1}) {
    const std::string out_path = d.file("progress" + std::to_string(rank) + ".txt");
    opt.out = std::fopen(out_path.c_str(), "w");
    REQUIRE(opt.out);
    CHECK(encode_with_progress(gpt2(), text, "big.txt", rank, opt) == want);
    std::fclose(opt.out);
    const std::string printed = read_file(out_path);
    if (rank != 0) {
      CHECK(printed.empty());
      continue;
    }
    INFO(printed);
    CHECK(printed.find('\r') == std::string::npos);
    CHECK(printed.rfind("tokenize big.txt | 1.0 / 2.6 MB (40%) | ", 0) == 0);  // the first report, at 1 MiB
    CHECK(printed.find("\ntokenize big.txt | 2.6 MB in ") != std::string::npos);
    CHECK(std::count(printed.begin(), printed.end(), '\n') == static_cast<long>(done.size()) + 1);
  }
}

// Hostile pipelines: encode nests one call per pre-tokenizer step, so a Sequence of 8,000 Splits (a
// 700 KB file) overflowed the stack; the file is refused as it is read, with the bound in the line.
TEST_CASE("tokenizer.json: more than kMaxPipelineSteps steps of a kind are refused as the file is read") {
  ScratchDir d;
  const nlohmann::json split = {{"type", "Split"}, {"pattern", {{"String", "zq"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const nlohmann::json byte_level = tiny_hf()["pre_tokenizer"];
  int n = 0;
  auto load = [&](const nlohmann::json& j) {
    const std::string path = d.file("steps" + std::to_string(n++) + ".json");
    write_file(path, j.dump());
    return Tokenizer::from_hf_json(path);
  };
  auto splits = [&](size_t count) {
    nlohmann::json j = tiny_hf();
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
    for (size_t i = 0; i < count; ++i) j["pre_tokenizer"]["pretokenizers"].push_back(split);
    j["pre_tokenizer"]["pretokenizers"].push_back(byte_level);
    return j;
  };
  // the bound itself: 63 Splits and ByteLevel load and encode
  CHECK(load(splits(bpe::kMaxPipelineSteps - 1)).encode("abzqab") == std::vector<int32_t>{257, 'z', 'q', 257});
  const std::string bound = "more than " + std::to_string(bpe::kMaxPipelineSteps) + " steps of one kind";
  for (size_t count : {size_t(bpe::kMaxPipelineSteps), size_t(8000)}) {
    const std::string e = error_of([&] { load(splits(count)); });
    INFO(e);
    CHECK(e.find(": pre_tokenizer.pretokenizers = ") != std::string::npos);
    CHECK(e.find(bound) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
  // nested Sequences are counted flat: 8 of 10 Splits each
  nlohmann::json j = tiny_hf();
  nlohmann::json inner = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
  for (int i = 0; i < 10; ++i) inner["pretokenizers"].push_back(split);
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
  for (int i = 0; i < 8; ++i) j["pre_tokenizer"]["pretokenizers"].push_back(inner);
  j["pre_tokenizer"]["pretokenizers"].push_back(byte_level);
  std::string e = error_of([&] { load(j); });
  CHECK(e.find(": pre_tokenizer.pretokenizers[6].pretokenizers[4] = ") != std::string::npos);
  CHECK(e.find(bound) != std::string::npos);
  // normalizers and post-processors alike (each normalizer is one more pass over the text)
  j = tiny_hf();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}};
  for (int i = 0; i < 100; ++i) j["normalizer"]["normalizers"].push_back({{"type", "NFC"}});
  e = error_of([&] { load(j); });
  CHECK(e.find(": normalizer.normalizers = ") != std::string::npos);
  CHECK(e.find(bound) != std::string::npos);
  j = tiny_hf();
  nlohmann::json procs = {{"type", "Sequence"}, {"processors", nlohmann::json::array()}};
  for (int i = 0; i < 40; ++i) procs["processors"].push_back({{"type", "ByteLevel"}});
  j["post_processor"] = {{"type", "Sequence"}, {"processors", {procs, procs}}};
  e = error_of([&] { load(j); });
  CHECK(e.find(": post_processor.processors[1].processors[24] = ") != std::string::npos);
  CHECK(e.find(bound) != std::string::npos);
}

// added_tokens as tokenizers' deserializer adds them (serialization.rs, AddedVocabulary::add_tokens):
// the id a token gets, not the file's "id", is what its encodings hold.
TEST_CASE("tokenizer.json added_tokens: the ids tokenizers gives them") {
  ScratchDir d;
  int n = 0;
  auto load = [&](const nlohmann::json& j) {
    const std::string path = d.file("added" + std::to_string(n++) + ".json");
    write_file(path, j.dump());
    return Tokenizer::from_hf_json(path);
  };
  using Ids = std::vector<int32_t>;
  // content already in the vocabulary (as "ab", id 257) under another id: the vocabulary's id, and the
  // file's id 260 names no token (tokenizers' vocabulary has 260 ids)
  nlohmann::json j = tiny_hf();
  j["added_tokens"].push_back({{"id", 260}, {"content", "ab"}, {"special", true}});
  Tokenizer t = load(j);
  CHECK(t.encode("cabc") == Ids{'c', 257, 'c'});
  CHECK(t.vocab_size() == 260);
  // an empty content is skipped: no id for it
  j = tiny_hf();
  j["added_tokens"].push_back({{"id", 260}, {"content", ""}, {"special", true}});
  t = load(j);
  CHECK(t.vocab_size() == 260);
  CHECK(t.encode("ab") == Ids{257});
  // ids in the order tokenizers adds them: the next after the vocabulary and the tokens before
  j = tiny_hf();
  j["added_tokens"].push_back({{"id", 261}, {"content", "<y>"}, {"special", true}});
  j["added_tokens"].push_back({{"id", 260}, {"content", "<x>"}, {"special", true}});
  t = load(j);
  CHECK(t.encode("<x><y>") == Ids{261, 260});
  // added_tokens that is not an array: tokenizers refuses the file; so does xtrain, in one line
  for (const nlohmann::json& bad : {nlohmann::json{{"<|endoftext|>", 259}}, nlohmann::json(nullptr), nlohmann::json("x")}) {
    j = tiny_hf();
    j["added_tokens"] = bad;
    const std::string e = error_of([&] { load(j); });
    INFO(e);
    CHECK(e.find(": added_tokens = ") != std::string::npos);
    CHECK(e.find("expected an array; tokenizers refuses the file") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
}

int main(int argc, char** argv) {
  // CMake sets XTRAIN_DATA_DIR to the source tree's data/, which scripts/setup.sh fills
  if (!std::filesystem::exists(gpt2_bpe_file("encoder.json")) || !std::filesystem::exists(gpt2_bpe_file("vocab.bpe"))) {
    std::fprintf(stderr, "test_tokenizer_files: no GPT-2 BPE files at '%s' (scripts/setup.sh fetches them); skipped\n",
                 gpt2_bpe_file("").c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
