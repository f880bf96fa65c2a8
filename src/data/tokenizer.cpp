// Tokenizer: builds the tables of a byte-level BPE vocabulary (GPT-2's files, tokenizer.json, tiktoken
// rank files), then encodes text as special-token split -> PCRE2 pre-tokenizer -> cached byte-pair
// merge of each piece (as tiktoken), or through a tokenizer.json's pipeline (hf_pipeline.h).
#include <xtrain/data/tokenizer.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <tuple>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "bpe.h"
#include "core/echo.h"
#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "core/json.h"
#include "data/tiktoken.h"
#include "hf_json_write.h"
#include "hf_pipeline.h"
#include "spm_codec.h"
#include "tokenizer_cache.h"
#include "tokenizer_impl.h"

namespace xtrain {

namespace bpe {

int32_t id_value(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer()) XT_FAIL(where << " has a non-integer id");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT32_MAX)
                                           : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
  if (!fits) XT_FAIL(where << " has id " << json_echo(v) << ", outside the 32-bit range of token ids");
  return v.get<int32_t>();
}

void read_vocab_object(const nlohmann::json& obj, const std::string& file, const char* what, RawVocab* raw) {
  if (!obj.is_object()) XT_FAIL(file << ": " << what << " is not a JSON object of token -> id");
  raw->vocab.reserve(obj.size());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    raw->vocab.emplace_back(it.key(), id_value(it.value(), file + ": " + what + " entry \"" + echo_value(it.key()) + "\""));
  }
}

}  // namespace bpe

namespace {

// The end-of-text tokens that separate documents, by name, in order of preference: <|endoftext|>
// (GPT-2, the OpenAI encodings, Qwen2 and Qwen3) and <|end_of_text|> (Llama 3). docs/tokenizers.md.
constexpr const char* kEndOfTextNames[] = {"<|endoftext|>", "<|end_of_text|>"};


// Pre-tokens are short words; pieces longer than this are merged each time instead of
// being cached, so a pathological input (1 MB without a space) cannot blow up the cache.
constexpr size_t kMaxCachedPieceBytes = 256;
// Bound on cache entries: ~100 MB worst case, far above the distinct words of any real corpus.
constexpr size_t kMaxCacheEntries = 1u << 20;
// Unassigned ids a tokenizer.json may leave below its special tokens (o200k_base: 18).
constexpr int64_t kMaxSpecialGap = 1 << 16;

}  // namespace

int32_t end_of_text_id(const std::vector<std::pair<std::string, int32_t>>& specials) {
  for (const char* name : kEndOfTextNames)
    for (const auto& [s, id] : specials)
      if (s == name) return id;
  return -1;
}

uint64_t bpe_fingerprint(const std::vector<std::string>& token_bytes, const std::vector<std::array<int32_t, 3>>& merges,
                         const std::vector<std::pair<std::string, int32_t>>& specials, const std::string& pipeline) {
  // Over the canonical content (not the file bytes), so both file formats of the same vocabulary
  // agree. Lengths are hashed too, so concatenations cannot collide.
  uint64_t h = fnv1a64("xtrain-bpe-v1", 13);
  auto put = [&h](uint64_t v) {  // little-endian, so the value does not depend on the host
    unsigned char le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(v >> (8 * k));
    h = fnv1a64(le, sizeof(le), h);
  };
  put(uint64_t(token_bytes.size()));
  for (const auto& s : token_bytes) {
    put(s.size());
    h = fnv1a64(s.data(), s.size(), h);
  }
  put(merges.size());
  for (const auto& m : merges) put((uint64_t(uint32_t(m[0])) << 32) | uint32_t(m[1]));
  std::vector<std::pair<int32_t, std::string>> sorted;
  for (const auto& [s, id] : specials) sorted.emplace_back(id, s);
  std::sort(sorted.begin(), sorted.end());
  put(sorted.size());
  for (const auto& [id, s] : sorted) {
    put(uint64_t(id));
    put(s.size());
    h = fnv1a64(s.data(), s.size(), h);
  }
  if (!pipeline.empty()) {  // a tokenizer.json pipeline other than GPT-2's
    put(pipeline.size());
    h = fnv1a64(pipeline.data(), pipeline.size(), h);
  }
  return h;
}

