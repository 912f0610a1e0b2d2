#include "sgd.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "../engine/errors.hpp"

namespace xtgrad::optim {

namespace {

// p <- p - lr * (g + wd * p)
template <class T>
void sgd_plain(T* p, const T* g, std::size_t n, T lr, T weight_decay) {
  for (std::size_t k = 0; k < n; ++k) p[k] -= lr * (g[k] + weight_decay * p[k]);
}

// buf <- keep * buf + take * d, with d = g + wd * p; p <- p - lr * (nesterov ? d + momentum * buf
// : buf). The first update passes keep = 0, take = 1 over a zero buffer, which gives buf = d
// exactly.
template <class T, bool Nesterov>
void sgd_momentum(T* p, const T* g, T* buf, std::size_t n, T lr, T weight_decay, T momentum, T keep,
                  T take) {
  for (std::size_t k = 0; k < n; ++k) {
    const T d = g[k] + weight_decay * p[k];
    const T b = keep * buf[k] + take * d;
    buf[k] = b;
    if constexpr (Nesterov)
      p[k] -= lr * (d + momentum * b);
    else
      p[k] -= lr * b;
  }
}

}  // namespace

template <class T>
SGD<T>::SGD(std::vector<Parameter<T>*> params, const SGDOptions& options)
    : Optimizer<T>("SGD", std::move(params), options.lr()),
      options_(options),
      state_(this->parameters().size()) {
  const std::string& owner = this->name();
  detail::require_finite_nonnegative(owner, "momentum", options.momentum());
  detail::require(std::isfinite(options.dampening()) && options.dampening() >= 0.0 &&
                      options.dampening() <= 1.0,
                  owner, "dampening", "in [0, 1]", options.dampening());
  detail::require_finite_nonnegative(owner, "weight_decay", options.weight_decay());
  if (options.nesterov() && (options.momentum() <= 0.0 || options.dampening() != 0.0))
    xtgrad::detail::fail_argument(owner, "nesterov",
                                  "requires momentum > 0 and dampening == 0, got momentum " +
                                      xtgrad::detail::number_str(options.momentum()) +
                                      " and dampening " +
                                      xtgrad::detail::number_str(options.dampening()));
}

template <class T>
const SGDParamState<T>* SGD<T>::state(std::size_t index) const {
  this->check_state_index(index);
  const auto& slot = state_[index];
  return slot ? &*slot : nullptr;
}

template <class T>
void SGD<T>::step() {
  const T lr = static_cast<T>(this->lr());
  const T weight_decay = static_cast<T>(options_.weight_decay());
  const T momentum = static_cast<T>(options_.momentum());
  const T one_minus_dampening = static_cast<T>(1.0 - options_.dampening());
  const auto& params = this->parameters();
  // Every check first, so that a failed step changes nothing.
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter<T>& p = *params[i];
    if (!p.has_grad) continue;
    detail::check_gradient(this->name() + "::step", i, p);
    if (options_.momentum() != 0.0 && state_[i])
      detail::check_state_shape(this->name() + "::step", i, p, state_[i]->momentum_buffer);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter<T>& p = *params[i];
    if (!p.has_grad) continue;
    const std::size_t n = p.value.size();
    if (options_.momentum() == 0.0) {
      sgd_plain(p.value.data(), p.grad.data(), n, lr, weight_decay);
      continue;
    }
    std::optional<SGDParamState<T>>& slot = state_[i];
    const bool first = !slot.has_value();
    if (first) slot.emplace(SGDParamState<T>{xt::zeros<T>(p.value.shape())});
    const T keep = first ? T(0) : momentum;
    const T take = first ? T(1) : one_minus_dampening;
    if (options_.nesterov())
      sgd_momentum<T, true>(p.value.data(), p.grad.data(), slot->momentum_buffer.data(), n, lr,
                            weight_decay, momentum, keep, take);
    else
      sgd_momentum<T, false>(p.value.data(), p.grad.data(), slot->momentum_buffer.data(), n, lr,
                             weight_decay, momentum, keep, take);
  }
}

template class SGD<float>;
template class SGD<double>;

}  // namespace xtgrad::optim
