#pragma once
// The validation loss of train_gpt: the mean cross-entropy, in nats, of the
// next character over the evaluation windows of batches.hpp, computed
// without recording (GPT::infer), the log-sum-exp of each position in
// double. The periodic evaluations during training score an evenly spread
// subset of the full-length windows (--eval-windows of them); the final one
// scores every window, i.e. every validation character but the first, the
// characters the unigram baseline is computed on. Under mpirun each rank
// scores every P-th batch of windows and the sums are added over the job;
// with the experts sharded over the ranks (every_rank) every rank scores
// every batch, the sparse layers' all-to-alls being collective.

#include <cstddef>
#include <utility>
#include <vector>

#include <xtgrad/engine/indices.hpp>
#include <xtgrad/modules/gpt.hpp>

#include <xtgrad/training/data_parallel.hpp>

namespace gpt_demo {

class Evaluator {
 public:
  // `text`: the validation ids; `subset`: how many windows the periodic
  // evaluations score (0 or more than there are: all full-length ones).
  Evaluator(const xtgrad::Indices& text, std::size_t block_size, std::size_t subset,
            std::size_t batch_rows, bool every_rank = false);

  double periodic(const xtgrad::GPT<float>& model, xtgrad::training::Parallel& parallel) const;
  double full(const xtgrad::GPT<float>& model, xtgrad::training::Parallel& parallel) const;

  std::size_t periodic_tokens() const;
  std::size_t full_tokens() const;

 private:
  double loss(const xtgrad::GPT<float>& model, const std::vector<std::size_t>& which,
              xtgrad::training::Parallel& parallel) const;

  const xtgrad::Indices& text_;
  std::vector<std::pair<std::size_t, std::size_t>> windows_;  // (start, T)
  std::vector<std::size_t> subset_, all_;
  std::size_t batch_rows_;
  bool every_rank_;
};

}  // namespace gpt_demo
