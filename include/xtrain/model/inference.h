// Inference over a GPT's parameters: logits for a batch of token sequences without targets, and
// incremental decoding with a key/value cache (prefill the prompt, then one token at a time). The blocks
// are the training forward's (block_forward, src/model/block.h) with Backend::attention_decode for the
// cache, so the logits are the training forward's bit for bit when the backend computes each row alone
// (RowKernels::per_row, backend.h: per-row GEMMs, and on CUDA the training attention through the decode
// kernel); with the fast kernels they differ in the last bits (BLAS and cuBLASLt pick kernels by row count,
// and CUDA's decode attention is not the training's flash/cuDNN kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/model/model.h>

namespace xtrain {

class Decoder {
 public:
  // Decoder: B sequences of up to maxT positions over `model`'s parameters (used in place, not copied;
  // the model must outlive the decoder). Holds the caches, 2 * L * B * maxT * KVH*HS activations, and
  // scratch for B*maxT positions (backend memory). Throws Error when B < 1. The weights are prepared for
  // the GEMMs (Backend::prepare_weights) here, and again only when Backend::weights_generation says the
  // backend's copy no longer holds them: then an append prepares them, and records its graph, again before
  // it runs anything. That covers every write into the parameters the backend sees (copy_to_device, zero,
  // adamw_update: the copy is dropped) and another model's forward or decoder on the same backend (the
  // backend keeps one prepared copy); a write it does not see must be followed by Backend::prepare_weights
  // (backend.h), which refreshes the copy in place. The cache assumes the parameters do not change between
  // resets. cuda_graph: where the backend records graphs (CUDA), the one-token steps of append and
  // append_greedy (Tn = 1, last positions only) are recorded once as a graph (Backend::capture_graph: the
  // forward, then argmax_rows of its B logit rows) and launched from then on: the same kernels on the same
  // buffers, so the same logits bit for bit, without a launch per kernel; kept across reset() (a second
  // generation does not record again). Where recording fails the decoder launches each kernel, as with
  // cuda_graph false. Several decoders (several models) may share a backend; decoders of one model do not
  // disturb each other.
  Decoder(GPT& model, int B, bool cuda_graph = true);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  int batch() const { return B_; }
  int vocab_size() const { return cfg_.V; }
  int context() const { return cfg_.maxT; }  // positions the cache holds (the model's maxT)
  int position() const { return pos_; }  // positions already in the cache (tokens per sequence)
  // graph_recorded: one-token steps launch a recorded graph (append_greedy's, or a run of append_greedy_steps)
  bool graph_recorded() const { return graph_ != nullptr || steps_graph_ != nullptr; }
  int graph_recordings() const { return graph_recordings_; }  // graphs recorded so far (one-token and multi-step)
  double graph_record_seconds() const { return graph_record_s_; }  // host seconds of the recordings so far (0: none)
  // reset: empties the cache (its contents are simply overwritten later) for a new sequence or a new window
  // over unchanged parameters (e.g. a cropped context); keeps the prepared weights and the recorded graph
  // (see the constructor for when they are made again).
  void reset() { pos_ = 0; }

  // append: tokens host (B,Tn) int32 in [0, V): the next Tn tokens of every sequence, at positions
  // [position(), position() + Tn) (all B sequences advance together). Runs the forward for them, keeps
  // their keys and values, and returns host fp32 logits over the vocabulary (padding columns dropped):
  // (B,Tn,V) when all_positions, else (B,V) for the last new position of each sequence. The reference
  // stays valid until the next call. Throws Error for a token outside [0, V), Tn < 1, or a position
  // past the model's context maxT.
  const std::vector<float>& append(const int32_t* tokens, int Tn, bool all_positions);

  // append_greedy: append's forward for the last new position of each sequence, then its greedy next token
  // on the device (Backend::argmax_rows), copying B ids to the host instead of B*V logits. Returns host (B)
  // int32: for sequence b the id sample_token gives with temperature 0 on append's logits (greedy_token,
  // backend/greedy.h), or -1 - v when those logits hold a non-finite value, v the lowest id of one (raise
  // fail_non_finite_logit(v, logit(b, v)) where the sequence is used). The reference stays valid until the
  // next call. Throws as append.
  const std::vector<int32_t>& append_greedy(const int32_t* tokens, int Tn);
  // append_greedy_steps: `steps` one-token steps of greedy decoding on the device: tokens host (B) at
  // position(), then each step's greedy ids (argmax_rows' tokens: a non-finite row's lowest non-finite id) as
  // the next step's tokens. Returns host (steps, B) int32, row k = what append_greedy would return at step k
  // (the same kernels: the same bits); the reference stays valid until the next call. With kGreedySteps steps
  // the whole run is one recorded graph (as the one-token step: the same fallbacks), with one transfer each
  // way, so the host does not wait between tokens; other counts take one append_greedy per step. logit() then
  // reads the last step's logits. Throws as append_greedy, for steps < 1, or past the context.
  static constexpr int kGreedySteps = 8;
  const std::vector<int32_t>& append_greedy_steps(const int32_t* tokens, int steps);
  // rewind: drops positions [pos, position()) (later appends overwrite their cache rows), e.g. to run one
  // step of append_greedy_steps again alone. Throws Error unless 0 <= pos <= position().
  void rewind(int pos);
  // logit: logit v of row `row` of the last append or append_greedy (rows as append returns them), copied
  // from the device and widened to fp32 (for messages: one copy per call). Throws Error outside those rows.
  float logit(int row, int v) const;

