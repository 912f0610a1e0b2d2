#include "adamw.hpp"

#include <utility>

namespace xtgrad::optim {

template <class T>
AdamW<T>::AdamW(std::vector<Parameter<T>*> params, const AdamWOptions& options)
    : Optimizer<T>("AdamW", std::move(params), options.lr()),
      options_(options),
      state_(this->parameters().size()) {
  detail::check_adam_hyperparameters(this->name(), std::get<0>(options.betas()),
                                     std::get<1>(options.betas()), options.eps(),
                                     options.weight_decay());
}

template <class T>
const AdamParamState<T>* AdamW<T>::state(std::size_t index) const {
  const auto& slot = state_.at(index);
  return slot ? &*slot : nullptr;
}

template <class T>
void AdamW<T>::step() {
  detail::AdamStepConfig config;
  config.lr = this->lr();
  config.beta1 = std::get<0>(options_.betas());
  config.beta2 = std::get<1>(options_.betas());
  config.eps = options_.eps();
  config.decoupled_weight_decay = options_.weight_decay();
  config.amsgrad = options_.amsgrad();
  detail::adam_step(this->name(), this->parameters(), state_, config);
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace xtgrad::optim
