// Higher-order gradients: the create_graph pass (create_graph.hpp) behind
// Tape::backward(y, create_graph), GradSink (grad_rule.hpp), Var::grad_var,
// and the first-order pass of grad().
#include "create_graph.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "errors.hpp"
#include "ops/elementwise.hpp"

namespace xtgrad {

namespace detail {

template <class T>
GraphPass<T>::GraphPass(Tape<T>& tape_, std::size_t top_, std::vector<char> wanted_)
    : tape(tape_), top(top_), wanted(std::move(wanted_)), grads(top_ + 1, k_none) {}

template <class T>
void GraphPass<T>::check_rules(const char* function, const std::vector<std::size_t>& roots) const {
  std::vector<char> reached(top + 1, 0);
  for (const std::size_t r : roots) reached[r] = 1;
  for (std::size_t i = top + 1; i-- > 0;) {
    if (!reached[i] || !wanted[i]) continue;
    const auto& node = tape.node_at(i);
    if (!node.backward) continue;  // a leaf or Parameter: nothing to run
    if (!node.grad_rule)
      fail_logic(function, std::string("not twice differentiable: ") + node.op + " (node " +
                               std::to_string(i) +
                               "): its backward has no differentiable form, so a create_graph "
                               "pass cannot record it; nothing was changed");
    for (const std::size_t p : node.parents)
      if (wanted[p]) reached[p] = 1;
  }
}

template <class T>
void GraphPass<T>::accumulate(std::size_t node, const Var<T>& g, std::size_t from) {
  tape.check_owns(g, "GradSink::add", "g");
  const Shape& expected = tape.value(node).shape();
  if (g.shape() != expected)
    fail_logic("GradSink::add", std::string("the GradRule of '") + op(tape, from) + "' (node " +
                                    std::to_string(from) + ") gave its input node " +
                                    std::to_string(node) + " a gradient of shape " +
                                    shape_str(g.shape()) + ", expected " + shape_str(expected));
  std::size_t& slot = grads[node];
  slot = slot == k_none ? g.index() : xtgrad::add(tape.var(slot), g).index();
}

template <class T>
void GraphPass<T>::run() {
  EnableGradGuard<T> recording(tape);
  for (std::size_t i = top + 1; i-- > 0;) {
    if (grads[i] == k_none || !wanted[i]) continue;
    const auto& node = tape.node_at(i);
    if (!node.grad_rule) continue;  // a leaf (check_rules refused a node without one)
    GradSink<T> sink(tape, *this, i);
    node.grad_rule(sink);
  }
}

template <class T>
std::vector<std::optional<xt::xarray<T>>> GraphPass<T>::first_order(
    const std::vector<std::size_t>& roots, const std::vector<const xt::xarray<T>*>& seeds,
    const std::vector<std::vector<std::size_t>>& inputs) {
  // Set every gradient buffer aside (swaps: no copy), run, swap them back.
  std::vector<xt::xarray<T>> node_grads(top + 1);
  std::vector<char> ready(top + 1, 0);
  std::vector<std::pair<Parameter<T>*, bool>> params;
  std::vector<xt::xarray<T>> param_grads;
  for (std::size_t i = 0; i <= top; ++i) {
    auto& node = tape.node_at(i);
    if (node.param) {
      Parameter<T>* p = node.param;
      if (std::any_of(params.begin(), params.end(), [p](const auto& e) { return e.first == p; }))
        continue;
      params.emplace_back(p, p->has_grad);
      param_grads.emplace_back();
      std::swap(p->grad, param_grads.back());
      p->has_grad = false;
    } else {
      std::swap(node.grad, node_grads[i]);
      ready[i] = node.grad_ready;
      node.grad_ready = false;
    }
  }
  auto restore = [&] {
    for (std::size_t i = 0; i <= top; ++i) {
      auto& node = tape.node_at(i);
      if (node.param) continue;
      std::swap(node.grad, node_grads[i]);
      node.grad_ready = ready[i];
    }
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::swap(params[k].first->grad, param_grads[k]);
      params[k].first->has_grad = params[k].second;
    }
  };
  std::vector<std::optional<xt::xarray<T>>> out(inputs.size());
  try {
    for (std::size_t k = 0; k < roots.size(); ++k) {
      GradSlot<T> seed = tape.grad_slot(roots[k]);
      if (seed.accumulate)
        seed.buffer += *seeds[k];
      else
        seed.buffer = *seeds[k];
    }
    for (std::size_t i = top + 1; i-- > 0;)
      if (wanted[i]) tape.run_rule(i);
    for (std::size_t k = 0; k < inputs.size(); ++k)
      for (const std::size_t j : inputs[k]) {
        if (!tape.node_has_grad(j)) continue;
        const auto& node = tape.node_at(j);
        if (node.param) {  // every node of one Parameter adds into its grad
          out[k] = node.param->grad;
          break;
        }
        out[k] = node.grad;
      }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

template <class T>
void GraphPass<T>::check_no_observer(const Tape<T>& tape, const char* function) {
  if (!tape.observers_.empty())
    fail_logic(function,
               "create_graph is refused while a BackwardObserver is added (observers follow "
               "first-order passes only); remove it first; nothing was changed");
}

template <class T>
void GraphPass<T>::check_params(const Tape<T>& tape, std::size_t top, const char* function) {
  for (std::size_t i = 0; i <= top; ++i) {
    const auto& node = tape.node_at(i);
    if (node.param && node.param->value.shape() != node.param_shape)
      tape.fail_param_changed(i, function);
  }
}

template <class T>
void GraphPass<T>::backward(Tape<T>& tape, const Var<T>& y, const xt::xarray<T>& dy) {
  const Check check("Tape::backward");
  tape.check_owns(y, check.function(), "y");
  const std::size_t root = y.index();
  const Shape& y_shape = tape.value(root).shape();
  check.shape(dy.shape() == y_shape, "dy", dy.shape(), y_shape, " (the shape of y)");
  check.logic(tape.requires_grad(root),
              "y does not require a gradient (no input of it was recorded with requires_grad, "
              "or it was computed with recording off)");
  check_params(tape, root, check.function());
  check_no_observer(tape, check.function());
  std::vector<char> wanted(root + 1);
  for (std::size_t i = 0; i <= root; ++i) wanted[i] = tape.requires_grad(i);
  GraphPass<T> pass(tape, root, std::move(wanted));
  pass.check_rules(check.function(), {root});
  if (tape.detect_anomaly_) tape.check_backward_start(root, dy);

  // Nothing was changed so far. Seed, run, then write what a plain backward writes.
  tape.keep_graph();  // create_graph keeps the graph: the gradient Vars live on it
  const std::size_t count = tape.size();
  EnableGradGuard<T> recording(tape);
  pass.grads[root] = tape.leaf(dy, false).index();
  pass.run();
  pass.write_grads(count);
}

template <class T>
std::size_t GraphPass<T>::onto_earlier(std::size_t i, const xt::xarray<T>& held, std::size_t g) {
  const std::vector<std::size_t>& vars = tape.graph_grads_;
  const std::size_t earlier = i < vars.size() ? vars[i] : k_none;
  const bool live = earlier != k_none && tape.value(earlier) == held;
  const Var<T> before = live ? tape.var(earlier) : tape.leaf(held, false);
  return xtgrad::add(before, tape.var(g)).index();
}

template <class T>
void GraphPass<T>::write_grads(std::size_t count) {
  std::vector<std::size_t>& vars = tape.graph_grads_;
  vars.resize(count, k_none);
  for (std::size_t i = 0; i < count; ++i) {
    auto& node = tape.node_at(i);
    if (node.is_leaf) continue;
    node.grad_ready = false;  // intermediate gradients restart at every backward
    vars[i] = k_none;
  }
  // One sum per Parameter over its nodes (a Parameter recorded twice has one grad).
  std::vector<std::pair<Parameter<T>*, std::size_t>> params;
  for (std::size_t i = 0; i <= top; ++i) {
    Parameter<T>* p = tape.node_at(i).param;
    if (grads[i] == k_none || !p) continue;
    auto it =
        std::find_if(params.begin(), params.end(), [p](const auto& e) { return e.first == p; });
    if (it == params.end())
      params.emplace_back(p, grads[i]);
    else
      it->second = xtgrad::add(tape.var(it->second), tape.var(grads[i])).index();
  }
  for (auto& [p, g] : params) {
    std::size_t first = k_none;
    for (std::size_t i = 0; i < count && first == k_none; ++i)
      if (tape.node_at(i).param == p) first = i;
    if (p->has_grad) g = onto_earlier(first, p->grad, g);  // onto its earlier gradient
    p->grad = tape.value(g);
    p->has_grad = true;
    for (std::size_t i = 0; i < count; ++i)
      if (tape.node_at(i).param == p) vars[i] = g;
  }
  for (std::size_t i = 0; i <= top; ++i) {
    std::size_t g = grads[i];
    auto& node = tape.node_at(i);
    if (g == k_none || node.param) continue;
    if (node.is_leaf && node.grad_ready) g = onto_earlier(i, node.grad, g);
    node.grad = tape.value(g);
    node.grad_ready = true;
    vars[i] = g;
  }
}

template <class T>
Var<T> GraphPass<T>::grad_var(Tape<T>& tape, std::size_t index) {
  const std::vector<std::size_t>& vars = tape.graph_grads_;
  if (index < vars.size() && vars[index] != k_none && tape.node_has_grad(index))
    return tape.var(vars[index]);
  fail_logic("Var::grad_var",
             "node " + std::to_string(index) + " ('" + op(tape, index) +
                 "') has no gradient Var: grad_var() is the gradient of the last "
                 "tape.backward(y, xtgrad::create_graph) that reached it (and none after a plain "
                 "backward, clear() or zero_grad())");
}

template struct GraphPass<float>;
template struct GraphPass<double>;

}  // namespace detail

// ---- GradSink ----

template <class T>
Var<T> GradSink<T>::grad_output() const {
  return tape_.var(pass_.grads[node_]);
}

template <class T>
Var<T> GradSink<T>::output() const {
  return tape_.var(node_);
}

template <class T>
Var<T> GradSink<T>::input(std::size_t k) const {
  return tape_.var(detail::GraphPass<T>::parents(tape_, node_).at(k));
}

template <class T>
std::size_t GradSink<T>::input_count() const {
  return detail::GraphPass<T>::parents(tape_, node_).size();
}

template <class T>
bool GradSink<T>::needs_grad(std::size_t k) const {
  return pass_.wanted[detail::GraphPass<T>::parents(tape_, node_).at(k)] != 0;
}

template <class T>
void GradSink<T>::add(std::size_t k, const Var<T>& g) {
  const std::size_t parent = detail::GraphPass<T>::parents(tape_, node_).at(k);
  if (pass_.wanted[parent]) pass_.accumulate(parent, g, node_);
}

template class GradSink<float>;
template class GradSink<double>;

// ---- Tape and Var ----

template <class T>
void Tape<T>::backward(const Var<T>& y, const BackwardOptions& options) {
  if (!options.create_graph) {
    backward(y);
    if (options.retain_graph) keep_graph();
    return;
  }
  check_owns(y, "Tape::backward", "y");
  const xt::xarray<T>& value = this->value(y.index_);
  if (value.size() != 1)
    detail::fail_logic("Tape::backward",
                       "y has shape " + detail::shape_str(value.shape()) +
                           "; backward(y) needs a one-element y, call backward(y, dy, options) "
                           "with an upstream gradient dy of y's shape");
  ones_.resize(value.shape());
  ones_.fill(T(1));
  detail::GraphPass<T>::backward(*this, y, ones_);
  reset_growth_watch();
}

template <class T>
void Tape<T>::backward(const Var<T>& y, const xt::xarray<T>& dy, const BackwardOptions& options) {
  if (!options.create_graph) {
    backward(y, dy);
    if (options.retain_graph) keep_graph();
    return;
  }
  detail::GraphPass<T>::backward(*this, y, dy);
  reset_growth_watch();
}

template <class T>
Var<T> Var<T>::grad_var() const {
  return detail::GraphPass<T>::grad_var(tape_for("Var::grad_var", "this"), index_);
}

#define XTGRAD_CREATE_GRAPH_INSTANTIATE(T)                                                      \
  template void Tape<T>::backward(const Var<T>&, const BackwardOptions&);                       \
  template void Tape<T>::backward(const Var<T>&, const xt::xarray<T>&, const BackwardOptions&); \
  template Var<T> Var<T>::grad_var() const;
XTGRAD_CREATE_GRAPH_INSTANTIATE(float)
XTGRAD_CREATE_GRAPH_INSTANTIATE(double)
#undef XTGRAD_CREATE_GRAPH_INSTANTIATE

}  // namespace xtgrad
