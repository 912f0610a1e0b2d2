#include "embedding.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "../check.hpp"
#include "../errors.hpp"

namespace xtgrad {

namespace {

constexpr const char* op_name = "embedding";

// The positions of indices grouped by row of weight (a counting sort), which
// backward walks row by row: the positions of row v are
// order[starts[v], starts[v + 1]). Positions of the padding row are left out.
struct RowGroups {
  std::vector<std::size_t> starts;  // [V + 1]
  std::vector<std::size_t> order;   // [number of positions not at padding]
};

RowGroups group_by_row(const Indices& indices, std::size_t rows, std::int64_t padding) {
  RowGroups g;
  g.starts.assign(rows + 1, 0);
  const std::int64_t* idx = indices.data();
  std::size_t kept = 0;
  for (std::size_t p = 0; p < indices.size(); ++p)
    if (idx[p] != padding) {
      ++g.starts[static_cast<std::size_t>(idx[p]) + 1];
      ++kept;
    }
  for (std::size_t v = 0; v < rows; ++v) g.starts[v + 1] += g.starts[v];
  g.order.resize(kept);
  // Place each position at its row's cursor; starts[v] then holds the end of
  // row v, and shifting by one restores the starts.
  for (std::size_t p = 0; p < indices.size(); ++p)
    if (idx[p] != padding) g.order[g.starts[static_cast<std::size_t>(idx[p])]++] = p;
  for (std::size_t v = rows; v > 0; --v) g.starts[v] = g.starts[v - 1];
  g.starts[0] = 0;
  return g;
}

}  // namespace

template <class T>
Var<T> embedding(const Indices& indices, const Var<T>& weight,
                 std::optional<std::int64_t> padding_idx) {
  Tape<T>& tape = detail::common_tape<T>(op_name, {{"weight", &weight}});
  const Shape& w_shape = weight.shape();
  if (w_shape.size() != 2)
    detail::fail_shape(op_name, "weight", w_shape, "[num_embeddings, embedding_dim]");
  const std::size_t rows = w_shape[0], dim = w_shape[1];
  const auto v = static_cast<std::int64_t>(rows);
  std::int64_t padding = -1;  // no row
  if (padding_idx) {
    if (*padding_idx < -v || *padding_idx >= v)
      detail::fail_argument(op_name, "padding_idx",
                            "is " + std::to_string(*padding_idx) + ", expected a row in [" +
                                std::to_string(-v) + ", " + std::to_string(v) + ") of weight " +
                                detail::shape_str(w_shape));
    padding = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  detail::check_indices(op_name, "indices", indices, rows);

  Shape y_shape(indices.shape().begin(), indices.shape().end());
  y_shape.push_back(dim);
  const std::size_t wi = weight.index();
  const std::size_t yi = tape.record(op_name, {wi}, weight.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  const T* w = tape.value(wi).data();
  const std::int64_t* idx = indices.data();
  // y[p, :] = weight[indices[p], :]
  for (std::size_t p = 0; p < indices.size(); ++p)
    std::copy_n(w + static_cast<std::size_t>(idx[p]) * dim, dim, y.data() + p * dim);

  if (!tape.requires_grad(yi)) {
    tape.set_backward(yi, nullptr);
    return tape.var(yi);
  }
  RowGroups groups = group_by_row(indices, rows, padding);
  std::vector<double> sum(dim);  // one row's sum of dy rows
  tape.set_backward(yi, [wi, rows, dim, groups = std::move(groups), sum = std::move(sum)](
                            Tape<T>& t, const xt::xarray<T>& dy) mutable {
    GradSlot<T> dw = t.grad_slot(wi);
    const T* g = dy.data();
    for (std::size_t r = 0; r < rows; ++r) {
      T* out = dw.buffer.data() + r * dim;
      const std::size_t* first = groups.order.data() + groups.starts[r];
      const std::size_t count = groups.starts[r + 1] - groups.starts[r];
      if (count == 0) {  // dw[r, :] (+)= 0: an unused row, or the padding row
        if (!dw.accumulate) std::fill_n(out, dim, T(0));
      } else if (count == 1) {  // dw[r, :] (+)= dy[p, :]
        const T* src = g + first[0] * dim;
        if (dw.accumulate)
          for (std::size_t j = 0; j < dim; ++j) out[j] += src[j];
        else
          std::copy_n(src, dim, out);
      } else {  // dw[r, :] (+)= sum over p with indices[p] == r of dy[p, :]   (in double)
        const T* src = g + first[0] * dim;
        for (std::size_t j = 0; j < dim; ++j) sum[j] = src[j];
        for (std::size_t q = 1; q < count; ++q) {
          src = g + first[q] * dim;
          for (std::size_t j = 0; j < dim; ++j) sum[j] += src[j];
        }
        if (dw.accumulate)
          for (std::size_t j = 0; j < dim; ++j) out[j] = static_cast<T>(out[j] + sum[j]);
        else
          for (std::size_t j = 0; j < dim; ++j) out[j] = static_cast<T>(sum[j]);
      }
    }
  });
  return tape.var(yi);
}

template Var<float> embedding(const Indices&, const Var<float>&, std::optional<std::int64_t>);
template Var<double> embedding(const Indices&, const Var<double>&, std::optional<std::int64_t>);

}  // namespace xtgrad
