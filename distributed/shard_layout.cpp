#include "shard_layout.hpp"

#include <algorithm>

namespace xtgrad::distributed::detail {

ShardLayout::ShardLayout(const std::vector<std::size_t>& sizes,
                         const std::vector<std::vector<std::size_t>>& buckets, std::size_t ranks)
    : sizes_(sizes), buckets_(buckets), flat_(sizes.size(), 0), ranks_(ranks) {
  bucket_begin_.push_back(0);
  for (const auto& members : buckets_) {
    for (const std::size_t j : members) {
      flat_[j] = total_;
      total_ += sizes_[j];
    }
    bucket_begin_.push_back(total_);
  }
}

std::size_t ShardLayout::begin(std::size_t rank) const {
  const std::size_t base = total_ / ranks_, extra = total_ % ranks_;
  return rank * base + std::min(rank, extra);
}

std::vector<ShardPiece> ShardLayout::pieces(std::size_t rank) const {
  std::vector<ShardPiece> out;
  const std::size_t lo = begin(rank), hi = end(rank);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const std::size_t part = std::max(lo, bucket_begin_[b]);  // this rank's part starts here
    for (const std::size_t j : buckets_[b]) {
      const std::size_t first = std::max(lo, flat_[j]), last = std::min(hi, flat_[j] + sizes_[j]);
      if (first < last) out.push_back({j, first - flat_[j], last - first, b, first - part});
    }
  }
  return out;
}

std::vector<std::vector<int>> ShardLayout::counts() const {
  std::vector<std::vector<int>> out(buckets_.size(), std::vector<int>(ranks_, 0));
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (std::size_t r = 0; r < ranks_; ++r) {
      const std::size_t first = std::max(begin(r), bucket_begin_[b]);
      const std::size_t last = std::min(end(r), bucket_begin_[b + 1]);
      out[b][r] = first < last ? static_cast<int>(last - first) : 0;
    }
  return out;
}

}  // namespace xtgrad::distributed::detail
