// GPT-2 tokenizer tests against the real vocabulary in $XTRAIN_SHARED_DATA/gpt2: tiktoken reference
// encodings, hand-derived pre-token splits checked with an independent reference BPE (encoder.py's
// algorithm, written here again), both file formats, round trips and the corpus token counts.
// Exits 77 (skipped) when XTRAIN_SHARED_DATA or its gpt2/tokenizer_examples.json is missing (the synthetic
// vocabularies, loader errors and caches, which need no shared data, are test_tokenizer_files).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include <xtrain/core/error.h>
#include "core/io.h"
#include "data/bpe.h"
#include "data/token_cache.h"
#include "test_tokenizer_util.h"

using namespace xtrain;
using namespace xtrain::test;

namespace {

// Reference BPE: openai/gpt-2 src/encoder.py bpe() on one pre-token, independent of src/data/bpe.cpp:
// symbols are strings in the byte alphabet, ranks come from vocab.bpe, and each round merges every
// occurrence of the best-ranked listed pair, left to right.
class RefBpe {
 public:
  RefBpe() {
    // bytes_to_unicode(), derived again: printable Latin-1 bytes keep their code point, the other
    // 68 bytes take U+0100.. in byte order.
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const int cp = printable ? b : next++;
      byte_text_[b] = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
    const std::string bpe = read_file(gpt2_file("vocab.bpe"));
    size_t pos = bpe.find('\n') + 1, rank = 0;  // skip "#version: 0.2"
    while (pos < bpe.size()) {
      const size_t eol = bpe.find('\n', pos), sp = bpe.find(' ', pos);
      ranks_[{bpe.substr(pos, sp - pos), bpe.substr(sp + 1, eol - sp - 1)}] = int(rank++);
      pos = eol + 1;
    }
  }
  std::vector<int32_t> encode_piece(const std::string& bytes) const {
    std::vector<std::string> word;
    for (unsigned char c : bytes) word.push_back(byte_text_[c]);
    while (word.size() > 1) {
      int best = -1;
      std::pair<std::string, std::string> bigram;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = ranks_.find({word[i], word[i + 1]});
        if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second, bigram = it->first;
      }
      if (best < 0) break;
      std::vector<std::string> merged;
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
          merged.push_back(word[i] + word[i + 1]);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      word = std::move(merged);
    }
    std::vector<int32_t> ids;
    for (const auto& s : word) ids.push_back(encoder_id(s));
    return ids;
  }
  const std::string& byte_text(unsigned char b) const { return byte_text_[b]; }

 private:
  std::string byte_text_[256];
  std::map<std::pair<std::string, std::string>, int> ranks_;
};

const RefBpe& ref() {
  static const RefBpe r;
  return r;
}

// encode(text) must equal the reference BPE of each hand-split pre-token, in order.
void check_pieces(const std::string& text, const std::vector<std::string>& pieces) {
  std::string joined;
  std::vector<int32_t> want;
  for (const auto& p : pieces) {
    joined += p;
    const auto ids = ref().encode_piece(p);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  REQUIRE(joined == text);  // the hand split covers the text
  CHECK(gpt2().encode(text) == want);
  CHECK(gpt2().decode(want) == text);
}

}  // namespace

TEST_CASE("tiktoken reference encodings (tokenizer_examples.json)") {
  const auto examples = nlohmann::json::parse(read_file(gpt2_file("tokenizer_examples.json")));
  REQUIRE(examples.size() == 5);
  for (const auto& ex : examples) {
    const std::string text = ex["text"];
    const auto want = ex["ids"].get<std::vector<int32_t>>();
    CAPTURE(text);
    CHECK(gpt2().encode(text) == want);
    CHECK(hf().encode(text) == want);
    CHECK(gpt2().decode(want) == text);
  }
}

TEST_CASE("vocabulary shape") {
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().eot_id() == 50256);
  CHECK(gpt2().decode({50256}) == "<|endoftext|>");
  CHECK(gpt2().decode({0}) == "!");  // id 0 is the first byte of the alphabet, '!'
  CHECK(encoder_id("\xC4\xA0") == 220);     // "Ġ" is the space byte
  CHECK(encoder_id("\xC4\x8A") == 198);     // "Ċ" is '\n'
  CHECK(encoder_id("\xC4\x8A\xC4\x8A") == 628);
}

