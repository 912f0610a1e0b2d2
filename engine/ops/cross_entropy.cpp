#include "../kernels/softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include "cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../check.hpp"
#include "../kernels/parallel.hpp"
#include "cross_entropy_rules.hpp"
#include "support/broadcast.hpp"

namespace xtgrad {

namespace {

// logits seen as rows: [N, C], or one row [C] (`single`, with a 0-d target).
struct Rows {
  std::size_t n = 0, c = 0;
  bool single = false;
};

Rows rows_of(const detail::Check& check, const char* arg, const Shape& shape) {
  check.shape(shape.size() == 1 || shape.size() == 2, arg, shape, "[N, C] or [C]",
              shape.size() > 2 ? " (the K-dimensional form [N, C, d1, ...] is not supported: "
                                 "move the class axis last and flatten to [N, C])"
                               : "");
  return shape.size() == 2 ? Rows{shape[0], shape[1], false} : Rows{1, shape[0], true};
}

// The shape a class target must have for `rows` of argument `arg`, and its
// values: class indices in [0, C) or ignore_index.
void check_class_target(const detail::Check& check, const char* arg, const Shape& logits,
                        const Rows& rows, const Indices& target, std::int64_t ignore_index) {
  const bool fits = rows.single ? target.dimension() == 0
                                : target.dimension() == 1 && target.shape()[0] == rows.n;
  check.shape(fits, "target", target.shape(), rows.single ? Shape{} : Shape{rows.n},
              " for argument '", arg, "' of shape ", logits);
  detail::check_indices(check.function(), "target", target, rows.c, &ignore_index);
}

void check_reduction(const detail::Check& check, Reduction r) {
  check.argument(r == Reduction::none || r == Reduction::mean || r == Reduction::sum,
                 "options.reduction", "is Reduction(", static_cast<int>(r),
                 "), expected none, mean or sum");
}

// The options of both cross_entropy overloads.
void check_label_smoothing(const detail::Check& check, double eps) {
  check.argument(eps >= 0.0 && eps <= 1.0, "options.label_smoothing", "is ", eps,
                 ", expected a value in [0, 1]");
}

// The result's shape: one loss per row for Reduction::none over [N, C].
Shape result_shape(const Rows& rows, Reduction r) {
  return r == Reduction::none && !rows.single ? Shape{rows.n} : Shape{};
}

// Collects the row losses into the result y: each one (none) or their
// total (sum), or the total / count (mean; 0 / 0 = NaN when no row counts,
// as torch). No buffer of row losses.
template <class T>
class RowLosses {
 public:
  RowLosses(Reduction r, xt::xarray<T>& y) : reduction_(r), y_(y.data()) {}
  void set(std::size_t row, double loss) {
    if (reduction_ == Reduction::none)
      y_[row] = static_cast<T>(loss);
    else
      total_ += loss;
  }
  // A sum of row losses (sum and mean reductions).
  void add(double total) { total_ += total; }
  void finish(double count) {
    if (reduction_ != Reduction::none)
      y_[0] = static_cast<T>(reduction_ == Reduction::sum ? total_ : total_ / count);
  }