  // forward: logits (B,T,V) for whole sequences, tokens host (B,T): reset() then append(all positions).
  const std::vector<float>& forward(const int32_t* tokens, int T) {
    reset();
    return append(tokens, T, true);
  }

 private:
  void* row(const DeviceBuffer<unsigned char>& buf, size_t elems) const;  // activation at element offset
  // blocks_and_head: the forward of Tn positions from the token ids `tokens` (B,Tn) at the position `pos`
  // (both in device memory: the encoder, rotary and attention read it when they run), logits into logits_
  // (B*Tn rows with all_positions, else B); device work only.
  void blocks_and_head(int Tn, bool all_positions, const int32_t* pos, const int32_t* tokens);
  // step: append's device work: checks, the tokens copied, the forward of the Tn positions into logits_
  // (logit_rows_ rows), and with `argmax` (last positions only) argmax_rows into ids_. The one-token step
  // records or launches the graph, which always ends with the argmax.
  void step(const int32_t* tokens, int Tn, bool all_positions, bool argmax);
  // check_append: throws Error unless `positions` more fit the context and tokens (count) are in [0, V)
  void check_append(const int32_t* tokens, int count, int positions) const;
  // prepare_weights: the backend's weight copy made from this model's parameters (weights_generation_)
  void prepare_weights();
  // refresh_weights: prepare_weights and the graphs dropped where the backend's copy no longer holds ours
  void refresh_weights();
  // reserve_logits: logits_ holds `rows` rows (a larger buffer drops the graphs, which write the old one)
  void reserve_logits(int rows);
  // record: whether `graph` holds `work` recorded, recording it once where graphs are used and not failed
  bool record(std::unique_ptr<StepGraph>& graph, bool& failed, const std::function<void()>& work);

  Backend& be_;
  GPTConfig cfg_;
  int B_ = 0, pos_ = 0;
  const float* params_ = nullptr;  // the model's whole parameter buffer (num_params_), for prepare_weights
  size_t num_params_ = 0;
  uint64_t weights_generation_ = 0;  // be_.weights_generation() after our last prepare_weights
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr;
  const float* head_ = nullptr;  // the output head: wte when tied, else lm_head
  std::vector<BlockWeights> layers_;  // per block, views into the model's parameters
  // activations in the backend's activation type (bytes), for up to B*maxT rows; statistics fp32
  DeviceBuffer<unsigned char> x_, x2_, ln_, qkv_, atty_, branch_, fch_, fch_act_, logits_;
  DeviceBuffer<float> mean_, rstd_;
  DeviceBuffer<int32_t> tokens_;  // the first new position (pos_dev_), then up to B*maxT token ids (tok_dev_)
  int32_t *pos_dev_ = nullptr, *tok_dev_ = nullptr;
  std::vector<int32_t> staging_;  // host: the tokens and the position, copied in one transfer
  DeviceBuffer<int32_t> ids_;  // (B) argmax_rows of the last step's logit rows
  DeviceBuffer<int32_t> steps_;  // append_greedy_steps: (kGreedySteps + 1) blocks [position | B token ids]
  DeviceBuffer<int32_t> codes_;  // append_greedy_steps: (kGreedySteps, B) argmax_rows codes
  int logit_rows_ = 0;         // rows of logits_ the last step wrote
  bool use_graph_ = true, graph_failed_ = false;
  std::unique_ptr<StepGraph> graph_;  // the one-token step, recorded
  std::unique_ptr<StepGraph> steps_graph_;  // kGreedySteps one-token steps, recorded
  bool steps_graph_failed_ = false;
  int graph_recordings_ = 0;
  double graph_record_s_ = 0.0;
  std::vector<DeviceBuffer<unsigned char>> kcache_, vcache_;  // per layer (B,maxT,KVH*HS)
  std::vector<unsigned char> host_raw_;                       // logits as copied from the device
  std::vector<float> host_logits_;
  std::vector<int32_t> host_ids_;
  std::vector<int32_t> host_steps_;  // append_greedy_steps' (steps, B) codes
};

}  // namespace xtrain
