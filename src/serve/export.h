// Model directories: what `xtrain_export` writes and what `xtrain_mpi --init-from` and
// `xtrain_generate --model` read. A directory holds model.safetensors, config.json and the GPT-2
// tokenizer files vocab.json (= encoder.json) and merges.txt (= vocab.bpe), in one of two layouts
// (docs/serving.md):
//   hf:     Hugging Face GPT2LMHeadModel (tensor names transformer.*, Conv1D (in, out) weights, V rows
//           of wte, head tied to wte); config.json model_type "gpt2". Needs KVH == NH and NH*HS == C.
//   xtrain: xtrain's own names and (out, in) shapes from param_layout, wte with V rows; config.json
//           model_type "xtrain-gpt" with n_kv_head and head_dim. Any xtrain shape.
// The conversions between a layout and xtrain's flat parameter buffer are written once, here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/lock.h"
#include "model/model.h"
#include "serve/safetensors.h"

namespace xtrain {

enum class ModelLayout { Hf, Xtrain };

// File names inside a model directory.
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kVocabFile = "vocab.json";   // GPT-2 encoder.json
inline constexpr const char* kMergesFile = "merges.txt";  // GPT-2 vocab.bpe
const char* layout_name(ModelLayout l);  // "hf" | "xtrain"

// hf_unsupported: "" when GPT-2 (hence the hf layout) can express cfg, else the one-line reason
// (e.g. "--kv-heads 2 < --heads 4: GPT-2 has no grouped-query attention").
std::string hf_unsupported(const GPTConfig& cfg);

// A loaded model directory.
struct ModelDir {
  GPTConfig cfg;
  std::vector<float> params;  // (num_params) in param_layout(cfg) order; wte rows [V, Vp) zero
  ModelLayout layout = ModelLayout::Hf;
  std::string vocab_json, merges_txt;  // tokenizer paths inside the directory ("" when absent)
};

// read_model_config: cfg from <dir>/config.json (either layout; the hf layout also accepts configs
// written by transformers, with n_inner null = 4 x n_embd). Throws Error "<dir>/config.json: <cause>"
// for a missing file, bad JSON, a missing/non-integer size, or a GPT-2 variant xtrain does not
// compute (activation other than gelu_new/gelu_pytorch_tanh, layer_norm_epsilon != 1e-5, untied head,
// scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn).
GPTConfig read_model_config(const std::string& dir, ModelLayout* layout = nullptr);

// load_model_dir: config.json + model.safetensors -> host parameters. Accepts files saved by
// transformers (keys with or without the "transformer." prefix; the non-persistent attn.bias /
// attn.masked_bias buffers and an lm_head.weight equal to wte are ignored; F16/BF16 widened).
// Throws Error naming the file, and for a wrong tensor "tensor <name>: expected shape [..], found [..]";
// a missing or unexpected tensor is an Error naming it.
ModelDir load_model_dir(const std::string& dir);

// fit_to_config: adapts a loaded model to a training config that may differ only in maxT (fewer
// positions: the first rows of wpe are kept) and must otherwise equal it; throws Error naming the
// tensor with expected and found shape otherwise.
std::vector<float> fit_to_config(const ModelDir& m, const GPTConfig& want);

// export_tensors: the layout's tensors for params (param_layout(cfg) order, num_params floats).
// `storage` receives the transposed copies that the returned views point into (keep it alive).
// Throws Error with hf_unsupported()'s reason when the hf layout cannot express cfg.
std::vector<StTensorF32> export_tensors(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                                        std::vector<std::vector<float>>& storage);

// model_config_json: config.json text for cfg in that layout (deterministic: sorted keys, 2-space
// indent, trailing newline). hf: model_type gpt2, architectures [GPT2LMHeadModel], n_embd, n_layer,
// n_head, n_positions, n_inner, vocab_size, layer_norm_epsilon 1e-5, activation_function
// gelu_new, dropouts 0, torch_dtype float32, tie_word_embeddings true; eos (and for hf bos) token id
// eot_id when >= 0.
std::string model_config_json(const GPTConfig& cfg, ModelLayout layout, int eot_id = -1);

// Bytes of a whole export, in memory: file name -> contents (model.safetensors, config.json,
// vocab.json, merges.txt). Deterministic for given inputs. Throws Error when the tokenizer files do
// not load, their vocabulary size is not cfg.V or (when tokenizer_fingerprint != 0, e.g. a
// checkpoint's) their fingerprint differs, for a Llama model (not exportable yet), and export_tensors' error for hf.
using ExportFiles = std::map<std::string, std::string>;
ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                        const std::string& encoder_json, const std::string& vocab_bpe,
                        uint64_t tokenizer_fingerprint = 0);

// ExportCommit: replaces the files of a model directory all together or not at all. The constructor
// opens dir (created if absent; never through another user's symlink, open_output_directory), takes
// an exclusive lock on dir/.xtrain-export.lock (DirLock: waited for with a line, at most 600 s),
// writes every file completely under a staging name (.xtrain-export.new.<name>, each atomically),
// keeps the previous files as hard links (.xtrain-export.prev.<name>) and renames the new files into
// place. Until keep(), the destructor undoes it: the previous files return (a name that had none is
// removed), so a caller whose next step fails (the registry update) leaves the directory as it was.
// Throws Error "<path>: <cause>" (nothing changed in dir then) for an unwritable directory, a full
// disk or a file size limit, an output name that is a symlink or not a regular file (refused before
// anything is written). A model file of kLongWorkBytes or more gets progress lines (progress.h).
class ExportCommit {
 public:
  ExportCommit(const std::string& dir, const ExportFiles& files);
  ~ExportCommit();  // undo() unless keep() was called; the lock is released after it
  ExportCommit(const ExportCommit&) = delete;
  ExportCommit& operator=(const ExportCommit&) = delete;
  void keep();  // the new files stay; the backups are removed

 private:
  void undo() noexcept;
  OutputLocation out_;
  std::string dir_;
  std::unique_ptr<DirLock> lock_;
  std::vector<std::string> staged_, backed_up_, renamed_;  // file names in dir
};

// write_export: ExportCommit(dir, files).keep(): the files of an export, all or nothing.
void write_export(const std::string& dir, const ExportFiles& files);

}  // namespace xtrain