 private:
  Reduction reduction_;
  T* y_;
  double total_ = 0.0;
};

// g_n: the upstream gradient of row n times its weight (see the header).
template <class T>
T row_gradient(const T* dy, std::size_t n, Reduction r, double count) {
  if (r == Reduction::none) return dy[n];
  return r == Reduction::sum ? dy[0] : static_cast<T>(dy[0] / count);
}

// The saved statistics of row n: its maximum m and log sum_c exp(x_c - m),
// so that p_c = exp((x_c - m) - log_s) is as accurate as softmax's own.
template <class T>
struct RowStats {
  T m, log_s;
};

// What backward keeps of row n (in the node's saved memory, Tape::save).
template <class T>
struct SavedRow {
  std::int64_t target;
  RowStats<T> stats;
};

// Rows per group of the class-target loss: each group's losses are summed on
// their own (in parallel), then the groups in order, a partition fixed by the
// row count alone, so that the loss does not depend on the thread count.
constexpr std::size_t k_loss_rows_per_group = 256;
// Elements a thread must have before a second one pays (an exp each).
constexpr std::size_t k_loss_min_elements = std::size_t(1) << 14;

std::size_t min_rows_per_thread(std::size_t c) {
  return std::max<std::size_t>(k_loss_min_elements / std::max<std::size_t>(c, 1), 1);
}

struct GroupSum {
  double total = 0.0, count = 0.0;
};

// The sums of `groups` groups (this thread's buffer, kept from call to call).
GroupSum* group_sums(std::size_t groups) {
  thread_local std::vector<GroupSum> buffer;
  if (buffer.size() < groups) buffer.resize(groups);
  return buffer.data();
}

template <class T>
RowStats<T> row_stats(const T* x, std::size_t c) {
  const T m = detail::row_max(x, c);
  const double s = detail::exp_minus_scalar<T, false, true>(x, m, T(0), nullptr, c);
  return {m, static_cast<T>(std::log(s))};
}

// The class-target forward: the losses into y, and per row (when `saved` is
// not null) the target and statistics that backward needs. Returns the number
// of rows that count (targets other than ignore_index).
template <class T>
double class_target_forward(const T* x, const std::int64_t* t, std::size_t n, std::size_t c,
                            const CrossEntropyOptions& options, xt::xarray<T>& y,
                            SavedRow<T>* saved) {
  const double eps = options.label_smoothing;
  const std::int64_t ignore = options.ignore_index;
  // Groups of rows split over the threads: each row's loss into y (no
  // reduction) or its group's sum.
  const std::size_t groups = (n + k_loss_rows_per_group - 1) / k_loss_rows_per_group;
  GroupSum* const sums = group_sums(groups);
  T* const row_losses = options.reduction == Reduction::none ? y.data() : nullptr;
  detail::parallel_for_rows(
      groups, std::max<std::size_t>(min_rows_per_thread(c) / k_loss_rows_per_group, 1),
      [&](std::size_t g0, std::size_t g1) {
        for (std::size_t g = g0; g < g1; ++g) {
          GroupSum sum;
          for (std::size_t r = g * k_loss_rows_per_group;
               r < std::min(n, (g + 1) * k_loss_rows_per_group); ++r) {
            if (saved) saved[r].target = t[r];
            double loss = 0.0;  // l_n = 0 for an ignored target
            if (t[r] != ignore) {
              const T* xr = x + r * c;
              const RowStats<T> st = row_stats(xr, c);
              if (saved) saved[r].stats = st;
              // l_n = (1 - eps) (lse - x_t) + eps (lse - mean_c x_c), lse = m + log_s
              const double lse = static_cast<double>(st.m) + st.log_s;
              double smooth = 0.0;
              if (eps != 0.0)
                smooth = lse - detail::sum_of(c, [xr](std::size_t k) { return xr[k]; }) / c;
              loss = (1.0 - eps) * (lse - xr[t[r]]) + eps * smooth;
              sum.count += 1.0;
            }
            if (row_losses) row_losses[r] = static_cast<T>(loss);
            sum.total += loss;
          }
          sums[g] = sum;
        }
      });
  RowLosses<T> losses(options.reduction, y);
  double count = 0.0;
  for (std::size_t g = 0; g < groups; ++g) {
    if (!row_losses) losses.add(sums[g].total);
    count += sums[g].count;
  }
  losses.finish(count);
  return count;
}

}  // namespace

template <class T>
Var<T> cross_entropy(const Var<T>& logits, const Indices& target, CrossEntropyOptions options) {
  const detail::Check check("cross_entropy");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"logits", &logits}});
  const Rows rows = rows_of(check, "logits", logits.shape());
  check_reduction(check, options.reduction);
  check_label_smoothing(check, options.label_smoothing);
  check_class_target(check, "logits", logits.shape(), rows, target, options.ignore_index);

  const std::size_t li = logits.index(), n = rows.n, c = rows.c;
  const std::size_t yi = tape.record(check.function(), {li}, logits.requires_grad());
  // Backward keeps the targets and row statistics; inference keeps nothing.
  SavedRow<T>* const saved =
      tape.requires_grad(yi) ? tape.template save<SavedRow<T>>(yi, n) : nullptr;
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(result_shape(rows, options.reduction));
  const double count =
      class_target_forward(tape.value(li).data(), target.data(), n, c, options, y, saved);

  tape.set_backward(yi, [li, yi, n, c, count, options](Tape<T>& tp, const xt::xarray<T>& dy) {
    const GradPointer<T> dx = tp.grad_pointer(li);
    if (dx.data == nullptr) return;
    const SavedRow<T>* saved = tp.template saved<SavedRow<T>>(yi);
    const T* x = tp.value(li).data();
    const T e = static_cast<T>(options.label_smoothing);
    // rows are independent: split over the threads in use
    detail::parallel_for_rows(n, min_rows_per_thread(c), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        T* d = dx.data + r * c;
        const std::int64_t tr = saved[r].target;
        if (tr == options.ignore_index) {  // dx[r, C] (+)= 0
          if (!dx.accumulate) std::fill(d, d + c, T(0));
          continue;
        }
        const T g = row_gradient(dy.data(), r, options.reduction, count);
        const T offset = -g * e / static_cast<T>(c);
        const RowStats<T> st = saved[r].stats;
        // dx[r, C] (+)= g * exp((x[r, C] - m) - log_s) - g * eps / C
        if (dx.accumulate)
          detail::scaled_exp_minus<T, true>(x + r * c, st.m, st.log_s, g, offset, d, c);
        else
          detail::scaled_exp_minus<T, false>(x + r * c, st.m, st.log_s, g, offset, d, c);
        d[tr] -= g * (T(1) - e);  // dx[r, t_r] -= g * (1 - eps)
      }
    });
  });
  tape.set_grad_rule(yi, [options](GradSink<T>& g) {
    const Var<T> x = g.input(0);
    const bool single = x.dimension() == 1;
    Indices kept = xt::empty<std::int64_t>(single ? Shape{} : Shape{x.shape()[0]});
    const SavedRow<T>* saved = g.tape().template saved<SavedRow<T>>(g.output().index());
    for (std::size_t r = 0; r < kept.size(); ++r) kept.data()[r] = saved[r].target;
    detail::cross_entropy_class_rule(g, kept, options);
  });
  return tape.var(yi);
}

