// Scoring multiple-choice items and held-out loss windows (include/xtrain/score/multiple_choice.h,
// held_out.h): batched forwards of the training model, each assigned to one rank by its index, and the
// per-row figures summed over the ranks from one owner each, so every figure is the same at any world size.
#include <xtrain/score/held_out.h>
#include <xtrain/score/multiple_choice.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <xtrain/core/error.h>
#include <xtrain/core/progress.h>

namespace xtrain {

namespace {

// gather_rows: every rank's values of the rows it owns (zeros elsewhere) summed over the group, so each
// row holds its owner's value exactly (x + 0 == x) on every rank. In pieces: the collective takes an int count.
void gather_rows(std::vector<double>* rows, HostCollectives* group) {
  if (!group || group->world_size() == 1) return;
  constexpr size_t kPiece = size_t{1} << 20;
  for (size_t off = 0; off < rows->size(); off += kPiece)
    group->all_reduce_sum_host(rows->data() + off, static_cast<int>(std::min(kPiece, rows->size() - off)));
}

// RowForward: one forward of (B, T) rows without dropout, its per-position losses on the host.
struct RowForward {
  GPT& model;
  std::vector<int32_t> tokens, targets;
  std::vector<float> losses;
  void run(int B, int T) {
    model.set_batch(tokens.data(), targets.data(), B, T);
    model.forward_pass(B, T, false, 0.0f, nullptr);
    losses.resize(static_cast<size_t>(B) * T);
    model.position_losses(losses.data(), B, T);
  }
};

}  // namespace

McTokens tokenize_mc(std::vector<McItem> items, const Tokenizer& tok, const GPTConfig& model, const std::string& path) {
  const int max_len = model.maxT;
  McTokens mc;
  for (const McItem& it : items) {
    mc.first_row.push_back(mc.ids.size());
    const std::vector<int32_t> ctx = tok.encode(it.context);
    for (size_t k = 0; k < it.choices.size(); ++k) {
      const std::vector<int32_t> ch = tok.encode(" " + it.choices[k]);  // the joining space goes with the choice
      const std::string where = path + ":" + std::to_string(it.line) + ": choices[" + std::to_string(k) + "]";
      if (ch.empty()) XT_FAIL(where << ": encodes to no token");
      if (ch.size() > static_cast<size_t>(max_len))
        XT_FAIL(where << ": " << ch.size() << " tokens, more than the model's context of " << max_len
                      << " (no context would be left to score it after)");
      for (const std::vector<int32_t>* part : {&ctx, &ch})
        for (int32_t id : *part)
          if (id < 0 || id >= model.V)
            XT_FAIL(path << ":" << it.line << ": token id " << id << " outside the model's vocabulary [0, " << model.V
                         << ") (the tokenizer is not the model's)");
      std::vector<int32_t> seq = ctx;
      seq.insert(seq.end(), ch.begin(), ch.end());
      const size_t keep = static_cast<size_t>(max_len) + 1;  // inputs seq[:-1] fill the context
      if (seq.size() > keep) seq.erase(seq.begin(), seq.end() - static_cast<std::ptrdiff_t>(keep));
      mc.T = std::max(mc.T, static_cast<int>(seq.size()) - 1);
      mc.ids.push_back(std::move(seq));
      mc.choice_tokens.push_back(static_cast<int>(ch.size()));
      mc.choice_bytes.push_back(it.choices[k].size());
    }
  }
  mc.first_row.push_back(mc.ids.size());
  mc.items = std::move(items);
  return mc;
}

McResult score_mc(GPT& model, const McTokens& mc, int rows_per_forward, HostCollectives* group,
                  const std::function<void(const McProgress&)>& progress) {
  XT_CHECK(rows_per_forward >= 1, "score_mc: rows per forward " << rows_per_forward);
  const int rank = group ? group->rank() : 0, world = group ? group->world_size() : 1;
  const size_t n_items = mc.items.size();
  // forwards: [first item, end item) each, whole items in file order up to rows_per_forward rows
  std::vector<std::pair<size_t, size_t>> forwards;
  for (size_t i = 0; i < n_items;) {
    size_t j = i + 1;
    while (j < n_items && mc.first_row[j + 1] - mc.first_row[i] <= static_cast<size_t>(rows_per_forward)) ++j;
    forwards.emplace_back(i, j);
    i = j;
  }
  McProgress done{0, 0};
  for (size_t f = rank; f < forwards.size(); f += world) done.total += forwards[f].second - forwards[f].first;
  std::vector<double> logprob(mc.rows(), 0.0);
  RowForward fw{model, {}, {}, {}};
  for (size_t f = rank; f < forwards.size(); f += world) {
    const size_t r0 = mc.first_row[forwards[f].first], r1 = mc.first_row[forwards[f].second];
    const int B = static_cast<int>(r1 - r0);
    size_t longest = 0;  // T: the forward's longest row (a function of the file alone, as the forward is)
    for (size_t r = r0; r < r1; ++r) longest = std::max(longest, mc.ids[r].size());
    const int T = static_cast<int>(longest) - 1;
    fw.tokens.assign(static_cast<size_t>(B) * T, 0);  // padding: id 0 after a row's end, never read
    fw.targets.assign(fw.tokens.size(), 0);
    for (size_t r = r0; r < r1; ++r) {
      const std::vector<int32_t>& s = mc.ids[r];
      const size_t at = (r - r0) * static_cast<size_t>(T);
      std::copy(s.begin(), s.end() - 1, fw.tokens.begin() + at);
      std::copy(s.begin() + 1, s.end(), fw.targets.begin() + at);
    }
    fw.run(B, T);
    for (size_t r = r0; r < r1; ++r) {  // the choice's tokens are the row's last targets (causal: padding unseen)
      const size_t len = mc.ids[r].size() - 1, at = (r - r0) * static_cast<size_t>(T);
      double sum = 0;
      for (size_t t = len - mc.choice_tokens[r]; t < len; ++t) sum -= fw.losses[at + t];
      logprob[r] = sum;
    }
    done.done += forwards[f].second - forwards[f].first;
    if (progress) progress(done);
  }
  gather_rows(&logprob, group);

  McResult res;
  res.items = n_items;
  res.choices.resize(mc.rows());
  size_t right[3] = {0, 0, 0};  // acc, acc_norm, acc_token_mean
  for (size_t i = 0; i < n_items; ++i) {
    size_t best[3] = {0, 0, 0};
    double top[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (size_t r = mc.first_row[i]; r < mc.first_row[i + 1]; ++r) {
      res.choices[r] = {logprob[r], mc.choice_tokens[r]};
      const double score[3] = {logprob[r], logprob[r] / static_cast<double>(mc.choice_bytes[r]),
                               logprob[r] / mc.choice_tokens[r]};
      for (int m = 0; m < 3; ++m)
        if (score[m] > top[m]) top[m] = score[m], best[m] = r - mc.first_row[i];  // first of equal maxima
    }
    for (int m = 0; m < 3; ++m) right[m] += best[m] == static_cast<size_t>(mc.items[i].label);
    res.right_logprob += logprob[mc.first_row[i] + mc.items[i].label];
  }
  const double n = static_cast<double>(n_items);
  res.right_logprob /= n;
  res.acc = right[0] / n, res.acc_norm = right[1] / n, res.acc_token_mean = right[2] / n;
  return res;
}

std::function<void(const McProgress&)> mc_progress_line(const std::string& what, std::FILE* out) {
  using Clock = std::chrono::steady_clock;
  auto last = std::make_shared<double>(0.0);
  return [what, out, last, t0 = Clock::now()](const McProgress& p) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s - *last < kMcProgressSeconds || p.done == 0 || p.done >= p.total) return;
    *last = s;
    std::fprintf(out, "eval   | %s | %zu / %zu items | %.1f items/s | eta %s\n", what.c_str(), p.done, p.total, p.done / s,
                 minutes_seconds(s / p.done * static_cast<double>(p.total - p.done)).c_str());
    std::fflush(out);
  };
}

