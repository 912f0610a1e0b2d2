// state_dict and load_state_dict of Adam and AdamW (the entries are listed
// in adam_update.hpp).

#include <string>
#include <utility>

#include "../engine/errors.hpp"
#include "adam.hpp"
#include "adam_update.hpp"
#include "adamw.hpp"
#include "state_reader.hpp"

namespace xtgrad::optim::detail {

// What load_state_dict assigns, read and checked in full first.
template <class T, class Options>
struct AdamFamily<T, Options>::Loaded {
  std::vector<double> lrs;
  std::vector<Options> options;
  std::vector<std::optional<AdamParamState<T>>> state;
};

template <class T, class Options>
StateDict<T> AdamFamily<T, Options>::state_dict() const {
  StateDict<T> out;
  this->write_common_state(out);
  for (std::size_t g = 0; g < options_.size(); ++g) {
    const Options& o = options_[g];
    out.reals[group_key(g, "beta1")] = std::get<0>(o.betas());
    out.reals[group_key(g, "beta2")] = std::get<1>(o.betas());
    out.reals[group_key(g, "eps")] = o.eps();
    out.reals[group_key(g, "weight_decay")] = o.weight_decay();
    out.integers[group_key(g, "amsgrad")] = o.amsgrad() ? 1 : 0;
  }
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (!state_[i]) continue;
    const AdamParamState<T>& s = *state_[i];
    out.integers[state_key(i, "step")] = s.step;
    out.arrays[state_key(i, "exp_avg")] = s.exp_avg;
    out.arrays[state_key(i, "exp_avg_sq")] = s.exp_avg_sq;
    if (options_[this->group_of(i)].amsgrad())
      out.arrays[state_key(i, "max_exp_avg_sq")] = s.max_exp_avg_sq;
  }
  return out;
}

template <class T, class Options>
typename AdamFamily<T, Options>::Loaded AdamFamily<T, Options>::read_state_dict(
    const StateDict<T>& state, const std::string& function) const {
  StateReader<T> reader(function, state);
  Loaded out;
  out.lrs = this->read_common_state(reader);
  for (std::size_t g = 0; g < this->group_count(); ++g) {
    Options o(out.lrs[g]);
    o.betas({reader.real(group_key(g, "beta1")), reader.real(group_key(g, "beta2"))})
        .eps(reader.real(group_key(g, "eps")))
        .weight_decay(reader.real(group_key(g, "weight_decay")))
        .amsgrad(reader.integer_in(group_key(g, "amsgrad"), 0, 1) == 1);
    check_adam_hyperparameters(function + " (param group " + std::to_string(g) + ")",
                               std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(),
                               o.weight_decay());
    out.options.push_back(o);
  }
  const auto& params = this->parameters();
  out.state.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string step_key = state_key(i, "step");
    const std::string exp_avg_key = state_key(i, "exp_avg");
    const std::string exp_avg_sq_key = state_key(i, "exp_avg_sq");
    const std::string max_key = state_key(i, "max_exp_avg_sq");
    const bool any = reader.has_integer(step_key) || reader.has_array(exp_avg_key) ||
                     reader.has_array(exp_avg_sq_key) || reader.has_array(max_key);
    if (!any) continue;  // no step taken yet for this parameter
    const std::string what =
        "parameter " + std::to_string(i) + " (" + xtgrad::detail::quoted(params[i]->name) + ")";
    const auto& shape = params[i]->value.shape();
    AdamParamState<T> s;
    // A step count is at most 2^53 (past that, beta^t is 0 in double anyway).
    s.step = reader.integer_in(step_key, 1, std::int64_t(1) << 53);
    s.exp_avg = reader.array(exp_avg_key, shape, what);
    s.exp_avg_sq = reader.array(exp_avg_sq_key, shape, what);
    const std::size_t g = this->group_of(i);
    if (out.options[g].amsgrad())
      s.max_exp_avg_sq = reader.array(max_key, shape, what);
    else if (reader.has_array(max_key))
      reader.fail("has " + xtgrad::detail::quoted(max_key) + " but parameter " + std::to_string(i) +
                  " is in param group " + std::to_string(g) + ", which has amsgrad off");
    out.state[i].emplace(std::move(s));
  }
  reader.finish();
  return out;
}

template <class T, class Options>
void AdamFamily<T, Options>::check_state_dict(const StateDict<T>& state) const {
  read_state_dict(state, this->name() + "::check_state_dict");
}

template <class T, class Options>
void AdamFamily<T, Options>::load_state_dict(const StateDict<T>& state) {
  Loaded loaded = read_state_dict(state, this->name() + "::load_state_dict");
  this->assign_lrs(std::move(loaded.lrs));
  options_ = std::move(loaded.options);
  state_ = std::move(loaded.state);
}

// The members defined here (the others are instantiated in adam_update.cpp).
#define XTGRAD_ADAM_STATE(T, Options)                                                \
  template StateDict<T> AdamFamily<T, Options>::state_dict() const;                  \
  template void AdamFamily<T, Options>::load_state_dict(const StateDict<T>&);        \
  template void AdamFamily<T, Options>::check_state_dict(const StateDict<T>&) const; \
  template AdamFamily<T, Options>::Loaded AdamFamily<T, Options>::read_state_dict(   \
      const StateDict<T>&, const std::string&) const;
XTGRAD_ADAM_STATE(float, AdamOptions)
XTGRAD_ADAM_STATE(double, AdamOptions)
XTGRAD_ADAM_STATE(float, AdamWOptions)
XTGRAD_ADAM_STATE(double, AdamWOptions)
#undef XTGRAD_ADAM_STATE

}  // namespace xtgrad::optim::detail
