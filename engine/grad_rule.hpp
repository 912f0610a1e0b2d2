#pragma once
// GradRule<T> and GradSink<T>: the differentiable form of a node's backward,
// which backward with create_graph (tape.hpp, BackwardOptions) runs instead
// of the node's BackwardFn, so that gradients become Vars on the same tape
// and can be differentiated again (PyTorch's create_graph=True).
//
// An op sets its rule right after set_backward:
//
//   tape.set_backward(yi, [...](Tape<T>& t, const xt::xarray<T>& dy) { ... });
//   tape.set_grad_rule(yi, [](GradSink<T>& g) {
//     // mul: da = dy * b, db = dy * a
//     if (g.needs_grad(0)) g.add(0, mul(g.grad_output(), g.input(1)));
//     if (g.needs_grad(1)) g.add(1, mul(g.grad_output(), g.input(0)));
//   });
//
// A rule computes with the public differentiable ops only (mul, add, matmul,
// sum, reshape, ...), so that its own result has a backward, and a rule of
// those ops in turn (third order). Like a BackwardFn it captures indices,
// shapes and scalars by value; it is kept inline in the node
// (detail::InlineFunction), so a warm tape stores it without allocating, and
// it is dropped when the node needs no gradient. A node that has a BackwardFn
// but no GradRule makes a create_graph backward that reaches it throw
// std::logic_error "not twice differentiable: <op>" before anything changes.
//
// tape.hpp stores a GradRule in every node and includes this header; a rule's
// body needs Var and Tape complete, so an op file includes tape.hpp, never
// this header alone.

#include <cstddef>

#include "inline_function.hpp"

namespace xtgrad {

template <class T>
class Tape;
template <class T>
class Var;

namespace detail {
template <class T>
struct GraphPass;  // the create_graph pass (create_graph.hpp)
}  // namespace detail

// What a GradRule sees of its node during a create_graph pass.
template <class T>
class GradSink {
 public:
  Tape<T>& tape() const { return tape_; }
  // d(outputs)/d(this node), as a Var of the node's shape.
  Var<T> grad_output() const;
  // The node itself (for rules that reuse the output: exp, tanh, sigmoid...).
  Var<T> output() const;
  // The node's k-th parent, in the order the op recorded its parents.
  Var<T> input(std::size_t k) const;
  std::size_t input_count() const;
  // Whether parent k wants a gradient: it requires one and leads to an input
  // that is asked for. add(k, ...) is ignored when false; a rule skips the
  // computation.
  bool needs_grad(std::size_t k) const;
  // Accumulate g (of parent k's shape) into parent k's gradient, as a
  // differentiable sum. A parent listed twice (mul(x, x)) gets both shares.
  void add(std::size_t k, const Var<T>& g);

 private:
  friend struct detail::GraphPass<T>;
  GradSink(Tape<T>& tape, detail::GraphPass<T>& pass, std::size_t node)
      : tape_(tape), pass_(pass), node_(node) {}
  Tape<T>& tape_;
  detail::GraphPass<T>& pass_;
  std::size_t node_;
};

// 48 bytes inline: a rule captures a few indices, axes or scalars; what it
// needs beyond that it reads through the sink.
template <class T>
using GradRule = detail::InlineFunction<void(GradSink<T>&), 48>;

extern template class GradSink<float>;
extern template class GradSink<double>;

}  // namespace xtgrad
