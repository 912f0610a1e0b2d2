#include "../engine/kernels/simd.hpp"  // first: see simd.hpp

#include <cmath>
#include <type_traits>

#include "adam_update.hpp"

#include "../engine/kernels/parallel.hpp"

#include <utility>

#include "adam.hpp"
#include "adamw.hpp"

namespace xtgrad::optim::detail {

namespace {

struct AdamScalars {
  double beta1, one_minus_beta1, beta2, one_minus_beta2;
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  double eps, l2_weight_decay;
  double param_scale;  // 1 - lr * decoupled_weight_decay
};

// The per-element coefficients of one step, as T or broadcast into a batch.
template <class V>
struct Coefficients {
  V beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bias_correction2_sqrt, eps, l2,
      param_scale;

  explicit Coefficients(const AdamScalars& s)
      : beta1(cast(s.beta1)),
        one_minus_beta1(cast(s.one_minus_beta1)),
        beta2(cast(s.beta2)),
        one_minus_beta2(cast(s.one_minus_beta2)),
        step_size(cast(s.step_size)),
        bias_correction2_sqrt(cast(s.bias_correction2_sqrt)),
        eps(cast(s.eps)),
        l2(cast(s.l2_weight_decay)),
        param_scale(cast(s.param_scale)) {}

 private:
  static V cast(double value) {
    if constexpr (std::is_floating_point_v<V>)
      return static_cast<V>(value);
    else
      return V(static_cast<typename V::value_type>(value));
  }
};

// The update of one element (V = T) or of one batch of elements
// (V = xsimd::batch<T>), written once for both; see adam_update.hpp.
template <bool Amsgrad, class V>
void adam_element(V& p, const V& grad, V& exp_avg, V& exp_avg_sq, V& max_exp_avg_sq,
                  const Coefficients<V>& c) {
  const V g = grad + c.l2 * p;
  exp_avg = c.beta1 * exp_avg + c.one_minus_beta1 * g;
  exp_avg_sq = c.beta2 * exp_avg_sq + c.one_minus_beta2 * g * g;
  V v = exp_avg_sq;
  if constexpr (Amsgrad) {
    max_exp_avg_sq = xsimd::max(max_exp_avg_sq, exp_avg_sq);
    v = max_exp_avg_sq;
  }
  const V denom = xsimd::sqrt(v) / c.bias_correction2_sqrt + c.eps;
  p = p * c.param_scale - c.step_size * (exp_avg / denom);
}

// One pass over n elements: whole batches, then the remaining elements one by
// one. (A plain loop would not vectorize: std::sqrt keeps an errno branch
// unless the build uses -fno-math-errno.) max_exp_avg_sq is null without amsgrad.
template <class T, bool Amsgrad>
void adam_kernel(T* p, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, std::size_t n,
                 const AdamScalars& s) {
  using B = xsimd::batch<T>;
  constexpr std::size_t lanes = B::size;
  const Coefficients<B> cb(s);
  std::size_t k = 0;
  for (; k + lanes <= n; k += lanes) {
    B p_k = B::load_unaligned(p + k), m_k = B::load_unaligned(exp_avg + k),
      v_k = B::load_unaligned(exp_avg_sq + k);
    B v_max_k = Amsgrad ? B::load_unaligned(max_exp_avg_sq + k) : B(T(0));
    adam_element<Amsgrad>(p_k, B::load_unaligned(grad + k), m_k, v_k, v_max_k, cb);
    p_k.store_unaligned(p + k);
    m_k.store_unaligned(exp_avg + k);
    v_k.store_unaligned(exp_avg_sq + k);
    if constexpr (Amsgrad) v_max_k.store_unaligned(max_exp_avg_sq + k);
  }
  const Coefficients<T> c(s);
  T unused = T(0);
  for (; k < n; ++k)
    adam_element<Amsgrad>(p[k], grad[k], exp_avg[k], exp_avg_sq[k],
                          Amsgrad ? max_exp_avg_sq[k] : unused, c);
}

}  // namespace

template <class T>
void check_adam_step(const std::string& owner, const std::vector<Parameter<T>*>& params,
                     const std::vector<std::optional<AdamParamState<T>>>& state) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter<T>& p = *params[i];
    if (!p.has_grad) continue;
    check_gradient(owner + "::step", i, p);
    if (state[i]) check_state_shape(owner + "::step", i, p, state[i]->exp_avg);
  }
}

