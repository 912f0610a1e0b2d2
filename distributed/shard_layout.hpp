#pragma once
// ShardLayout: how ZeRO (sharded_optimizer.hpp) splits a model's parameters
// over P ranks. Internal to distributed/.
//
// The parameters are flattened, back to back, in the order of a
// GradientSynchronizer's buckets (bucket 0's members first, each bucket's
// members in its order), into N elements. Rank r owns the contiguous range
// [begin(r), end(r)): N / P elements each, the first N % P ranks one more,
// so that every rank's share of the optimizer's work and memory is within
// one element of N / P. A boundary may cut a parameter: each rank's share
// is a list of pieces (a parameter, the first element of it and a length).
// Since both the buckets and the shards are contiguous, rank r's part of
// bucket b is one range, counts[b][r] elements long, in rank order: what
// MPI_Reduce_scatter and MPI_Allgatherv take.

#include <cstddef>
#include <vector>

namespace xtgrad::distributed::detail {

struct ShardPiece {
  std::size_t parameter;  // index into the synchronizer's parameter list
  std::size_t offset;     // first element of the parameter in the piece
  std::size_t length;     // elements
  std::size_t bucket;     // the bucket holding the parameter
  std::size_t at;         // the piece's first element within this rank's part of the bucket
};

class ShardLayout {
 public:
  // sizes[j]: elements of parameter j; buckets: the synchronizer's buckets.
  ShardLayout(const std::vector<std::size_t>& sizes,
              const std::vector<std::vector<std::size_t>>& buckets, std::size_t ranks);

  std::size_t elements() const { return total_; }
  std::size_t ranks() const { return ranks_; }
  std::size_t begin(std::size_t rank) const;
  std::size_t end(std::size_t rank) const { return begin(rank + 1); }
  // Rank r's pieces, in flat order.
  std::vector<ShardPiece> pieces(std::size_t rank) const;
  // [bucket][rank]: the elements of each bucket that each rank owns.
  std::vector<std::vector<int>> counts() const;
  // Bucket b's first flat element and gradient elements.
  std::size_t bucket_begin(std::size_t b) const { return bucket_begin_[b]; }
  std::size_t bucket_size(std::size_t b) const { return bucket_begin_[b + 1] - bucket_begin_[b]; }
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t size(std::size_t j) const { return sizes_[j]; }
  // Where parameter j starts in the flat order, and in its bucket.
  std::size_t flat_begin(std::size_t j) const { return flat_[j]; }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<std::vector<std::size_t>> buckets_;
  std::vector<std::size_t> bucket_begin_, flat_;
  std::size_t ranks_, total_ = 0;
};

}  // namespace xtgrad::distributed::detail
