// SentencePiece codec over the library (see spm_codec.h): load with xtrain's checks, encode in
// newline-ended pieces where that gives the same ids, decode.
#include "spm_codec.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "data/protobuf_wire.h"
#include "core/io.h"
#include <xtrain/data/tokenizer.h>

namespace xtrain::spm {

namespace {

// top_level_fields: the field numbers of a protobuf message's top level (wire format,
// developers.google.com/protocol-buffers/docs/encoding), or false when the bytes do not walk to the
// end as fields. The library parses the whole message; this walk only tells which fields are there.
bool top_level_fields(std::string_view b, std::vector<uint32_t>* fields) {
  return for_each_field(b, [&](uint32_t field, uint32_t, uint64_t, std::string_view) { fields->push_back(field); });
}

// ModelProto's fields (sentencepiece_model.proto): pieces 1, trainer_spec 2, normalizer_spec 3.
constexpr uint32_t kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3;

}  // namespace

Codec::Codec() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Codec::~Codec() = default;

std::unique_ptr<Codec> Codec::load(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path);  // missing, unreadable, a directory
  } catch (const Error& e) {
    XT_FAIL("--tokenizer-model: " << e.what());
  }
  std::unique_ptr<Codec> c(new Codec());
  c->path_ = path;
  const std::string hint = " (Llama 3's tokenizer.model is a tiktoken rank file: --tokenizer llama3 --tokenizer-ranks FILE)";
  std::vector<uint32_t> fields;
  if (bytes.empty() || !top_level_fields(bytes, &fields))
    XT_FAIL("--tokenizer-model " << path << ": not a SentencePiece model (not a protobuf message)" << hint);
  const sentencepiece::util::Status st = c->sp_->LoadFromSerializedProto(bytes);
  if (!st.ok())
    XT_FAIL("--tokenizer-model " << path << ": not a SentencePiece model (" << st.ToString() << ")" << hint);
  for (uint32_t f : {kPieces, kTrainerSpec, kNormalizerSpec})
    if (std::find(fields.begin(), fields.end(), f) == fields.end())
      XT_FAIL("--tokenizer-model " << path << ": incomplete SentencePiece model (no "
                                   << (f == kPieces ? "pieces" : f == kTrainerSpec ? "trainer spec" : "normalizer spec")
                                   << "; a truncated file?)");
  c->fingerprint_ = fnv1a64(bytes.data(), bytes.size(), fnv1a64("xtrain-spm-v1", 13));
  c->bytes_ = bytes;
  std::vector<int32_t> nl, ab, a;  // a: "a" then "b" appended
  c->encode_call("\n", &nl);
  c->encode_call("a\nb", &ab);
  c->encode_call("a", &a);
  c->encode_call("b", &a);
  c->drops_newlines_ = nl.empty() && ab == a;
  return c;
}

void Codec::encode_call(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  const sentencepiece::util::Status st = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!st.ok()) XT_FAIL(path_ << ": SentencePiece encode failed: " << st.ToString());
  out->insert(out->end(), ids.begin(), ids.end());
}

void Codec::encode(std::string_view text, std::vector<int32_t>* out, const std::function<void(size_t)>& bytes_done) const {
  if (!drops_newlines_) {
    encode_call(text, out);
    if (bytes_done) bytes_done(text.size());
    return;
  }
  size_t next_report = Tokenizer::kEncodeProgressBytes;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.size();
    if (text.size() - pos > kChunkBytes) {
      const size_t nl = text.find('\n', pos + kChunkBytes);
      if (nl != text.npos) end = nl + 1;
    }
    encode_call(text.substr(pos, end - pos), out);
    pos = end;
    if (bytes_done && pos >= next_report && pos < text.size()) {
      bytes_done(pos);
      next_report = pos + Tokenizer::kEncodeProgressBytes;
    }
  }
  if (bytes_done) bytes_done(text.size());
}

std::string Codec::decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size())
      XT_FAIL("decode: token id " << id << " is outside the vocabulary [0, " << vocab_size() << ")");
  return sp_->DecodeIds(std::vector<int>(ids.begin(), ids.end()));
}

int Codec::vocab_size() const { return sp_->GetPieceSize(); }
int Codec::eos_id() const { return sp_->eos_id(); }
std::string Codec::piece(int id) const { return sp_->IdToPiece(id); }

int Codec::special_id(const std::string& role) const {
  const int id = role == "bos" ? sp_->bos_id() : role == "eos" ? sp_->eos_id() : role == "unk" ? sp_->unk_id() : sp_->pad_id();
  return id >= 0 && id < vocab_size() ? id : -1;
}

}  // namespace xtrain::spm