double held_out_loss(GPT& model, const TokenStream& tokens, int T, int max_windows, int rows_per_forward,
                     HostCollectives* group) {
  XT_CHECK(T >= 1 && rows_per_forward >= 1, "held_out_loss: T " << T << ", rows per forward " << rows_per_forward);
  const int rank = group ? group->rank() : 0, world = group ? group->world_size() : 1;
  const size_t n = tokens.size();
  const size_t windows = n > 0 ? std::min<size_t>(std::max(max_windows, 0), (n - 1) / T) : 0;
  if (windows == 0) return std::nan("");
  std::vector<double> sums(windows, 0.0);
  RowForward fw{model, {}, {}, {}};
  std::vector<int32_t> w(static_cast<size_t>(T) + 1);
  const size_t R = static_cast<size_t>(rows_per_forward);
  for (size_t f = rank; f * R < windows; f += world) {
    const size_t j0 = f * R, j1 = std::min(windows, j0 + R);
    const int B = static_cast<int>(j1 - j0);
    fw.tokens.resize(static_cast<size_t>(B) * T);
    fw.targets.resize(fw.tokens.size());
    for (size_t j = j0; j < j1; ++j) {
      tokens.copy(j * T, w.size(), w.data());
      std::copy_n(w.begin(), T, fw.tokens.begin() + (j - j0) * T);
      std::copy_n(w.begin() + 1, T, fw.targets.begin() + (j - j0) * T);
    }
    fw.run(B, T);
    for (size_t j = j0; j < j1; ++j) {
      double s = 0;
      for (int t = 0; t < T; ++t) s += fw.losses[(j - j0) * T + t];
      sums[j] = s;
    }
  }
  gather_rows(&sums, group);
  double total = 0;
  for (double s : sums) total += s;
  return total / (static_cast<double>(windows) * T);
}

}  // namespace xtrain