TEST_CASE("hand-derived pre-token splits match the reference BPE") {
  // " hello" is one pre-token and one token.
  CHECK(gpt2().encode(" hello") == std::vector<int32_t>{encoder_id("\xC4\xA0hello")});
  check_pieces(" hello", {" hello"});
  // \s+(?!\S) stops one space short of the next word, which takes that space.
  check_pieces("a   b", {"a", "  ", " b"});
  check_pieces(" \t x", {" \t", " x"});
  check_pieces("a   ", {"a", "   "});  // trailing whitespace: (?!\S) holds at the end
  // "\n\n" alone is one token (628), but before a word the first \n is split off by \s+(?!\S) and
  // the second is matched alone by \s+ (the optional space in " ?\p{L}+" is a literal space).
  CHECK(gpt2().encode("\n\n") == std::vector<int32_t>{628});
  check_pieces("a\n\nb", {"a", "\n", "\n", "b"});
  CHECK(gpt2().encode("a\n\nb") == std::vector<int32_t>{encoder_id("a"), 198, 198, encoder_id("b")});
  check_pieces("end.\n\n", {"end", ".", "\n\n"});
  check_pieces("a\xC2\xA0" "b", {"a", "\xC2\xA0", "b"});  // U+00A0 is \s
  // Contractions are their own pre-tokens.
  check_pieces("don't", {"don", "'t"});
  check_pieces("I'll", {"I", "'ll"});
  check_pieces("we're they've I'm he'd it's", {"we", "'re", " they", "'ve", " I", "'m", " he", "'d", " it", "'s"});
  CHECK(gpt2().encode("don't") == std::vector<int32_t>{encoder_id("don"), encoder_id("'t")});
  // Digits: one pre-token however long (no 3-digit limit as in cl100k).
  check_pieces("12345", {"12345"});
  CHECK(gpt2().encode("12345") == std::vector<int32_t>{encoder_id("123"), encoder_id("45")});
  check_pieces("in 2024!", {"in", " 2024", "!"});
  check_pieces("x=1,y=22", {"x", "=", "1", ",", "y", "=", "22"});
  // Letters outside ASCII are \p{L}; emoji are neither letters nor numbers.
  check_pieces("caf\xC3\xA9", {"caf\xC3\xA9"});
  check_pieces("na\xC3\xAFve caf\xC3\xA9", {"na\xC3\xAFve", " caf\xC3\xA9"});
  check_pieces("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"});  // 日本語
  check_pieces("\xF0\x9F\x98\x80 ok", {"\xF0\x9F\x98\x80", " ok"});                            // 😀
  check_pieces("hi \xF0\x9F\x98\x80!", {"hi", " \xF0\x9F\x98\x80!"});
  // Byte fallback: 😀 is no token of its own, so its 4 bytes take several ids.
  const auto emoji = gpt2().encode("\xF0\x9F\x98\x80");
  CHECK(emoji.size() > 1);
  CHECK(gpt2().decode(emoji) == "\xF0\x9F\x98\x80");
}

TEST_CASE("special tokens, empty text, decode range") {
  CHECK(gpt2().encode("").empty());
  CHECK(gpt2().decode({}).empty());
  auto concat = [](std::vector<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  CHECK(gpt2().encode("<|endoftext|>") == std::vector<int32_t>{50256});
  CHECK(gpt2().encode("Hello<|endoftext|>world") ==
        concat({gpt2().encode("Hello"), {50256}, gpt2().encode("world")}));
  // The regex runs on each side separately: "a " ends in a lone space (220) before the special.
  CHECK(gpt2().encode("a <|endoftext|> b") == std::vector<int32_t>{encoder_id("a"), 220, 50256, encoder_id("\xC4\xA0" "b")});
  CHECK(gpt2().encode("<|endoftext|><|endoftext|>") == std::vector<int32_t>{50256, 50256});
  CHECK(gpt2().encode("<|endoftext|") == concat({gpt2().encode("<|"), gpt2().encode("endoftext|")}));
  CHECK_THROWS_AS(gpt2().decode({50257}), Error);
  CHECK_THROWS_AS(gpt2().decode({-1}), Error);
}

TEST_CASE("invalid UTF-8 bytes round-trip through byte tokens") {
  CHECK(gpt2().encode("\xFF") == std::vector<int32_t>{encoder_id(ref().byte_text(0xFF))});
  // An invalid byte is a pre-token of its own; the valid text around it is split as usual.
  check_pieces("a\x80" "b", {"a", "\x80", "b"});
  for (const std::string s : {"\xE2\x82", "caf\xC3", "\xC3\x28", "\xF0\x9F\x98", "x \xFF\xFE y", "\xED\xA0\x80"}) {
    CAPTURE(s);
    CHECK(gpt2().decode(gpt2().encode(s)) == s);
  }
  std::mt19937 rng(42);
  for (int it = 0; it < 2000; ++it) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = char(rng() & 0xFF);
    REQUIRE(gpt2().decode(gpt2().encode(s)) == s);
  }
}