uint64_t tiktoken_fingerprint(const std::string& name, const std::string& pattern, const std::vector<std::string>& token_bytes,
                              const std::vector<bool>& unassigned, const std::vector<std::pair<std::string, int32_t>>& specials) {
  uint64_t h = fnv1a64("xtrain-tiktoken-v1", 18);
  auto put_bytes = [&h](const std::string& s) {
    unsigned char le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(uint64_t(s.size()) >> (8 * k));
    h = fnv1a64(le, sizeof(le), h);
    h = fnv1a64(s.data(), s.size(), h);
  };
  put_bytes(name);
  put_bytes(pattern);
  for (size_t id = 0; id < token_bytes.size(); ++id)
    put_bytes(!unassigned.empty() && unassigned[id] ? std::string("\xff<unassigned>") : token_bytes[id]);
  for (const auto& [s, id] : specials) put_bytes(s + "=" + std::to_string(id));
  return h;
}

std::unique_ptr<Tokenizer::Impl> Tokenizer::Impl::build(const bpe::RawVocab& raw) {
  const std::string& f = raw.file;
  auto impl = std::make_unique<Impl>();
  std::unordered_map<std::string, int32_t> special_of;
  for (const auto& [s, id] : raw.specials) special_of.emplace(s, id);
  // Ids are dense 0..n-1; bound them by the number of entries before allocating anything, so a
  // huge or sparse id is one clear error instead of an overflow or gigabytes of tables.
  // Special (added) tokens above the model's vocabulary may leave ids unassigned, as tokenizers allows
  // and tiktoken's cl100k_base and o200k_base do (an export's tokenizer.json of them has such gaps):
  // at most kMaxSpecialGap ids past the entries.
  const int64_t entries = static_cast<int64_t>(raw.vocab.size() + raw.specials.size());
  int32_t vocab_size = 0, model_size = 0;
  for (const auto* list : {&raw.vocab, &raw.specials})
    for (const auto& [s, id] : *list) {
      const bool special = list == &raw.specials || special_of.count(s);  // a special listed in the vocab too
      const int64_t limit = special ? entries + kMaxSpecialGap : entries;
      if (id < 0 || id >= limit)
        XT_FAIL(f << ": token \"" << echo_value(s) << "\" has id " << id << ", outside 0.." << limit - 1
                  << " (ids must be dense)");
      vocab_size = std::max(vocab_size, id + 1);
      if (list == &raw.vocab && !special_of.count(s)) model_size = std::max(model_size, id + 1);
    }
  impl->token_bytes.resize(size_t(vocab_size));
  std::vector<bool> seen(size_t(vocab_size), false);
  std::unordered_map<std::string, int32_t> id_of;  // token text -> id (for merges)
  id_of.reserve(raw.vocab.size());
  auto define = [&](int32_t id, std::string bytes, const std::string& text) {
    if (id < 0) XT_FAIL(f << ": token \"" << echo_value(text) << "\" has negative id " << id);
    if (seen[size_t(id)] && impl->token_bytes[size_t(id)] != bytes)
      XT_FAIL(f << ": id " << id << " is given to two different tokens");
    seen[size_t(id)] = true;
    impl->token_bytes[size_t(id)] = std::move(bytes);
  };
  for (const auto& [text, id] : raw.vocab) {
    std::string bytes;
    if (special_of.count(text)) {
      bytes = text;  // special tokens are literal text, not written in the byte alphabet
    } else if (!bpe::token_text_to_bytes(text, &bytes)) {
      XT_FAIL(f << ": token \"" << echo_value(text) << "\" (id " << id << ") is not in GPT-2's byte alphabet");
    }
    define(id, std::move(bytes), text);
    if (!id_of.emplace(text, id).second) XT_FAIL(f << ": token \"" << echo_value(text) << "\" appears twice");
  }
  for (const auto& [text, id] : raw.specials) {
    define(id, text, text);
    impl->specials.emplace_back(text, id);
  }
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (seen[size_t(id)]) continue;
    if (id < model_size) XT_FAIL(f << ": id " << id << " has no token (ids must be 0.." << vocab_size - 1 << ")");
    if (impl->unassigned.empty()) impl->unassigned.assign(size_t(vocab_size), false);
    impl->unassigned[size_t(id)] = true;  // between the model's vocabulary and a special token
  }

  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    std::string text;
    const char32_t cp = bpe::byte_to_unicode()[b];  // <= U+0143: one or two UTF-8 bytes
    if (cp < 0x80) text.push_back(char(cp));
    else text += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    auto it = id_of.find(text);
    if (it == id_of.end()) XT_FAIL(f << ": the vocabulary has no token for byte " << b);
    byte_ids[size_t(b)] = it->second;
  }
  impl->merges.reserve(raw.merges.size());
  for (size_t i = 0; i < raw.merges.size(); ++i) {
    const std::string& a = raw.merges[i].first, &b = raw.merges[i].second;  // not a structured binding: clang 14 (C++17) cannot capture one
    auto lookup = [&](const std::string& t, const char* role) {
      auto it = id_of.find(t);
      if (it == id_of.end())
        XT_FAIL(raw.merge_where[i] << ": merge \"" << echo_value(a) << " " << echo_value(b) << "\" references unknown "
                  << role << " token \"" << echo_value(t) << "\"");
      return it->second;
    };
    impl->merges.push_back({lookup(a, "left"), lookup(b, "right"), lookup(a + b, "merged")});
    const size_t bytes = impl->token_bytes[size_t(impl->merges.back()[2])].size();
    if (raw.rule == bpe::PairRule::kAnySplit && bytes > bpe::kMaxTokenBytes)  // the Merger's work is quadratic in it
      XT_FAIL(raw.merge_where[i] << ": merge \"" << echo_value(a) << " " << echo_value(b) << "\" makes a token of " << bytes
                                 << " bytes; at most " << bpe::kMaxTokenBytes << " are read (GPT-2's longest has 128)");
  }
  std::vector<int32_t> whole;  // the model vocabulary (not the specials), for ignore_merges
  if (raw.whole_piece_first)
    for (const auto& [text, id] : raw.vocab) whole.push_back(id);
  impl->merger = std::make_unique<bpe::Merger>(byte_ids, impl->merges, impl->token_bytes, raw.rule, whole);
  impl->eot = end_of_text_id(impl->specials);

  impl->fingerprint = bpe_fingerprint(impl->token_bytes, impl->merges, impl->specials, raw.pipeline);
  // Longest first, so that a special token that is a prefix of another cannot shadow it.
  std::sort(impl->specials.begin(), impl->specials.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  return impl;
}

