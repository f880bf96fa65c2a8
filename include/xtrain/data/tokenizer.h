// GPT-2 byte-level BPE tokenizer (Radford et al. 2019), giving exactly tiktoken's "gpt2" ids.
// Loads either OpenAI's encoder.json + vocab.bpe or a Hugging Face tokenizer.json (BPE model with
// ByteLevel pre-tokenizer). The pre-tokenizer regex's Unicode letter/number classes come from PCRE2
// with PCRE2_UCP (docs/dependencies.md says why PCRE2); JSON parsing is nlohmann/json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xtrain {

namespace bpe {
struct RankVocab;
struct RawVocab;
struct HfPipeline;
}

class Tokenizer {
 public:
  // from_gpt2_files: encoder.json (token string -> id, GPT-2 byte-to-unicode alphabet) and
  // vocab.bpe ("#version" line then one merge "a b" per line, rank = line order).
  // Throws Error naming the file for a missing/unreadable/malformed file.
  static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // from_hf_json: a Hugging Face tokenizer.json with a byte-level BPE model (model.vocab, model.merges
  // as "a b" strings or [a, b] pairs), giving exactly the ids of `tokenizers` 0.23's
  // encode(text, add_special_tokens=True): added tokens with their flags, the NFC/NFD/NFKC/NFKD
  // normalizers, Split and ByteLevel pre-tokenizers, ignore_merges, and the ByteLevel and
  // TemplateProcessing post-processors (a BOS such as Llama 3's <|begin_of_text|>). Throws Error
  // "<file>: <json path> = <value> is not supported (...)" for anything else (hf_pipeline.h).
  static Tokenizer from_hf_json(const std::string& tokenizer_json);
  // from_tiktoken: a tiktoken rank file (one "base64-token rank" per line; Llama 3's tokenizer.model
  // is one) read with the split pattern and special tokens of the built-in encoding `name`
  // (tiktoken_names(): cl100k_base, o200k_base, r50k_base, p50k_base, p50k_edit, llama3), giving
  // exactly tiktoken's ids with allowed_special="all". Throws UsageError for an unknown name, Error
  // naming file and line for a bad rank file (bad base64, duplicate token or rank, a rank missing
  // that is not a special token's id, another rank count than the encoding's).
  static Tokenizer from_tiktoken(const std::string& ranks_file, const std::string& name);
  // from_gpt2_bytes, from_hf_json_bytes, from_tiktoken_bytes: the three loaders above over their files'
  // bytes already read (the paths name them in messages and are what source_files() gives), with the
  // same checks and errors: the tokenizer table cache builds from the very bytes its entry's key
  // hashes, so a file replaced meanwhile cannot leave one file's tables under another's key.
  static Tokenizer from_gpt2_bytes(const std::string& encoder_json, std::string_view encoder_bytes, const std::string& vocab_bpe,
                                   std::string_view vocab_bytes);
  static Tokenizer from_hf_json_bytes(const std::string& tokenizer_json, std::string_view bytes);
  static Tokenizer from_tiktoken_bytes(const std::string& ranks_file, std::string_view bytes, const std::string& name);
  // from_sentencepiece: a SentencePiece .model file, encoded and decoded by the library
  // (libsentencepiece, src/data/spm_codec.h): a text gives the library's Encode ids (no BOS/EOS
  // added; control tokens such as "</s>" written in the text are not matched), eot_id() is the
  // model's EOS ("</s>"), the fingerprint covers the file's bytes. Throws Error naming the file for
  // one that is unreadable, a directory, not a model or incomplete (truncated).
  static Tokenizer from_sentencepiece(const std::string& model_file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // encode: UTF-8 text (any bytes are accepted) -> token ids. Special tokens (e.g. "<|endoftext|>")
  // appearing literally in the text map to their ids (tiktoken's allowed_special="all"); a
  // tokenizer.json's post-processor adds its ids (Llama 3: <|begin_of_text|> first).
  // `bytes_done`, when set, is called from inside the loop with the bytes of `text` encoded so far,
  // each time about kEncodeProgressBytes more are done, and with text.size() at the end (a progress
  // line, token_cache.h; the text is never split outside the tokenizer, which would change the
  // tokens at the split points).
  std::vector<int32_t> encode(std::string_view text, const std::function<void(size_t)>& bytes_done = {}) const;
  static constexpr size_t kEncodeProgressBytes = size_t{1} << 20;
  // decode: ids -> bytes. Throws Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const;  // number of ids, e.g. 50257 for GPT-2
  // eot_id: the end-of-text token put between documents: <|endoftext|> (GPT-2, OpenAI encodings,
  // Qwen), else <|end_of_text|> (Llama 3); SentencePiece: the model's EOS; -1 when there is none.
  int eot_id() const;
  // fingerprint: 64-bit hash of vocabulary, merges and special tokens; token caches and checkpoints
  // record it so that data tokenized with another vocabulary is refused.
  uint64_t fingerprint() const;
  // adopt_fingerprint: a tokenizer.json that an export converted from another tokenizer (a tiktoken
  // encoding) gives that tokenizer's ids but hashes to another value; read back from the export it
  // takes the original's fingerprint, so caches and checkpoints made with either agree. Only the
  // model-directory reader calls it, after checking the file is the one the export wrote
  // (serve/export.h: kTokenizerJsonFingerprintKey).
  void adopt_fingerprint(uint64_t original);

  // What the tokenizer is, for exports and messages.
  enum class Kind { Gpt2Files, Tiktoken, HfJson, SentencePiece };
  Kind kind() const;
  // describe: the kind, then what it was read from: "GPT-2 BPE <encoder.json> + <vocab.bpe>", "tiktoken
  // cl100k_base", "Hugging Face BPE <tokenizer.json>", "SentencePiece <file>".
  std::string describe() const;
  // source_files: the files it was read from (GPT-2: encoder.json and vocab.bpe; else one).
  const std::vector<std::string>& source_files() const;

  // HfTokenRoles: the tokens Hugging Face's tokenizer_config.json names, as this tokenizer defines
  // them ("" / -1 where it has none), and whether encode puts the BOS first (a tokenizer.json's
  // TemplateProcessing). GPT-2's files: <|endoftext|> is bos, eos and unk (Hugging Face's gpt2);
  // tiktoken: eos = eot_id(), llama3 also bos <|begin_of_text|>; tokenizer.json: eos = eot_id(), bos =
  // the post-processor's first id; SentencePiece: the model's bos/eos/unk/pad pieces.
  struct HfTokenRoles {
    std::string bos, eos, unk, pad;
    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
    bool add_bos = false;
  };
  HfTokenRoles hf_token_roles() const;
  // hf_tokenizer_json: this tokenizer as a Hugging Face tokenizer.json (the `tokenizers` library's
  // serialisation) that gives the same ids (src/data/hf_json_write.cpp): GPT-2's files and tiktoken
  // encodings as a byte-level BPE (tiktoken: transformers' TikTokenConverter: merges recovered from the
  // ranks, ignore_merges, the encoding's split pattern); a tokenizer.json: the file's bytes;
  // SentencePiece: a Unigram model. Throws Error "<what>: <why>" for what it cannot express exactly.
  std::string hf_tokenizer_json() const;
  // sentencepiece_model: the .model bytes (SentencePiece only; Error otherwise).
  std::string sentencepiece_model() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer from_ranks(const bpe::RankVocab& vocab);  // tokenizer.cpp; used by from_tiktoken
  // from_raw: tokenizer.cpp; used by from_hf_json (hf_json.cpp) with its pipeline
  static Tokenizer from_raw(const bpe::RawVocab& raw, std::unique_ptr<bpe::HfPipeline> pipeline);
  friend class TokenizerTables;  // src/data/tokenizer_cache.h: stores and restores the tables
  std::unique_ptr<Impl> impl_;
};

// check_tokenizer_choice: the one rule of the tokenizer options of xtrain_mpi, xtrain_tokenize and
// xtrain_generate: a tokenizer_json replaces encoder.json + vocab.bpe, so giving either of those
// explicitly as well is a UsageError (a file named on the command line is never silently ignored).
void check_tokenizer_choice(const std::string& tokenizer_json, bool encoder_json_given, bool vocab_bpe_given);

// parse_token_ids: "15496 11 995" or "15496,11,995" -> ids (the form xtrain_tokenize --print-ids writes),
// each in [0, vocab_size). Throws UsageError "<what>: "<word>" is not an integer id", "<what>: <id> is
// outside the vocabulary [0, V)" or, for an empty field between commas ("1,,2", "1,"), "<what>: an
// empty id between commas in "<s>"".
std::vector<int32_t> parse_token_ids(const std::string& s, const std::string& what, int vocab_size);

// load_tokenizer: picks the format from the arguments: tokenizer_json non-empty -> HF file,
// otherwise encoder_json + vocab_bpe. Throws UsageError when neither is given.
Tokenizer load_tokenizer(const std::string& tokenizer_json, const std::string& encoder_json,
                         const std::string& vocab_bpe);

// TokenizerFiles: the parsed tokenizer options of every program (declared once by
// add_tokenizer_options, src/data/tokenizer_options.h). Paths; tokenizer_json "" = none.
struct TokenizerFiles {
  std::string tokenizer;                // --tokenizer: "gpt2" (the files below) or a tiktoken_names() entry
  std::string tokenizer_ranks;          // --tokenizer-ranks: rank file of a tiktoken encoding, "" = default
  std::string tokenizer_json;           // Hugging Face tokenizer.json; replaces the GPT-2 pair when set
  std::string tokenizer_model;          // --tokenizer-model: SentencePiece .model; replaces the GPT-2 pair when set
  std::string encoder_json, vocab_bpe;  // OpenAI GPT-2 encoder.json and vocab.bpe (merges)
  bool encoder_json_given = false, vocab_bpe_given = false;  // on the command line, not defaults
  bool any_given = false;  // any tokenizer option on the command line (else a model directory's may be used)
  // where load_tokenizer keeps the tables it derives from GPT-2's files or a rank file (the token caches'
  // directory, src/data/tokenizer_cache.h), so a later start reads them; "" = derive them every time
  std::string cache_dir;
  std::string cache_dir_origin = "--cache-dir";  // what chose cache_dir, as its messages name it ("$XDG_CACHE_HOME")
  std::string log_prefix;  // starts each of its warning lines: "rank R (host): " under mpirun, else ""
  bool gpt2_defaults() const { return !encoder_json_given && !vocab_bpe_given; }
};

// load_tokenizer: the tokenizer the options name: a SentencePiece model when tokenizer_model is set,
// a tiktoken encoding when files.tokenizer is not "gpt2" (its rank file: tokenizer_ranks, else
// tiktoken_default_file), else the overload above.
Tokenizer load_tokenizer(const TokenizerFiles& files);

// tokenizer_ranks_path: the rank file load_tokenizer(files) reads, "" when it reads none.
std::string tokenizer_ranks_path(const TokenizerFiles& files);

// tokenizer_inputs: the files load_tokenizer(files) reads, each with its option name
// ({"--tokenizer-model", path}, {"--encoder-json", path}, ...): what an output must never overwrite.
std::vector<std::pair<std::string, std::string>> tokenizer_inputs(const TokenizerFiles& files);

}  // namespace xtrain
