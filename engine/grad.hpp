#pragma once
// grad and hvp: gradients as values, without touching .grad.
//
//   grad(tape, outputs, inputs, options)    torch.autograd.grad
//     The gradients of sum_k <grad_outputs[k], outputs[k]> with respect to
//     each input, as Vars. Nothing is accumulated: no leaf's .grad() and no
//     Parameter::grad changes (a plain backward's buffers are set aside and
//     put back). inputs are Vars (leaves, Parameters' Vars or intermediates)
//     or Parameters (the gradient sums every node that recorded it). With
//     create_graph the gradients are recorded through the ops' GradRules
//     (grad_rule.hpp) and can be differentiated again; an op without one
//     throws std::logic_error "not twice differentiable: <op>" before
//     anything changes. Without it they are constants (leaves without
//     gradient) computed by the fused first-order backward; any op works.
//     An input no gradient reaches is refused (std::invalid_argument naming
//     inputs[k]) unless allow_unused, which gives zeros (torch gives None;
//     torch's materialize_grads gives zeros).
//
//   hvp(tape, output, inputs, v, options)   torch.autograd.functional.hvp
//     H v for a one-element output f and the Hessian H of f with respect to
//     the inputs (all together), by double backward: g = grad(f, inputs,
//     create_graph), then grad(sum_k <g_k, v_k>, inputs). Entries of v have
//     the inputs' shapes. An input f does not depend on, or a function
//     linear in the inputs, gives zeros. With options.create_graph the result
//     is differentiable again; an op it would then need a rule of, but which
//     has none (a third derivative), is found only by the second pass, after
//     the first has appended g's nodes: the refusal leaves those nodes on the
//     tape (no value, .grad or Parameter::grad is changed).
//
// Errors: std::invalid_argument naming the function and the argument (outputs,
// inputs[k], grad_outputs[k], v[k]) and the shapes; std::logic_error for tape
// misuse (a Var of another tape or a cleared one, an output or input that does
// not require a gradient).

#include <vector>

#include <xtensor/xarray.hpp>

#include "parameter.hpp"
#include "tape.hpp"

namespace xtgrad {

// An input of grad / hvp: a Var, or a Parameter (all its nodes on the tape).
template <class T>
class GradInput {
 public:
  GradInput(const Var<T>& var) : var_(var) {}         // NOLINT: implicit, for {x, w}
  GradInput(Parameter<T>& param) : param_(&param) {}  // NOLINT
  const Var<T>* var() const { return param_ ? nullptr : &var_; }
  Parameter<T>* param() const { return param_; }

 private:
  Var<T> var_;
  Parameter<T>* param_ = nullptr;
};

template <class T>
struct GradOptions {
  // One per output, of its shape; empty: every output has one element and
  // gets 1 (torch's default for scalar outputs).
  std::vector<xt::xarray<T>> grad_outputs = {};
  // Record the gradients so that they can be differentiated again.
  bool create_graph = false;
  // An input no gradient reaches gets zeros instead of an error.
  bool allow_unused = false;
};

struct HvpOptions {
  bool create_graph = false;  // record H v so that it can be differentiated again
};

template <class T>
std::vector<Var<T>> grad(Tape<T>& tape, const std::vector<Var<T>>& outputs,
                         const std::vector<GradInput<T>>& inputs,
                         const GradOptions<T>& options = {});

template <class T>
std::vector<Var<T>> hvp(Tape<T>& tape, const Var<T>& output,
                        const std::vector<GradInput<T>>& inputs,
                        const std::vector<xt::xarray<T>>& v, const HvpOptions& options = {});

}  // namespace xtgrad
