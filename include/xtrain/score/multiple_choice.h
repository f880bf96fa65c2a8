// Multiple-choice evaluation (HellaSwag and the like): the items of a file, their tokens, and their scores
// by the log-probabilities a GPT gives each choice after the context. Each choice is scored in its own
// sequence: the context's tokens, then the tokens of " " + choice (tokenized apart, as llm.c's
// hellaswag.py does), cut from the left to the model's context + 1 tokens when longer (lm-eval-harness's
// rule). All choices of several items run in one forward of the training model (GPT::forward), so the
// CPU and CUDA backends run the same code. docs/usage.md, "Evaluating", is the user's account.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <xtrain/comm/host_collectives.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/model/model.h>

namespace xtrain {

// McItem: one question. label: the index of the right choice in `choices`. line: its line in the file (from 1).
struct McItem {
  std::string context;
  std::vector<std::string> choices;
  int label = 0;
  size_t line = 0;
};

// read_mc_file: the items of a JSON-lines file, one object a line (blank lines skipped), zstd-compressed when path
// ends in ".zst" (read as --data's JSON lines are: streamed, each line and the whole bounded), each in one of two forms:
//   HellaSwag's, as published (rowanz/hellaswag, hellaswag_val.jsonl): "endings" (strings), "label" (an integer,
//     or its decimal text as in the Hugging Face copy), and "ctx", or when it is absent "ctx_a" and "ctx_b"
//     joined as the dataset joins them (ctx_a + " " + ctx_b, ctx_a alone when ctx_b is empty);
//   a generic one: "context" (string), "choices" (strings), "answer" (an integer index).
// Other fields are ignored. Throws Error "<path>:<line>: <field>: <cause>" for the first bad line (not JSON, a
// field missing or of the wrong type, an empty context or choice, fewer than 2 choices, an answer outside the
// choices), "<path>: no items" for a file without one, and the JSON lines reader's errors (a file that cannot
// be read, a corrupt or truncated .zst, a line over 256 MiB, a file over a quarter of the available memory).
std::vector<McItem> read_mc_file(const std::string& path);

// McTokens: the tokens of one file's items. Choice k of item i is row first_row[i] + k; a row's sequence is
// ids[row] (context then choice, already cut from the left to at most max_len + 1 tokens) whose last
// choice_tokens[row] tokens are the choice's; choice_bytes[row] is the choice's UTF-8 length in bytes (the
// space before it not counted).
struct McTokens {
  std::vector<McItem> items;
  std::vector<size_t> first_row;  // (items + 1): first_row[items] is the number of rows
  std::vector<std::vector<int32_t>> ids;
  std::vector<int> choice_tokens;
  std::vector<size_t> choice_bytes;
  int T = 0;  // the longest row less its last token (a forward runs (rows, its own longest row's T))
  size_t rows() const { return ids.size(); }
};

// tokenize_mc: the items' rows for `model` (max_len = model.maxT, its context). Throws Error
// "<path>:<line>: choices[k]: ..." for a choice of more than max_len tokens (no context would be left) or one
// that encodes to no token, and "<path>:<line>: token id ..." for an id outside [0, model.V) (a tokenizer
// that is not the model's).
McTokens tokenize_mc(std::vector<McItem> items, const Tokenizer& tok, const GPTConfig& model, const std::string& path);

// McChoiceScore: one choice: logprob = the sum of the natural-log probabilities of its tokens, tokens = how
// many.
struct McChoiceScore {
  double logprob = 0;
  int tokens = 0;
};

// McResult: a file's scores. acc: the share of items whose right choice has the largest logprob; acc_norm: by
// logprob / bytes of the choice (lm-eval-harness's acc_norm); acc_token_mean: by logprob / tokens (llm.c's
// "acc_norm" of hellaswag.py). Ties go to the first choice (numpy's argmax). right_logprob: the mean over the
// items, in file order, of the right choice's logprob (a continuous figure beside the accuracies).
struct McResult {
  size_t items = 0;
  double acc = 0, acc_norm = 0, acc_token_mean = 0;
  double right_logprob = 0;
  std::vector<McChoiceScore> choices;  // per row of McTokens
};

// score_mc: every choice of `mc` through `model` in forwards of up to `rows_per_forward` rows (whole items,
// taken in file order; an item with more choices runs alone) of as many positions as their longest row,
// without dropout. Forward f
// runs on rank f % world of `group` (null: this process does every forward) and the per-choice sums are then
// summed over the ranks (each from one rank, zeros elsewhere), so every rank gets the same result, bit for
// bit, at any world size: a forward's content and shape do not depend on the world. `progress` (may be
// empty) is called after each of this rank's forwards with the items done on this rank. Collective over
// group. Throws Error from the backend.
struct McProgress {
  size_t done = 0, total = 0;
};
McResult score_mc(GPT& model, const McTokens& mc, int rows_per_forward, HostCollectives* group,
                  const std::function<void(const McProgress&)>& progress = {});

// kMcProgressSeconds: mc_progress_line prints at most this often.
inline constexpr double kMcProgressSeconds = 5.0;
// mc_progress_line: a score_mc progress callback that prints "eval   | <what> | <done> / <total> items | <rate>
// items/s | eta <m>m<s>s" to `out` every kMcProgressSeconds from its creation (none for work that ends sooner).
std::function<void(const McProgress&)> mc_progress_line(const std::string& what, std::FILE* out);

}  // namespace xtrain