template <class T>
void adam_step(const std::vector<Parameter<T>*>& params,
               std::vector<std::optional<AdamParamState<T>>>& state, std::size_t begin,
               std::size_t end, const AdamStepConfig& config) {
  // The bias corrections of the last step count seen: the parameters of a
  // group usually share it, and two pow calls per parameter were a few
  // percent of a small model's step.
  std::int64_t corrected_step = 0;
  double bias_correction1 = 0.0, bias_correction2 = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    Parameter<T>& p = *params[i];
    if (!p.has_grad) continue;
    p.mark_changed();  // the value is written below
    std::optional<AdamParamState<T>>& slot = state[i];
    if (!slot) {
      slot.emplace();
      slot->exp_avg = xt::zeros<T>(p.value.shape());
      slot->exp_avg_sq = xt::zeros<T>(p.value.shape());
      if (config.amsgrad) slot->max_exp_avg_sq = xt::zeros<T>(p.value.shape());
    }
    const std::int64_t t = ++slot->step;
    if (t != corrected_step) {
      corrected_step = t;
      bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(t));
      bias_correction2 = 1.0 - std::pow(config.beta2, static_cast<double>(t));
    }
    const AdamScalars scalars{config.beta1,
                              1.0 - config.beta1,
                              config.beta2,
                              1.0 - config.beta2,
                              config.lr / bias_correction1,
                              std::sqrt(bias_correction2),
                              config.eps,
                              config.l2_weight_decay,
                              1.0 - config.lr * config.decoupled_weight_decay};
    // Split over the threads in use at multiples of k_parallel_align, so that
    // the same elements as on one thread take the scalar tail.
    T *value = p.value.data(), *exp_avg = slot->exp_avg.data(),
      *exp_avg_sq = slot->exp_avg_sq.data();
    T* max_exp_avg_sq = config.amsgrad ? slot->max_exp_avg_sq.data() : nullptr;
    const T* grad = p.grad.data();
    xtgrad::detail::parallel_for(
        p.value.size(), xtgrad::detail::k_parallel_light, [&](std::size_t b, std::size_t e) {
          if (config.amsgrad)
            adam_kernel<T, true>(value + b, grad + b, exp_avg + b, exp_avg_sq + b,
                                 max_exp_avg_sq + b, e - b, scalars);
          else
            adam_kernel<T, false>(value + b, grad + b, exp_avg + b, exp_avg_sq + b, nullptr, e - b,
                                  scalars);
        });
  }
}

void check_adam_hyperparameters(const std::string& owner, double beta1, double beta2, double eps,
                                double weight_decay) {
  require(beta1 >= 0.0 && beta1 < 1.0, owner, "betas[0]", "in [0, 1)", beta1);
  require(beta2 >= 0.0 && beta2 < 1.0, owner, "betas[1]", "in [0, 1)", beta2);
  require(std::isfinite(eps) && eps > 0.0, owner, "eps", "a finite number > 0", eps);
  require_finite_nonnegative(owner, "weight_decay", weight_decay);
}

template <class T, class Options>
AdamFamily<T, Options>::AdamFamily(std::vector<Parameter<T>*> params, const Options& options)
    : AdamFamily(std::vector<ParamGroup<T, Options>>(
          1, ParamGroup<T, Options>{std::move(params), options})) {}

template <class T, class Options>
AdamFamily<T, Options>::AdamFamily(const std::vector<ParamGroup<T, Options>>& groups)
    : Optimizer<T>(Options::k_name, group_params(groups), group_lrs(groups)),
      state_(this->parameters().size()) {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const Options& o = groups[g].options;
    check_adam_hyperparameters(this->group_owner(g), std::get<0>(o.betas()), std::get<1>(o.betas()),
                               o.eps(), o.weight_decay());
    options_.push_back(o);
  }
}

template <class T, class Options>
Options AdamFamily<T, Options>::options(std::size_t group) const {
  this->check_group("options", group);
  return Options(options_[group]).lr(this->lr(group));
}

template <class T, class Options>
const AdamParamState<T>* AdamFamily<T, Options>::state(std::size_t index) const {
  this->check_state_index(index);
  const auto& slot = state_[index];
  return slot ? &*slot : nullptr;
}

template <class T, class Options>
void AdamFamily<T, Options>::step() {
  // Every check first, so that a failed step changes nothing.
  check_adam_step(this->name(), this->parameters(), state_);
  for (std::size_t g = 0; g < this->group_count(); ++g) {
    const Options& o = options_[g];
    AdamStepConfig config;
    config.lr = this->lr(g);
    config.beta1 = std::get<0>(o.betas());
    config.beta2 = std::get<1>(o.betas());
    config.eps = o.eps();
    (Options::k_decoupled_weight_decay ? config.decoupled_weight_decay : config.l2_weight_decay) =
        o.weight_decay();
    config.amsgrad = o.amsgrad();
    adam_step(this->parameters(), state_, this->group_begin(g), this->group_end(g), config);
  }
}

template class AdamFamily<float, AdamOptions>;
template class AdamFamily<double, AdamOptions>;
template class AdamFamily<float, AdamWOptions>;
template class AdamFamily<double, AdamWOptions>;

template void check_adam_step(const std::string&, const std::vector<Parameter<float>*>&,
                              const std::vector<std::optional<AdamParamState<float>>>&);
template void check_adam_step(const std::string&, const std::vector<Parameter<double>*>&,
                              const std::vector<std::optional<AdamParamState<double>>>&);
template void adam_step(const std::vector<Parameter<float>*>&,
                        std::vector<std::optional<AdamParamState<float>>>&, std::size_t,
                        std::size_t, const AdamStepConfig&);
template void adam_step(const std::vector<Parameter<double>*>&,
                        std::vector<std::optional<AdamParamState<double>>>&, std::size_t,
                        std::size_t, const AdamStepConfig&);

}  // namespace xtgrad::optim::detail