Tokenizer Tokenizer::from_ranks(const bpe::RankVocab& v) {
  const std::string& f = v.file;
  auto impl = std::make_unique<Impl>(v.pattern);
  int64_t n = int64_t(v.token_bytes.size());
  for (const auto& sp : v.specials) n = std::max(n, int64_t(sp.second) + 1);
  impl->token_bytes = v.token_bytes;
  impl->token_bytes.resize(size_t(n));
  impl->unassigned.assign(size_t(n), true);
  for (size_t id = 0; id < v.token_bytes.size(); ++id) impl->unassigned[id] = v.token_bytes[id].empty();
  for (const auto& [s, id] : v.specials) {
    if (!impl->unassigned[size_t(id)])
      XT_FAIL(f << ": special token " << s << " has id " << id << ", which the rank file or another special uses");
    impl->unassigned[size_t(id)] = false;
    impl->token_bytes[size_t(id)] = s;
    impl->specials.emplace_back(s, id);
  }
  impl->eot = end_of_text_id(impl->specials);
  if (std::find(impl->unassigned.begin(), impl->unassigned.end(), true) == impl->unassigned.end())
    impl->unassigned.clear();
  // tiktoken's mergeable ranks: every token is mergeable and its rank is its id, so the merges are
  // the multi-byte tokens in rank order (Merger registers every split of each as a pair).
  std::array<int32_t, 256> byte_ids;
  byte_ids.fill(-1);
  for (int32_t id = 0; id < int32_t(v.token_bytes.size()); ++id) {
    const std::string& t = v.token_bytes[size_t(id)];
    if (t.size() == 1) byte_ids[uint8_t(t[0])] = id;
    else if (t.size() > 1) impl->merges.push_back({-1, -1, id});
  }
  for (int b = 0; b < 256; ++b)
    if (byte_ids[size_t(b)] < 0) XT_FAIL(f << ": no token for the single byte " << b << " (every byte needs a rank)");
  std::vector<int32_t> ranked;  // tiktoken's encoder: every rank's token, looked up whole first
  for (int32_t id = 0; id < int32_t(v.token_bytes.size()); ++id)
    if (!v.token_bytes[size_t(id)].empty()) ranked.push_back(id);
  impl->merger = std::make_unique<bpe::Merger>(byte_ids, impl->merges, impl->token_bytes, bpe::PairRule::kAnySplit, ranked);

  // Fingerprint: name, pattern, every id's bytes (unassigned ids marked) and the specials.
  impl->fingerprint = tiktoken_fingerprint(v.name, v.pattern, impl->token_bytes, impl->unassigned, v.specials);
  impl->kind = Kind::Tiktoken, impl->name = v.name, impl->pattern = v.pattern, impl->files = {v.file};
  std::sort(impl->specials.begin(), impl->specials.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>* out, PieceMark* mark) const {
  pre.split(text, [&](std::string_view piece) {
    mark->reached(piece.data());  // pieces come in text order
    encode_piece(piece, out);
  });
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1 || piece.size() > kMaxCachedPieceBytes) {
    merger->merge(piece, out);
    return;
  }
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  merger->merge(piece, out);
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() >= kMaxCacheEntries) cache.clear();
  cache.emplace(key, std::vector<int32_t>(out->begin() + long(first), out->end()));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  const std::string encoder = read_json_text(encoder_json);  // its read errors before vocab.bpe's
  return from_gpt2_bytes(encoder_json, encoder, vocab_bpe, read_file(vocab_bpe));
}

