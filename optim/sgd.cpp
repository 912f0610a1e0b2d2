#include "sgd.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "../engine/errors.hpp"
#include "../engine/kernels/parallel.hpp"
#include "state_reader.hpp"

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

// The checks of the constructor, also applied to a loaded state dict.
void check_sgd_options(const std::string& owner, const SGDOptions& options) {
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

}  // namespace

template <class T>
SGD<T>::SGD(std::vector<Parameter<T>*> params, const SGDOptions& options)
    : SGD(std::vector<SGDParamGroup<T>>(1, SGDParamGroup<T>{std::move(params), options})) {}

template <class T>
SGD<T>::SGD(const std::vector<SGDParamGroup<T>>& groups)
    : Optimizer<T>("SGD", detail::group_params(groups), detail::group_lrs(groups)),
      state_(this->parameters().size()) {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    check_sgd_options(this->group_owner(g), groups[g].options);
    options_.push_back(groups[g].options);
  }
}

template <class T>
SGDOptions SGD<T>::options(std::size_t group) const {
  this->check_group("options", group);
  return SGDOptions(options_[group]).lr(this->lr(group));
}

template <class T>
const SGDParamState<T>* SGD<T>::state(std::size_t index) const {
  this->check_state_index(index);
  const auto& slot = state_[index];
  return slot ? &*slot : nullptr;
}

template <class T>
void SGD<T>::step() {
  const auto& params = this->parameters();
  // Every check first, so that a failed step changes nothing.
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter<T>& p = *params[i];
    if (!p.has_grad) continue;
    detail::check_gradient(this->name() + "::step", i, p);
    if (state_[i])
      detail::check_state_shape(this->name() + "::step", i, p, state_[i]->momentum_buffer);
  }
  for (std::size_t g = 0; g < this->group_count(); ++g) {
    const SGDOptions& o = options_[g];
    const T lr = static_cast<T>(this->lr(g));
    const T weight_decay = static_cast<T>(o.weight_decay());
    const T momentum = static_cast<T>(o.momentum());
    const T one_minus_dampening = static_cast<T>(1.0 - o.dampening());
    for (std::size_t i = this->group_begin(g); i < this->group_end(g); ++i) {
      Parameter<T>& p = *params[i];
      if (!p.has_grad) continue;
      p.mark_changed();  // the value is written below
      const std::size_t n = p.value.size();
      if (o.momentum() == 0.0) {
        // each update split over the threads in use: elements are independent
        xtgrad::detail::parallel_for(
            n, xtgrad::detail::k_parallel_light, [&](std::size_t b, std::size_t e) {
              sgd_plain(p.value.data() + b, p.grad.data() + b, e - b, lr, weight_decay);
            });
        continue;
      }
      std::optional<SGDParamState<T>>& slot = state_[i];
      const bool first = !slot.has_value();
      if (first) slot.emplace(SGDParamState<T>{xt::zeros<T>(p.value.shape())});
      const T keep = first ? T(0) : momentum;
      const T take = first ? T(1) : one_minus_dampening;
      T* buffer = slot->momentum_buffer.data();
      xtgrad::detail::parallel_for(
          n, xtgrad::detail::k_parallel_light, [&](std::size_t b, std::size_t e) {
            if (o.nesterov())
              sgd_momentum<T, true>(p.value.data() + b, p.grad.data() + b, buffer + b, e - b, lr,
                                    weight_decay, momentum, keep, take);
            else
              sgd_momentum<T, false>(p.value.data() + b, p.grad.data() + b, buffer + b, e - b, lr,
                                     weight_decay, momentum, keep, take);
          });
    }
  }
}

// What load_state_dict assigns, read and checked in full first.
template <class T>
struct SGD<T>::Loaded {
  std::vector<double> lrs;
  std::vector<SGDOptions> options;
  std::vector<std::optional<SGDParamState<T>>> state;
};

template <class T>
StateDict<T> SGD<T>::state_dict() const {
  StateDict<T> out;
  this->write_common_state(out);
  for (std::size_t g = 0; g < options_.size(); ++g) {
    out.reals[detail::group_key(g, "momentum")] = options_[g].momentum();
    out.reals[detail::group_key(g, "dampening")] = options_[g].dampening();
    out.reals[detail::group_key(g, "weight_decay")] = options_[g].weight_decay();
    out.integers[detail::group_key(g, "nesterov")] = options_[g].nesterov() ? 1 : 0;
  }
  for (std::size_t i = 0; i < state_.size(); ++i)
    if (state_[i]) out.arrays[detail::state_key(i, "momentum_buffer")] = state_[i]->momentum_buffer;
  return out;
}

template <class T>
typename SGD<T>::Loaded SGD<T>::read_state_dict(const StateDict<T>& state,
                                                const std::string& function) const {
  detail::StateReader<T> reader(function, state);
  Loaded out;
  out.lrs = this->read_common_state(reader);
  for (std::size_t g = 0; g < this->group_count(); ++g) {
    SGDOptions o(out.lrs[g]);
    o.momentum(reader.real(detail::group_key(g, "momentum")))
        .dampening(reader.real(detail::group_key(g, "dampening")))
        .weight_decay(reader.real(detail::group_key(g, "weight_decay")))
        .nesterov(reader.integer_in(detail::group_key(g, "nesterov"), 0, 1) == 1);
    check_sgd_options(function + " (param group " + std::to_string(g) + ")", o);
    out.options.push_back(o);
  }
  const auto& params = this->parameters();
  out.state.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string key = detail::state_key(i, "momentum_buffer");
    if (!reader.has_array(key)) continue;
    const std::size_t g = this->group_of(i);
    if (out.options[g].momentum() == 0.0)
      reader.fail("has " + xtgrad::detail::quoted(key) + " but parameter " + std::to_string(i) +
                  " is in param group " + std::to_string(g) +
                  ", whose momentum is 0 (no momentum buffer expected)");
    const std::string what =
        "parameter " + std::to_string(i) + " (" + xtgrad::detail::quoted(params[i]->name) + ")";
    out.state[i].emplace(SGDParamState<T>{reader.array(key, params[i]->value.shape(), what)});
  }
  reader.finish();
  return out;
}

template <class T>
void SGD<T>::check_state_dict(const StateDict<T>& state) const {
  read_state_dict(state, this->name() + "::check_state_dict");
}

template <class T>
void SGD<T>::load_state_dict(const StateDict<T>& state) {
  Loaded loaded = read_state_dict(state, this->name() + "::load_state_dict");
  this->assign_lrs(std::move(loaded.lrs));
  options_ = std::move(loaded.options);
  state_ = std::move(loaded.state);
}

template class SGD<float>;
template class SGD<double>;

}  // namespace xtgrad::optim
