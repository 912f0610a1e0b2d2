#include "tape.hpp"

#include <stdexcept>
#include <string>

#include "errors.hpp"

namespace xtgrad {

// ---- Var ----

template <class T>
Tape<T>& Var<T>::tape_for(const char* op, const char* arg) const {
  if (tape_ == nullptr)
    detail::fail_logic(op, "argument " + detail::quoted(arg) +
                               " is an empty Var handle; obtain Vars from Tape::leaf, "
                               "Tape::param or an op");
  tape_->check_live(*this, op, arg);
  return *tape_;
}

template <class T>
const xt::xarray<T>& Var<T>::value() const {
  return tape_for("Var::value", "this").value(index_);
}

template <class T>
const xt::xarray<T>& Var<T>::grad() const {
  return tape_for("Var::grad", "this").grad_of(index_);
}

template <class T>
T Var<T>::item() const {
  const xt::xarray<T>& v = tape_for("Var::item", "this").value(index_);
  detail::Check("Var::item")
      .shape(v.size() == 1, "this", v.shape(),
             "one element (item() reads a one-element Var; read value() for more)");
  return *v.data();
}

template <class T>
bool Var<T>::requires_grad() const {
  return tape_for("Var::requires_grad", "this").requires_grad(index_);
}

// ---- Tape ----

template <class T>
void Tape<T>::check_live(const Var<T>& v, const char* op, const char* arg) const {
  const bool stale = v.index_ >= size_ || node_at(v.index_).stamp != v.stamp_;
  if (stale && v.stamp_ >= cleared_stamp_)  // recorded after the last clear(): freed since
    detail::fail_logic(op, "argument " + detail::quoted(arg) +
                               " is a Var of a graph that was freed when recording started again "
                               "after a completed Tape::backward (as PyTorch frees a graph after "
                               "backward); keep the graph with tape.backward(y, "
                               "xtgrad::retain_graph) or tape.keep_graph(), or record the "
                               "computation again");
  if (stale)
    detail::fail_logic(op, "argument " + detail::quoted(arg) +
                               " is a Var of a tape that was cleared since it was recorded; "
                               "record the computation again after Tape::clear()");
  // Ops size their results by their arguments' shapes: a resized Parameter is
  // refused here, before the op records anything.
  const Node& node = node_at(v.index_);
  if (node.param && node.param->value.shape() != node.param_shape) fail_param_changed(v.index_, op);
}

template <class T>
void Tape<T>::check_owns(const Var<T>& v, const char* op, const char* arg) const {
  if (&v.tape_for(op, arg) != this)  // an empty or stale handle throws here
    detail::fail_logic(op, "argument " + detail::quoted(arg) +
                               " belongs to a different tape; record all inputs of one "
                               "computation on the same Tape");
}

template <class T>
std::size_t Tape<T>::record(const char* op, const std::size_t* parents, std::size_t count,
                            bool requires_grad) {
  if (free_on_record_ && count == 0) free_graph();
  if (size_ == nodes_.size()) nodes_.push_back(std::make_unique<Node>());
  Node& node = node_at(size_);
  node.op = op;
  node.param = nullptr;
  node.backward = nullptr;
  node.grad_rule = nullptr;
  node.parents.assign(parents, parents + count);  // no allocation once the node's list is warm
  node.requires_grad = grad_enabled_ && requires_grad;
  node.is_leaf = false;
  node.grad_ready = false;
  node.infinity_allowed = false;
  node.stamp = next_stamp_++;
  if (profiler_) profile_forward_begin(size_);
  return size_++;
}

template <class T>
Var<T> Tape<T>::param(Parameter<T>& p) {
  // Without recording no gradient will reach p: p.grad is not even looked at
  // (Module::infer relies on this to only read its Parameters).
  if (grad_enabled_ && p.requires_grad && p.grad.shape() != p.value.shape()) {
    // A gradient accumulated for the old shape is never dropped silently.
    if (p.has_grad)
      detail::fail_logic("Tape::param",
                         "Parameter " + detail::quoted(p.name) + " has shape " +
                             detail::shape_str(p.value.shape()) +
                             " but holds a gradient of shape " + detail::shape_str(p.grad.shape()) +
                             " accumulated before it changed; call zero_grad() on it (or on its "
                             "module or optimizer) before recording it again");
    p.grad.resize(p.value.shape());  // no gradient yet: the buffer only follows the new shape
    p.grad.fill(T(0));
  }
  const std::size_t index = record("param", {}, p.requires_grad);
  node_at(index).param = &p;
  node_at(index).param_shape = p.value.shape();
  node_at(index).is_leaf = true;
  // value stays unused for a Parameter node (value() reads p.value); resetting
  // it would allocate (a default xarray holds one element) every step.
  if (detect_anomaly_) check_forward(index);
  if (profiler_) profile_forward_end(index);
  watch_growth(p);
  return var(index);
}

template <class T>
const xt::xarray<T>& Tape<T>::value(std::size_t index) const {
  const Node& node = node_at(index);
  if (!node.param) return node.value;
  // Ops and backward rules size their loops by the recorded shape.
  if (node.param->value.shape() != node.param_shape) fail_param_changed(index, "Tape::value");
  return node.param->value;
}

template <class T>
void Tape<T>::fail_param_changed(std::size_t index, const char* where) const {
  const Node& node = node_at(index);
  detail::fail_logic(where, "Parameter " + detail::quoted(node.param->name) + " (node " +
                                std::to_string(index) + ") had shape " +
                                detail::shape_str(node.param_shape) +
                                " when it was recorded and has shape " +
                                detail::shape_str(node.param->value.shape()) +
                                " now; record the computation again after changing a Parameter");
}

template <class T>
GradSlot<T> Tape<T>::grad_slot(std::size_t index) {
  Node& node = node_at(index);
  if (node.param) {
    Parameter<T>& p = *node.param;
    if (p.grad.shape() != p.value.shape()) p.grad.resize(p.value.shape());
    const bool accumulate = p.has_grad;
    p.has_grad = true;
    return {p.grad, accumulate};
  }
  const bool accumulate = node.grad_ready;
  if (!accumulate && node.grad.shape() != node.value.shape()) node.grad.resize(node.value.shape());
  node.grad_ready = true;
  return {node.grad, accumulate};
}

template <class T>
const xt::xarray<T>& Tape<T>::grad_of(std::size_t index) {
  Node& node = node_at(index);
  if (node.param) return node.param->grad;
  if (!node.grad_ready) {
    node.grad.resize(node.value.shape());
    node.grad.fill(T(0));
  }
  return node.grad;
}

template <class T>
void Tape<T>::backward(const Var<T>& y) {
  check_owns(y, "Tape::backward", "y");
  const xt::xarray<T>& value = this->value(y.index_);
  if (value.size() != 1)
    detail::fail_logic("Tape::backward",
                       "y has shape " + detail::shape_str(value.shape()) +
                           "; backward(y) needs a one-element y, call backward(y, dy) with an "
                           "upstream gradient dy of y's shape");
  ones_.resize(value.shape());  // kept across calls: no allocation per step
  ones_.fill(T(1));
  backward(y, ones_);
}

template <class T>
void Tape<T>::backward(const Var<T>& y, const xt::xarray<T>& dy) {
  check_owns(y, "Tape::backward", "y");
  const std::size_t root = y.index_;
  if (dy.shape() != value(root).shape())
    detail::fail_shape("Tape::backward", "dy", dy.shape(),
                       detail::shape_str(value(root).shape()) + " (the shape of y)");
  if (!node_at(root).requires_grad)
    detail::fail_logic("Tape::backward",
                       "y does not require a gradient (no input of it was recorded with "
                       "requires_grad, or it was computed with recording off)");
  // Backward rules read parameter values with the shapes of the forward:
  // refuse before anything is written.
  for (std::size_t i = 0; i <= root; ++i) {
    const Node& node = node_at(i);
    if (node.param && node.param->value.shape() != node.param_shape)
      fail_param_changed(i, "Tape::backward");
  }
  if (detect_anomaly_) check_backward_start(root, dy);
  for (BackwardObserver<T>* observer : observers_) observer->backward_begin(*this, root);
  graph_grads_.clear();  // gradient Vars of an earlier create_graph pass are stale now

  for (std::size_t i = 0; i < size_; ++i)
    if (!node_at(i).is_leaf) node_at(i).grad_ready = false;

  GradSlot<T> seed = grad_slot(root);
  if (seed.accumulate)
    seed.buffer += dy;
  else
    seed.buffer = dy;

  if (observers_.empty()) {
    for (std::size_t i = root + 1; i-- > 0;) run_rule(i);
  } else {
    for (std::size_t i = root + 1; i-- > 0;) {
      run_rule(i);
      for (BackwardObserver<T>* observer : observers_) observer->node_done(*this, i);
    }
    for (BackwardObserver<T>* observer : observers_) observer->backward_end(*this);
  }
  free_on_record_ = true;  // the graph is done: the next new graph replaces it
  reset_growth_watch();
}

template <class T>
void Tape<T>::run_rule(std::size_t index) {
  Node& node = node_at(index);
  if (!node.backward || !node.grad_ready) return;
  if (profiler_)
    profile_backward(index);
  else
    node.backward(*this, node.grad);
  if (detect_anomaly_) check_backward(index);
}

template <class T>
Tape<T>::~Tape() {
  for (BackwardObserver<T>* observer : observers_) observer->tape_destroyed(*this);
}

template <class T>
void Tape<T>::add_backward_observer(BackwardObserver<T>* observer) {
  if (observer == nullptr)
    detail::fail_logic("Tape::add_backward_observer", "the observer is null");
  for (const BackwardObserver<T>* o : observers_)
    if (o == observer)
      detail::fail_logic("Tape::add_backward_observer", "this observer was added already");
  observers_.push_back(observer);
}

template <class T>
void Tape<T>::remove_backward_observer(BackwardObserver<T>* observer) {
  for (std::size_t k = 0; k < observers_.size(); ++k)
    if (observers_[k] == observer) {
      observers_.erase(observers_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
  detail::fail_logic("Tape::remove_backward_observer", "this observer was never added");
}

template <class T>
void Tape<T>::zero_grad() {
  for (std::size_t i = 0; i < size_; ++i) {
    Node& node = node_at(i);
    if (node.is_leaf && !node.param) node.grad_ready = false;
  }
}

template class Tape<float>;
template class Tape<double>;
template class Var<float>;
template class Var<double>;

}  // namespace xtgrad