TEST_CASE("corpora: round trip, known token counts, both loaders agree") {
  struct Corpus {
    const char* file;
    size_t tokens;  // tiktoken "gpt2" encoding of the file
  };
  for (const Corpus& c : {Corpus{"tinyshakespeare.txt", 338025}, Corpus{"tinystories-valid.txt", 195558},
                          Corpus{"tinystories-valid-head-eot.txt", 38685},
                          Corpus{"tinystories-train-1000.txt", 235420}}) {
    const std::string file = c.file;
    CAPTURE(file);
    const std::string text = read_file(shared_data() + "/" + c.file);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = gpt2().encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE(std::string(c.file) << ": " << text.size() << " bytes -> " << ids.size() << " tokens in " << s << " s");
    CHECK(ids.size() == c.tokens);
    CHECK(gpt2().decode(ids) == text);
    CHECK(hf().encode(text) == ids);
    if (std::string(c.file) == "tinystories-valid-head-eot.txt")
      CHECK(std::count(ids.begin(), ids.end(), 50256) == 201);  // 201 stories, each ending in <|endoftext|>
  }
  CHECK(gpt2().fingerprint() == hf().fingerprint());
  CHECK(hf().vocab_size() == 50257);
  CHECK(hf().eot_id() == 50256);
}

TEST_CASE("the byte-pair merge agrees with the reference BPE on every distinct word of a corpus") {
  const std::string text = read_file(shared_data() + "/tinystories-valid.txt");
  bpe::PreTokenizer pre;
  std::map<std::string, int> words;
  pre.split(text, [&](std::string_view p) { ++words[std::string(p)]; });
  REQUIRE(words.size() > 1000);
  for (const auto& word_count : words) {
    const std::string& w = word_count.first;  // not a structured binding: clang 14 cannot capture one
    CAPTURE(w);
    REQUIRE(gpt2().encode(w) == ref().encode_piece(w));
  }
}

TEST_CASE("pre-tokenizer: JIT and the windowed interpreter split alike") {
  bpe::PreTokenizer jit(true), interp(false, 17);  // a tiny window exercises the window edges
  MESSAGE("PCRE2 JIT in use: " << std::string(jit.jit() ? "yes" : "no (interpreter only)"));
  CHECK(!interp.jit());
  auto split = [](const bpe::PreTokenizer& p, std::string_view t) {
    std::vector<std::string> v;
    p.split(t, [&](std::string_view s) { v.emplace_back(s); });
    return v;
  };
  for (const char* f : {"tinyshakespeare.txt", "tinystories-valid.txt"}) {
    const std::string text = read_file(shared_data() + "/" + f).substr(0, 200000);
    CHECK(split(jit, text) == split(interp, text));
  }
  const std::vector<std::string> atoms = {"a", " ", "  ", "\n", "\t", "'s", "'ll", "7", "\xC3\xA9", "\xE6\x97\xA5",
                                          "\xF0\x9F\x98\x80", "\xC2\xA0", "\xE2\x80\xA8", "!", "\x80", "\xFF", "\xE2\x82"};
  std::mt19937 rng(7);
  for (int it = 0; it < 20000; ++it) {
    std::string s;
    for (int k = int(rng() % 24); k > 0; --k) s += atoms[rng() % atoms.size()];
    const auto a = split(jit, s);
    std::string joined;
    for (const auto& p : a) joined += p;
    REQUIRE(joined == s);
    REQUIRE(a == split(interp, s));
  }
}

TEST_CASE("long pre-tokens (not cached) encode and round-trip") {
  for (const std::string s : {std::string(100000, 'a'), std::string(100000, ' ') + "x", std::string(5000, '7')}) {
    const auto ids = gpt2().encode(s);
    CHECK(gpt2().decode(ids) == s);
    CHECK(ids.size() < s.size());  // merges happened
  }
}

int main(int argc, char** argv) {
  // CMake always sets XTRAIN_SHARED_DATA to ../shared/data; a clone without it skips this test.
  if (shared_data().empty() || !std::filesystem::exists(gpt2_file("tokenizer_examples.json"))) {
    std::fprintf(stderr, "test_tokenizer: no shared data at '%s'; skipped\n", shared_data().c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
