#include "distributed_sampler.hpp"

#include <cstring>
#include <numeric>
#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/errors.hpp"
#include "batcher.hpp"

namespace xtgrad::distributed {

namespace {
constexpr const char* k_sampler_name = "distributed::DistributedSampler";
}  // namespace

DistributedSampler::DistributedSampler(std::size_t n, DistributedSamplerOptions options, int rank,
                                       int ranks)
    : n_(n), options_(options) {
  if (ranks < 1)
    xtgrad::detail::fail_argument(k_sampler_name, "ranks",
                                  "is " + std::to_string(ranks) + ", expected >= 1");
  if (rank < 0 || rank >= ranks)
    xtgrad::detail::fail_argument(
        k_sampler_name, "rank",
        "is " + std::to_string(rank) + ", expected a rank in [0, " + std::to_string(ranks) + ")");
  xtgrad::detail::check_positive_size(k_sampler_name, "global_batch_size",
                                      options.global_batch_size);
  if (options.global_batch_size % static_cast<std::size_t>(ranks) != 0)
    xtgrad::detail::fail_argument(k_sampler_name, "global_batch_size",
                                  "is " + std::to_string(options.global_batch_size) +
                                      ", not divisible by the " + std::to_string(ranks) +
                                      " ranks; each rank takes global_batch_size / ranks rows");
  rank_ = static_cast<std::size_t>(rank);
  ranks_ = static_cast<std::size_t>(ranks);
  // The epoch's order: n rows, padded up to a multiple of the ranks.
  const std::size_t padded =
      xtgrad::detail::checked_add(k_sampler_name, "arguments 'n' and 'ranks'", n, ranks_);
  xtgrad::detail::checked_allocation<std::size_t>(k_sampler_name, "argument 'n'", {padded});
  start_epoch(0);
}

std::size_t DistributedSampler::rows_in_epoch() const {
  const std::size_t b = options_.global_batch_size;
  if (options_.drop_last) return n_ / b * b;
  return (n_ + ranks_ - 1) / ranks_ * ranks_;  // padded by wrapping
}

std::size_t DistributedSampler::batches_per_epoch() const {
  const std::size_t b = options_.global_batch_size;
  return (rows_in_epoch() + b - 1) / b;
}

void DistributedSampler::start_epoch(std::uint64_t epoch) {
  if (options_.shuffle) {
    order_ = shuffled_order(n_, options_.seed, epoch);
  } else {
    order_.resize(n_);
    std::iota(order_.begin(), order_.end(), std::size_t{0});
  }
  const std::size_t rows = rows_in_epoch();
  if (n_ > 0)
    for (std::size_t i = n_; i < rows; ++i) order_.push_back(order_[i - n_]);
  order_.resize(rows);
  position_ = 0;
}

bool DistributedSampler::next(Shard& shard) {
  if (position_ >= order_.size()) return false;
  const std::size_t rows = std::min(options_.global_batch_size, order_.size() - position_);
  const std::size_t local = rows / ranks_;  // rows is a multiple of ranks_ (see the header)
  shard.indices.assign(
      order_.begin() + static_cast<std::ptrdiff_t>(position_ + rank_ * local),
      order_.begin() + static_cast<std::ptrdiff_t>(position_ + (rank_ + 1) * local));
  shard.row_offset = rank_ * local;
  shard.global_rows = rows;
  position_ += rows;
  return true;
}

namespace {

// out = rows `indices` of data [N, ...]; every index checked before out changes.
template <class U>
void copy_rows(const char* op, const xt::xarray<U>& data, const std::vector<std::size_t>& indices,
               xt::xarray<U>& out) {
  if (data.dimension() == 0) xtgrad::detail::fail_shape(op, "data", data.shape(), "[N, ...]");
  const std::size_t n = data.shape()[0];
  for (std::size_t k = 0; k < indices.size(); ++k)
    if (indices[k] >= n)
      xtgrad::detail::fail_argument(op, "indices",
                                    "holds " + std::to_string(indices[k]) + " at position " +
                                        std::to_string(k) + ", expected an index below " +
                                        std::to_string(n));
  const std::size_t row = n == 0 ? 0 : data.size() / n;
  auto shape = data.shape();
  shape[0] = indices.size();
  if (out.shape() != shape) out.resize(shape);
  if (row > 0)
    for (std::size_t k = 0; k < indices.size(); ++k)
      std::memcpy(out.data() + k * row, data.data() + indices[k] * row, row * sizeof(U));
}

}  // namespace

template <class T>
void gather_rows(const xt::xarray<T>& data, const std::vector<std::size_t>& indices,
                 xt::xarray<T>& out) {
  copy_rows("distributed::gather_rows", data, indices, out);
}

void gather_labels(const Indices& labels, const std::vector<std::size_t>& indices, Indices& out) {
  if (labels.dimension() != 1)
    xtgrad::detail::fail_shape("distributed::gather_labels", "labels", labels.shape(), "[N]");
  copy_rows("distributed::gather_labels", labels, indices, out);
}

template void gather_rows(const xt::xarray<float>&, const std::vector<std::size_t>&,
                          xt::xarray<float>&);
template void gather_rows(const xt::xarray<double>&, const std::vector<std::size_t>&,
                          xt::xarray<double>&);

}  // namespace xtgrad::distributed
