// SentencePiece models through libsentencepiece (--tokenizer-model): xtrain's ids equal the reference
// vectors of tests/vectors/make_spm_vectors.py (the library's own Encode, recorded), the newline
// pieces of a long text give the ids of one whole-text Encode, the fingerprint covers the file's
// bytes, the options' rules, and bad model files refused with one message naming the file.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/data/tokenizer.h>
#include "data/tokenizer_options.h"
#include "test_tokenizer_util.h"

namespace xt = xtrain;

namespace {

std::string vec(const std::string& name) { return std::string(XTRAIN_TEST_VECTORS_DIR) + "/" + name; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::string& model) {
  try {
    xt::Tokenizer::from_sentencepiece(model);
  } catch (const xt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SentencePiece: ids equal the library's recorded ids for every case, decode as the library") {
  for (const char* name : {"bpe", "unigram"}) {
    CAPTURE(name);
    const xt::Tokenizer tok = xt::Tokenizer::from_sentencepiece(vec(std::string("spm_") + name + ".model"));
    sentencepiece::SentencePieceProcessor sp;
    REQUIRE(sp.Load(vec(std::string("spm_") + name + ".model")).ok());
    CHECK(tok.vocab_size() == 512);
    CHECK(tok.eot_id() == sp.eos_id());
    CHECK(tok.eot_id() >= 0);
    const auto j = nlohmann::json::parse(xt::read_file(vec(std::string("spm_") + name + ".json")));
    REQUIRE(j["cases"].size() > 50);
    for (const auto& c : j["cases"]) {
      const std::string text = c["text"].get<std::string>();
      CAPTURE(text);
      const std::vector<int32_t> got = tok.encode(text);
      CHECK(got == c["ids"].get<std::vector<int32_t>>());
      CHECK(tok.decode(got) == sp.DecodeIds(std::vector<int>(got.begin(), got.end())));
    }
  }
}

TEST_CASE("SentencePiece: a long text encoded in newline pieces gives the ids of one whole-text Encode") {
  const std::string path = xt::test::shared_data() + "/tinyshakespeare.txt";
  if (xt::test::shared_data().empty() || !std::filesystem::exists(path)) {
    MESSAGE("skipped: no ../shared/data/tinyshakespeare.txt");
    return;
  }
  const std::string text = xt::read_file(path);
  REQUIRE(text.size() > 10 * (size_t{64} << 10));  // many newline pieces
  for (const char* name : {"bpe", "unigram"}) {
    CAPTURE(name);
    const xt::Tokenizer tok = xt::Tokenizer::from_sentencepiece(vec(std::string("spm_") + name + ".model"));
    sentencepiece::SentencePieceProcessor sp;
    REQUIRE(sp.Load(vec(std::string("spm_") + name + ".model")).ok());
    std::vector<int> whole;
    REQUIRE(sp.Encode(text, &whole).ok());
    std::vector<size_t> reports;
    const std::vector<int32_t> got = tok.encode(text, [&](size_t n) { reports.push_back(n); });
    CHECK(got == std::vector<int32_t>(whole.begin(), whole.end()));
    REQUIRE(!reports.empty());
    CHECK(reports.back() == text.size());
    CHECK(std::is_sorted(reports.begin(), reports.end()));
  }
}

TEST_CASE("SentencePiece: the fingerprint covers the file's bytes") {
  xt::test::ScratchDir dir;
  const std::string bytes = xt::read_file(vec("spm_unigram.model"));
  const std::string copy = dir.file("copy.model"), changed = dir.file("changed.model");
  write_bytes(copy, bytes);
  // the model_prefix string in the trainer spec: a byte that changes no id
  std::string other = bytes;
  const size_t at = other.find("spm_unigram");
  REQUIRE(at != std::string::npos);
  other[at] = 'S';
  write_bytes(changed, other);
  const uint64_t f = xt::Tokenizer::from_sentencepiece(vec("spm_unigram.model")).fingerprint();
  CHECK(xt::Tokenizer::from_sentencepiece(copy).fingerprint() == f);
  CHECK(xt::Tokenizer::from_sentencepiece(changed).fingerprint() != f);
  CHECK(xt::Tokenizer::from_sentencepiece(vec("spm_bpe.model")).fingerprint() != f);
}

TEST_CASE("SentencePiece: bad model files are refused with one message naming the file") {
  xt::test::ScratchDir dir;
  const std::string bytes = xt::read_file(vec("spm_bpe.model"));
  const std::string not_model = dir.file("vocab.txt"), empty = dir.file("empty.model");
  write_bytes(not_model, "hello world\nthis is text, not a model\n");
  write_bytes(empty, "");
  CHECK(error_of(not_model).find(not_model + ": not a SentencePiece model") != std::string::npos);
  CHECK(error_of(empty).find(empty + ": not a SentencePiece model") != std::string::npos);
  CHECK(error_of(dir.file("missing.model")).find("missing.model") != std::string::npos);
  CHECK(error_of(dir.path.string()).find("not a regular file") != std::string::npos);
  // truncated anywhere: inside a field (not a protobuf message) ...
  for (size_t cut : {size_t(1), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    const std::string t = dir.file("cut" + std::to_string(cut) + ".model");
    write_bytes(t, bytes.substr(0, cut));
    CAPTURE(cut);
    CHECK(error_of(t).find(t + ": ") != std::string::npos);
  }
  // ... or after the last piece (field 1, key 0x0a, a varint length), before the trainer spec: the
  // library loads that, every piece being there, so xtrain's own check must refuse it
  size_t end = 0;
  while (end < bytes.size() && uint8_t(bytes[end]) == 0x0a) {
    size_t len = 0, i = end + 1;
    for (int shift = 0; uint8_t(bytes[i]) & 0x80; shift += 7) len |= size_t(uint8_t(bytes[i++]) & 0x7f) << shift;
    len |= size_t(uint8_t(bytes[i])) << (7 * (i - end - 1));
    end = i + 1 + len;
  }
  REQUIRE(end > 1000);
  REQUIRE(end < bytes.size());
  const std::string boundary = dir.file("boundary.model");
  write_bytes(boundary, bytes.substr(0, end));
  sentencepiece::SentencePieceProcessor sp;
  CHECK(sp.LoadFromSerializedProto(bytes.substr(0, end)).ok());
  CHECK(error_of(boundary).find(boundary + ": incomplete SentencePiece model (no trainer spec") != std::string::npos);
}

TEST_CASE("--tokenizer-model: declared with the other tokenizer options, alone") {
  const auto parse = xt::test::parse_tokenizer_options;
  xt::TokenizerFiles f;
  parse({"--tokenizer-model", "/x/t.model"}, f);
  CHECK(f.tokenizer_model == "/x/t.model");
  CHECK(xt::tokenizer_inputs(f) == std::vector<std::pair<std::string, std::string>>{{"--tokenizer-model", "/x/t.model"}});
  for (std::vector<const char*> other : {std::vector<const char*>{"--tokenizer", "cl100k_base"},
                                         {"--tokenizer-json", "t.json"}, {"--encoder-json", "e.json"},
                                         {"--vocab-bpe", "v.bpe"}, {"--tokenizer-ranks", "r.tiktoken"}}) {
    xt::TokenizerFiles g;
    other.insert(other.begin(), {"--tokenizer-model", "t.model"});
    CAPTURE(other[2]);
    CHECK_THROWS_AS(parse(other, g), xt::UsageError);
  }
  xt::TokenizerFiles e;
  CHECK_THROWS_AS(parse({"--tokenizer-model", ""}, e), xt::UsageError);
  xt::TokenizerFiles m;
  m.tokenizer_model = vec("spm_bpe.model");
  CHECK(xt::load_tokenizer(m).fingerprint() == xt::Tokenizer::from_sentencepiece(vec("spm_bpe.model")).fingerprint());
}

TEST_CASE("SentencePiece as tokenizer.json: a Unigram model with the identity normalizer is written piece by piece, others refused") {
  const xt::Tokenizer t = xt::Tokenizer::from_sentencepiece(vec("spm_unigram.model"));
  sentencepiece::SentencePieceProcessor sp;
  REQUIRE(sp.Load(vec("spm_unigram.model")).ok());
  const nlohmann::json j = nlohmann::json::parse(t.hf_tokenizer_json());
  const nlohmann::json& m = j["model"];
  CHECK(m["type"] == "Unigram");
  CHECK(m["byte_fallback"] == true);  // the model's (make_spm_vectors.py: --byte_fallback=true)
  CHECK(m["unk_id"] == sp.unk_id());
  REQUIRE(m["vocab"].size() == size_t(sp.GetPieceSize()));
  for (int id = 0; id < sp.GetPieceSize(); ++id) {  // every piece at its id, with the library's score
    CHECK(m["vocab"][id][0] == sp.IdToPiece(id));
    CHECK(m["vocab"][id][1].get<double>() == double(sp.GetScore(id)));
  }
  // the dummy prefix and the escaped spaces of the library's identity normalizer; no pre-tokenizer
  CHECK(j["normalizer"]["normalizers"][0] == nlohmann::json{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
  CHECK(j["normalizer"]["normalizers"][1]["content"] == "\xe2\x96\x81");
  CHECK(j["pre_tokenizer"].is_null());
  CHECK(j["post_processor"].is_null());  // no BOS added: encode adds none
  std::set<int> special;
  for (const auto& a : j["added_tokens"]) special.insert(a["id"].get<int>());
  CHECK(special == std::set<int>{sp.unk_id(), sp.bos_id(), sp.eos_id()});  // the control and unknown pieces
  const xt::Tokenizer::HfTokenRoles r = t.hf_token_roles();
  CHECK(r.bos == "<s>");
  CHECK(r.eos == "</s>");
  CHECK(r.eos_id == sp.eos_id());
  CHECK(!r.add_bos);
  // spm_bpe: a BPE model with spm_train's nmt_nfkc normalizer: refused naming what
  std::string e;
  try {
    xt::Tokenizer::from_sentencepiece(vec("spm_bpe.model")).hf_tokenizer_json();
  } catch (const xt::Error& err) {
    e = err.what();
  }
  CHECK(e.find("spm_bpe.model: a SentencePiece BPE model: only Unigram models are converted to tokenizer.json") != std::string::npos);
}
