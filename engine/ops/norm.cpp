#include "../kernels/norm_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include "norm.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/parallel.hpp"
#include "../kernels/scratch.hpp"
#include "elementwise.hpp"
#include "math.hpp"
#include "reduce.hpp"

namespace xtgrad {

namespace {

// The checks of both ops; returns D, the length of a row.
template <class T>
std::size_t check_norm(const char* op, const Var<T>& x, const Var<T>* weight, const Var<T>* bias,
                       double eps) {
  const detail::Check check(op);
  const Shape& xs = x.shape();
  check.shape(!xs.empty(), "x", xs, "[..., D] (at least one axis)");
  const std::size_t d = xs.back();
  for (const auto& [name, v] : {std::pair{"weight", weight}, std::pair{"bias", bias}})
    if (v)
      check.shape(v->shape().size() == 1 && v->shape()[0] == d, name, v->shape(), "[", d,
                  "] to match x ", xs);
  check.argument(eps >= 0.0 && std::isfinite(eps), "eps", "is ", eps,
                 ", expected a finite value >= 0");
  return d;
}

// dst[D] (+)= sum[D] (write-or-accumulate rule), or nothing when dst is null.
template <class T>
void write_row_sums(GradPointer<T> dst, const double* sum, std::size_t d) {
  if (!dst.data) return;
  if (dst.accumulate)
    for (std::size_t j = 0; j < d; ++j) dst.data[j] += static_cast<T>(sum[j]);
  else
    for (std::size_t j = 0; j < d; ++j) dst.data[j] = static_cast<T>(sum[j]);
}

// Rows whose weight and bias shares are summed in T before they are added
// into the double sums (as RowSum does along a row).
constexpr std::size_t k_rows_per_flush = 16;
// Rows per group of the weight and bias sums: groups are summed on their
// own (in parallel) and then added in group order, a partition fixed by the
// row count alone, so that the sums do not depend on the thread count.
constexpr std::size_t k_norm_rows_per_group = 256;
// Elements a thread must have before a second one pays.
constexpr std::size_t k_norm_min_elements = std::size_t(1) << 15;
// Rows whose statistics the forward computes together (norm_rows_stats).
constexpr std::size_t k_norm_stats_rows = 4;

// The rows [r0, r1) of the backward (norm_backward_row per row), their
// weight and bias shares summed into sums[2, D] (dw then db; when wanted): in
// T over blocks of k_rows_per_flush rows (in shares[2, D]), then in double.
template <bool Centered, bool HasWeight, class T>
void norm_backward_rows(const T* x, const T* w, const T* dy, const double* stats, std::size_t r0,
                        std::size_t r1, std::size_t d, GradPointer<T> dx, bool want_dw,
                        bool want_db, double* sums, T* shares) {
  double* const dw_sum = want_dw ? sums : nullptr;
  double* const db_sum = want_db ? sums + d : nullptr;
  T* const acc_w = want_dw ? shares : nullptr;
  T* const acc_b = want_db ? shares + d : nullptr;
  for (T* a : {acc_w, acc_b})
    if (a) std::fill(a, a + d, T(0));
  for (double* s : {dw_sum, db_sum})
    if (s) std::fill(s, s + d, 0.0);
  const auto flush = [&] {  // sums[D] += acc[D]; acc[D] = 0
    for (auto [acc, sum] : {std::pair{acc_w, dw_sum}, std::pair{acc_b, db_sum}})
      if (acc)
        for (std::size_t j = 0; j < d; ++j) {
          sum[j] += acc[j];
          acc[j] = T(0);
        }
  };
  for (std::size_t r = r0; r < r1; ++r) {
    const detail::NormStats st = Centered ? detail::NormStats{stats[2 * r], stats[2 * r + 1]}
                                          : detail::NormStats{0.0, stats[r]};
    T* const out = dx.data ? dx.data + r * d : nullptr;
    if (dx.accumulate)
      detail::norm_backward_row<Centered, HasWeight, true>(x + r * d, w, dy + r * d, out, acc_w,
                                                           acc_b, d, st);
    else
      detail::norm_backward_row<Centered, HasWeight, false>(x + r * d, w, dy + r * d, out, acc_w,
                                                            acc_b, d, st);
    if ((r + 1 - r0) % k_rows_per_flush == 0) flush();
  }
  flush();
}

// The backward of both ops over all rows, in groups of k_norm_rows_per_group
// rows split over the threads in use; the weight and bias gradients are the
// groups' sums added in group order, written once at the end.
template <bool Centered, bool HasWeight, class T>
void norm_backward(const T* x, const T* w, const T* dy, const double* stats, std::size_t rows,
                   std::size_t d, GradPointer<T> dx, GradPointer<T> dw, GradPointer<T> db) {
  const bool want_sums = dw.data || db.data;
  const std::size_t groups = (rows + k_norm_rows_per_group - 1) / k_norm_rows_per_group;
  // every group's sums and T shares in the caller's scratch, so that the
  // threads that run the groups need no memory of their own; each group's
  // on cache lines of its own: the shares are rewritten every row, and a line
  // written by the two threads' neighbouring groups at once went back and
  // forth between the cores (layer_norm's backward of [4096, 128] took
  // longer on two threads than on one)
  const std::size_t sums_stride = detail::whole_lines<double>(2 * d);
  const std::size_t shares_stride = detail::whole_lines<T>(2 * d);
  double* const group_sums = want_sums
                                 ? detail::aligned_thread_scratch<double>(
                                       detail::ScratchSlot::norm_group_sums, groups * sums_stride)
                                 : nullptr;
  T* const group_shares = want_sums ? detail::aligned_thread_scratch<T>(
                                          detail::ScratchSlot::norm_shares, groups * shares_stride)
                                    : nullptr;
  const std::size_t min_groups = std::max<std::size_t>(
      k_norm_min_elements / (k_norm_rows_per_group * std::max<std::size_t>(d, 1)), 1);
  detail::parallel_for_rows(groups, min_groups, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g)
      norm_backward_rows<Centered, HasWeight>(
          x, w, dy, stats, g * k_norm_rows_per_group,
          std::min((g + 1) * k_norm_rows_per_group, rows), d, dx, dw.data != nullptr,
          db.data != nullptr, want_sums ? group_sums + g * sums_stride : nullptr,
          want_sums ? group_shares + g * shares_stride : nullptr);
  });
  if (!want_sums) return;
  double* const sums =
      detail::aligned_thread_scratch<double>(detail::ScratchSlot::norm_sums, 2 * d);
  std::fill(sums, sums + 2 * d, 0.0);
  for (std::size_t g = 0; g < groups; ++g)
    for (std::size_t j = 0; j < 2 * d; ++j) sums[j] += group_sums[g * sums_stride + j];
  write_row_sums(dw, sums, d);
  write_row_sums(db, sums + d, d);
}