namespace {

// The probability-target forward: the losses into y, and per row (when
// `stats` is not null) m, log_s and Q = sum_c q'_c (the factor of p in dx).
template <class T>
void probs_target_forward(const T* x, const T* q, std::size_t n, std::size_t c, double eps,
                          Reduction reduction, xt::xarray<T>& y, T* stats) {
  RowLosses<T> losses(reduction, y);
  const double keep_q = 1.0 - eps, spread = c == 0 ? 0.0 : eps / c;  // q' = keep_q q + spread
  for (std::size_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;
    const T* qr = q + r * c;
    const RowStats<T> st = row_stats(xr, c);
    // l_n = sum_c q'_c ((m - x_c) + log_s) = -sum_c q'_c log p_c
    losses.set(r, detail::sum_of(c, [&](std::size_t k) {
                 return (keep_q * qr[k] + spread) *
                        ((static_cast<double>(st.m) - xr[k]) + st.log_s);
               }));
    if (stats) {
      const double total_q = detail::sum_of(c, [qr](std::size_t k) { return qr[k]; });
      stats[3 * r] = st.m;
      stats[3 * r + 1] = st.log_s;
      stats[3 * r + 2] = static_cast<T>(keep_q * total_q + spread * c);
    }
  }
  losses.finish(static_cast<double>(n));
}

}  // namespace

template <class T>
Var<T> cross_entropy(const Var<T>& logits, const Var<T>& target_probs,
                     CrossEntropyOptions options) {
  const detail::Check check("cross_entropy");
  Tape<T>& tape = detail::common_tape<T>(check.function(),
                                         {{"logits", &logits}, {"target_probs", &target_probs}});
  const Rows rows = rows_of(check, "logits", logits.shape());
  check.shape(target_probs.shape() == logits.shape(), "target_probs", target_probs.shape(),
              logits.shape(), ", the shape of argument 'logits'");
  check_reduction(check, options.reduction);
  check_label_smoothing(check, options.label_smoothing);

  const std::size_t li = logits.index(), qi = target_probs.index(), n = rows.n, c = rows.c;
  const std::size_t yi = tape.record(check.function(), {li, qi},
                                     logits.requires_grad() || target_probs.requires_grad());
  T* const stats = tape.requires_grad(yi) ? tape.template save<T>(yi, 3 * n) : nullptr;
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(result_shape(rows, options.reduction));
  probs_target_forward(tape.value(li).data(), tape.value(qi).data(), n, c, options.label_smoothing,
                       options.reduction, y, stats);

  tape.set_backward(yi, [li, qi, yi, n, c, options](Tape<T>& tp, const xt::xarray<T>& dy) {
    const T* stats = tp.template saved<T>(yi);
    const T* x = tp.value(li).data();
    const T* q = tp.value(qi).data();
    const T keep_q = static_cast<T>(1.0 - options.label_smoothing);
    const T spread = c == 0 ? T(0) : static_cast<T>(options.label_smoothing / c);
    const double count = static_cast<double>(n);
    // One parent at a time: when logits and target_probs are one Var, the
    // second claim accumulates onto the first.
    if (tp.requires_grad(li)) {
      const GradPointer<T> dx = tp.grad_pointer(li);
      for (std::size_t r = 0; r < n; ++r) {
        const T g = row_gradient(dy.data(), r, options.reduction, count);
        const T m = stats[3 * r], log_s = stats[3 * r + 1], total_q = stats[3 * r + 2];
        for (std::size_t k = 0; k < c; ++k) {
          const std::size_t i = r * c + k;
          // dx[r, k] (+)= g * (p[r, k] * Q_r - q'[r, k])
          const T v = g * (std::exp((x[i] - m) - log_s) * total_q - (keep_q * q[i] + spread));
          dx.data[i] = dx.accumulate ? dx.data[i] + v : v;
        }
      }
    }
    if (tp.requires_grad(qi)) {
      const GradPointer<T> dq = tp.grad_pointer(qi);
      for (std::size_t r = 0; r < n; ++r) {
        const T g = row_gradient(dy.data(), r, options.reduction, count) * keep_q;
        const T m = stats[3 * r], log_s = stats[3 * r + 1];
        for (std::size_t k = 0; k < c; ++k) {
          const std::size_t i = r * c + k;
          const T v = g * ((m - x[i]) + log_s);  // dq[r, k] (+)= g (1 - eps) (lse_r - x[r, k])
          dq.data[i] = dq.accumulate ? dq.data[i] + v : v;
        }
      }
    }
  });
  tape.set_grad_rule(yi,
                     [options](GradSink<T>& g) { detail::cross_entropy_probs_rule(g, options); });
  return tape.var(yi);
}

