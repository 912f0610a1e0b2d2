#pragma once
// The create_graph pass, detail::GraphPass<T>: one reverse pass over a tape
// for higher-order gradients (backward with create_graph, grad, hvp).
// Internal to engine/. create_graph.cpp defines it, and with it the public
// functions built on it: Tape::backward(y[, dy], options) and Var::grad_var
// (tape.hpp), GradSink (grad_rule.hpp).
//
// The pass walks the nodes that existed when it started once in reverse, from
// the highest output down, as the first-order backward does (no recursion).
// With create_graph each reached node's GradRule runs through a GradSink and
// records differentiable ops; the new nodes are appended after the walked
// ones, which the walk never visits. Without it (grad without create_graph)
// the nodes' BackwardFns run with every gradient buffer set aside and put
// back afterwards, so that nothing a user sees as .grad changes.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <xtensor/xarray.hpp>

#include "grad_rule.hpp"
#include "tape.hpp"

namespace xtgrad::detail {

template <class T>
struct GraphPass {
  static constexpr std::size_t k_none = std::numeric_limits<std::size_t>::max();

  // `top`: the highest output node; `wanted[i]`: node i requires a gradient
  // and leads to an input asked for (every requiring node for backward).
  GraphPass(Tape<T>& tape, std::size_t top, std::vector<char> wanted);

  // std::logic_error "not twice differentiable: <op>" (from `function`) when
  // a node that the gradients of `roots` reach has a backward but no
  // GradRule. Changes nothing.
  void check_rules(const char* function, const std::vector<std::size_t>& roots) const;
  // Adds g to the gradient Var of `node` (a differentiable sum).
  void accumulate(std::size_t node, const Var<T>& g, std::size_t from);
  // Runs the GradRules from `top` down; recording is on meanwhile.
  void run();
  // The node holding `node`'s gradient, or k_none.
  std::size_t grad_of(std::size_t node) const { return grads[node]; }

  // Pointers into the tape's nodes, for the first-order pass of grad().
  // Runs the BackwardFns of the wanted nodes from `top` down after seeding
  // roots[k] with seeds[k]; returns the gradient of each node in `inputs`
  // (summed over a Parameter's nodes), and an empty array for a node that no
  // gradient reached. Every .grad buffer is as before afterwards.
  std::vector<std::optional<xt::xarray<T>>> first_order(
      const std::vector<std::size_t>& roots, const std::vector<const xt::xarray<T>*>& seeds,
      const std::vector<std::vector<std::size_t>>& inputs);

  // backward(y, dy, create_graph): the checks of a plain backward, then the
  // pass, then .grad / Parameter::grad and the gradient Vars written.
  static void backward(Tape<T>& tape, const Var<T>& y, const xt::xarray<T>& dy);
  // After the pass of backward(y, dy, create_graph) over nodes [0, count):
  // intermediate gradients reset, and each reached node's .grad (summed per
  // Parameter into Parameter::grad) and gradient Var (grad_var) written. A
  // leaf or Parameter that holds a gradient already adds the new one onto it
  // (onto_earlier): onto its earlier gradient Var when that still holds the
  // value, else onto a constant.
  void write_grads(std::size_t count);
  std::size_t onto_earlier(std::size_t i, const xt::xarray<T>& held, std::size_t g);
  // Var::grad_var.
  static Var<T> grad_var(Tape<T>& tape, std::size_t index);
  // The op name, parents and Parameter of node i (the pass reads them
  // through Tape's private Node).
  static const char* op(const Tape<T>& tape, std::size_t i) { return tape.node_at(i).op; }
  static const std::vector<std::size_t>& parents(const Tape<T>& tape, std::size_t i) {
    return tape.node_at(i).parents;
  }
  // Throws std::logic_error from `function` when an observer is added.
  static void check_no_observer(const Tape<T>& tape, const char* function);
  // The checks backward makes of the recording before it writes anything:
  // no Parameter changed shape among nodes [0, top].
  static void check_params(const Tape<T>& tape, std::size_t top, const char* function);

  Tape<T>& tape;
  std::size_t top;
  std::vector<char> wanted;
  std::vector<std::size_t> grads;  // node -> node holding its gradient Var, or k_none
};

// Turns recording on for the pass (the GradRules record), restoring it after.
template <class T>
class EnableGradGuard {
 public:
  explicit EnableGradGuard(Tape<T>& tape) : tape_(tape), previous_(tape.grad_enabled()) {
    tape_.set_grad_enabled(true);
  }
  ~EnableGradGuard() { tape_.set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  Tape<T>& tape_;
  bool previous_;
};

extern template struct GraphPass<float>;
extern template struct GraphPass<double>;

}  // namespace xtgrad::detail
