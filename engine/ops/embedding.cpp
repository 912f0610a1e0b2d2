#include "embedding.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../errors.hpp"
#include "mask.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_embedding_op = "embedding";

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

// out[v, :] (+)= sum over the positions p of row v of src[p, :] (sums of two
// or more rows in double, through `sum` [dim]), for every row v < rows: the
// scatter-add of embedding's backward and of embedding_dense_backward.
template <class T>
void scatter_rows(const RowGroups& groups, const T* src, T* out_rows, bool accumulate,
                  std::size_t rows, std::size_t dim, double* sum) {
  for (std::size_t r = 0; r < rows; ++r) {
    T* out = out_rows + r * dim;
    const std::size_t* first = groups.order.data() + groups.starts[r];
    const std::size_t count = groups.starts[r + 1] - groups.starts[r];
    if (count == 0) {  // out[r, :] (+)= 0: an unused row, or the padding row
      if (!accumulate) std::fill_n(out, dim, T(0));
    } else if (count == 1) {  // out[r, :] (+)= src[p, :]
      const T* row = src + first[0] * dim;
      if (accumulate)
        for (std::size_t j = 0; j < dim; ++j) out[j] += row[j];
      else
        std::copy_n(row, dim, out);
    } else {  // out[r, :] (+)= sum over p with indices[p] == r of src[p, :]   (in double)
      const T* row = src + first[0] * dim;
      for (std::size_t j = 0; j < dim; ++j) sum[j] = row[j];
      for (std::size_t q = 1; q < count; ++q) {
        row = src + first[q] * dim;
        for (std::size_t j = 0; j < dim; ++j) sum[j] += row[j];
      }
      if (accumulate)
        for (std::size_t j = 0; j < dim; ++j) out[j] = static_cast<T>(out[j] + sum[j]);
      else
        for (std::size_t j = 0; j < dim; ++j) out[j] = static_cast<T>(sum[j]);
    }
  }
}

// padding_idx as a row in [0, rows), or -1 (no row) when absent;
// std::invalid_argument from `op` outside [-rows, rows).
template <class... OfWhat>
std::int64_t padding_row(const detail::Check& check, std::optional<std::int64_t> padding_idx,
                         std::size_t rows, const OfWhat&... of_what) {
  const auto v = static_cast<std::int64_t>(rows);
  if (!padding_idx) return -1;
  check.argument(*padding_idx >= -v && *padding_idx < v, "padding_idx", "is ", *padding_idx,
                 ", expected a row in [", -v, ", ", v, ")", of_what...);
  return *padding_idx < 0 ? *padding_idx + v : *padding_idx;
}

// The indices kept in node `index`'s saved memory, in the shape of `rows`
// ([indices.shape..., D]) without its last axis.
template <class T>
Indices saved_indices(const Tape<T>& tape, std::size_t index, const Shape& rows) {
  Indices kept = xt::empty<std::int64_t>(Shape(rows.begin(), rows.end() - 1));
  const std::int64_t* saved = tape.template saved<std::int64_t>(index);
  std::copy_n(saved, kept.size(), kept.data());
  return kept;
}

template <class T>
Var<T> record_dense_backward(Tape<T>& tape, const Var<T>& grad_output, const Indices& indices,
                             std::size_t num_weights, std::int64_t padding);

// The embedding node, its arguments checked: by embedding, or by the forward
// of the node whose create_graph rule records this one (its saved indices
// were checked then, and are not checked again).
template <class T>
Var<T> record_embedding(Tape<T>& tape, const Indices& indices, const Var<T>& weight,
                        std::int64_t padding) {
  const std::size_t rows = weight.shape()[0], dim = weight.shape()[1];
  Shape y_shape(indices.shape().begin(), indices.shape().end());
  y_shape.push_back(dim);
  detail::checked_allocation<T>(k_embedding_op, "arguments 'indices' and 'weight'", y_shape);
  const std::size_t wi = weight.index();
  const std::size_t yi = tape.record(k_embedding_op, {wi}, weight.requires_grad());
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
    // dw[v, :] (+)= sum over p with indices[p] == v of dy[p, :]
    scatter_rows(groups, dy.data(), dw.buffer.data(), dw.accumulate, rows, dim, sum.data());
  });
  // create_graph: dweight = embedding_dense_backward(dy, indices), the indices
  // kept in this node's saved memory
  std::copy_n(idx, indices.size(), tape.template save<std::int64_t>(yi, indices.size()));
  tape.set_grad_rule(yi, [rows, padding](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    const Var<T> dy = g.grad_output();
    const Indices kept = saved_indices(g.tape(), g.output().index(), dy.shape());
    g.add(0, record_dense_backward(g.tape(), dy, kept, rows, padding));
  });
  return tape.var(yi);
}

