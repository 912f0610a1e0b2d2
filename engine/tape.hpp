#pragma once
// Tape<T> and Var<T>: the reverse-mode core of xtgrad.
// (Var and the types of the interface: var.hpp; NoGradGuard and
// DetectAnomalyGuard: tape_guards.hpp; the graph's lifetime is in
// tape_lifetime.cpp and anomaly mode in tape_anomaly.cpp.)
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
// Anomaly mode (torch.autograd.detect_anomaly, but per tape, no global
// state): off by default. When on, each node's value is checked for NaN and
// Inf as soon as it exists (a leaf or Parameter when recorded, an op's
// result when the op hands over its backward rule), and during backward the
// gradients each node's rule wrote into its parents are checked right after
// the rule ran. The first non-finite element throws AnomalyError naming the
// op, the node index and the shapes. Off, it costs one branch per node.
// Without it NaN and Inf simply propagate as IEEE arithmetic says.
// A forward value reports the NaN it produces, and an infinity only where
// one is born of finite inputs: deliberate masking is no anomaly, so an
// infinity is not reported in a leaf (user data: an additive -inf mask), in
// an op whose inputs already hold one (scores + mask, softmax of a masked
// row), or in an op that writes a user-given infinite fill value
// (masked_fill(x, mask, -inf), through allow_infinity). A Parameter and a
// gradient are reported for any NaN or Inf.
//
// Lifetime: clear() invalidates every Var of the tape (using one afterwards
// throws std::logic_error) but keeps the node buffers, so the next step of a
// training loop reuses them instead of allocating; release() frees them.
// A completed backward frees its graph the way PyTorch's does, at the next
// recording that starts a new graph: after tape.backward(y) (without
// retain_graph or create_graph), the first node recorded without parents (a
// leaf, a Parameter, a constant) first forgets every node but the leaves
// that lead the tape (recorded before any op of the first graph since
// clear(); PyTorch keeps leaf tensors too), so that a training loop that
// forgets clear() stays the size of one step. Until then the recording is
// intact: its Vars, values and gradients read as before, backward may run
// again, and ops on its Vars append to it (a metric computed after
// backward); those nodes are freed with it. A Var of a freed node throws
// std::logic_error saying so. backward(y, retain_graph), create_graph,
// grad / hvp (grad.hpp) and keep_graph() keep the graph.
// A loop that only runs forward (inference, evaluation) on one tape, with no
// backward and no clear(), has no finished graph to free: every iteration's
// nodes stay, and the tape grows without bound. Nothing tells such a loop
// from several forwards that one backward will combine (both record the
// same Parameters again), so the tape does not free them; it warns instead,
// once per tape, on stderr, naming the fix: when one Parameter is recorded
// for the growth_warning()-th time (16 by default) since the last backward
// or clear(). The fix is tape.clear() at the start of each iteration, or
// Module::infer, which records on a private tape and keeps nothing.
// A Parameter recorded with param() must outlive the recording, and its value
// must not change between the forward and the backward that reads it (a
// change of shape is caught: using the recorded Var, or backward, throws
// std::logic_error).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "anomaly_error.hpp"
#include "backward_fn.hpp"
#include "backward_observer.hpp"
#include "grad_rule.hpp"
#include "parameter.hpp"
#include "tape_guards.hpp"
#include "var.hpp"

namespace xtgrad {

template <class T>
class Tape;
class Profiler;  // engine/profiler.hpp

// The backward rule of one node (BackwardFn<T>, backward_fn.hpp): given
// d(output)/d(node) it adds the parents' gradients through
// tape.grad_slot(parent_index). Captures indices, shapes and evaluated
// containers by value, never views or references.

template <class T>
class Tape {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "xtgrad::Tape<T>: T must be float or double");

 public:
  Tape() = default;
  ~Tape();                     // tells the backward observers still added
  Tape(const Tape&) = delete;  // Vars point at their tape: it must not move
  Tape& operator=(const Tape&) = delete;

  // Record an input. Evaluates `expr` (any xtensor expression, strided views
  // included) once into the tape; `expr` itself is never written to.
  template <class E>
  Var<T> leaf(const xt::xexpression<E>& expr, bool requires_grad = true) {
    const std::size_t index = record("leaf", {}, requires_grad);
    node_at(index).value = expr.derived_cast();
    node_at(index).is_leaf = true;
    if (detect_anomaly_) check_forward(index);
    if (profiler_) profile_forward_end(index);
    return var(index);
  }
  Var<T> leaf(const xt::xarray<T>& value, bool requires_grad = true) {
    return leaf<xt::xarray<T>>(value, requires_grad);
  }

