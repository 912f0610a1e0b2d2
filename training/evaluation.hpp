#pragma once
// training::CrossEntropyScore and training::NextTokenEvaluator: held-out
// numbers from logits computed without recording (Module::infer).
//
// CrossEntropyScore adds up, batch by batch, the cross-entropy of each row of
// logits against its target (cross_entropy's per-row loss without smoothing,
// in double: the log-sum-exp shifted by the row's maximum), how many rows'
// first argmax is the target, and each row's prediction (that argmax), in
// the order the rows were added.
//
//   training::CrossEntropyScore<float> score;
//   for (...) score.add(model.infer(inputs), labels);
//   score.mean_loss(), score.accuracy(), score.predictions
//
// NextTokenEvaluator is the held-out loss of a language model over a token
// sequence (the mean cross-entropy, in nats, of the next token), the way
// perplexity is measured over a long text: the sequence cut into consecutive
// windows of block_size + 1 tokens overlapping by one (window w starts at
// w * block_size), the last one shorter, so that every token but the first
// is predicted exactly once, from the tokens before it in its window.
// periodic() scores an evenly spread subset of the full-length windows (an
// evaluation during training), full() every window. Windows of one length
// go through model.infer (tokens [B, T] -> logits [B, T, V]) in batches of
// at most batch_rows, in order. Under mpirun (training::Parallel) batch b is
// scored by rank b % P and the sums are added over the job; with
// every_rank (a model whose forward is collective, such as experts sharded
// over the ranks) every rank scores every batch.

#include <cstddef>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../data/token_windows.hpp"
#include "../engine/indices.hpp"
#include "data_parallel.hpp"

namespace xtgrad::training {

template <class T>
struct CrossEntropyScore {
  double loss_sum = 0.0;
  std::size_t rows = 0, correct = 0;
  std::vector<std::size_t> predictions;  // one per row added

  // logits [..., V], one row per target; targets [rows] in [0, V).
  // std::invalid_argument naming the argument when the rows differ or a
  // target is out of range, before anything is added.
  void add(const xt::xarray<T>& logits, const Indices& targets);
  double mean_loss() const { return loss_sum / static_cast<double>(rows); }
  double accuracy() const { return static_cast<double>(correct) / static_cast<double>(rows); }
};

extern template struct CrossEntropyScore<float>;
extern template struct CrossEntropyScore<double>;

// The unigram baseline of a next-token evaluation: the cross-entropy, in
// nats, of the training tokens' frequencies on the held-out tokens,
//   H = -(1/N) sum_n log p(t_n),   p(t) = (count_train(t) + 1) / (N_train + V)
// (add-one smoothing, so that a token seen only in the held-out ones has a
// finite cost), over the N tokens NextTokenEvaluator scores: every held-out
// token but the first, which no window predicts. A model that learned
// nothing about context scores at best about this. std::invalid_argument
// for an id outside [0, vocab_size) or fewer than two held-out tokens.
double unigram_cross_entropy(const Indices& train, const Indices& held_out, std::size_t vocab_size);

class NextTokenEvaluator {
 public:
  // `tokens` (kept by reference): the held-out ids; `subset`: how many
  // windows periodic() scores (0, or more than there are: every full-length one).
  NextTokenEvaluator(const Indices& tokens, std::size_t block_size, std::size_t subset,
                     std::size_t batch_rows, bool every_rank = false);

  template <class Model>
  double periodic(const Model& model, Parallel& parallel) const {
    return loss(model, subset_, parallel);
  }
  template <class Model>
  double full(const Model& model, Parallel& parallel) const {
    return loss(model, all_, parallel);
  }

 private:
  // The windows `which`, as batches of one length and at most batch_rows windows.
  std::vector<std::vector<std::size_t>> batches(const std::vector<std::size_t>& which) const;

  template <class Model>
  double loss(const Model& model, const std::vector<std::size_t>& which, Parallel& parallel) const {
    const std::vector<std::vector<std::size_t>> batched = batches(which);
    const auto ranks = static_cast<std::size_t>(parallel.size());
    double sum = 0.0;
    std::size_t tokens = 0;
    for (std::size_t b = 0; b < batched.size(); ++b) {
      for (const std::size_t w : batched[b]) tokens += windows_[w].second;
      if (!every_rank_ && b % ranks != static_cast<std::size_t>(parallel.rank())) continue;
      std::vector<std::size_t> starts;
      for (const std::size_t w : batched[b]) starts.push_back(windows_[w].first);
      const TokenWindows batch = next_token_windows(tokens_.data(), tokens_.size(), starts,
                                                    windows_[batched[b].front()].second);
      CrossEntropyScore<float> score;  // the batch's sum, then the job's
      score.add(model.infer(batch.inputs), batch.targets);
      sum += score.loss_sum;
    }
    // The job's sum: the mean over ranks times their number.
    if (every_rank_) return sum / static_cast<double>(tokens);
    return parallel.mean(sum) * static_cast<double>(ranks) / static_cast<double>(tokens);
  }

  const Indices& tokens_;
  std::vector<std::pair<std::size_t, std::size_t>> windows_;  // (start, T)
  std::vector<std::size_t> subset_, all_;
  std::size_t batch_rows_;
  bool every_rank_;
};

}  // namespace xtgrad::training
