// TrainConfig: what one training run is asked to do (model, optimizer, batch, schedule, files).
// Plain data, no MPI or backend: options.h, the data seam and the training loop all read it.
#pragma once

#include <cstdint>
#include <string>

#include <xtrain/model/model.h>
#include <xtrain/train/optim.h>

namespace xtrain {

struct TrainConfig {
  GPTConfig model;
  OptimConfig optim;
  int batch = 16;          // GLOBAL sequences per optimizer step (all ranks, all micro-steps)
  int seq = 128;           // T, tokens per sequence
  int steps = 100;         // optimizer steps to reach (a resumed run continues up to this step)
  // The LR schedule's length (OptimConfig::total_steps, the checkpoint's total_steps); 0 = `steps`. A
  // resumed run extended past its checkpoint's schedule keeps that schedule and trains on at its final
  // learning rate (lr_at, optim.h); see schedule_length().
  int schedule_steps = 0;
  int stop_after = 0;      // end this run after N steps (checkpoint written); schedule still spans `steps`
  int grad_accum = 1;      // micro-steps per optimizer step
  double bucket_mb = 25;   // gradient all-reduce bucket size in MiB, overlapped with backward (0 = one all-reduce)
  float dropout = 0.0f;    // GPT-2 embd/resid dropout probability
  int recompute = -1;      // activation recompute in the backward: 0 none, 1 MLP activation, 2 also the norms (GPT ctor); -1 auto (auto_recompute)
  int logits_chunk_rows = 0;  // rows per chunk of the head + loss (GPT::set_logits_chunk_rows); 0 = automatic
  Fp8Linears fp8;             // --fp8: the linear layers multiplied in FP8 (GPT::set_fp8); none by default
  // --cuda-graph: record the step's forward and backward once and launch them as a CUDA graph where the step
  // allows it (src/train/graph_step.h): auto = on one rank; on = also on several ranks whose communicator records
  // its collectives (NCCL: the bucketed gradient all-reduce inside the graph); off = launch every kernel.
  enum class CudaGraph { off, auto_one_rank, on };
  CudaGraph cuda_graph = CudaGraph::auto_one_rank;
  uint64_t seed = 1337;    // init, batch sampling and dropout streams
  double val_fraction = 0.1;  // tail of the token stream held out for validation
  int val_every = 25;      // validation every N steps (and at the last step); 0 = never
  // --resume: the checkpoint's training tokens (its held-out split), used instead of val_fraction's split
  // when none of --val-fraction, --val-every, --val-data is given; 0 = split by val_fraction
  uint64_t resume_n_train = 0;
  int val_seqs = 64;       // validation sequences (global) per evaluation; also per --eval set
  int eval_batch = 8;      // sequences per forward of the evaluations (--eval windows, --eval-mc choices): the
                           // same at any world size, so their figures are too (src/score/)
  int log_every = 1;       // print a step line every N steps (metrics file gets every step)
  std::string ckpt;        // checkpoint path ("" = none)
  int ckpt_every = 0;      // also write the checkpoint every N steps (0 = only at the end)
  std::string resume;      // checkpoint to resume from ("" = fresh start)
  std::string metrics;     // JSON-lines metrics file (rank 0 writes; "" = none)
  std::string timeline;    // Chrome trace of a few steady-state steps (rank 0 writes; "" = none; timeline.h)
  bool memory_report = false;  // rank 0 prints where its device memory goes after the last step (memory_report.h)

  int schedule_length() const { return schedule_steps > 0 ? schedule_steps : steps; }
};

}  // namespace xtrain
