// Training windows, evaluation windows and the validation loss (batches.hpp).

#include "batches.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <xtgrad/data/counter_key.hpp>

namespace gpt_demo {

namespace {

// The windows of a text of `length` tokens: (start, T), T <= block_size.
std::vector<std::pair<std::size_t, std::size_t>> evaluation_windows(std::size_t length,
                                                                    std::size_t block_size) {
  std::vector<std::pair<std::size_t, std::size_t>> windows;
  for (std::size_t start = 0; start + 1 < length; start += block_size)
    windows.emplace_back(start, std::min(block_size, length - 1 - start));
  return windows;
}

// Sum over the rows of logits [B, T, V] of lse - logit of the target.
double cross_entropy_sum(const xt::xarray<float>& logits, const xtgrad::Indices& targets) {
  const std::size_t V = logits.shape().back();
  const std::size_t rows = targets.size();
  double sum = 0.0;
  for (std::size_t n = 0; n < rows; ++n) {
    const float* row = logits.data() + n * V;
    const double top = *std::max_element(row, row + V);
    double total = 0.0;
    for (std::size_t c = 0; c < V; ++c) total += std::exp(double(row[c]) - top);
    sum += std::log(total) + top - row[targets(n)];
  }
  return sum;
}

}  // namespace

std::size_t window_start(std::uint64_t seed, std::uint64_t step, std::uint64_t row,
                         std::size_t length, std::size_t block_size) {
  if (length < block_size + 2)
    throw std::invalid_argument("the training text has " + std::to_string(length) +
                                " characters, too few for windows of --block-size " +
                                std::to_string(block_size) + " + 1");
  const std::uint64_t key = xtgrad::counter_key(seed, 0x77696e646f77ULL, step, row);  // "window"
  return static_cast<std::size_t>(key % (length - block_size));
}

TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count) {
  std::vector<std::size_t> starts;
  for (std::size_t r = first; r < first + count; ++r)
    starts.push_back(window_start(seed, step, r, text.size(), block_size));
  return xtgrad::next_token_windows(text.data(), text.size(), starts, block_size);
}

Evaluator::Evaluator(const xtgrad::Indices& text, std::size_t block_size, std::size_t subset,
                     std::size_t batch_rows, bool every_rank)
    : text_(text),
      windows_(evaluation_windows(text.size(), block_size)),
      batch_rows_(batch_rows),
      every_rank_(every_rank) {
  std::vector<std::size_t> full_length;
  for (std::size_t w = 0; w < windows_.size(); ++w) {
    all_.push_back(w);
    if (windows_[w].second == block_size) full_length.push_back(w);
  }
  if (subset == 0 || subset >= full_length.size()) {
    subset_ = full_length;
  } else {
    for (std::size_t k = 0; k < subset; ++k)
      subset_.push_back(full_length[k * full_length.size() / subset]);
  }
  if (subset_.empty()) subset_ = all_;
}

double Evaluator::periodic(const xtgrad::GPT<float>& model,
                           xtgrad::training::Parallel& parallel) const {
  return loss(model, subset_, parallel);
}

double Evaluator::full(const xtgrad::GPT<float>& model,
                       xtgrad::training::Parallel& parallel) const {
  return loss(model, all_, parallel);
}

double Evaluator::loss(const xtgrad::GPT<float>& model, const std::vector<std::size_t>& which,
                       xtgrad::training::Parallel& parallel) const {
  // Batches of windows of one length, in order; batch b on rank b % P.
  std::vector<std::vector<std::size_t>> batches;
  for (const std::size_t w : which) {
    if (batches.empty() || batches.back().size() == batch_rows_ ||
        windows_[batches.back().front()].second != windows_[w].second)
      batches.emplace_back();
    batches.back().push_back(w);
  }
  const auto ranks = static_cast<std::size_t>(parallel.size());
  double sum = 0.0;
  std::size_t tokens = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    for (const std::size_t w : batches[b]) tokens += windows_[w].second;
    if (!every_rank_ && b % ranks != static_cast<std::size_t>(parallel.rank())) continue;
    std::vector<std::size_t> starts;  // of windows of one length T
    for (const std::size_t w : batches[b]) starts.push_back(windows_[w].first);
    const std::size_t T = windows_[batches[b].front()].second;
    const TokenBatch batch = xtgrad::next_token_windows(text_.data(), text_.size(), starts, T);
    sum += cross_entropy_sum(model.infer(batch.inputs), batch.targets);
  }
  // The job's sum: the mean over ranks times their number.
  if (every_rank_) return sum / static_cast<double>(tokens);
  return parallel.mean(sum) * static_cast<double>(ranks) / static_cast<double>(tokens);
}

}  // namespace gpt_demo