// y[N, D] for all rows, with the statistics of each row into stats (when not null).
template <bool Centered, bool HasWeight, bool HasBias, class T>
void norm_forward(const T* x, const T* w, const T* b, T* y, std::size_t rows, std::size_t d,
                  double eps, double* stats) {
  // rows are independent: split over the threads in use
  const std::size_t min_rows =
      std::max<std::size_t>(k_norm_min_elements / std::max<std::size_t>(d, 1), 1);
  detail::parallel_for_rows(rows, min_rows, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1;) {
      // the statistics of k_norm_stats_rows rows at a time (the last few one by one)
      detail::NormStats st[k_norm_stats_rows];
      const std::size_t n = r1 - r >= k_norm_stats_rows ? k_norm_stats_rows : 1;
      if (n == k_norm_stats_rows)
        detail::norm_rows_stats<Centered, k_norm_stats_rows>(x + r * d, d, eps, st);
      else
        detail::norm_rows_stats<Centered, 1>(x + r * d, d, eps, st);
      for (std::size_t i = 0; i < n; ++i, ++r) {
        detail::norm_forward_row<Centered, HasWeight, HasBias>(x + r * d, w, b, y + r * d, d,
                                                               st[i]);
        if (stats && Centered) stats[2 * r] = st[i].mean;
        if (stats) stats[Centered ? 2 * r + 1 : r] = st[i].rstd;
      }
    }
  });
}