template <class T>
Var<T> nll_loss(const Var<T>& log_probs, const Indices& target, NllLossOptions options) {
  const detail::Check check("nll_loss");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"log_probs", &log_probs}});
  const Rows rows = rows_of(check, "log_probs", log_probs.shape());
  check_reduction(check, options.reduction);
  const std::int64_t ignore = options.ignore_index;
  check_class_target(check, "log_probs", log_probs.shape(), rows, target, ignore);

  const std::size_t zi = log_probs.index();
  const std::size_t yi = tape.record(check.function(), {zi}, log_probs.requires_grad());
  const T* z = tape.value(zi).data();
  const std::int64_t* t = target.data();
  const std::size_t n = rows.n, c = rows.c;
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(result_shape(rows, options.reduction));
  RowLosses<T> losses(options.reduction, y);
  // Backward keeps the targets (in the node's saved memory); inference nothing.
  std::int64_t* const kept =
      tape.requires_grad(yi) ? tape.template save<std::int64_t>(yi, n) : nullptr;
  if (kept) std::copy(t, t + n, kept);
  double count = 0.0;
  for (std::size_t r = 0; r < n; ++r) {
    const bool counted = t[r] != ignore;
    losses.set(r, counted ? -static_cast<double>(z[r * c + t[r]]) : 0.0);  // l_n = -z[n, t_n]
    count += counted ? 1.0 : 0.0;
  }
  losses.finish(count);

  tape.set_backward(yi, [zi, yi, n, c, count, options](Tape<T>& tp, const xt::xarray<T>& dy) {
    const GradPointer<T> dz = tp.grad_pointer(zi);
    if (dz.data == nullptr) return;
    const std::int64_t* target = tp.template saved<std::int64_t>(yi);
    if (!dz.accumulate) std::fill(dz.data, dz.data + n * c, T(0));  // dz[N, C] = 0, then
    for (std::size_t r = 0; r < n; ++r) {
      const std::int64_t tr = target[r];
      if (tr == options.ignore_index) continue;
      // dz[r, t_r] (+)= -g_r
      dz.data[r * c + tr] -= row_gradient(dy.data(), r, options.reduction, count);
    }
  });
  tape.set_grad_rule(yi, [options](GradSink<T>& g) {
    const Var<T> z = g.input(0);
    Indices kept = xt::empty<std::int64_t>(z.dimension() == 1 ? Shape{} : Shape{z.shape()[0]});
    const std::int64_t* saved = g.tape().template saved<std::int64_t>(g.output().index());
    std::copy_n(saved, kept.size(), kept.data());
    detail::nll_loss_rule(g, kept, options);
  });
  return tape.var(yi);
}

template Var<float> cross_entropy(const Var<float>&, const Indices&, CrossEntropyOptions);
template Var<double> cross_entropy(const Var<double>&, const Indices&, CrossEntropyOptions);
template Var<float> cross_entropy(const Var<float>&, const Var<float>&, CrossEntropyOptions);
template Var<double> cross_entropy(const Var<double>&, const Var<double>&, CrossEntropyOptions);
template Var<float> nll_loss(const Var<float>&, const Indices&, NllLossOptions);
template Var<double> nll_loss(const Var<double>&, const Indices&, NllLossOptions);

}  // namespace xtgrad
