#pragma once
// DistributedSampler: which rows of each global batch this rank trains on,
// in the shape of torch.utils.data.distributed.DistributedSampler, but
// cutting every global batch rather than the epoch, so that P ranks
// together see exactly the batches of one process.
//
// The epoch's global order is Batcher's (data/batcher.hpp):
// shuffled_order(n, seed, epoch) with shuffle, 0 .. n-1 without, so one
// process with the same seed and a Batcher of the global batch size sees
// the same batches. Global batch k is positions [k B, k B + B) of that
// order, and rank r of P takes the r-th of its P equal, consecutive slices:
// b = B / P rows starting at row r b of the global batch (its row_offset,
// which keys dropout masks: distributed/data_parallel.hpp). So the global
// batch size must be a multiple of P (std::invalid_argument otherwise).
//
// The last, shorter batch: with drop_last it is dropped (every batch is B
// rows, and one process with Batcher's drop_last sees the same batches);
// without, the order is first padded by wrapping around to its start up to
// a multiple of P, as DistributedSampler pads (it repeats at most P - 1
// examples), and the last batch of those rows is split in P equal slices.
// Either way every rank gets the same number of batches, and the batches of
// one step have the same size on every rank, so no rank waits for another.
//
// It is index arithmetic on (rank, ranks) and needs no MPI, so it is built
// and tested with or without distributed/; its namespace is that of the
// data-parallel training it serves (distributed/data_parallel.hpp).

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/indices.hpp"

namespace xtgrad::distributed {

struct DistributedSamplerOptions {
  std::size_t global_batch_size = 1;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
};

// One rank's slice of one global batch.
struct Shard {
  std::vector<std::size_t> indices;  // positions in the data set, b of them
  std::size_t row_offset = 0;        // the slice's first row within the global batch
  std::size_t global_rows = 0;       // rows of the whole global batch (P b)
};

class DistributedSampler {
 public:
  // std::invalid_argument naming the argument for a global batch size of 0
  // or not a multiple of `ranks`, ranks < 1 or rank outside [0, ranks).
  DistributedSampler(std::size_t n, DistributedSamplerOptions options, int rank, int ranks);

  std::size_t size() const { return n_; }
  std::size_t batches_per_epoch() const;
  const DistributedSamplerOptions& options() const { return options_; }

  void start_epoch(std::uint64_t epoch);
  // This rank's slice of the next global batch; false at the end of the epoch.
  bool next(Shard& shard);

 private:
  std::size_t rows_in_epoch() const;  // after padding or dropping
  std::size_t n_;
  DistributedSamplerOptions options_;
  std::size_t rank_, ranks_;
  std::vector<std::size_t> order_;
  std::size_t position_ = 0;
};

// out = rows `indices` of data [N, ...] (reusing out's memory when the shape repeats);
// std::invalid_argument for an index >= N.
template <class T>
void gather_rows(const xt::xarray<T>& data, const std::vector<std::size_t>& indices,
                 xt::xarray<T>& out);
void gather_labels(const Indices& labels, const std::vector<std::size_t>& indices, Indices& out);

extern template void gather_rows(const xt::xarray<float>&, const std::vector<std::size_t>&,
                                 xt::xarray<float>&);
extern template void gather_rows(const xt::xarray<double>&, const std::vector<std::size_t>&,
                                 xt::xarray<double>&);

}  // namespace xtgrad::distributed
