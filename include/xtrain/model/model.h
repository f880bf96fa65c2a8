// GPT decoder in two families (GPTConfig::arch): GPT-2 (Radford et al. 2019: token + learned position
// embeddings, pre-LN blocks with a GELU MLP, tied head) and Llama (Touvron et al. 2023: RMSNorm, rotary
// positions, SwiGLU MLP, no biases, tied or own head); causal self-attention with grouped-query heads
// (Ainslie et al. 2023) in both. Written once against Backend&.
// All parameters live in ONE contiguous buffer and the gradients in a buffer of the same layout,
// so the data-parallel gradient all-reduce is one call (llm.c).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/model/model_params.h>

namespace xtrain {

struct BlockActs;   // src/model/block.h
struct BlockGrads;

// Arch: the model family (--arch; Hugging Face's model_type names). Stored as int32 in checkpoints.
enum class Arch : int32_t { gpt2 = 0, llama = 1 };
// parse_arch: "gpt2" | "llama"; throws UsageError naming --arch otherwise. to_string gives the word back.
Arch parse_arch(const std::string& s);
const char* to_string(Arch a);

// The family traits: what each part of a model is, one row per family (kFamilyTraits). The model code
// (block, step, decoder, layout, init, validation) asks GPTConfig::traits(), never the family, so a new
// family built from these parts is one row here (docs/extending.md says what else a new part needs).
enum class NormKind { layernorm, rmsnorm };  // LayerNorm (w, b; eps 1e-5) or RMSNorm (w; eps norm_eps)
enum class PositionKind { learned, rotary }; // wpe added to the token embeddings, or rotary on q, k (rope_theta)
enum class MlpKind { gelu, swiglu };         // fc (F) then GELU, or fc (2F: [gate | up]) then SwiGLU
struct FamilyTraits {
  Arch arch;
  const char* name;          // --arch's word (Hugging Face's model_type)
  NormKind norm;
  PositionKind positions;
  MlpKind mlp;
  bool biases;               // the linear layers and norms have biases (model_params.h: the ParamIn::gpt2 vectors)
  bool scaled_residual_init; // normal_residual rows N(0, 0.02/sqrt(2L)) (GPT-2 sec. 2.3), else N(0, 0.02)
  bool untied_head;          // --tie-embeddings false is allowed (its own lm_head)
};
inline constexpr FamilyTraits kFamilyTraits[] = {
    // arch        name     norm                positions             mlp              biases scaled untied
    {Arch::gpt2, "gpt2", NormKind::layernorm, PositionKind::learned, MlpKind::gelu, true, true, false},
    {Arch::llama, "llama", NormKind::rmsnorm, PositionKind::rotary, MlpKind::swiglu, false, false, true},
};
constexpr bool families_in_order() {
  for (int i = 0; i < int(sizeof(kFamilyTraits) / sizeof(kFamilyTraits[0])); ++i)
    if (static_cast<int>(kFamilyTraits[i].arch) != i) return false;
  return true;
}
static_assert(families_in_order(), "kFamilyTraits: one row per Arch, in enum order");

// The accepted RMSNorm epsilons (--norm-eps, a model directory's rms_norm_eps): Llama models use 1e-5
// or 1e-6 and Hugging Face configs go down to 1e-12; the epsilon is added to a mean square of ~1, so a
// larger one than 1 outweighs it and stops normalizing, and one far below 1e-12 (1e-300 reads as float 0)
// is no epsilon at all.
inline constexpr float kMinNormEps = 1e-12f, kMaxNormEps = 1.0f;

struct GPTConfig {
  int V = 50257;  // vocabulary size (the tokenizer's; targets and token ids lie in [0, V))
  int maxT = 128; // context length (rows of wpe)
  int C = 128;    // model width (embedding channels)
  int L = 4;      // layers
  int NH = 4;     // query heads
  int KVH = 4;    // key/value heads (GQA; NH % KVH == 0)
  int HS = 32;    // head size
  int F = 512;    // MLP hidden width (llama: SwiGLU's intermediate size)
  // The family and its fields (gpt2: the defaults, never anything else; validate() refuses others).
  Arch arch = Arch::gpt2;
  float norm_eps = 1e-5f;       // RMSNorm's eps (llama; GPT-2's LayerNorm keeps its 1e-5, backend.h), in [kMinNormEps, kMaxNormEps]
  float rope_theta = 10000.0f;  // rotary base theta (llama; backend/rotary.h)
  int32_t tie_embeddings = 1;   // 1: the head is wte; 0: its own lm_head (llama only). int32: checkpoint field
  // traits: the family's parts (kFamilyTraits); the model code asks these, not the family
  const FamilyTraits& traits() const { return kFamilyTraits[static_cast<int>(arch)]; }
  bool rmsnorm() const { return traits().norm == NormKind::rmsnorm; }
  bool rotary() const { return traits().positions == PositionKind::rotary; }
  bool swiglu() const { return traits().mlp == MlpKind::swiglu; }
  // fc_width: the fc layer's outputs, F, or 2F for SwiGLU ([gate | up], swiglu_forward's (N,2F) input)
  int fc_width() const { return swiglu() ? 2 * F : F; }
  // llama: the family itself, for the file formats that name it (Hugging Face's config.json and tensor
  // names, src/serve); the model code asks traits() instead
  bool llama() const { return arch == Arch::llama; }
  bool tied() const { return tie_embeddings != 0; }
  int qkv_width() const { return QkvLayout::row_width(NH, KVH, HS); }  // qkv row (qkv_layout.h)
  // Vp: V rounded up to a multiple of 64 (GPT-2: 50304, as llm.c): the rows of wte and the row stride
  // of the logits, so every logits/wte row starts 256-byte aligned for the lm_head GEMMs. Rows
  // [V, Vp) of wte start at zero and are never a target, so they get no gradient and stay zero
  // (weight decay of zero is zero). Derived, not stored: checkpoints keep V.
  int Vp() const { return (V + 63) / 64 * 64; }
  // Upper limits of the sizes (command line, config.json and checkpoints alike): every tensor
  // dimension and product stays far from 2^31.
  static constexpr int kMaxDim = 1 << 16, kMaxHeads = 1 << 12, kMaxHeadDim = 1 << 12, kMaxLayers = 1 << 12,
                       kMaxFfn = 1 << 18, kMaxSeq = 1 << 20;
  // the vocabulary (set by the tokenizer, no option): the largest real ones hold ~262k tokens; the
  // limit keeps Vp() and V x C far from int overflow
  static constexpr int kMaxVocab = 1 << 24;
  // check_size: throws UsageError "<option> = <value> is too large (limit <limit>)" for the first size
  // above its limit (kSizeLimits, in its order); sizes <= 0 pass (validate names them). The one check
  // of the limits: validate() calls it, and the trainer's options call it on the sizes as given,
  // before any arithmetic on them.
  void check_size() const;
  // validate: throws UsageError naming the option for inconsistent sizes or one above its limit
  // (check_size), for an odd head size with llama (rotary pairs), a non-positive or non-finite
  // --norm-eps / --rope-theta, and for llama fields other than their defaults with gpt2.
  void validate() const;
  // num_params: the floats of the flat parameter buffer of this model (param_layout's elements).
  size_t num_params() const;
  std::string describe() const;  // one line for logs
};

// TokenIdField: a special-token id a model file records beside the model, by its field: config.json's
// and generation_config.json's bos_token_id, eos_token_id, pad_token_id ("eos_token_id[1]" for an
// element of a list, as Llama 3's generation_config.json gives).
struct TokenIdField {
  std::string field;
  long long id = 0;
};

// check_model_config: the one check of a model configuration read from or written to a file (a
// checkpoint's header, config.json, generation_config.json, an export): validate(), as Error "<what>:
// <validate's message>" (exit 1: the file's content, not the command line, is wrong), and each of
// token_ids a token of the vocabulary: Error "<what>: <field> <id> is not a token id of the vocabulary
// (vocab_size V: ids 0 to V-1)" for one negative or >= V. Every loader and writer calls it, so a model one
// of them refuses is refused by all, and no file records a model xtrain cannot build.
void check_model_config(const GPTConfig& cfg, const std::string& what, const std::vector<TokenIdField>& token_ids = {});

// The size limits, each with the option that sets the size (messages name it; for a checkpoint or
// config.json too, as the option is how a user changes it).
struct SizeLimit {
  int GPTConfig::*size;
  int limit;
  const char* option;
};
constexpr SizeLimit kSizeLimits[] = {
    {&GPTConfig::C, GPTConfig::kMaxDim, "--dim"},         {&GPTConfig::NH, GPTConfig::kMaxHeads, "--heads"},
    {&GPTConfig::KVH, GPTConfig::kMaxHeads, "--kv-heads"}, {&GPTConfig::HS, GPTConfig::kMaxHeadDim, "--head-dim"},
    {&GPTConfig::L, GPTConfig::kMaxLayers, "--layers"},   {&GPTConfig::F, GPTConfig::kMaxFfn, "--ffn"},
    {&GPTConfig::maxT, GPTConfig::kMaxSeq, "--seq"},
};

// One tensor carved out of the flat parameter buffer.
struct ParamTensor {
  std::string name;          // e.g. "h3.attn.qkv.w"
  std::vector<int> shape;    // e.g. {QKV, C}
  size_t offset = 0, count = 0;  // elements into the flat buffer
  bool decay = false;        // AdamW weight decay applies (the spec's; 2-D weights only)
  const ParamSpec* spec = nullptr;  // its row of the parameter table (model_params.h)
  int layer = -1;            // its block, -1 for the embeddings and the final LayerNorm
};

// param_layout: every tensor of the parameter table (model_params.h) in buffer order, the tensors
// contiguous: kEmbedParamTable, kLayerParamTable for each of the L blocks, kFinalParamTable.
// Tensor i of a block is at layer_param_index(l, i).
// A row absent from cfg's family (param_present false: biases and wpe for llama, lm_head when tied) is
// a tensor of zero elements (shape[0] == 0) at its place.
std::vector<ParamTensor> param_layout(const GPTConfig& cfg);
// param_present: whether table row s has elements in a model of cfg (ParamIn, model_params.h).
bool param_present(const GPTConfig& cfg, const ParamSpec& s);

// Dropout context for one forward/backward: p and one key per local sequence, derived from
// (seed, step, global sequence index) so masks do not depend on world size or micro-batching.
struct DropoutKeys {
  float p = 0.0f;
  std::vector<uint64_t> seq_keys;  // (B) base key per local sequence
};

// Fp8Linears (--fp8): the linear layers that multiply in FP8 where the backend has it (Backend::set_fp8_weights,
// CUDA bf16 on compute capability 8.9 or newer): `mlp` the MLP's two of every block (fc: SwiGLU's gate and up
// projections or GELU's fc, and fc_proj), `head` the output head (Vp,C). Everything else stays bf16.
struct Fp8Linears {
  bool mlp = false;
  bool head = false;
  bool any() const { return mlp || head; }
};
// parse_fp8_linears: "none", "mlp", "head" or a comma-separated list of them ("mlp,head"); throws UsageError
// naming --fp8 for anything else. fp8_linears_name: the canonical spelling ("none", "mlp", "head", "mlp,head").
Fp8Linears parse_fp8_linears(const std::string& text);
std::string fp8_linears_name(const Fp8Linears& which);

// TrainMemory: what training one rank needs, in bytes (doubles: an estimate that never overflows,
// whatever the sizes asked for).
struct TrainMemory {
  double num_params = 0;   // parameters of the model
  double weights = 0;      // params + grads + AdamW m and v (4 x num_params x 4 bytes) + the backend's
                           // copy of the weights for its GEMMs (num_params x Backend::weight_copy_bytes()) and
                           // the FP8 copies of --fp8 (2 bytes per selected parameter)
  double activations = 0;  // the activation table (model_acts.h) for (B, T), tokens and targets
  double scratch = 0;      // --fp8: the largest scratch of one product's casts (matmul.cu), held while it runs
  double total() const { return weights + activations + scratch; }
};
// estimate_train_memory: the memory GPT(cfg, be, recompute) with set_logits_chunk_rows(logits_chunk_rows)
// and a training step on B sequences of T tokens take on `be` (its activation dtype and attention scratch;
// buffers shared under `recompute` counted once; the logits buffer of one chunk of rows).
// fp8 (--fp8): where `be` makes FP8 copies (Backend::fp8_unavailable empty), those of the matrices it takes (2 bytes
// per parameter: both layouts) in `weights`, and the casts' largest scratch in `scratch`.
TrainMemory estimate_train_memory(const GPTConfig& cfg, int B, int T, const Backend& be, int recompute = 0,
                                  int logits_chunk_rows = 0, const Fp8Linears& fp8 = {});
// check_train_memory: throws Error "the model needs about X GiB per rank (...) but ... GiB are
// available ..." when `ranks_sharing` ranks of this estimate exceed be.available_memory_bytes()
// (no check where that is unknown). Called before the model is allocated, so an oversized model
// is one line naming the estimate instead of an allocation failure at step 1.
void check_train_memory(const GPTConfig& cfg, int B, int T, const Backend& be, int ranks_sharing, int recompute = 0,
                        int logits_chunk_rows = 0, const Fp8Linears& fp8 = {});

// auto_recompute: --recompute auto's level for a family: 1 where the MLP activation is its own
// elementwise pass over a kept product (SwiGLU: silu(gate) * up from the kept gate/up matmul output, so
// recomputing it costs one such pass and saves an (N, F) buffer per layer), 0 where it is fused into the
// fc matmul on CUDA (GELU: recomputing it repeats that matmul, ~2% of a GPT-2 124M step).
inline int auto_recompute(const GPTConfig& cfg) { return cfg.traits().mlp == MlpKind::swiglu ? 1 : 0; }


class GPT {
 public:
  // recompute (--recompute, llm.c's): 0 keeps every layer's activations for the backward; 1 keeps
  // one MLP activation output buffer for all layers and recomputes act(fch) in the backward; 2 also shares
  // the layernorm outputs ln1, ln2 and recomputes them from the kept layer input (mean/rstd kept).
  // Same ops on the same inputs: losses and gradients are bitwise those of 0; only memory and time
  // change (model_acts.h says which buffers are shared). Throws Error outside [0, 2].
  // with_grads false (a model that only decodes, xtrain_generate): no gradient buffer (grads() is null,
  // zero_grads() and backward() throw Error), which would be the size of the parameters, allocated and zeroed.
  GPT(const GPTConfig& cfg, Backend& be, int recompute = 0, bool with_grads = true);
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return cfg_; }
  int recompute() const { return recompute_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  size_t num_params() const { return num_params_; }
  float* params() { return params_.get(); }  // backend memory, (num_params)
  float* grads() { return grads_.get(); }    // backend memory, same layout; null without grads
  // block_weights: block `layer`'s parameters (views into params(), LayerParam order; null where absent)
  BlockWeights block_weights(int layer);
  // tensor: the parameters of tensor `index` of layout() (layer_param_index, final_param_index, kWte, ...);
  // null for a tensor absent from this family (zero elements), so ops take it as "no bias", "no wpe"
  const float* tensor(size_t index) const;
  // head: the output head's weights (Vp,C): wte when tied, else lm_head
  const float* head() const { return tensor(cfg_.tied() ? size_t(kWte) : final_param_index(cfg_.L, kLmHead)); }
  Backend& backend() { return be_; }
  // logits: the logits (B,T,Vp) of the last forward(train=false), backend memory in the activation type
  // (forward(train=true) overwrites them with dlogits); null before the first forward. Throws Error where
  // that forward ran the head in more than one chunk of rows (set_logits_chunk_rows): the buffer holds the
  // last chunk only (the decoder, inference.h, keeps whole logits).
  const void* logits() const;
  // set_logits_chunk_rows (--logits-chunk-rows): the rows of each chunk in which forward_pass runs the head,
  // the loss and (training) the head's backward; the logits buffer holds one chunk. 0 (the default) =
  // automatic: all rows where their logits fit in a bound, else the fewest equal chunks under it
  // (src/model/model_acts.h, kLogitsChunkBytes, logits_chunk_rows). Within a row nothing changes; the
  // head's weight gradient is summed chunk by chunk, so another chunking changes it in the last bits (fp32
  // summation order).
  // A change takes effect at the next set_batch, which allocates the activation buffers again. Throws
  // Error for rows < 0.
  void set_logits_chunk_rows(int rows);
  int logits_chunk_rows() const { return logits_chunk_rows_; }
  // set_fp8 (--fp8): hands the selected weights to the backend (Backend::set_fp8_weights), whose matmuls with
  // them then multiply in FP8 from the next forward on. Returns {taken, selected}: the matrices the backend took
  // and those `which` names (a weight whose dimensions are not multiples of 16, or that does not start 16-byte
  // aligned, stays bf16). Throws UsageError where the backend has no FP8.
  std::pair<size_t, size_t> set_fp8(const Fp8Linears& which);
  const Fp8Linears& fp8() const { return fp8_; }

  // init_params: GPT-2 initialization, identical for a given seed on every rank and backend:
  // weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)) (GPT-2 paper, sec. 2.3), biases 0,
  // LayerNorm weights 1. Drawn on the host from rng.h streams keyed by (seed, tensor index).
  void init_params(uint64_t seed);

  // forward: tokens, targets host (B,T) int32 with T <= maxT. Returns the SUM of the B*T per-position
  // cross-entropy losses (nats). When `train`, dropout (when keys given and p > 0) is applied, and the
  // head's backward runs here, chunk by chunk of rows right after each chunk's fused loss (dlogits = dloss
  // * (softmax - onehot)): it ADDS the head's weight gradient (lm_head, or wte's head part when tied) into
  // grads(), or WRITES it there with `grads` Grad::assign (the first chunk assigns, the others add; the
  // backward() of this forward must take the same mode), and leaves the gradient at the final norm's output
  // for backward(); throws Error for a model without gradients. Equal to set_batch, then forward_pass, then
  // loss_sum.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T, bool train, float dloss,
                 const DropoutKeys* dropout, Grad grads = Grad::accumulate);
  // The three parts of forward, for a step recorded as a graph (Backend::capture_graph): set_batch
  // copies the batch to the model's device buffers (the host-device copy a recording may not hold) and
  // refuses backward() until a forward of it; forward_pass queues the forward of that batch (device work
  // only; B, T as given to set_batch); loss_sum waits for the queued work and returns the sum of the
  // per-position losses of the last forward run on the device, of a (B,T) batch: the caller names the
  // shape, since a launch of a recorded forward runs no host code (B, T must fit the buffers).
  void set_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  void forward_pass(int B, int T, bool train, float dloss, const DropoutKeys* dropout, Grad grads = Grad::accumulate);
  double loss_sum(int B, int T);
  // position_losses: the per-position losses (B,T) of the last forward run on the device (nats, fp32, the
  // cross-entropy kernel's own values: -log p(target)) copied to `out` (host, B*T floats); the evaluations
  // (src/eval/) read the log-probabilities of chosen positions from them. Same bounds as loss_sum.
  void position_losses(float* out, int B, int T);
  // buffers_generation: changes whenever the activation or batch buffers are reallocated (a larger
  // batch), so a graph recorded with their addresses knows it must be recorded again.
  uint64_t buffers_generation() const { return buffers_generation_; }
  // backward: after forward(train=true): ADDS d(sum of losses * dloss)/d(params) into grads(), for
  // that forward's batch (grads accumulate: the later micro-steps of a step), or WRITES it there (Grad::assign:
  // the first micro-step, instead of zero_grads() and an accumulating backward, with no memset of grads() and no
  // read of what it held: the same bits on the CPU backend; on CUDA cuBLAS may take another kernel, hence another
  // fp32 summation order, for a GEMM's beta 0). Assigned, each weight gradient is written by its first writer (the
  // matmuls' beta 0, the norms' and biases' column sums stored); the embeddings' scatter-add, which touches only
  // the rows the batch uses, accumulates into wte's and wpe's gradients after a zeroing of just those two (a tied
  // wte's is first written whole by the head). The head's weight gradient is not written here: the forward wrote
  // it (head and loss in chunks of rows), with its own `grads`, which must be this one (Error otherwise). Throws
  // Error without a preceding forward(train=true).
  void backward(Grad grads = Grad::accumulate);
  // zero_grads: grads() = 0 (one memset of the buffer).
  void zero_grads();
  // GradReadyHook: called by backward() with an element offset into grads() each time every gradient
  // at that offset and above is final for this backward: after lnf, after each layer l (its first
  // tensor's offset), and 0 at the end (the embeddings, which the tied head also writes). Called when
  // the work is queued on the backend, not when it has run. The bucketed all-reduce starts buckets
  // from it (src/train/grad_buckets.cpp); an empty hook (the default) is never called.
  using GradReadyHook = std::function<void(size_t offset)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // memory_entries: the model's buffers for the memory report (train/memory_report.h), bytes as requested:
  // the parameters by table row (model_params.h; a block's row summed over the L layers), the gradient
  // buffer, the activation table's rows (model_acts.h) for the buffers' (B,T) (a per-layer row summed over
  // the buffers kept: L, or 1 where --recompute shares it), tokens and targets (activations). No
  // activation rows before the first forward.
  std::vector<MemoryEntry> memory_entries() const;

