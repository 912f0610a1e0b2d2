#pragma once
// Tape<T> and Var<T>: the reverse-mode core of xtgrad.
//
// A Tape is a Wengert list: a flat vector of nodes in creation order (which is
// already a topological order, as in Stan Math). Each node holds its value,
// its gradient (allocated on first use), the indices of its parents and the
// backward rule of the op that made it. backward() walks the list once in
// reverse. There is no shared graph and no global state: two tapes in two
// threads never touch each other.
//
// Gradient semantics (as in PyTorch):
//  * leaves (tape.leaf) and Parameters (tape.param) accumulate across
//    backward calls until zero_grad();
//  * intermediate gradients restart from zero at every backward, so calling
//    backward twice on one recording is well defined;
//  * Var::grad() of a node that no gradient reached is all zeros.
//
// Lifetime: clear() invalidates every Var of the tape (using one afterwards
// throws std::logic_error) but keeps the node buffers, so the next step of a
// training loop reuses them instead of allocating; release() frees them.
// A Parameter recorded with param() must outlive the recording, and its value
// must not change between the forward and the backward that reads it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "parameter.hpp"

namespace xtgrad {

template <class T>
class Tape;

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

// A cheap handle to one node of a tape: (tape, index, generation).
template <class T>
class Var {
 public:
  Var() = default;  // an empty handle; any use throws std::logic_error

  const xt::xarray<T>& value() const;
  // d(output)/d(this) after backward; zeros if no gradient reached this node.
  const xt::xarray<T>& grad() const;
  const Shape& shape() const { return value().shape(); }
  std::size_t size() const { return value().size(); }
  std::size_t dimension() const { return value().dimension(); }
  bool requires_grad() const;

  Tape<T>& tape() const { return tape_for("Var::tape", "this"); }
  // The tape, or std::logic_error naming `op` and `arg` for an empty handle
  // or one whose tape was cleared since it was recorded.
  Tape<T>& tape_for(const char* op, const char* arg) const;
  std::size_t index() const { return index_; }

 private:
  friend class Tape<T>;
  Var(Tape<T>* tape, std::size_t index, std::uint64_t generation)
      : tape_(tape), index_(index), generation_(generation) {}
  Tape<T>* tape_ = nullptr;
  std::size_t index_ = 0;
  std::uint64_t generation_ = 0;
};

// Where a backward rule writes a parent's gradient. When `accumulate` is
// false the buffer holds garbage of the right shape and must be overwritten
// (a GEMM with beta = 0); when true, add to it (beta = 1).
template <class T>
struct GradSlot {
  xt::xarray<T>& buffer;
  bool accumulate;
};

// The backward rule of one node: given d(output)/d(node) it adds the parents'
// gradients through tape.grad_slot(parent_index). Captures indices, shapes and
// evaluated containers by value, never views or references.
template <class T>
using BackwardFn = std::function<void(Tape<T>& tape, const xt::xarray<T>& grad_output)>;

template <class T>
class Tape {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "xtgrad::Tape<T>: T must be float or double");

 public:
  Tape() = default;
  Tape(const Tape&) = delete;  // Vars point at their tape: it must not move
  Tape& operator=(const Tape&) = delete;

  // Record an input. Evaluates `expr` (any xtensor expression, strided views
  // included) once into the tape; `expr` itself is never written to.
  template <class E>
  Var<T> leaf(const xt::xexpression<E>& expr, bool requires_grad = true) {
    const std::size_t index = record("leaf", {}, requires_grad);
    nodes_[index].value = expr.derived_cast();
    nodes_[index].is_leaf = true;
    return var(index);
  }
  Var<T> leaf(const xt::xarray<T>& value, bool requires_grad = true) {
    return leaf<xt::xarray<T>>(value, requires_grad);
  }

  // Record a Parameter: backward accumulates into p.grad. No copy of p.value.
  Var<T> param(Parameter<T>& p);

  // Reverse pass from a one-element y (upstream gradient 1), or from any y
  // with an explicit upstream gradient dy of y's shape.
  void backward(const Var<T>& y);
  void backward(const Var<T>& y, const xt::xarray<T>& dy);

  // Zero the gradients of this tape's leaves (Parameters are zeroed by their
  // owner: Module::zero_grad or an optimizer's zero_grad).
  void zero_grad();

  // Forget every node; Vars of this tape become invalid. Buffers are kept for
  // reuse by the next recording (see release()).
  void clear();
  // clear(), and free the kept buffers too.
  void release();

  std::size_t size() const { return size_; }

  // Inference: while recording is off, ops compute values only; nothing is
  // saved for backward and no result requires a gradient.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }

  // ---- For op implementations (engine/ops). Not needed by users. ----

  // Append a node for op `op` with the given parents; it requires a gradient
  // when recording is on and `requires_grad` is true. Returns its index. The
  // value is left to the caller (value_mut). Appending may move other nodes:
  // take references to parent values after this call, not before.
  std::size_t record(const char* op, std::initializer_list<std::size_t> parents,
                     bool requires_grad);
  void set_backward(std::size_t index, BackwardFn<T> backward);
  Var<T> var(std::size_t index) { return Var<T>(this, index, generation_); }

  const xt::xarray<T>& value(std::size_t index) const;
  xt::xarray<T>& value_mut(std::size_t index) { return nodes_[index].value; }
  bool requires_grad(std::size_t index) const { return nodes_[index].requires_grad; }
  GradSlot<T> grad_slot(std::size_t index);

  // Throws std::logic_error unless v is a live handle of this tape.
  void check_owns(const Var<T>& v, const char* op, const char* arg) const;

 private:
  friend class Var<T>;
  static constexpr std::size_t k_max_parents = 4;

  struct Node {
    const char* op = "";
    xt::xarray<T> value;  // unused for Parameter nodes
    xt::xarray<T> grad;   // unused for Parameter nodes
    Parameter<T>* param = nullptr;
    BackwardFn<T> backward;
    std::array<std::size_t, k_max_parents> parents{};
    std::size_t parent_count = 0;
    bool requires_grad = false;
    bool is_leaf = false;
    bool grad_ready = false;  // grad holds a value for the current backward
  };

  void check_live(const Var<T>& v, const char* where) const;
  const xt::xarray<T>& grad_of(std::size_t index);

  std::vector<Node> nodes_;  // nodes_[0, size_) are live; the rest are kept buffers
  std::size_t size_ = 0;
  std::uint64_t generation_ = 1;  // bumped by clear(); Vars remember theirs
  bool grad_enabled_ = true;
};

// Turns recording off for a scope (like torch::NoGradGuard), restoring the
// previous state at exit.
template <class T>
class NoGradGuard {
 public:
  explicit NoGradGuard(Tape<T>& tape) : tape_(tape), previous_(tape.grad_enabled()) {
    tape_.set_grad_enabled(false);
  }
  ~NoGradGuard() { tape_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  Tape<T>& tape_;
  bool previous_;
};

extern template class Tape<float>;
extern template class Tape<double>;
extern template class Var<float>;
extern template class Var<double>;

}  // namespace xtgrad
