#include "adam.hpp"

#include <utility>

namespace xtgrad::optim {

template <class T>
Adam<T>::Adam(std::vector<Parameter<T>*> params, const AdamOptions& options)
    : Optimizer<T>("Adam", std::move(params), options.lr()),
      options_(options),
      state_(this->parameters().size()) {
  detail::check_adam_hyperparameters(this->name(), std::get<0>(options.betas()),
                                     std::get<1>(options.betas()), options.eps(),
                                     options.weight_decay());
}

template <class T>
const AdamParamState<T>* Adam<T>::state(std::size_t index) const {
  const auto& slot = state_.at(index);
  return slot ? &*slot : nullptr;
}

template <class T>
void Adam<T>::step() {
  detail::AdamStepConfig config;
  config.lr = this->lr();
  config.beta1 = std::get<0>(options_.betas());
  config.beta2 = std::get<1>(options_.betas());
  config.eps = options_.eps();
  config.l2_weight_decay = options_.weight_decay();
  config.amsgrad = options_.amsgrad();
  detail::adam_step(this->name(), this->parameters(), state_, config);
}

template class Adam<float>;
template class Adam<double>;

}  // namespace xtgrad::optim
