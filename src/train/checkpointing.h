// The training run's side of checkpoints: what goes into one (write_checkpoint) and what a resume must
// match (restore_checkpoint), under the ranks' agreement. The file format is <xtrain/checkpoint/checkpoint.h>.
#pragma once

#include <cstdint>

#include <xtrain/backend/backend.h>
#include <xtrain/checkpoint/checkpoint.h>
#include <xtrain/comm/host_collectives.h>
#include <xtrain/model/model.h>
#include <xtrain/train/batches.h>
#include <xtrain/train/config.h>
#include <xtrain/train/optim.h>

namespace xtrain {

// write_checkpoint: called by every rank of `group` after `step`: rank 0 copies params, the optimizer's state
// (AdamW's moments; Muon's momentum) and
// metadata to the host, then saves them (save_checkpoint) on a worker thread while every rank keeps
// meeting under the group's deadline (agree_while_working, agree.h), so a write that outlasts
// --comm-timeout does not end the job. Returns the file's XXH3-64 checksum on rank 0, 0 elsewhere. A
// failure (non-finite parameters, which never replace a good checkpoint; an I/O error) ends every
// rank with AgreedFailure, rank 0 printing "step N: <cause>".
uint64_t write_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, Optimizer& opt, Backend& be,
                          HostCollectives& group, int step);

// restore_checkpoint: called by every rank of `group`: each reads cfg.resume on a worker thread while the
// ranks keep meeting under the deadline (agree_while_working), checks that it matches the model
// (description and parameter count), data, batch and schedule configuration (--steps, --lr, --warmup,
// --min-lr-frac, --weight-decay, --grad-clip, --optimizer and the options of the optimizer and schedule; Error
// naming the option otherwise: "--optimizer is adamw in the checkpoint, muon now") and holds possible values
// (finite, second moments >= 0), loads params and the optimizer's state, and returns the step it was
// written after. Rank 0 prints the line "resumed from ...". A failure ends every rank (AgreedFailure).
int restore_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, Optimizer& opt, Backend& be,
                       HostCollectives& group);

}  // namespace xtrain
