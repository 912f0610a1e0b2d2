#pragma once
// Integer index tensors and axis arguments, as PyTorch takes them.
//
// Indices (class targets, embedding ids, index_select / gather positions)
// are plain int64 arrays, not Vars: they carry no gradient, exactly as
// torch's LongTensor arguments. An axis ("dim") is an int64 in [-rank, rank),
// negative counting from the end (dim = -1 is the last axis), as in torch.

#include <cstddef>
#include <cstdint>
#include <string>

#include <xtensor/xarray.hpp>

#include "errors.hpp"

namespace xtgrad {

using Indices = xt::xarray<std::int64_t>;

namespace detail {

// The axis `dim` of a tensor of rank `rank`, in [0, rank); std::invalid_argument
// naming `op`, `arg` and the valid range otherwise. A 0-d tensor has no axis.
inline std::size_t normalize_dim(const char* op, const char* arg, std::int64_t dim,
                                 std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (dim < -r || dim >= r)
    fail_argument(
        op, arg,
        "is " + std::to_string(dim) +
            (rank == 0 ? ", but a 0-d tensor has no axis"
                       : ", expected an axis in [" + std::to_string(-r) + ", " + std::to_string(r) +
                             ") for a tensor of rank " + std::to_string(rank)));
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

// Every element of `indices` in [0, bound) (or equal to `allowed`, a value
// such as ignore_index that is not a position); std::invalid_argument naming
// `op`, `arg`, the flat position of the first bad element, its value and the
// bound otherwise. Checked before anything is read through an index.
inline void check_indices(const char* op, const char* arg, const Indices& indices,
                          std::size_t bound, const std::int64_t* allowed = nullptr) {
  const std::int64_t* data = indices.data();
  const auto limit = static_cast<std::int64_t>(bound);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t v = data[i];
    if ((v < 0 || v >= limit) && !(allowed && v == *allowed))
      fail_argument(op, arg,
                    "holds " + std::to_string(v) + " at flat position " + std::to_string(i) +
                        ", expected an index in [0, " + std::to_string(bound) + ")" +
                        (allowed ? " or " + std::to_string(*allowed) : std::string()));
  }
}

}  // namespace detail
}  // namespace xtgrad