// The embedding_dense_backward node, its arguments checked (as record_embedding).
template <class T>
Var<T> record_dense_backward(Tape<T>& tape, const Var<T>& grad_output, const Indices& indices,
                             std::size_t num_weights, std::int64_t padding) {
  static constexpr const char* op = "embedding_dense_backward";
  const std::size_t dim = grad_output.shape().back(), n = indices.size();
  const std::size_t gi = grad_output.index();
  const std::size_t yi = tape.record(op, {gi}, grad_output.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(Shape{num_weights, dim});
  std::vector<double> sum(dim);
  // y[v, :] = sum over p with indices[p] == v (not padding_idx) of grad_output[p, :]
  scatter_rows(group_by_row(indices, num_weights, padding), tape.value(gi).data(), y.data(), false,
               num_weights, dim, sum.data());
  // Backward reads the indices from this node's saved memory.
  if (tape.requires_grad(yi))
    std::copy_n(indices.data(), n, tape.template save<std::int64_t>(yi, n));

  tape.set_backward(yi, [gi, yi, n, dim, padding](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(gi)) return;
    const GradPointer<T> dg = t.grad_pointer(gi);
    const std::int64_t* idx = t.template saved<std::int64_t>(yi);
    for (std::size_t p = 0; p < n; ++p) {
      T* out = dg.data + p * dim;
      if (idx[p] == padding) {  // dg[p, :] (+)= 0
        if (!dg.accumulate) std::fill_n(out, dim, T(0));
        continue;
      }
      const T* row = dy.data() + static_cast<std::size_t>(idx[p]) * dim;
      if (dg.accumulate)  // dg[p, :] += dy[indices[p], :]
        for (std::size_t j = 0; j < dim; ++j) out[j] += row[j];
      else  // dg[p, :] = dy[indices[p], :]
        std::copy_n(row, dim, out);
    }
  });
  // create_graph: dgrad_output = the lookup of dy, 0 at the padding positions
  tape.set_grad_rule(yi, [padding](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    const Shape& g_shape = g.input(0).shape();
    const Indices kept = saved_indices(g.tape(), g.output().index(), g_shape);
    const Var<T> rows = record_embedding(g.tape(), kept, g.grad_output(), -1);
    if (padding < 0) {
      g.add(0, rows);
      return;
    }
    Shape mask_shape(kept.shape().begin(), kept.shape().end());
    mask_shape.push_back(1);
    xt::xarray<bool> at_padding = xt::empty<bool>(mask_shape);
    std::transform(kept.begin(), kept.end(), at_padding.begin(),
                   [padding](std::int64_t v) { return v == padding; });
    g.add(0, masked_fill(rows, at_padding, 0.0));
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> embedding(const Indices& indices, const Var<T>& weight,
                 std::optional<std::int64_t> padding_idx) {
  const detail::Check check(k_embedding_op);
  Tape<T>& tape = detail::common_tape<T>(k_embedding_op, {{"weight", &weight}});
  const Shape& w_shape = weight.shape();
  check.shape(w_shape.size() == 2, "weight", w_shape, "[num_embeddings, embedding_dim]");
  const std::int64_t padding = padding_row(check, padding_idx, w_shape[0], " of weight ", w_shape);
  detail::check_indices(k_embedding_op, "indices", indices, w_shape[0]);
  return record_embedding(tape, indices, weight, padding);
}

template <class T>
Var<T> embedding_dense_backward(const Var<T>& grad_output, const Indices& indices,
                                std::size_t num_weights, std::optional<std::int64_t> padding_idx) {
  const detail::Check check("embedding_dense_backward");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"grad_output", &grad_output}});
  const Shape& g_shape = grad_output.shape();
  const Shape& i_shape = indices.shape();
  check.shape(g_shape.size() == i_shape.size() + 1 &&
                  std::equal(i_shape.begin(), i_shape.end(), g_shape.begin()),
              "grad_output", g_shape, "the shape ", i_shape,
              " of 'indices' followed by the embedding dimension");
  const std::int64_t padding = padding_row(check, padding_idx, num_weights);
  detail::check_indices(check.function(), "indices", indices, num_weights);
  return record_dense_backward(tape, grad_output, indices, num_weights, padding);
}

template Var<float> embedding(const Indices&, const Var<float>&, std::optional<std::int64_t>);
template Var<double> embedding(const Indices&, const Var<double>&, std::optional<std::int64_t>);
template Var<float> embedding_dense_backward(const Var<float>&, const Indices&, std::size_t,
                                             std::optional<std::int64_t>);
template Var<double> embedding_dense_backward(const Var<double>&, const Indices&, std::size_t,
                                              std::optional<std::int64_t>);

}  // namespace xtgrad