Tokenizer Tokenizer::from_gpt2_bytes(const std::string& encoder_json, std::string_view encoder_bytes, const std::string& vocab_bpe,
                                     std::string_view text) {
  bpe::RawVocab raw;
  raw.file = encoder_json;
  bpe::read_vocab_object(parse_json_file_bytes(encoder_json, encoder_bytes), encoder_json, "the top level", &raw);
  // tiktoken's "gpt2" encoding declares <|endoftext|> as its only special token.
  for (const auto& [s, id] : raw.vocab)
    if (s == "<|endoftext|>") raw.specials.emplace_back(s, id);
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) return;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != line.npos)
      XT_FAIL(vocab_bpe << ":" << line_no << ": expected a merge \"left right\", got \"" << echo_value(line) << "\"");
    raw.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
    raw.merge_where.push_back(vocab_bpe + ":" + std::to_string(line_no));
  });
  raw.file = encoder_json + " + " + vocab_bpe;
  Tokenizer t(Impl::build(raw));
  t.impl_->files = {encoder_json, vocab_bpe};
  // In GPT-2's files every token that is neither a single byte nor special is made by exactly one
  // merge (50257 = 256 + 50000 + 1), so fewer merges than such tokens means a cut vocab.bpe, which
  // would otherwise train silently with a weaker tokenizer.
  const size_t made_by_merges = raw.vocab.size() - 256 - raw.specials.size();
  if (raw.merges.size() < made_by_merges)
    XT_FAIL(vocab_bpe << ": " << raw.merges.size() << " merges, but " << encoder_json << " has " << made_by_merges
                      << " tokens that only merges make (empty or truncated vocab.bpe?)");
  return t;
}