  // Record a Parameter: backward accumulates into p.grad. No copy of p.value.
  // A frozen parameter (p.requires_grad false) is recorded as a constant:
  // nothing is computed for it in backward and p.grad is never touched.
  // Recording on, a gradient accumulated for an older shape of p.value is
  // refused (std::logic_error), never dropped; recording off, p is only read.
  Var<T> param(Parameter<T>& p);

  // Reverse pass from a one-element y (upstream gradient 1), or from any y
  // with an explicit upstream gradient dy of y's shape.
  void backward(const Var<T>& y);
  void backward(const Var<T>& y, const xt::xarray<T>& dy);
  void backward(const Var<T>& y, const BackwardOptions& options);
  void backward(const Var<T>& y, const xt::xarray<T>& dy, const BackwardOptions& options);

  // Zero the gradients of this tape's leaves (Parameters are zeroed by their
  // owner: Module::zero_grad or an optimizer's zero_grad).
  void zero_grad();

  // Forget every node; Vars of this tape become invalid. Buffers are kept for
  // reuse by the next recording (see release()).
  void clear();
  // Keep the recording of the last backward: the next node recorded without
  // parents appends to it instead of starting a fresh graph (see "Lifetime"
  // at the top of this file). The explicit form of backward(y, retain_graph).
  void keep_graph() { free_on_record_ = false; }
  // clear(), and free the kept buffers too.
  void release();

  std::size_t size() const { return size_; }

  // The forward-only-loop warning (see "Lifetime" at the top of this file):
  // printed once per tape when one Parameter is recorded for the n-th time
  // since the last backward or clear(); 0 turns it off.
  std::size_t growth_warning() const { return growth_warning_; }
  void set_growth_warning(std::size_t n) { growth_warning_ = n; }

  // Inference: while recording is off, ops compute values only; nothing is
  // saved for backward and no result requires a gradient.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }

  // Anomaly mode (see the top of this file). When a forward value is
  // non-finite, AnomalyError is thrown and that node is not recorded (the
  // tape is as before the call). When a gradient is, backward stops there:
  // gradients already accumulated stay as they are (zero_grad before retrying).
  bool detect_anomaly() const { return detect_anomaly_; }
  void set_detect_anomaly(bool enabled) { detect_anomaly_ = enabled; }

