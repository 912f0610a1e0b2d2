#pragma once
// Optimizer<T>: the base of SGD, Adam and AdamW, in the shape of the PyTorch C++
// frontend's torch::optim::Optimizer, with parameter groups.
//
// An optimizer holds pointers to Parameters it does not own (they must outlive
// it), split into parameter groups as torch.optim's param_groups: each group
// has its own learning rate (read and written by the schedules of
// lr_scheduler.hpp) and, in the derived class, its own hyperparameters (every
// field of the optimizer's options; for example weight_decay 0 on biases and
// norm weights). An optimizer built from one list of parameters has one group.
// Parameters are numbered across the groups in order (group 0's first, as in
// torch's state_dict), and the derived class keeps per-parameter state under
// that number. State is allocated on the first step() that finds a gradient
// for that parameter.
//
// state_dict() returns the whole state as plain data (StateDict: each group's
// hyperparameters, the per-parameter buffers and step counts) and
// load_state_dict() takes it back, so that a run saved and resumed continues
// bit for bit; the layout is listed with each optimizer. load_state_dict
// checks everything (the optimizer type, the number of groups and of
// parameters in each, every hyperparameter as the constructor would, every
// buffer's shape against its parameter, no missing or unexpected entry)
// before it changes anything, and throws std::invalid_argument naming the
// entry and what was expected. As in torch.optim, the loaded hyperparameters
// replace those given to the constructor.
//
// step() skips a parameter whose has_grad is false, as PyTorch skips
// `p.grad is None`: neither its value nor its state changes (no weight decay
// either). A gradient whose shape differs from its value's is an error.
//
// Construction throws std::invalid_argument when there is no parameter at all
// (as torch.optim does; a group may be empty), for a null pointer, a parameter
// listed twice, in one group or in two (its update would be applied twice), or
// an invalid learning rate. Learning rates must be finite and >= 0.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/parameter.hpp"
#include "../engine/state_dict.hpp"

namespace xtgrad::optim {

// One parameter group: its parameters and its hyperparameters, all of them
// (Options is SGDOptions, AdamOptions or AdamWOptions), as a group of
// torch.optim with every key given:
//   SGD<float> sgd({{weights, SGDOptions(0.1).momentum(0.9).weight_decay(1e-4)},
//                   {biases, SGDOptions(0.1).momentum(0.9)}});
template <class T, class Options>
struct ParamGroup {
  std::vector<Parameter<T>*> params;
  Options options;
};

namespace detail {
template <class T>
class StateReader;
}  // namespace detail

template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;

  // Forget every parameter's gradient (Parameter::zero_grad). Virtual so
  // that a wrapper keeping gradients elsewhere (distributed::ShardedOptimizer)
  // can release them instead.
  virtual void zero_grad();

  // The learning rate of a group (the first by default). std::invalid_argument
  // for a group index >= group_count().
  double lr(std::size_t group = 0) const;
  // Sets every group's learning rate to lr. Throws std::invalid_argument
  // unless lr is finite and >= 0.
  void set_lr(double lr);
  // Sets one group's learning rate (as param_groups[group]["lr"] = lr).
  void set_lr(std::size_t group, double lr);

  std::size_t group_count() const { return group_lrs_.size(); }
  // The parameters of a group are parameters()[group_begin(g), group_end(g)).
  std::size_t group_begin(std::size_t group) const;
  std::size_t group_end(std::size_t group) const;

  // Every parameter, group after group.
  const std::vector<Parameter<T>*>& parameters() const { return params_; }
  // The class name used in error messages ("SGD", "Adam", "AdamW").
  const std::string& name() const { return name_; }

  // The whole state, as plain data (see the derived class for its entries).
  virtual StateDict<T> state_dict() const = 0;
  // Replaces the state with `state`, all or nothing (see above).
  virtual void load_state_dict(const StateDict<T>& state) = 0;
  // Throws what load_state_dict(state) would throw, and changes nothing.
  virtual void check_state_dict(const StateDict<T>& state) const = 0;

 protected:
  // groups[g] holds the parameters of group g, lrs[g] its learning rate.
  Optimizer(std::string name, std::vector<std::vector<Parameter<T>*>> groups,
            std::vector<double> lrs);

  // For state(index) of the derived classes: std::invalid_argument naming
  // the optimizer, the index and the number of parameters.
  void check_state_index(std::size_t index) const;
  // For a group argument of `method` ("lr", "options", ...):
  // std::invalid_argument "xtgrad::<name>::<method>: argument 'group' is g,
  // expected less than n (the number of groups)" when g >= group_count().
  void check_group(const char* method, std::size_t group) const;
  // The owner named by errors about group g's hyperparameters: the name, and
  // " param group <g>" when there is more than one group.
  std::string group_owner(std::size_t group) const;
  // The group of parameter `index`.
  std::size_t group_of(std::size_t index) const;

  // The entries every optimizer's state dict has: "type", "param_groups",
  // "param_groups.<g>.params" and "param_groups.<g>.lr".
  void write_common_state(StateDict<T>& state) const;
  // Checks them against this optimizer; returns the learning rates.
  std::vector<double> read_common_state(detail::StateReader<T>& reader) const;
  void assign_lrs(std::vector<double> lrs) { group_lrs_ = std::move(lrs); }

 private:
  std::string name_;
  std::vector<Parameter<T>*> params_;
  std::vector<std::size_t> group_begin_;  // group_count() + 1 offsets into params_
  std::vector<double> group_lrs_;
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

namespace detail {

// Unless ok, throws std::invalid_argument
//   "xtgrad::<owner>: argument '<argument>' must be <expectation>, got <value>".
void require(bool ok, const std::string& owner, const char* argument, const char* expectation,
             double value);
void require_finite_nonnegative(const std::string& owner, const char* argument, double value);
void require_at_least(const std::string& owner, const char* argument, std::int64_t value,
                      std::int64_t minimum);

// The parameter lists and learning rates of `groups` (any ParamGroup), for
// the constructors taking groups.
template <class T, class Options>
std::vector<std::vector<Parameter<T>*>> group_params(
    const std::vector<ParamGroup<T, Options>>& groups) {
  std::vector<std::vector<Parameter<T>*>> out;
  for (const auto& g : groups) out.push_back(g.params);
  return out;
}
template <class T, class Options>
std::vector<double> group_lrs(const std::vector<ParamGroup<T, Options>>& groups) {
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(g.options.lr());
  return out;
}

// "param_groups.<g>.<key>" and "state.<i>.<key>": the names of state dict entries.
std::string group_key(std::size_t group, const char* key);
std::string state_key(std::size_t index, const char* key);

// Throws std::invalid_argument naming `function` ("Adam::step",
// "clip_grad_norm") unless p.grad has p.value's shape.
template <class T>
void check_gradient(const std::string& function, std::size_t index, const Parameter<T>& p);

// Throws std::logic_error naming `function` when p.value no longer has the
// shape its optimizer state was created with.
template <class T>
void check_state_shape(const std::string& function, std::size_t index, const Parameter<T>& p,
                       const xt::xarray<T>& state);

}  // namespace detail

}  // namespace xtgrad::optim
