// Writers of Hugging Face tokenizer.json files (hf_json_write.h): byte-level BPE (GPT-2's files, the
// tiktoken encodings) and SentencePiece Unigram models. Field names, order and values are those
// `tokenizers` 0.23 saves; the conversions are transformers' (convert_slow_tokenizer.py: GPT2Converter,
// TikTokenConverter, SpmConverter with the normalizer of LlamaConverter).
#include "hf_json_write.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "bpe.h"
#include <xtrain/core/error.h>
#include "data/protobuf_wire.h"
#include "spm_codec.h"

namespace xtrain {

namespace {

using ojson = nlohmann::ordered_json;

// byte_level_text: token bytes in GPT-2's byte alphabet (bytes_to_unicode), as UTF-8.
std::string byte_level_text(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t cp = bpe::byte_to_unicode()[b];  // <= U+0143: one or two UTF-8 bytes
    if (cp < 0x80) out.push_back(char(cp));
    else out += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return out;
}

ojson added_token(int32_t id, const std::string& content, bool special) {
  return ojson{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
               {"rstrip", false},  {"normalized", false}, {"special", special}};
}

ojson byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return ojson{{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", trim_offsets},
               {"use_regex", use_regex}};
}

// tokenizer_json: the top level in tokenizers' order.
std::string tokenizer_json(ojson added, ojson normalizer, ojson pre, ojson post, ojson decoder, ojson model) {
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = std::move(normalizer);
  j["pre_tokenizer"] = std::move(pre);
  j["post_processor"] = std::move(post);
  j["decoder"] = std::move(decoder);
  j["model"] = std::move(model);
  return j.dump() + "\n";
}

}  // namespace

namespace bpe {

std::vector<std::pair<int32_t, int32_t>> merges_from_ranks(const std::vector<std::string>& token_bytes) {
  std::unordered_map<std::string, int32_t> rank_of;
  rank_of.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (!token_bytes[id].empty()) rank_of.emplace(token_bytes[id], int32_t(id));
  std::vector<std::pair<int32_t, int32_t>> merges, local;
  for (const std::string& t : token_bytes) {
    if (t.size() < 2) continue;
    local.clear();
    for (size_t k = 1; k < t.size(); ++k) {
      auto l = rank_of.find(t.substr(0, k)), r = rank_of.find(t.substr(k));
      if (l != rank_of.end() && r != rank_of.end()) local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    merges.insert(merges.end(), local.begin(), local.end());
  }
  return merges;
}

std::string write_byte_level_json(const ByteLevelJson& s) {
  ojson added = ojson::array(), vocab = ojson::object(), merges = ojson::array();
  std::vector<std::string> text(s.token_bytes.size());
  for (size_t id = 0; id < s.token_bytes.size(); ++id) {
    if (s.token_bytes[id].empty()) continue;  // unassigned
    if (s.special[id]) {
      text[id] = s.token_bytes[id];
      added.push_back(added_token(int32_t(id), s.token_bytes[id], true));
      if (!s.specials_in_vocab) continue;
    } else {
      text[id] = byte_level_text(s.token_bytes[id]);
    }
    // appended, not vocab[key] =: ordered_json's lookup is linear, and the texts are distinct
    vocab.get_ref<ojson::object_t&>().ojson::object_t::Container::emplace_back(text[id], int32_t(id));
  }
  for (const auto& [l, r] : s.merges) merges.push_back(ojson::array({text.at(size_t(l)), text.at(size_t(r))}));
  ojson pre;
  if (s.pattern.empty()) {
    pre = byte_level(false, true, true);
  } else {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            ojson::array({ojson{{"type", "Split"}, {"pattern", {{"Regex", s.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                          byte_level(false, true, false)})}};
  }
  ojson model = {{"type", "BPE"},          {"dropout", nullptr},    {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                 {"byte_fallback", false}, {"ignore_merges", s.ignore_merges}, {"vocab", std::move(vocab)},
                 {"merges", std::move(merges)}};
  return tokenizer_json(std::move(added), nullptr, std::move(pre), byte_level(true, false, true), byte_level(true, true, true),
                        std::move(model));
}

}  // namespace bpe

namespace spm {

namespace {

// The fields of sentencepiece_model.proto that decide the ids.
struct Piece {
  std::string text;
  float score = 0;
  int type = 1;  // NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
};
struct ModelSpec {
  std::vector<Piece> pieces;
  int model_type = 1;  // UNIGRAM 1, BPE 2, WORD 3, CHAR 4
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  std::string normalizer_name, charsmap, rule_tsv;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

ModelSpec parse_model(const std::string& bytes, const std::string& path) {
  ModelSpec m;
  const bool ok = for_each_field(bytes, [&](uint32_t f, uint32_t, uint64_t v, std::string_view d) {
    (void)v;
    if (f == 1) {  // pieces
      Piece p;
      for_each_field(d, [&](uint32_t pf, uint32_t, uint64_t pv, std::string_view pd) {
        if (pf == 1) p.text = std::string(pd);
        else if (pf == 2 && pd.size() == 4) std::memcpy(&p.score, pd.data(), 4);  // little-endian float
        else if (pf == 3) p.type = int(pv);
      });
      m.pieces.push_back(std::move(p));
    } else if (f == 2) {  // trainer_spec
      for_each_field(d, [&](uint32_t tf, uint32_t, uint64_t tv, std::string_view) {
        if (tf == 3) m.model_type = int(tv);
        else if (tf == 35) m.byte_fallback = tv != 0;
        else if (tf == 24) m.treat_whitespace_as_suffix = tv != 0;
      });
    } else if (f == 3) {  // normalizer_spec
      for_each_field(d, [&](uint32_t nf, uint32_t, uint64_t nv, std::string_view nd) {
        if (nf == 1) m.normalizer_name = std::string(nd);
        else if (nf == 2) m.charsmap = std::string(nd);
        else if (nf == 3) m.add_dummy_prefix = nv != 0;
        else if (nf == 4) m.remove_extra_whitespaces = nv != 0;
        else if (nf == 5) m.escape_whitespaces = nv != 0;
        else if (nf == 6) m.rule_tsv = std::string(nd);
      });
    }
  });
  if (!ok) XT_FAIL(path << ": not a SentencePiece model (not a protobuf message)");
  return m;
}

}  // namespace

std::string Codec::hf_tokenizer_json() const {
  const ModelSpec m = parse_model(bytes_, path_);
  const std::string why = "tokenizers would not give the library's ids";
  // What the Unigram conversion below reproduces exactly; anything else is refused, naming it.
  if (m.model_type != 1)
    XT_FAIL(path_ << ": a SentencePiece " << (m.model_type == 2 ? "BPE" : m.model_type == 3 ? "word" : "char")
                  << " model: only Unigram models are converted to tokenizer.json (" << why << ")");
  if (!m.charsmap.empty() || !m.rule_tsv.empty())
    XT_FAIL(path_ << ": normalizer " << (m.normalizer_name.empty() ? "(custom rules)" : m.normalizer_name)
                  << ": only the identity normalizer is converted to tokenizer.json (" << why << ")");
  if (m.remove_extra_whitespaces)
    XT_FAIL(path_ << ": remove_extra_whitespaces is true: not converted to tokenizer.json (" << why << ")");
  if (!m.escape_whitespaces || m.treat_whitespace_as_suffix)
    XT_FAIL(path_ << ": escape_whitespaces false or treat_whitespace_as_suffix true: not converted to tokenizer.json (" << why << ")");
  if (int(m.pieces.size()) != vocab_size()) XT_FAIL(path_ << ": " << m.pieces.size() << " pieces read, the library has " << vocab_size());
  const char* kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's whitespace mark
  ojson added = ojson::array(), vocab = ojson::array();
  int unk_id = -1;
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const Piece& p = m.pieces[id];
    if (p.type == 5) XT_FAIL(path_ << ": piece " << id << " is UNUSED: not converted to tokenizer.json (" << why << ")");
    if (p.type == 2) unk_id = int(id);
    // control and unknown pieces are special added tokens, user-defined ones plain added tokens
    // (SentencePieceExtractor): matched in the text before the model, as the library matches user-defined ones
    if (p.type == 2 || p.type == 3) added.push_back(added_token(int32_t(id), p.text, true));
    if (p.type == 4) added.push_back(added_token(int32_t(id), p.text, false));
    vocab.push_back(ojson::array({p.text, double(p.score)}));
  }
  ojson normalizers = ojson::array();
  if (m.add_dummy_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  ojson decoders = ojson::array({ojson{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                 ojson{{"type", "ByteFallback"}}, ojson{{"type", "Fuse"}}});
  if (m.add_dummy_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  ojson model = {{"type", "Unigram"}, {"unk_id", unk_id < 0 ? ojson(nullptr) : ojson(unk_id)}, {"vocab", std::move(vocab)},
                 {"byte_fallback", m.byte_fallback}};
  return tokenizer_json(std::move(added), {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}, nullptr, nullptr,
                        {{"type", "Sequence"}, {"decoders", std::move(decoders)}}, std::move(model));
}

}  // namespace spm

}  // namespace xtrain
