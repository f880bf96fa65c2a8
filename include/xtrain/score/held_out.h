// The loss of a model on held-out token streams (--eval NAME=FILES in the trainer, xtrain_eval --loss): the
// mean over consecutive windows, split across ranks so that the value is the same at any world size.
#pragma once

#include <xtrain/comm/host_collectives.h>
#include <xtrain/data/token_stream.h>
#include <xtrain/model/model.h>

namespace xtrain {

// held_out_loss: the mean loss (nats per token) of `model` over consecutive windows of T tokens of `tokens`
// (window j: tokens [j*T, j*T + T], its targets shifted by one), min(max_windows, (n - 1) / T) of them, in
// forwards of `rows_per_forward` windows; forward f on rank f % world of group (null: all here), the
// per-window sums then gathered to every rank and added in window order: the same value at any world size.
// NaN when no window fits. Collective over group.
double held_out_loss(GPT& model, const TokenStream& tokens, int T, int max_windows, int rows_per_forward,
                     HostCollectives* group);

}  // namespace xtrain
