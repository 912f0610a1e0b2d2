// Batcher and the reproducible shuffle (described in batcher.hpp).

#include "batcher.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "../engine/errors.hpp"

namespace xtgrad {

namespace {

// Uniform in [0, bound) for bound >= 1, by rejection: outputs below
// 2^64 mod bound are drawn again, so that every residue is equally likely
// (the bounded draw of O'Neill's PCG library, "bounded_rand").
std::uint64_t bounded_draw(std::mt19937_64& generator, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    const std::uint64_t r = generator();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::seed_seq words{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                      static_cast<std::uint32_t>(epoch), static_cast<std::uint32_t>(epoch >> 32)};
  std::mt19937_64 generator(words);
  // Fisher-Yates: position i takes a uniform pick among positions 0 .. i.
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(bounded_draw(generator, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

template <class T>
Batcher<T>::Batcher(xt::xarray<T> inputs, Indices labels, BatcherOptions options)
    : inputs_(std::move(inputs)), labels_(std::move(labels)), options_(options) {
  if (inputs_.dimension() == 0)
    detail::fail_argument("Batcher", "inputs",
                          "is 0-d, expected [N, ...] with one row per example");
  const std::size_t n = inputs_.shape()[0];
  if (labels_.dimension() != 1 || labels_.shape()[0] != n)
    detail::fail_shape("Batcher", "labels", labels_.shape(),
                       "[" + std::to_string(n) + "] (one label per row of inputs " +
                           detail::shape_str(inputs_.shape()) + ")");
  detail::check_positive_size("Batcher", "batch_size", options_.batch_size);
  row_size_ = n == 0 ? 0 : inputs_.size() / n;
  start_epoch(0);
}

template <class T>
std::size_t Batcher<T>::batches_per_epoch() const {
  const std::size_t n = size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

template <class T>
void Batcher<T>::start_epoch(std::uint64_t epoch) {
  if (options_.shuffle) {
    order_ = shuffled_order(size(), options_.seed, epoch);
  } else {
    order_.resize(size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
  }
  position_ = 0;
}

template <class T>
bool Batcher<T>::next(Batch<T>& batch) {
  const std::size_t left = order_.size() - position_;
  const std::size_t b = std::min(options_.batch_size, left);
  if (b == 0 || (options_.drop_last && b < options_.batch_size)) return false;
  std::vector<std::size_t> shape(inputs_.shape().begin(), inputs_.shape().end());
  shape[0] = b;
  if (!std::equal(shape.begin(), shape.end(), batch.inputs.shape().begin(),
                  batch.inputs.shape().end()))
    batch.inputs = xt::xarray<T>::from_shape(shape);
  if (batch.labels.size() != b || batch.labels.dimension() != 1)
    batch.labels = Indices::from_shape({b});
  batch.indices.assign(order_.begin() + static_cast<std::ptrdiff_t>(position_),
                       order_.begin() + static_cast<std::ptrdiff_t>(position_ + b));
  for (std::size_t k = 0; k < b; ++k) {
    const std::size_t i = batch.indices[k];
    if (row_size_ > 0)
      std::memcpy(batch.inputs.data() + k * row_size_, inputs_.data() + i * row_size_,
                  row_size_ * sizeof(T));
    batch.labels(k) = labels_(i);
  }
  position_ += b;
  return true;
}

template class Batcher<float>;
template class Batcher<double>;

}  // namespace xtgrad
