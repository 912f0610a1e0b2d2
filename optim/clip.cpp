#include "clip.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../engine/errors.hpp"
#include "optimizer.hpp"

namespace xtgrad::optim {

namespace {

constexpr const char* k_op = "clip_grad_norm";
// Keeps the coefficient finite for all-zero gradients (PyTorch's constant).
constexpr double k_clip_eps = 1e-6;

// sum |g|^norm_type over one gradient, or max |g| for the infinity norm. A NaN
// element makes the result NaN (sums propagate it; the max needs the flag).
template <class T>
double norm_part(const T* g, std::size_t n, double norm_type) {
  double acc = 0.0;
  if (std::isinf(norm_type)) {
    bool has_nan = false;
    for (std::size_t k = 0; k < n; ++k) {
      const double a = std::abs(static_cast<double>(g[k]));
      acc = std::max(acc, a);
      has_nan |= std::isnan(a);
    }
    if (has_nan) acc = std::numeric_limits<double>::quiet_NaN();
  } else if (norm_type == 2.0) {
    for (std::size_t k = 0; k < n; ++k) acc += static_cast<double>(g[k]) * g[k];
  } else if (norm_type == 1.0) {
    for (std::size_t k = 0; k < n; ++k) acc += std::abs(static_cast<double>(g[k]));
  } else {
    for (std::size_t k = 0; k < n; ++k)
      acc += std::pow(std::abs(static_cast<double>(g[k])), norm_type);
  }
  return acc;
}

}  // namespace

template <class T>
double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm, double norm_type) {
  detail::require(!std::isnan(max_norm) && max_norm >= 0.0, k_op, "max_norm", ">= 0", max_norm);
  detail::require(!std::isnan(norm_type) && norm_type > 0.0, k_op, "norm_type", "> 0 (or infinity)",
                  norm_type);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i] == nullptr)
      xtgrad::detail::fail_argument(k_op, "params",
                                    "holds a null pointer at position " + std::to_string(i));
    if (params[i]->has_grad) detail::check_gradient(k_op, i, *params[i]);
  }

  const bool infinity = std::isinf(norm_type);
  double acc = 0.0;
  for (const Parameter<T>* p : params) {
    if (!p->has_grad) continue;
    const double part = norm_part(p->grad.data(), p->grad.size(), norm_type);
    // A NaN part enters acc through the sum; std::max(NaN, x) then keeps it.
    acc = infinity && !std::isnan(part) ? std::max(acc, part) : acc + part;
  }
  const double total = infinity || norm_type == 1.0 ? acc
                       : norm_type == 2.0           ? std::sqrt(acc)
                                                    : std::pow(acc, 1.0 / norm_type);
  if (!std::isfinite(total)) return total;

  const double clip_coef = max_norm / (total + k_clip_eps);
  if (clip_coef < 1.0) {
    const T coef = static_cast<T>(clip_coef);
    for (Parameter<T>* p : params) {
      if (!p->has_grad) continue;
      T* g = p->grad.data();
      for (std::size_t k = 0, n = p->grad.size(); k < n; ++k) g[k] *= coef;
    }
  }
  return total;
}

template double clip_grad_norm(const std::vector<Parameter<float>*>&, double, double);
template double clip_grad_norm(const std::vector<Parameter<double>*>&, double, double);

}  // namespace xtgrad::optim
