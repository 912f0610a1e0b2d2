#pragma once
// Batcher<T>: mini-batches of a data set held in memory, in the shape of
// torch.utils.data.DataLoader(shuffle, drop_last, generator) over a
// TensorDataset of inputs [N, ...] and integer labels [N].
//
// Each epoch visits the examples in an order: 0, 1, ..., N-1 without
// shuffle, else shuffled_order(N, seed, epoch). Batches are consecutive runs
// of batch_size positions of that order; the last, shorter run is a batch of
// its own unless drop_last. A batch holds inputs [B, ...] (the examples'
// rows, copied), labels [B] and the examples' indices in the data set.
//
// The shuffle is the same on every platform and standard library: a
// Fisher-Yates shuffle (Knuth, TAOCP vol. 2, 3.4.2, Algorithm P) driven by
// std::mt19937_64, whose output sequence the C++ standard fixes, seeded
// through std::seed_seq (also fixed) from the 32-bit halves of (seed,
// epoch), with each bounded draw made by rejection, never through
// std::shuffle or std::uniform_int_distribution (whose outputs each standard
// library defines its own way). So (seed, epoch) alone determines an epoch's
// order: a run resumed at epoch e sees exactly the batches it would have.
//
// It knows nothing of gradients or tapes (engine/), of modules, nor of files
// (io/): data/ stands beside them, and a training loop joins them.
//
// Errors (std::invalid_argument naming "Batcher", the argument and what was
// expected): inputs of rank 0, labels that are not [N] with the inputs' N,
// batch_size 0.

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/indices.hpp"

namespace xtgrad {

struct BatcherOptions {
  std::size_t batch_size = 1;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
};

// The visiting order of epoch `epoch`: a permutation of 0 .. n-1 (see above).
std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

template <class T>
struct Batch {
  xt::xarray<T> inputs;              // [B, ...]
  Indices labels;                    // [B]
  std::vector<std::size_t> indices;  // the B examples' positions in the data set
};

template <class T>
class Batcher {
 public:
  // inputs [N, ...] and labels [N] are moved in (pass std::move to avoid a copy).
  Batcher(xt::xarray<T> inputs, Indices labels, BatcherOptions options);

  std::size_t size() const { return labels_.size(); }  // N
  std::size_t batches_per_epoch() const;
  const BatcherOptions& options() const { return options_; }
  const xt::xarray<T>& inputs() const { return inputs_; }
  const Indices& labels() const { return labels_; }

  // Starts epoch `epoch` (any number; epochs need not come in order).
  void start_epoch(std::uint64_t epoch);
  // Fills `batch` with the next batch of the epoch (reusing its memory when
  // the size repeats); false, leaving `batch` alone, when the epoch is over.
  bool next(Batch<T>& batch);

 private:
  xt::xarray<T> inputs_;
  Indices labels_;
  BatcherOptions options_;
  std::size_t row_size_ = 0;  // elements per example
  std::vector<std::size_t> order_;
  std::size_t position_ = 0;  // in order_
};

extern template class Batcher<float>;
extern template class Batcher<double>;

}  // namespace xtgrad
