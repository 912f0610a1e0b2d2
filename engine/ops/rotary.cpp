#include "rotary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/parallel.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_rotary_op = "apply_rotary";
constexpr double k_pi = 3.14159265358979323846;  // math.pi of modeling_rope_utils

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  return a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings;
}

// inv_freq[i] = 1 / theta^(2i / Dh), then scaled (rotary.hpp).
double scaled_inv_freq(std::size_t i, double head_dim, double theta, const RopeScaling& scaling) {
  const double inv_freq = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / head_dim);
  if (scaling.type == RopeScaling::Type::linear) return inv_freq / scaling.factor;
  if (scaling.type != RopeScaling::Type::llama3) return inv_freq;
  const double original = scaling.original_max_position_embeddings;
  const double wavelen = 2.0 * k_pi / inv_freq;
  if (wavelen > original / scaling.low_freq_factor) return inv_freq / scaling.factor;
  if (wavelen < original / scaling.high_freq_factor) return inv_freq;
  const double smooth = (original / wavelen - scaling.low_freq_factor) /
                        (scaling.high_freq_factor - scaling.low_freq_factor);
  return (1.0 - smooth) * inv_freq / scaling.factor + smooth * inv_freq;
}

// cos[t, i] and sin[t, i] for t < rows, i < half (the table [T, h] is what
// both halves of a row share): cos_sin[t * half + i] and
// cos_sin[(rows + t) * half + i]. Computed in double, then rounded to T.
template <class T>
void fill_tables(T* cos_sin, std::size_t rows, std::size_t half, std::size_t position_offset,
                 double theta, const RopeScaling& scaling) {
  const double head_dim = 2.0 * static_cast<double>(half);
  T* cos_table = cos_sin;
  T* sin_table = cos_sin + rows * half;
  for (std::size_t i = 0; i < half; ++i) {
    const double inv_freq = scaled_inv_freq(i, head_dim, theta, scaling);
    for (std::size_t t = 0; t < rows; ++t) {
      const double angle = static_cast<double>(position_offset + t) * inv_freq;
      cos_table[t * half + i] = static_cast<T>(std::cos(angle));
      sin_table[t * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

// fill_tables of the last call on this thread, kept: a model rotates the
// queries and keys of every layer with the same (T, Dh, offset, theta), and
// the cos and sin evaluations cost more than the rotation of a small batch
// (measured, float [1, 12, 64, 64]: 32 us a call with new tables, 11 us
// with kept ones), so they run once per step instead of twice per layer.
template <class T>
const T* cached_tables(std::size_t rows, std::size_t half, std::size_t position_offset,
                       double theta, const RopeScaling& scaling) {
  struct Cache {
    bool valid = false;
    std::size_t rows = 0, half = 0, position_offset = 0;
    double theta = 0.0;
    RopeScaling scaling;
    std::vector<T> values;
  };
  thread_local Cache cache;
  if (!(cache.valid && cache.rows == rows && cache.half == half &&
        cache.position_offset == position_offset && cache.theta == theta &&
        same_scaling(cache.scaling, scaling))) {
    cache.valid = false;  // until the new tables are complete
    cache.values.resize(2 * rows * half);
    fill_tables(cache.values.data(), rows, half, position_offset, theta, scaling);
    cache.rows = rows;
    cache.half = half;
    cache.position_offset = position_offset;
    cache.theta = theta;
    cache.scaling = scaling;
    cache.valid = true;
  }
  return cache.values.data();
}

// One rotation of every row of a [rows_total, Dh] stack, row r at position
// (r % seq) of the tables. forward (inverse == false):
//   d[i] = s[i] c - s[i + h] s,  d[i + h] = s[i + h] c + s[i] s
// backward (inverse == true, the transpose):
//   d[i] = s[i] c + s[i + h] s,  d[i + h] = s[i + h] c - s[i] s
// written into d, or added to it (add). Compile-time choices only.
template <bool inverse, bool add, class T>
void rotate_rows(const T* src, T* dst, const T* cos_table, const T* sin_table,
                 std::size_t rows_total, std::size_t seq, std::size_t half) {
  const std::size_t dh = 2 * half;
  // A few multiply-adds an element: a light pass (kernels/parallel.hpp).
  const std::size_t min_rows =
      std::max<std::size_t>(detail::k_parallel_light / std::max<std::size_t>(dh, 1), 1);
  detail::parallel_for_rows(rows_total, min_rows, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t t = r % seq;
      const T* c = cos_table + t * half;
      const T* s = sin_table + t * half;
      const T* x1 = src + r * dh;
      const T* x2 = x1 + half;
      T* y1 = dst + r * dh;
      T* y2 = y1 + half;
      for (std::size_t i = 0; i < half; ++i) {
        const T a = x1[i], b = x2[i];
        T first, second;
        if constexpr (inverse) {
          first = a * c[i] + b * s[i];
          second = b * c[i] - a * s[i];
        } else {
          first = a * c[i] - b * s[i];
          second = b * c[i] + a * s[i];
        }
        if constexpr (add) {
          y1[i] += first;
          y2[i] += second;
        } else {
          y1[i] = first;
          y2[i] = second;
        }
      }
    }
  });
}

// Records the rotation of x (inverse == false: apply_rotary) or its inverse,
// the transposed rotation by -angle (the op of apply_rotary's gradient),
// after the checks.
template <bool inverse, class T>
Var<T> record_rotation(const Var<T>& x, std::size_t position_offset, double theta,
                       const RopeScaling& scaling) {
  Tape<T>& tape = x.tape();
  const Shape& shape = x.shape();
  const std::size_t dh = shape.back(), seq = shape[shape.size() - 2], half = dh / 2;
  const std::size_t xi = x.index();
  const std::size_t yi =
      tape.record(inverse ? "apply_rotary_inverse" : k_rotary_op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(shape);
  const std::size_t rows_total = dh == 0 ? 0 : xv.size() / dh;

  // cos and sin [T, h] each, kept in this node for backward.
  T* tables = tape.template save<T>(yi, 2 * seq * half);
  const T* computed = cached_tables<T>(seq, half, position_offset, theta, scaling);
  std::copy(computed, computed + 2 * seq * half, tables);
  // y[.., t, :] = x * cos[t] + rotate_half(x) * sin[t]   (inverse: the transpose)
  rotate_rows<inverse, false>(xv.data(), y.data(), tables, tables + seq * half, rows_total, seq,
                              half);

  tape.set_backward(yi, [xi, yi, rows_total, seq, half](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const GradPointer<T> dx = t.grad_pointer(xi);
    const T* tab = t.template saved<T>(yi);
    // dx[.., t, :] (+)= dy * cos[t] + rotate_half^T(dy * sin[t])   (inverse: the rotation)
    if (dx.accumulate)
      rotate_rows<!inverse, true>(dy.data(), dx.data, tab, tab + seq * half, rows_total, seq, half);
    else
      rotate_rows<!inverse, false>(dy.data(), dx.data, tab, tab + seq * half, rows_total, seq,
                                   half);
  });
  // create_graph: dx = the inverse rotation of dy (of the inverse: the rotation)
  tape.set_grad_rule(yi, [position_offset, theta, scaling](GradSink<T>& g) {
    if (g.needs_grad(0))
      g.add(0, record_rotation<!inverse>(g.grad_output(), position_offset, theta, scaling));
  });
  return tape.var(yi);
}

}  // namespace

void detail::check_rope_scaling(const char* function, const char* arg, const RopeScaling& scaling) {
  const detail::Check check(function);
  const auto positive = [](double v) { return std::isfinite(v) && v > 0.0; };
  check.argument(scaling.type == RopeScaling::Type::none ||
                     scaling.type == RopeScaling::Type::linear ||
                     scaling.type == RopeScaling::Type::llama3,
                 arg, "has a type that is not none, linear or llama3");
  if (scaling.type == RopeScaling::Type::none) return;
  check.argument(positive(scaling.factor), arg, "has factor ", scaling.factor,
                 ", expected a finite value > 0");
  if (scaling.type != RopeScaling::Type::llama3) return;
  check.argument(positive(scaling.low_freq_factor) && positive(scaling.high_freq_factor) &&
                     scaling.low_freq_factor < scaling.high_freq_factor,
                 arg, "has low_freq_factor ", scaling.low_freq_factor, " and high_freq_factor ",
                 scaling.high_freq_factor,
                 ", expected finite 0 < low_freq_factor < high_freq_factor");
  check.argument(positive(scaling.original_max_position_embeddings), arg,
                 "has original_max_position_embeddings ", scaling.original_max_position_embeddings,
                 ", expected a finite value > 0");
}

template <class T>
Var<T> apply_rotary(const Var<T>& x, std::size_t position_offset, double theta) {
  return apply_rotary(x, position_offset, theta, RopeScaling{});
}

template <class T>
Var<T> apply_rotary(const Var<T>& x, std::size_t position_offset, double theta,
                    const RopeScaling& scaling) {
  detail::common_tape<T>(k_rotary_op, {{"x", &x}});
  const Shape& shape = x.shape();
  const detail::Check check(k_rotary_op);
  check.shape(shape.size() >= 2, "x", shape, "[..., T, Dh] (rank >= 2: positions, head dimension)");
  const std::size_t dh = shape.back();
  check.shape(dh % 2 == 0, "x", shape,
              "[..., T, Dh] with Dh even (the two halves are rotated together), got Dh = ", dh);
  check.argument(std::isfinite(theta) && theta > 0.0, "theta", "is ", theta,
                 ", expected a finite value > 0");
  const std::size_t seq = shape[shape.size() - 2];  // positions offset .. offset + T - 1
  check.argument(seq == 0 || position_offset <= std::numeric_limits<std::size_t>::max() - (seq - 1),
                 "position_offset", "is ", position_offset, ", and the last position of x ", shape,
                 " (position_offset + T - 1) overflows std::size_t");
  detail::check_rope_scaling(k_rotary_op, "scaling", scaling);
  return record_rotation<false>(x, position_offset, theta, scaling);
}

template Var<float> apply_rotary(const Var<float>&, std::size_t, double);
template Var<double> apply_rotary(const Var<double>&, std::size_t, double);
template Var<float> apply_rotary(const Var<float>&, std::size_t, double, const RopeScaling&);
template Var<double> apply_rotary(const Var<double>&, std::size_t, double, const RopeScaling&);

}  // namespace xtgrad
