#include "tape.hpp"

#include <stdexcept>
#include <string>

#include "check.hpp"

namespace xtgrad {

// ---- Var ----

template <class T>
Tape<T>& Var<T>::tape_for(const char* op, const char* arg) const {
  if (tape_ == nullptr)
    throw std::logic_error(std::string("xtgrad::") + op + ": argument '" + arg +
                           "' is an empty Var handle; obtain Vars from Tape::leaf, Tape::param "
                           "or an op");
  tape_->check_live(*this, op);
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
bool Var<T>::requires_grad() const {
  return tape().requires_grad(index_);
}

// ---- Tape ----

template <class T>
void Tape<T>::check_live(const Var<T>& v, const char* where) const {
  if (v.generation_ != generation_ || v.index_ >= size_)
    throw std::logic_error(std::string("xtgrad::") + where +
                           ": this Var belongs to a tape that was cleared since it was "
                           "recorded; record the computation again after Tape::clear()");
}

template <class T>
void Tape<T>::check_owns(const Var<T>& v, const char* op, const char* arg) const {
  if (v.tape_ != this)
    throw std::logic_error(std::string("xtgrad::") + op + ": argument '" + arg +
                           "' belongs to a different tape; record all inputs of one "
                           "computation on the same Tape");
  check_live(v, op);
}

template <class T>
std::size_t Tape<T>::record(const char* op, std::initializer_list<std::size_t> parents,
                            bool requires_grad) {
  if (parents.size() > k_max_parents)
    throw std::logic_error(std::string("xtgrad::Tape::record: op '") + op +
                           "' has too many parents");
  if (size_ == nodes_.size()) nodes_.emplace_back();
  Node& node = nodes_[size_];
  node.op = op;
  node.param = nullptr;
  node.backward = nullptr;
  std::copy(parents.begin(), parents.end(), node.parents.begin());
  node.parent_count = parents.size();
  node.requires_grad = grad_enabled_ && requires_grad;
  node.is_leaf = false;
  node.grad_ready = false;
  return size_++;
}

template <class T>
void Tape<T>::set_backward(std::size_t index, BackwardFn<T> backward) {
  Node& node = nodes_[index];
  if (node.requires_grad) node.backward = std::move(backward);
}

template <class T>
Var<T> Tape<T>::param(Parameter<T>& p) {
  if (p.grad.shape() != p.value.shape()) p.zero_grad();
  const std::size_t index = record("param", {}, true);
  nodes_[index].param = &p;
  nodes_[index].is_leaf = true;
  nodes_[index].value = xt::xarray<T>();  // a kept buffer is not needed here
  return var(index);
}

template <class T>
const xt::xarray<T>& Tape<T>::value(std::size_t index) const {
  const Node& node = nodes_[index];
  return node.param ? node.param->value : node.value;
}

template <class T>
GradSlot<T> Tape<T>::grad_slot(std::size_t index) {
  Node& node = nodes_[index];
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
  Node& node = nodes_[index];
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
    throw std::logic_error("xtgrad::Tape::backward: y has shape " +
                           detail::shape_str(value.shape()) +
                           "; backward(y) needs a one-element y, call backward(y, dy) with an "
                           "upstream gradient dy of y's shape");
  xt::xarray<T> ones = xt::ones<T>(value.shape());
  backward(y, ones);
}

template <class T>
void Tape<T>::backward(const Var<T>& y, const xt::xarray<T>& dy) {
  check_owns(y, "Tape::backward", "y");
  const std::size_t root = y.index_;
  if (dy.shape() != value(root).shape())
    detail::fail_shape("Tape::backward", "dy", dy.shape(),
                       detail::shape_str(value(root).shape()) + " (the shape of y)");
  if (!nodes_[root].requires_grad)
    throw std::logic_error(
        "xtgrad::Tape::backward: y does not require a gradient (no input of it was recorded "
        "with requires_grad, or it was computed with recording off)");

  for (std::size_t i = 0; i < size_; ++i)
    if (!nodes_[i].is_leaf) nodes_[i].grad_ready = false;

  GradSlot<T> seed = grad_slot(root);
  if (seed.accumulate)
    seed.buffer += dy;
  else
    seed.buffer = dy;

  for (std::size_t i = root + 1; i-- > 0;) {
    Node& node = nodes_[i];
    if (node.backward && node.grad_ready) node.backward(*this, node.grad);
  }
}

template <class T>
void Tape<T>::zero_grad() {
  for (std::size_t i = 0; i < size_; ++i) {
    Node& node = nodes_[i];
    if (node.is_leaf && !node.param) node.grad_ready = false;
  }
}

template <class T>
void Tape<T>::clear() {
  for (std::size_t i = 0; i < size_; ++i) {
    nodes_[i].backward = nullptr;  // drop captured buffers now, keep the node's own
    nodes_[i].param = nullptr;
  }
  size_ = 0;
  ++generation_;
}

template <class T>
void Tape<T>::release() {
  clear();
  nodes_.clear();
  nodes_.shrink_to_fit();
}

template class Tape<float>;
template class Tape<double>;
template class Var<float>;
template class Var<double>;

}  // namespace xtgrad