 private:
  void ensure_acts(int B, int T);
  // act: layer l's activation `which` (LayerAct, model_acts.h), the shared buffer where recompute
  // shares it; gact: global activation `which` (GlobalAct)
  void* act(int l, int which) const;
  void* gact(int which) const;
  float* param(int layer, int which);
  // block_acts: layer l's activation buffers for block_forward / block_backward; block_grads: its
  // parameter gradients (views into grads(), null where absent)
  BlockActs block_acts(int l) const;
  BlockGrads block_grads(int l, Grad mode);
  // head_and_loss: the head, the fused loss and, when training, the head's backward over the N rows of
  // lnf in chunks of logits_chunk_rows, its weight gradient written with `grads` by the first chunk
  // (model_step.cpp)
  void head_and_loss(int N, bool train, Grad grads);

  GPTConfig cfg_;
  Backend& be_;
  int recompute_ = 0;
  int logits_chunk_rows_ = 0;  // set_logits_chunk_rows; 0 = automatic
  Fp8Linears fp8_;              // set_fp8
  int logits_chunks_ = 0;      // the chunks of the last forward's head (logits() needs 1)
  int logits_rows_ = 0;        // the logits buffer's rows (ensure_acts: the largest chunk run in these buffers)
  Grad fwd_grads_ = Grad::accumulate;  // how the last training forward wrote the head's gradient (backward checks)
  std::vector<ParamTensor> layout_;
  size_t num_params_ = 0;
  DeviceBuffer<float> params_, grads_;
  // activations for the current (B,T); reallocated only when B*T grows. Raw bytes: the activation
  // table (src/model/model_acts.h) gives each buffer's shape, element count and storage type.
  int B_ = 0, T_ = 0;
  uint64_t buffers_generation_ = 0;
  int batch_B_ = 0, batch_T_ = 0;  // the batch set_batch copied (forward_pass checks its B, T against it)
  // the batch of the last forward, which backward() differentiates (may be smaller than B_); 0 until a
  // forward with train=true (backward needs its dlogits)
  int fwd_B_ = 0, fwd_T_ = 0;
  std::vector<DeviceBuffer<unsigned char>> acts_;
  DeviceBuffer<int32_t> tokens_, targets_;
  const DropoutKeys* dropout_ = nullptr;
  float dloss_ = 0.0f;
  GradReadyHook grad_ready_;
};

}  // namespace xtrain
