#pragma once
// Var<T>, the handle to one node of a Tape (engine/tape.hpp), and the small
// types the tape's interface speaks in: backward's options, the gradient
// slots a backward rule writes into, Shape and NoDeduce. Included by
// tape.hpp; Var's member functions are defined with the tape's.

#include <cstddef>
#include <cstdint>

#include <xtensor/xarray.hpp>

namespace xtgrad {

template <class T>
class Tape;

// Options of Tape::backward. create_graph (PyTorch's create_graph=True):
// backward records its own computation on the same tape through each node's
// GradRule (grad_rule.hpp), so that gradients are Vars (Var::grad_var) that
// can be differentiated again; .grad() and Parameter::grad get the values a
// plain backward gives. Refused (std::logic_error, before anything changes)
// when a node the gradients reach has no GradRule ("not twice
// differentiable: <op>") or a BackwardObserver is added.
//
// retain_graph (PyTorch's retain_graph=True): keep the recording after this
// backward instead of freeing it at the next recording that starts a new
// graph (see "Lifetime" at the top of this file). create_graph implies it.
struct BackwardOptions {
  bool create_graph = false;
  bool retain_graph = false;
};
// tape.backward(y, xtgrad::create_graph).
inline constexpr BackwardOptions create_graph{true};
// tape.backward(y, xtgrad::retain_graph).
inline constexpr BackwardOptions retain_graph{false, true};

// Blocks template argument deduction, so that an argument declared
// `const std::optional<Var<NoDeduce<T>>>&` accepts a plain Var<T>.
template <class T>
struct TypeIdentity {
  using type = T;
};
template <class T>
using NoDeduce = typename TypeIdentity<T>::type;

// Shape of a tensor, as xtensor stores it.
using Shape = xt::xarray<float>::shape_type;

// A cheap handle to one node of a tape: (tape, index, stamp). The stamp is
// the node's when the Var was made; a node recorded again over a cleared or
// freed one gets a new stamp, so a stale Var is always told apart.
template <class T>
class Var {
 public:
  Var() = default;  // an empty handle; any use throws std::logic_error

  // The references returned by value() and grad() stay valid until the tape
  // is cleared (a later backward may change what grad() holds).
  const xt::xarray<T>& value() const;
  // d(output)/d(this) after backward; zeros if no gradient reached this node.
  const xt::xarray<T>& grad() const;
  // The value of a one-element Var (any shape of one element), as
  // torch.Tensor.item(); std::invalid_argument naming the shape otherwise.
  T item() const;
  const Shape& shape() const { return tape_for("Var::shape", "this").value(index_).shape(); }
  std::size_t size() const { return tape_for("Var::size", "this").value(index_).size(); }
  std::size_t dimension() const {
    return tape_for("Var::dimension", "this").value(index_).dimension();
  }
  bool requires_grad() const;
  // The gradient as a differentiable Var, after a backward with create_graph
  // that reached this node (a leaf's or Parameter's sums the earlier
  // create_graph backwards since its gradient was last zeroed; a gradient
  // accumulated otherwise enters as a constant). std::logic_error when there
  // is none: no such backward, a plain backward or clear() since, a zeroed
  // gradient, or no gradient reached this node.
  Var<T> grad_var() const;

  Tape<T>& tape() const { return tape_for("Var::tape", "this"); }
  // The tape, or std::logic_error naming `op` and `arg` for an empty handle
  // or one whose tape was cleared since it was recorded.
  Tape<T>& tape_for(const char* op, const char* arg) const;
  // The node's index; std::logic_error when the tape was cleared (or the
  // graph freed) since it was recorded, so that an op never records a stale
  // index as a parent. An empty handle gives 0.
  std::size_t index() const;

 private:
  friend class Tape<T>;
  Var(Tape<T>* tape, std::size_t index, std::uint64_t stamp)
      : tape_(tape), index_(index), stamp_(stamp) {}
  Tape<T>* tape_ = nullptr;
  std::size_t index_ = 0;
  std::uint64_t stamp_ = 0;
};

// Where a backward rule writes a parent's gradient (Tape::grad_slot states
// the rule): overwrite `buffer` when `accumulate` is false, add to it when true.
template <class T>
struct GradSlot {
  xt::xarray<T>& buffer;
  bool accumulate;
};

// GradSlot as a raw pointer, for kernels (Tape::grad_pointer): null when the
// node needs no gradient.
template <class T>
struct GradPointer {
  T* data = nullptr;
  bool accumulate = false;
};

}  // namespace xtgrad