  // Profiling (engine/profiler.hpp): while a Profiler is set, every op's
  // forward (record to set_backward) and backward rule is timed into it.
  // Null (the default) costs one branch per node. The profiler must outlive
  // its use here.
  Profiler* profiler() const { return profiler_; }
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }

  // Backward observers (backward_observer.hpp), called in the order they
  // were added. None (the default) costs one branch per backward. Adding one
  // twice or removing one never added is std::logic_error.
  void add_backward_observer(BackwardObserver<T>* observer);
  void remove_backward_observer(BackwardObserver<T>* observer);

  // Reading a recording (engine/graph_dot.hpp, engine/profiler.hpp), for
  // index < size(): the op name, the parents in the order the op recorded
  // them, whether it is a leaf (leaf or param), and its Parameter (null
  // unless recorded with param()).
  const char* node_op(std::size_t index) const { return node_at(index).op; }
  std::size_t node_parent_count(std::size_t index) const { return node_at(index).parents.size(); }
  std::size_t node_parent(std::size_t index, std::size_t k) const {
    return node_at(index).parents[k];
  }
  bool node_is_leaf(std::size_t index) const { return node_at(index).is_leaf; }
  const Parameter<T>* node_param(std::size_t index) const { return node_at(index).param; }
  // Whether node index holds a gradient, i.e. grad_slot(index) would
  // accumulate: a leaf or Parameter since its last zero_grad, another node
  // since the start of the current (or last) backward pass. recompute
  // (recompute.hpp) reads it to continue an input's sum in the same order.
  bool node_has_grad(std::size_t index) const {
    const Node& node = node_at(index);
    return node.param ? node.param->has_grad : node.grad_ready;
  }

  // ---- Writing an op ----
  //
  // Every op of engine/ops is written with the functions below, and so can
  // yours (docs/custom_ops.md has a complete example):
  //
  //   1. check the arguments first: detail::common_tape (check.hpp) for the
  //      tape, then shapes and values, throwing through errors.hpp, so that a
  //      bad call records nothing;
  //   2. `record` the node and fill its value through `value_mut`;
  //   3. hand over the backward rule with `set_backward` (always, also when
  //      recording is off: the rule is then dropped), and its differentiable
  //      form with `set_grad_rule` (grad_rule.hpp) for create_graph;
  //   4. return `var(index)`.
  //
  // The rule gets d(output)/d(node) and adds each parent's share through
  // `grad_slot` / `grad_pointer`. It must capture indices, shapes, scalars
  // and evaluated arrays by value, never Vars' references, views or lazy
  // expressions, and read values through `value(index)` when it runs.

  // Append a node for op `op` (a string that outlives the tape, usually a
  // literal) with the given parent node indices (any number; a warm tape
  // reuses the list's storage); it requires a gradient when recording is on
  // and `requires_grad` is true (pass "any parent requires one"). Returns its
  // index. Nodes never move, so references to values and shapes
  // stay valid while the tape grows.
  std::size_t record(const char* op, std::initializer_list<std::size_t> parents,
                     bool requires_grad) {
    return record(op, parents.begin(), parents.size(), requires_grad);
  }
  std::size_t record(const char* op, const std::vector<std::size_t>& parents, bool requires_grad) {
    return record(op, parents.data(), parents.size(), requires_grad);
  }
  // The value of a node just recorded, for the op to fill (resize it to the
  // result's shape; it may hold a buffer kept from an earlier recording).
  xt::xarray<T>& value_mut(std::size_t index) { return node_at(index).value; }
  // Every op calls this once, after its value is complete; anomaly mode
  // checks the value here. Dropped when the node needs no gradient. Any
  // callable `void(Tape<T>&, const xt::xarray<T>&)` (a lambda, a BackwardFn):
  // it is moved into the node's BackwardFn, which a warm tape reuses without
  // allocating.
  template <class F>
  void set_backward(std::size_t index, F&& backward) {
    if (detect_anomaly_) check_forward(index);
    Node& node = node_at(index);
    if (node.requires_grad) node.backward.emplace(std::forward<F>(backward));
    if (profiler_) profile_forward_end(index);
  }
  // For an op that writes a user-given infinite value (masked_fill with
  // -inf): anomaly mode does not report the infinities of node `index`'s
  // value (NaN still is). Call it between `record` and `set_backward`.
  void allow_infinity(std::size_t index) { node_at(index).infinity_allowed = true; }
  // The differentiable form of the rule (GradRule, grad_rule.hpp), for
  // backward with create_graph; set right after set_backward, dropped like it
  // when the node needs no gradient.
  template <class F>
  void set_grad_rule(std::size_t index, F&& rule) {
    Node& node = node_at(index);
    if (node.requires_grad) node.grad_rule.emplace(std::forward<F>(rule));
  }

  // Memory for what a backward rule reads beside values (row statistics, a
  // copy of integer targets): `count` elements of a trivially copyable U,
  // owned by node `index` (call it after `record`) and kept across clear()
  // like the node's value, so that a warm tape records without allocating.
  // The op fills it; the rule reads it back with saved<U>(index). One buffer
  // per node: a second call replaces the first's contents.
  template <class U>
  U* save(std::size_t index, std::size_t count) {
    static_assert(std::is_trivially_copyable_v<U> && alignof(U) <= alignof(std::max_align_t),
                  "Tape::save: U must be trivially copyable and at most max_align_t-aligned");
    Node& node = node_at(index);
    const std::size_t blocks =
        (count * sizeof(U) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
    if (node.saved_blocks < blocks) {
      node.saved = std::make_unique<std::max_align_t[]>(blocks);
      node.saved_blocks = blocks;
    }
    U* data = reinterpret_cast<U*>(node.saved.get());
    std::uninitialized_default_construct_n(data, count);
    return std::launder(data);
  }
  template <class U>
  const U* saved(std::size_t index) const {
    return std::launder(reinterpret_cast<const U*>(node_at(index).saved.get()));
  }
  Var<T> var(std::size_t index) { return Var<T>(this, index, node_at(index).stamp); }

  const xt::xarray<T>& value(std::size_t index) const;
  bool requires_grad(std::size_t index) const { return node_at(index).requires_grad; }

  // Where a backward rule puts parent `index`'s gradient; call it only when
  // requires_grad(index). The write-or-accumulate rule: the first rule to
  // reach a node in a backward pass gets accumulate == false and a buffer of
  // the node's shape holding garbage, which it must overwrite entirely (BLAS
  // beta = 0); every later call, in this pass or for a leaf or Parameter
  // after an earlier backward, gets accumulate == true and must add onto the
  // buffer (beta = 1). The same parent may be claimed twice by one rule (an
  // op applied to x and x): the second claim accumulates.
  GradSlot<T> grad_slot(std::size_t index);
  // grad_slot as a raw pointer for kernels: null (and the node untouched)
  // when the node needs no gradient, otherwise the same rule.
  GradPointer<T> grad_pointer(std::size_t index) {
    if (!requires_grad(index)) return {};
    GradSlot<T> slot = grad_slot(index);
    return {slot.buffer.data(), slot.accumulate};
  }

  // Throws std::logic_error unless v is a live handle of this tape.
  void check_owns(const Var<T>& v, const char* op, const char* arg) const;

 private:
  friend class Var<T>;
  friend struct detail::GraphPass<T>;
  struct Node {
    const char* op = "";
    xt::xarray<T> value;  // unused for Parameter nodes
    xt::xarray<T> grad;   // unused for Parameter nodes
    Parameter<T>* param = nullptr;
    Shape param_shape;  // param->value's shape when recorded
    BackwardFn<T> backward;
    GradRule<T> grad_rule;  // empty unless the op set one
    std::vector<std::size_t> parents;
    std::unique_ptr<std::max_align_t[]> saved;  // Tape::save, kept across clear()
    std::size_t saved_blocks = 0;
    bool requires_grad = false;
    bool is_leaf = false;
    bool grad_ready = false;        // grad holds a value for the current backward
    bool infinity_allowed = false;  // allow_infinity: anomaly mode reports NaN only
    std::uint64_t stamp = 0;        // unique per recording of this node (Var's stamp)
  };

  std::size_t record(const char* op, const std::size_t* parents, std::size_t count,
                     bool requires_grad);
  void check_live(const Var<T>& v, const char* op, const char* arg) const;
  const xt::xarray<T>& grad_of(std::size_t index);

  // Anomaly mode. check_forward throws (and un-records `index` when it is the
  // last node) if its value is non-finite; check_backward if the rule of node
  // `index` left a non-finite gradient in a parent; check_backward_start if dy
  // or a gradient accumulated by an earlier backward already is.
  void check_forward(std::size_t index);
  bool infinity_expected(std::size_t index) const;  // check_forward's rule for an infinity
  void check_backward(std::size_t index);
  void check_backward_start(std::size_t root, const xt::xarray<T>& dy) const;
  std::string describe(std::size_t index) const;
  [[noreturn]] void fail_param_changed(std::size_t index, const char* where) const;
  const xt::xarray<T>* accumulated_grad(std::size_t index) const;
  // The profiler_ hooks, in tape_profiling.cpp.
  void profile_forward_begin(std::size_t index);
  void profile_forward_end(std::size_t index);
  void profile_backward(std::size_t index);
  void run_rule(std::size_t index);  // node index's rule, profiled and checked

  // nodes_[0, size_) are live; the rest are kept buffers. Each node has its
  // own allocation, so that a reference to a node's value stays valid while
  // later nodes are appended. (A deque did that too, but its indexing was
  // about 3% of a small model's training step.)
  std::vector<std::unique_ptr<Node>> nodes_;
  Node& node_at(std::size_t index) { return *nodes_[index]; }
  const Node& node_at(std::size_t index) const { return *nodes_[index]; }
  std::size_t size_ = 0;
  std::uint64_t next_stamp_ = 1;     // Node::stamp of the next recorded node
  std::uint64_t cleared_stamp_ = 1;  // next_stamp_ at the last clear()
  bool grad_enabled_ = true;
  xt::xarray<T> ones_;  // the upstream gradient of backward(y)
  bool detect_anomaly_ = false;
  // Set by a completed backward that frees its graph: the next node recorded
  // without parents frees it first (free_graph; see "Lifetime" at the top).
  bool free_on_record_ = false;
  // The leaves that lead the first graph freed since clear() (recorded
  // before any op): kept by every free until clear(), as PyTorch keeps leaf
  // tensors alive when it frees a graph. k_unset until that first free.
  static constexpr std::size_t k_unset = static_cast<std::size_t>(-1);
  std::size_t kept_leaves_ = k_unset;
  void free_graph();
  void truncate(std::size_t count);  // forget nodes [count, size_)
  // The forward-only-loop warning: the first Parameter recorded since the
  // last backward or clear(), how often it has been since, and whether the
  // warning was printed (once per tape).
  static constexpr std::size_t k_default_growth_warning = 16;
  std::size_t growth_warning_ = k_default_growth_warning;
  const Parameter<T>* watched_param_ = nullptr;
  std::size_t watched_records_ = 0;
  bool growth_warned_ = false;
  void watch_growth(const Parameter<T>& p);  // called by param()
  void reset_growth_watch() {
    watched_param_ = nullptr;
    watched_records_ = 0;
  }
  Profiler* profiler_ = nullptr;
  std::vector<BackwardObserver<T>*> observers_;
  // Node -> the node holding its gradient Var after the last create_graph
  // backward (Var::grad_var); emptied by a plain backward and by clear().
  std::vector<std::size_t> graph_grads_;
};

template <class T>
std::size_t Var<T>::index() const {
  if (tape_ != nullptr && (index_ >= tape_->size_ || tape_->node_at(index_).stamp != stamp_))
    tape_->check_live(*this, "Var::index", "this");  // throws
  return index_;
}

extern template class Tape<float>;
extern template class Tape<double>;
extern template class Var<float>;
extern template class Var<double>;

}  // namespace xtgrad