Tokenizer Tokenizer::from_raw(const bpe::RawVocab& raw, std::unique_ptr<bpe::HfPipeline> pipeline) {
  auto impl = Impl::build(raw);
  impl->hf = std::move(pipeline);
  impl->kind = Kind::HfJson, impl->files = {raw.file};
  if (impl->hf) impl->specials.clear();  // the pipeline matches its added tokens itself, with their flags
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_sentencepiece(const std::string& model_file) {
  auto impl = std::make_unique<Impl>();
  impl->spm = spm::Codec::load(model_file);
  impl->eot = impl->spm->eos_id();
  impl->fingerprint = impl->spm->fingerprint();
  impl->kind = Kind::SentencePiece, impl->files = {model_file};
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const std::function<void(size_t)>& bytes_done) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  if (impl_->spm) {
    impl_->spm->encode(text, &out, bytes_done);
    return out;
  }
  Impl::PieceMark mark{text.data(), text.data() + kEncodeProgressBytes, bytes_done ? &bytes_done : nullptr};
  if (impl_->hf) {
    impl_->hf->encode(text, &out, [&](std::string_view piece, const char* where) {
      mark.reached(where);
      impl_->encode_piece(piece, &out);
    });
    if (bytes_done) bytes_done(text.size());
    return out;
  }
  size_t pos = 0;
  std::vector<size_t> next(impl_->specials.size());
  for (size_t i = 0; i < next.size(); ++i) next[i] = text.find(impl_->specials[i].first);
  while (true) {
    // Earliest special token at or after pos (longest first on ties, see build()).
    // next[i] caches where special i occurs next; it is searched again only once pos has passed it,
    // so a vocabulary with hundreds of specials (Llama 3) stays linear in the text.
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (size_t i = 0; i < impl_->specials.size(); ++i) {
      const auto& sp = impl_->specials[i];
      if (next[i] != text.npos && next[i] < pos) next[i] = text.find(sp.first, pos);
      if (next[i] < best) best = next[i], hit = &sp;
    }
    impl_->encode_ordinary(text.substr(pos, best == std::string_view::npos ? text.npos : best - pos), &out, &mark);
    if (!hit) {
      if (bytes_done) bytes_done(text.size());
      return out;
    }
    out.push_back(hit->second);
    pos = best + hit->first.size();
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (impl_->spm) return impl_->spm->decode(ids);
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      XT_FAIL("decode: token id " << id << " is outside the vocabulary [0, " << vocab_size() << ")");
    if (!impl_->unassigned.empty() && impl_->unassigned[size_t(id)])
      XT_FAIL("decode: token id " << id << " is not assigned to any token");
    out += impl_->token_bytes[size_t(id)];
  }
  return out;
}

int Tokenizer::vocab_size() const { return impl_->spm ? impl_->spm->vocab_size() : int(impl_->token_bytes.size()); }
int Tokenizer::eot_id() const { return impl_->eot; }
uint64_t Tokenizer::fingerprint() const { return impl_->fingerprint; }
void Tokenizer::adopt_fingerprint(uint64_t original) { impl_->fingerprint = original; }
Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
const std::vector<std::string>& Tokenizer::source_files() const { return impl_->files; }

std::string Tokenizer::describe() const {
  switch (impl_->kind) {
    case Kind::Gpt2Files: return "GPT-2 BPE " + impl_->files.at(0) + " + " + impl_->files.at(1);
    case Kind::Tiktoken: return "tiktoken " + impl_->name;
    case Kind::HfJson: return "Hugging Face BPE " + impl_->files.at(0);  // the kind, then its file, as the others
    case Kind::SentencePiece: break;
  }
  return "SentencePiece " + impl_->files.at(0);
}

Tokenizer::HfTokenRoles Tokenizer::hf_token_roles() const {
  HfTokenRoles r;
  auto set = [&](std::string* name, int32_t* id, int32_t v) {
    if (v < 0) return;
    *id = v;
    *name = impl_->spm ? impl_->spm->piece(v) : impl_->token_bytes.at(size_t(v));
  };
  if (impl_->spm) {
    set(&r.bos, &r.bos_id, impl_->spm->special_id("bos"));
    set(&r.eos, &r.eos_id, impl_->spm->special_id("eos"));
    set(&r.unk, &r.unk_id, impl_->spm->special_id("unk"));
    set(&r.pad, &r.pad_id, impl_->spm->special_id("pad"));
    return r;
  }
  set(&r.eos, &r.eos_id, impl_->eot);
  if (impl_->kind == Kind::Gpt2Files) {  // Hugging Face's gpt2: <|endoftext|> in every role
    set(&r.bos, &r.bos_id, impl_->eot);
    set(&r.unk, &r.unk_id, impl_->eot);
  } else if (impl_->kind == Kind::Tiktoken) {
    for (const auto& [s, id] : impl_->specials)
      if (s == "<|begin_of_text|>") set(&r.bos, &r.bos_id, id);
  } else if (impl_->hf && !impl_->hf->prefix.empty()) {
    set(&r.bos, &r.bos_id, impl_->hf->prefix.front());
    r.add_bos = true;
  }
  return r;
}

