#include "sum_to.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "reduce.hpp"
#include "shape.hpp"

namespace xtgrad::detail {

template <class T>
Var<T> sum_to(const Var<T>& g, const Shape& shape) {
  const Shape& from = g.shape();
  if (from == shape) return g;
  const std::size_t lead = from.size() - shape.size();
  // The axes g was repeated along: the new leading ones, and size-1 ones.
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < from.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1))
      dims.push_back(static_cast<std::int64_t>(d));
  // sum(x, {}) reduces every axis: with no repeated axis, only the shape differs.
  const Var<T> summed = dims.empty() ? g : sum(g, dims);
  return reshape(summed, std::vector<std::int64_t>(shape.begin(), shape.end()));
}

std::uint64_t reduced_axes(const std::vector<std::int64_t>& dims, std::size_t rank) {
  if (dims.empty())
    return rank == 0 ? 0 : (rank >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << rank) - 1);
  std::uint64_t axes = 0;
  for (const std::int64_t d : dims) {
    if (rank == 0) continue;  // a 0-d x takes 0 and -1: nothing to broadcast over
    axes |= std::uint64_t(1) << static_cast<std::size_t>(d < 0 ? d + static_cast<std::int64_t>(rank)
                                                               : d);
  }
  return axes;
}

std::vector<std::int64_t> axes_list(std::uint64_t axes, std::size_t rank) {
  std::vector<std::int64_t> out;
  for (std::size_t d = 0; d < rank; ++d)
    if (axes >> d & 1) out.push_back(static_cast<std::int64_t>(d));
  return out;
}

template <class T>
Var<T> unreduce(const Var<T>& g, const Shape& shape, std::uint64_t axes) {
  std::vector<std::int64_t> keep(shape.begin(), shape.end());
  for (std::size_t d = 0; d < keep.size(); ++d)
    if (axes >> d & 1) keep[d] = 1;
  const Shape& from = g.shape();
  const bool same =
      from.size() == keep.size() &&
      std::equal(from.begin(), from.end(), keep.begin(),
                 [](std::size_t a, std::int64_t b) { return static_cast<std::int64_t>(a) == b; });
  const Var<T> kept = same ? g : reshape(g, keep);
  if (kept.shape() == shape) return kept;
  return expand(kept, std::vector<std::int64_t>(shape.begin(), shape.end()));
}

template Var<float> sum_to(const Var<float>&, const Shape&);
template Var<double> sum_to(const Var<double>&, const Shape&);
template Var<float> unreduce(const Var<float>&, const Shape&, std::uint64_t);
template Var<double> unreduce(const Var<double>&, const Shape&, std::uint64_t);

}  // namespace xtgrad::detail
