// Tape's anomaly mode (tape.hpp, "Anomaly mode"): the checks of forward
// values and of the gradients each backward rule writes, and the messages
// that name the node, its op and shape, and the first non-finite element.

#include <cmath>
#include <string>

#include "errors.hpp"
#include "tape.hpp"

namespace xtgrad {

namespace {

// Index of the first NaN or Inf of `a`, or a.size() when all are finite.
template <class T>
std::size_t first_non_finite(const xt::xarray<T>& a) {
  const T* data = a.data();
  const std::size_t n = a.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(data[i])) return i;
  return n;
}

// Index of the first NaN of `a` at or after `from`, or a.size().
template <class T>
std::size_t first_nan(const xt::xarray<T>& a, std::size_t from) {
  const T* data = a.data();
  const std::size_t n = a.size();
  for (std::size_t i = from; i < n; ++i)
    if (std::isnan(data[i])) return i;
  return n;
}

// "nan at [1, 2]" for element `flat` of `a`.
template <class T>
std::string element_str(const xt::xarray<T>& a, std::size_t flat) {
  const T v = a.data()[flat];
  std::vector<std::size_t> index(a.dimension());
  for (std::size_t d = a.dimension(); d-- > 0;) {
    index[d] = flat % a.shape()[d];
    flat /= a.shape()[d];
  }
  const std::string what = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  return what + " at " + detail::shape_str(index);
}

}  // namespace

template <class T>
std::string Tape<T>::describe(std::size_t index) const {
  const Node& node = node_at(index);
  std::string out = "node " + std::to_string(index) + " ('" + node.op + "'";
  if (node.param) out += " '" + node.param->name + "'";
  return out + ", shape " + detail::shape_str(value(index).shape()) + ")";
}

template <class T>
const xt::xarray<T>* Tape<T>::accumulated_grad(std::size_t index) const {
  const Node& node = node_at(index);
  if (!node.requires_grad) return nullptr;
  if (node.param) return node.param->has_grad ? &node.param->grad : nullptr;
  return node.grad_ready ? &node.grad : nullptr;
}

template <class T>
bool Tape<T>::infinity_expected(std::size_t index) const {
  const Node& node = node_at(index);
  if (node.infinity_allowed || (node.is_leaf && !node.param)) return true;
  for (const std::size_t parent : node.parents) {
    const xt::xarray<T>& input = value(parent);
    if (first_non_finite(input) < input.size()) return true;  // the infinity was there before
  }
  return false;
}

template <class T>
void Tape<T>::check_forward(std::size_t index) {
  const xt::xarray<T>& v = value(index);
  std::size_t bad = first_non_finite(v);
  if (bad == v.size()) return;
  if (!std::isnan(v.data()[bad]) && infinity_expected(index)) {
    bad = first_nan(v, bad);
    if (bad == v.size()) return;
  }
  const Node& node = node_at(index);
  std::string what = "xtgrad::Tape (anomaly mode): the forward value of " + describe(index) +
                     " is not finite: " + element_str(v, bad);
  if (!node.parents.empty()) {
    what += "; its inputs are";
    for (std::size_t k = 0; k < node.parents.size(); ++k)
      what += (k ? ", " : " ") + describe(node.parents[k]);
  }
  what += "; the node was not recorded";
  const std::string op = node.op;
  if (index + 1 == size_) {  // un-record it: the tape is as before the op was called
    node_at(index).param = nullptr;
    --size_;
  }
  throw AnomalyError(what, AnomalyError::Phase::forward, op, index, index);
}

template <class T>
void Tape<T>::check_backward(std::size_t index) {
  const Node& node = node_at(index);
  for (const std::size_t parent : node.parents) {
    const xt::xarray<T>* grad = accumulated_grad(parent);
    if (grad == nullptr) continue;
    const std::size_t bad = first_non_finite(*grad);
    if (bad == grad->size()) continue;
    // Every gradient was finite before this rule ran (checked after each
    // earlier rule and at the start), so this rule made it non-finite.
    throw AnomalyError("xtgrad::Tape (anomaly mode): the backward of " + describe(index) +
                           " made the gradient of its input " + describe(parent) +
                           " not finite: " + element_str(*grad, bad) +
                           " (the upstream gradient of the node was finite)",
                       AnomalyError::Phase::backward, node.op, index, parent);
  }
}

template <class T>
void Tape<T>::check_backward_start(std::size_t root, const xt::xarray<T>& dy) const {
  const std::size_t bad = first_non_finite(dy);
  if (bad < dy.size())
    throw AnomalyError("xtgrad::Tape::backward (anomaly mode): the upstream gradient dy of " +
                           describe(root) + " is not finite: " + element_str(dy, bad),
                       AnomalyError::Phase::backward, node_at(root).op, root, root);
  for (std::size_t i = 0; i <= root; ++i) {
    if (!node_at(i).is_leaf) continue;
    const xt::xarray<T>* grad = accumulated_grad(i);
    if (grad == nullptr) continue;
    const std::size_t at = first_non_finite(*grad);
    if (at < grad->size())
      throw AnomalyError("xtgrad::Tape::backward (anomaly mode): the gradient accumulated in " +
                             describe(i) + " by an earlier backward is not finite: " +
                             element_str(*grad, at) + "; zero_grad() before this backward",
                         AnomalyError::Phase::backward, node_at(i).op, i, i);
  }
}
#define XTGRAD_INSTANTIATE_TAPE_ANOMALY(T)                                    \
  template std::string Tape<T>::describe(std::size_t) const;                  \
  template const xt::xarray<T>* Tape<T>::accumulated_grad(std::size_t) const; \
  template bool Tape<T>::infinity_expected(std::size_t) const;                \
  template void Tape<T>::check_forward(std::size_t);                          \
  template void Tape<T>::check_backward(std::size_t);                         \
  template void Tape<T>::check_backward_start(std::size_t, const xt::xarray<T>&) const;
XTGRAD_INSTANTIATE_TAPE_ANOMALY(float)
XTGRAD_INSTANTIATE_TAPE_ANOMALY(double)
#undef XTGRAD_INSTANTIATE_TAPE_ANOMALY

}  // namespace xtgrad