// The create_graph rule of both norms (grad_rule.hpp): the backward of the
// header as differentiable ops, with the row statistics recomputed from x as
// ops too (they depend on x):
//   xc = x - mean_j(x) (layer_norm) or x (rms_norm),  rstd = rsqrt(mean_j(xc^2) + eps)
//   xhat = xc * rstd,  dxhat = dy * w
//   dx = rstd * (dxhat - mean_j(dxhat) - xhat * mean_j(dxhat * xhat))   (no mean_j(dxhat):
//   rms_norm) dw = sum over rows of dy * xhat,  db = sum over rows of dy
// Parents 1 and 2 are x again when weight or bias is absent.
template <bool Centered, class T>
void norm_grad_rule(GradSink<T>& s, bool has_weight, bool has_bias, double eps) {
  const Var<T> dy = s.grad_output(), x = s.input(0);
  const std::vector<std::int64_t> last{-1};
  std::vector<std::int64_t> rows(x.dimension() - 1);  // the leading axes
  for (std::size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<std::int64_t>(k);
  // [..., D] -> [D]; a single row [D] has nothing to sum (sum over {} would sum all)
  const auto sum_rows = [&rows](const Var<T>& v) { return rows.empty() ? v : sum(v, rows); };
  const Var<T> xc = Centered ? sub(x, mean(x, last, true)) : x;                 // [..., D]
  const Var<T> rstd = rsqrt(add_scalar(mean(square(xc), last, true), T(eps)));  // [..., 1]
  const Var<T> xhat = mul(xc, rstd);                                            // [..., D]
  if (s.needs_grad(0)) {
    const Var<T> dxhat = has_weight ? mul(dy, s.input(1)) : dy;  // [..., D]
    Var<T> inner = sub(dxhat, mul(xhat, mean(mul(dxhat, xhat), last, true)));
    if (Centered) inner = sub(inner, mean(dxhat, last, true));
    s.add(0, mul(rstd, inner));  // dx[..., D]
  }
  if (has_weight && s.needs_grad(1)) s.add(1, sum_rows(mul(dy, xhat)));  // dw[D]
  if (has_bias && s.needs_grad(2)) s.add(2, sum_rows(dy));               // db[D]
}

// Records layer_norm (Centered) or rms_norm after the checks.

template <bool Centered, class T>
Var<T> record_norm(const char* op, const Var<T>& x, const std::optional<Var<T>>& weight,
                   const std::optional<Var<T>>& bias, double eps, std::size_t d) {
  Tape<T>& tape = x.tape();
  const std::size_t xi = x.index();
  const std::optional<std::size_t> wi = weight ? std::optional(weight->index()) : std::nullopt;
  const std::optional<std::size_t> bi = bias ? std::optional(bias->index()) : std::nullopt;
  const bool needs_grad =
      tape.requires_grad(xi) || (wi && tape.requires_grad(*wi)) || (bi && tape.requires_grad(*bi));
  const std::size_t yi = tape.record(op, {xi, wi.value_or(xi), bi.value_or(xi)}, needs_grad);
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  const std::size_t rows = d == 0 ? 0 : xv.size() / d;
  const T* w = wi ? tape.value(*wi).data() : nullptr;
  const T* b = bi ? tape.value(*bi).data() : nullptr;
  // stats[rows, 2] = {mean, rstd} (layer_norm) or stats[rows] = rstd (rms_norm),
  // kept only when backward will run.
  constexpr std::size_t per_row = Centered ? 2 : 1;
  // (in the node's saved memory: no allocation once the tape is warm).
  double* const stats =
      tape.requires_grad(yi) ? tape.template save<double>(yi, per_row * rows) : nullptr;
  // y[N, D] = (x[N, D] - mean) * rstd * w[D] + b[D]  (rms_norm: mean 0, no b)
  if (w && b)
    norm_forward<Centered, true, true>(xv.data(), w, b, y.data(), rows, d, eps, stats);
  else if (w)
    norm_forward<Centered, true, false>(xv.data(), w, b, y.data(), rows, d, eps, stats);
  else if (b)
    norm_forward<Centered, false, true>(xv.data(), w, b, y.data(), rows, d, eps, stats);
  else
    norm_forward<Centered, false, false>(xv.data(), w, b, y.data(), rows, d, eps, stats);

  tape.set_backward(yi, [xi, yi, wi, bi, d, rows](Tape<T>& t, const xt::xarray<T>& dy) {
    const double* stats = t.template saved<double>(yi);
    // Claimed in the order x, weight, bias and written in that order, so that
    // a Var passed twice gets the sum of both shares (grad_slot's rule).
    const GradPointer<T> dx = t.grad_pointer(xi);
    const GradPointer<T> dw = wi ? t.grad_pointer(*wi) : GradPointer<T>{};
    const GradPointer<T> db = bi ? t.grad_pointer(*bi) : GradPointer<T>{};
    const T* x = t.value(xi).data();
    if (wi)
      norm_backward<Centered, true>(x, t.value(*wi).data(), dy.data(), stats, rows, d, dx, dw, db);
    else
      norm_backward<Centered, false, T>(x, nullptr, dy.data(), stats, rows, d, dx, dw, db);
  });
  tape.set_grad_rule(yi,
                     [has_weight = wi.has_value(), has_bias = bi.has_value(), eps](GradSink<T>& g) {
                       norm_grad_rule<Centered>(g, has_weight, has_bias, eps);
                     });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> layer_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight,
                  const std::optional<Var<NoDeduce<T>>>& bias, double eps) {
  static constexpr const char* op = "layer_norm";
  const Var<T>* w = weight ? &*weight : nullptr;
  const Var<T>* b = bias ? &*bias : nullptr;
  detail::common_tape<T>(op, {{"x", &x}, {"weight", w}, {"bias", b}});
  const std::size_t d = check_norm(op, x, w, b, eps);
  return record_norm<true>(op, x, weight, bias, eps, d);
}

template <class T>
Var<T> rms_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight, double eps) {
  static constexpr const char* op = "rms_norm";
  const Var<T>* w = weight ? &*weight : nullptr;
  detail::common_tape<T>(op, {{"x", &x}, {"weight", w}});
  const std::size_t d = check_norm<T>(op, x, w, nullptr, eps);
  return record_norm<false>(op, x, weight, std::optional<Var<T>>{}, eps, d);
}

#define XTGRAD_INSTANTIATE_NORM(T)                                        \
  template Var<T> layer_norm(const Var<T>&, const std::optional<Var<T>>&, \
                             const std::optional<Var<T>>&, double);       \
  template Var<T> rms_norm(const Var<T>&, const std::optional<Var<T>>&, double);
XTGRAD_INSTANTIATE_NORM(float)
XTGRAD_INSTANTIATE_NORM(double)
#undef XTGRAD_INSTANTIATE_NORM

}  // namespace xtgrad
