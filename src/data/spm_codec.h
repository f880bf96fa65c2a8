// SentencePiece models (Kudo & Richardson 2018) through the library itself (Debian libsentencepiece-dev,
// docs/dependencies.md): loading with the checks xtrain adds, encode and decode. The public interface
// is Tokenizer::from_sentencepiece (src/data/tokenizer.h); this header keeps the library's own header
// out of every file that includes tokenizer.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace xtrain::spm {

class Codec {
 public:
  // load: a SentencePiece .model file (a serialized ModelProto). Throws Error naming the path for a
  // file that cannot be read (a directory too), is not a ModelProto, or lacks the pieces, the
  // trainer spec or the normalizer spec (a file cut at a field boundary parses but is incomplete).
  static std::unique_ptr<Codec> load(const std::string& path);
  ~Codec();

  // encode: appends the ids of `text` as the library's Encode of the whole text gives them, with no
  // BOS or EOS added. When the model drops newlines (see drops_newlines), the text is handed to the
  // library in pieces ending at a newline (about kChunkBytes each), which gives the same ids with
  // memory bounded by the piece, not the text; otherwise in one call. bytes_done as Tokenizer::encode.
  void encode(std::string_view text, std::vector<int32_t>* out, const std::function<void(size_t)>& bytes_done) const;
  static constexpr size_t kChunkBytes = size_t{64} << 10;
  // decode: the library's DecodeIds (pieces joined, "▁" as a space, the first word's leading space
  // dropped, byte pieces as their bytes). Throws Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const;
  int eos_id() const;  // -1 when the model has none
  // special_id: the model's "bos" | "eos" | "unk" | "pad" id, -1 when it has none.
  int special_id(const std::string& role) const;
  std::string piece(int id) const;  // the piece's text ("<s>", "\xe2\x96\x81the", "<0x0A>")
  const std::string& model_bytes() const { return bytes_; }  // the .model file as loaded
  // hf_tokenizer_json: the model as a Hugging Face tokenizer.json that `tokenizers` encodes to the
  // library's ids (hf_json_write.cpp); Error naming what it cannot express exactly.
  std::string hf_tokenizer_json() const;
  // drops_newlines: the model's normalizer turns a newline into whitespace that it removes when
  // extra (spm_train's default nmt_nfkc with remove_extra_whitespaces and a dummy prefix), so a text
  // split after a newline encodes to the concatenation of its parts: the probe is exactly that, on
  // "\n" and "a\nb". False for models that keep newlines (identity normalizer, byte fallback: Llama 2).
  bool drops_newlines() const { return drops_newlines_; }
  // fingerprint: FNV-1a 64 of the model file's bytes (with a format tag): any change to the file,
  // normalizer rules included, is another tokenizer.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Codec();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
  std::string bytes_;
  bool drops_newlines_ = false;
  uint64_t fingerprint_ = 0;
  void encode_call(std::string_view text, std::vector<int32_t>* out) const;
};

}  // namespace xtrain::spm