std::string Tokenizer::hf_tokenizer_json() const {
  if (impl_->spm) return impl_->spm->hf_tokenizer_json();
  if (impl_->kind == Kind::HfJson) return read_file(impl_->files.at(0));  // the file itself: same fingerprint
  bpe::ByteLevelJson j;
  j.token_bytes = impl_->token_bytes;
  for (size_t id = 0; id < impl_->unassigned.size(); ++id)
    if (impl_->unassigned[id]) j.token_bytes[id].clear();
  j.special.assign(j.token_bytes.size(), false);
  for (const auto& [s, id] : impl_->specials) j.special[size_t(id)] = true;
  if (impl_->kind == Kind::Gpt2Files) {  // transformers' GPT2Converter: vocab.bpe's merges, ByteLevel's regex
    j.specials_in_vocab = true;
    for (const auto& m : impl_->merges) j.merges.emplace_back(m[0], m[1]);
  } else {  // TikTokenConverter: merges from the ranks (specials are no ranks), whole pieces first; the specials
    // also in model.vocab, so tokenizers gives each its own id across the gap of unassigned ids below them
    // (cl100k_base, o200k_base) instead of the next id after the vocabulary
    j.specials_in_vocab = true;
    std::vector<std::string> ranks = j.token_bytes;
    for (const auto& [s, id] : impl_->specials) ranks[size_t(id)].clear();
    j.merges = bpe::merges_from_ranks(ranks);
    j.pattern = tiktoken_hf_pattern(impl_->name);
    j.ignore_merges = true;
  }
  return bpe::write_byte_level_json(j);
}

std::string Tokenizer::sentencepiece_model() const {
  if (!impl_->spm) XT_FAIL(describe() << ": not a SentencePiece model");
  return impl_->spm->model_bytes();
}

void check_tokenizer_choice(const std::string& tokenizer_json, bool encoder_json_given, bool vocab_bpe_given) {
  if (!tokenizer_json.empty() && (encoder_json_given || vocab_bpe_given))
    throw UsageError("give either --tokenizer-json or --encoder-json/--vocab-bpe, not both");
}

