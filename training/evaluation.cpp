// CrossEntropyScore and NextTokenEvaluator (evaluation.hpp).

#include "evaluation.hpp"

#include <algorithm>
#include <cmath>

#include "../engine/errors.hpp"

namespace xtgrad::training {

template <class T>
void CrossEntropyScore<T>::add(const xt::xarray<T>& logits, const Indices& targets) {
  const detail::Check check("training::CrossEntropyScore::add");
  const std::size_t V = logits.dimension() == 0 ? 0 : logits.shape().back();
  const std::size_t n = targets.size();
  check.shape(V > 0 && logits.size() == n * V, "logits", logits.shape(), "[..., V] of ", n,
              " rows of V > 0 classes, one per target");
  detail::check_indices(check.function(), "targets", targets, V);
  for (std::size_t i = 0; i < n; ++i) {
    const T* row = logits.data() + i * V;
    const auto best = static_cast<std::size_t>(std::max_element(row, row + V) - row);
    const double top = row[best];
    double total = 0.0;
    for (std::size_t c = 0; c < V; ++c) total += std::exp(double(row[c]) - top);
    const auto target = static_cast<std::size_t>(targets.data()[i]);
    loss_sum += std::log(total) + top - row[target];
    correct += best == target;
    predictions.push_back(best);
  }
  rows += n;
}

template struct CrossEntropyScore<float>;
template struct CrossEntropyScore<double>;

double unigram_cross_entropy(const Indices& train, const Indices& held_out,
                             std::size_t vocab_size) {
  const detail::Check check("training::unigram_cross_entropy");
  check.argument(held_out.size() >= 2, "held_out", "has ", held_out.size(),
                 " tokens, expected at least 2 (the first is not scored)");
  detail::check_indices(check.function(), "train", train, vocab_size);
  detail::check_indices(check.function(), "held_out", held_out, vocab_size);
  std::vector<double> counts(vocab_size, 1.0);  // add-one smoothing
  for (const std::int64_t id : train) counts[static_cast<std::size_t>(id)] += 1.0;
  const double total = static_cast<double>(train.size() + vocab_size);
  double sum = 0.0;
  for (std::size_t n = 1; n < held_out.size(); ++n)
    sum -= std::log(counts[static_cast<std::size_t>(held_out(n))] / total);
  return sum / static_cast<double>(held_out.size() - 1);
}

NextTokenEvaluator::NextTokenEvaluator(const Indices& tokens, std::size_t block_size,
                                       std::size_t subset, std::size_t batch_rows, bool every_rank)
    : tokens_(tokens), batch_rows_(batch_rows), every_rank_(every_rank) {
  const detail::Check check("training::NextTokenEvaluator");
  check.argument(block_size > 0, "block_size", "is 0, expected at least 1");
  check.argument(batch_rows > 0, "batch_rows", "is 0, expected at least 1");
  std::vector<std::size_t> full_length;
  for (std::size_t start = 0; start + 1 < tokens.size(); start += block_size) {
    const std::size_t T = std::min(block_size, tokens.size() - 1 - start);
    all_.push_back(windows_.size());
    if (T == block_size) full_length.push_back(windows_.size());
    windows_.emplace_back(start, T);
  }
  if (subset == 0 || subset >= full_length.size()) {
    subset_ = full_length;
  } else {
    for (std::size_t k = 0; k < subset; ++k)
      subset_.push_back(full_length[k * full_length.size() / subset]);
  }
  if (subset_.empty()) subset_ = all_;
}

std::vector<std::vector<std::size_t>> NextTokenEvaluator::batches(
    const std::vector<std::size_t>& which) const {
  std::vector<std::vector<std::size_t>> out;
  for (const std::size_t w : which) {
    if (out.empty() || out.back().size() == batch_rows_ ||
        windows_[out.back().front()].second != windows_[w].second)
      out.emplace_back();
    out.back().push_back(w);
  }
  return out;
}

}  // namespace xtgrad::training
