// Inference over a GPT's parameters: logits for a batch of token sequences without targets, and
// incremental decoding with a key/value cache (prefill the prompt, then one token at a time). The blocks
// are the training forward's (block_forward, src/model/block.h) with Backend::attention_decode for the
// cache, so the logits are the training forward's bit for bit when the backend computes each row alone
// (RowKernels::per_row, backend.h: per-row GEMMs, and on CUDA the training attention through the decode
// kernel); with the fast kernels they differ in the last bits (BLAS and cuBLASLt pick kernels by row count,
// and CUDA's decode attention is not the training's flash/cuDNN kernel).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace xtrain {

class Decoder {
 public:
  // Decoder: B sequences of up to maxT positions over `model`'s parameters (used in place, not copied;
  // the model must outlive the decoder). Holds the caches, 2 * L * B * maxT * KVH*HS activations, and
  // scratch for B*maxT positions (backend memory). Throws Error when B < 1. The weights are prepared for
  // the GEMMs (Backend::prepare_weights) here and at reset(), not per append: the cache already assumes
  // the parameters do not change between resets. cuda_graph: where the backend records graphs (CUDA), the one-token steps of
  // append (Tn = 1, last positions only) are recorded once as a graph (Backend::capture_graph) and
  // launched from then on: the same kernels on the same buffers, so the same logits bit for bit, without
  // a launch per kernel; recorded again after reset(). Where recording fails the decoder launches each
  // kernel, as with cuda_graph false. Several decoders (several models) may share a backend: the backend
  // keeps one prepared copy of weights, so an append that finds it no longer holds this model's
  // (Backend::weights_generation moved: another model's forward or decoder, a write into the parameters)
  // prepares them again, and records its graph again, first. Decoders of one model do not disturb each other.
  Decoder(GPT& model, int B, bool cuda_graph = true);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  int batch() const { return B_; }
  int vocab_size() const { return cfg_.V; }
  int context() const { return cfg_.maxT; }  // positions the cache holds (the model's maxT)
  int position() const { return pos_; }  // positions already in the cache (tokens per sequence)
  bool graph_recorded() const { return graph_ != nullptr; }  // one-token steps launch a recorded graph
  // reset: empties the cache (its contents are simply overwritten later) and reads the weights again.
  void reset();
  // restart: empties the cache and keeps the prepared weights and the recorded one-token graph (it reads
  // the position from device memory): for a new window over unchanged parameters, e.g. a cropped context.
  void restart() { pos_ = 0; }

  // append: tokens host (B,Tn) int32 in [0, V): the next Tn tokens of every sequence, at positions
  // [position(), position() + Tn) (all B sequences advance together). Runs the forward for them, keeps
  // their keys and values, and returns host fp32 logits over the vocabulary (padding columns dropped):
  // (B,Tn,V) when all_positions, else (B,V) for the last new position of each sequence. The reference
  // stays valid until the next call. Throws Error for a token outside [0, V), Tn < 1, or a position
  // past the model's context maxT.
  const std::vector<float>& append(const int32_t* tokens, int Tn, bool all_positions);

  // forward: logits (B,T,V) for whole sequences, tokens host (B,T): reset() then append(all positions).
  const std::vector<float>& forward(const int32_t* tokens, int T) {
    reset();
    return append(tokens, T, true);
  }

 private:
  void* row(const DeviceBuffer<unsigned char>& buf, size_t elems) const;  // activation at element offset
  // blocks_and_head: the forward after the encoder for the Tn positions in x_ (attention at the position
  // held in device memory, pos_dev_), logits into logits_ (`rows` rows); device work only.
  void blocks_and_head(int Tn, bool all_positions);
  // prepare_weights: the backend's weight copy made from this model's parameters (weights_generation_)
  void prepare_weights();

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
  DeviceBuffer<unsigned char> x_, x2_, ln_, qkv_, atty_, branch_, fch_, fgelu_, logits_;
  DeviceBuffer<float> mean_, rstd_;
  DeviceBuffer<int32_t> tokens_;  // the first new position (pos_dev_), then up to B*maxT token ids (tok_dev_)
  int32_t *pos_dev_ = nullptr, *tok_dev_ = nullptr;
  std::vector<int32_t> staging_;  // host: the tokens and the position, copied in one transfer
  bool use_graph_ = true, graph_failed_ = false;
  std::unique_ptr<StepGraph> graph_;  // the one-token step, recorded
  std::vector<DeviceBuffer<unsigned char>> kcache_, vcache_;  // per layer (B,maxT,KVH*HS)
  std::vector<unsigned char> host_raw_;                       // logits as copied from the device
  std::vector<float> host_logits_;
};

}  // namespace xtrain