std::vector<int32_t> parse_token_ids(const std::string& s, const std::string& what, int vocab_size) {
  std::vector<int32_t> ids;
  // Comma-separated fields (one field when there is no comma), each one or more whitespace-separated
  // words: an empty field ("1,,2", "1,2,") is a typo that would otherwise drop an id silently.
  size_t begin = 0;
  const bool commas = s.find(',') != std::string::npos;
  while (true) {
    const size_t comma = s.find(',', begin);
    std::istringstream in(s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    std::string word;
    bool any = false;
    while (in >> word) {
      any = true;
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || v < INT32_MIN || v > INT32_MAX)
        throw UsageError(what + ": \"" + echo_value(word) + "\" is not an integer id");
      if (v < 0 || v >= vocab_size)
        throw UsageError(what + ": " + std::to_string(v) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      ids.push_back(int32_t(v));
    }
    if (commas && !any)
      throw UsageError(what + ": an empty id between commas in \"" + echo_value(s) + "\"");
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return ids;
}

Tokenizer load_tokenizer(const std::string& tokenizer_json, const std::string& encoder_json,
                         const std::string& vocab_bpe) {
  if (!tokenizer_json.empty()) return Tokenizer::from_hf_json(tokenizer_json);
  if (encoder_json.empty() || vocab_bpe.empty())
    throw UsageError("give a tokenizer: --tokenizer-json FILE, or both --encoder-json FILE and --vocab-bpe FILE");
  return Tokenizer::from_gpt2_files(encoder_json, vocab_bpe);
}

std::string tokenizer_ranks_path(const TokenizerFiles& files) {
  if (files.tokenizer.empty() || files.tokenizer == "gpt2") return "";
  return files.tokenizer_ranks.empty() ? tiktoken_default_file(files.tokenizer) : files.tokenizer_ranks;
}

std::vector<std::pair<std::string, std::string>> tokenizer_inputs(const TokenizerFiles& files) {
  if (!files.tokenizer_model.empty()) return {{"--tokenizer-model", files.tokenizer_model}};
  const std::string ranks = tokenizer_ranks_path(files);
  if (!ranks.empty()) return {{"--tokenizer-ranks", ranks}};
  if (!files.tokenizer_json.empty()) return {{"--tokenizer-json", files.tokenizer_json}};
  return {{"--encoder-json", files.encoder_json}, {"--vocab-bpe", files.vocab_bpe}};
}

Tokenizer load_tokenizer(const TokenizerFiles& files) {
  if (!files.tokenizer_model.empty()) return Tokenizer::from_sentencepiece(files.tokenizer_model);
  const std::string ranks = tokenizer_ranks_path(files);
  if (!ranks.empty()) {
    // a rank file given that is missing is a bad input file (exit 1) like any other; the default one missing
    // is a usage error as every missing default of the data directory is (an option or the set-up supplies it)
    std::error_code ec;
    if (!files.tokenizer_ranks.empty() && !std::filesystem::exists(ranks, ec))
      XT_FAIL("--tokenizer-ranks " << ranks << ": no such file");
    if (!std::filesystem::exists(ranks, ec))
      throw UsageError("--tokenizer " + files.tokenizer + ": rank file " + ranks + " is missing (run scripts/setup.sh " +
                       "--tokenizers, or give --tokenizer-ranks FILE; " + data_dir_note("--tokenizer-ranks FILE") + ")");
    if (files.cache_dir.empty()) return Tokenizer::from_tiktoken(ranks, files.tokenizer);
    return load_tokenizer_cached({files.cache_dir, files.cache_dir_origin, files.log_prefix}, "tiktoken:" + files.tokenizer, {ranks},
                                 [&](const std::vector<std::string>* b) {
                                   return b ? Tokenizer::from_tiktoken_bytes(ranks, b->at(0), files.tokenizer)
                                            : Tokenizer::from_tiktoken(ranks, files.tokenizer);
                                 });
  }
  if (files.tokenizer_json.empty())
    for (const auto& [given, path, option] : {std::tuple{files.encoder_json_given, files.encoder_json, "--encoder-json"},
                                              std::tuple{files.vocab_bpe_given, files.vocab_bpe, "--vocab-bpe"}}) {
      std::error_code ec;
      if (!given && !std::filesystem::exists(path, ec))
        throw UsageError(std::string(option) + ": the default " + path + " is missing (" +
                         data_dir_note(std::string(option) + " FILE") + ")");
    }
  if (files.cache_dir.empty()) return load_tokenizer(files.tokenizer_json, files.encoder_json, files.vocab_bpe);
  if (!files.tokenizer_json.empty())
    return load_tokenizer_cached({files.cache_dir, files.cache_dir_origin, files.log_prefix}, kHfJsonLoader, {files.tokenizer_json},
                                 [&](const std::vector<std::string>* b) {
                                   return b ? Tokenizer::from_hf_json_bytes(files.tokenizer_json, b->at(0))
                                            : Tokenizer::from_hf_json(files.tokenizer_json);
                                 });
  return load_tokenizer_cached({files.cache_dir, files.cache_dir_origin, files.log_prefix}, "gpt2", {files.encoder_json, files.vocab_bpe},
                               [&](const std::vector<std::string>* b) {
                                 return b ? Tokenizer::from_gpt2_bytes(files.encoder_json, b->at(0), files.vocab_bpe, b->at(1))
                                          : Tokenizer::from_gpt2_files(files.encoder_json, files.vocab_bpe);
                               });
}

}  // namespace xtrain
