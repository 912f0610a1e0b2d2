#include "sum_to.hpp"

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

template Var<float> sum_to(const Var<float>&, const Shape&);
template Var<double> sum_to(const Var<double>&, const Shape&);

}  // namespace xtgrad::detail
