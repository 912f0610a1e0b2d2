#include "grad.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "create_graph.hpp"
#include "errors.hpp"
#include "ops/elementwise.hpp"
#include "ops/reduce.hpp"

namespace xtgrad {

namespace {

std::string nth(const char* name, std::size_t k) {
  return name + ("[" + std::to_string(k) + "]");
}

// The nodes of each input (a Parameter's every node on the tape, in order).
template <class T>
std::vector<std::vector<std::size_t>> input_nodes(Tape<T>& tape,
                                                  const std::vector<GradInput<T>>& inputs) {
  static constexpr const char* fn = "grad";
  std::vector<std::vector<std::size_t>> nodes(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string name = nth("inputs", k);
    const Parameter<T>* p = inputs[k].param();
    if (const Var<T>* v = inputs[k].var()) {
      tape.check_owns(*v, fn, name.c_str());
      p = tape.node_param(v->index());
      if (p == nullptr) nodes[k].push_back(v->index());
    }
    // A Parameter, or a Var of one: every node that recorded it for a
    // gradient (one read under NoGradGuard, for evaluation, is not a use).
    if (p != nullptr) {
      for (std::size_t i = 0; i < tape.size(); ++i)
        if (tape.node_param(i) == p && tape.requires_grad(i)) nodes[k].push_back(i);
    } else if (!tape.requires_grad(nodes[k].front())) {
      detail::fail_logic(fn, "argument " + detail::quoted(name) +
                                 " does not require a gradient (recorded with "
                                 "requires_grad = false, or with recording off)");
    }
  }
  return nodes;
}

// The output nodes (roots), after checking each output and grad_outputs.
template <class T>
std::vector<std::size_t> checked_roots(const detail::Check& check, Tape<T>& tape,
                                       const std::vector<Var<T>>& outputs,
                                       const std::vector<xt::xarray<T>>& given) {
  std::vector<std::size_t> roots;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::string name = nth("outputs", k);
    tape.check_owns(outputs[k], check.function(), name.c_str());
    check.logic(outputs[k].requires_grad(), "argument ", detail::quoted(name),
                " does not require a gradient (no input of it requires one)");
    roots.push_back(outputs[k].index());
  }
  check.argument(given.empty() || given.size() == outputs.size(), "grad_outputs", "has ",
                 given.size(), " entries, expected ", outputs.size(), " (one per output) or none");
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    check.argument(!given.empty() || outputs[k].size() == 1, nth("outputs", k).c_str(),
                   "has shape ", outputs[k].shape(),
                   "; an output of more than one element needs grad_outputs");
    check.shape(given.empty() || given[k].shape() == outputs[k].shape(),
                nth("grad_outputs", k).c_str(),
                given.empty() ? outputs[k].shape() : given[k].shape(), outputs[k].shape(),
                " (the shape of outputs[", k, "])");
  }
  return roots;
}

// wanted: node i requires a gradient and leads to an input (a forward scan).
template <class T>
std::vector<char> wanted_nodes(const Tape<T>& tape, std::size_t top,
                               const std::vector<std::vector<std::size_t>>& nodes) {
  std::vector<char> wanted(top + 1, 0);
  for (const auto& list : nodes)
    for (const std::size_t i : list)
      if (i <= top) wanted[i] = 1;
  for (std::size_t i = 0; i <= top; ++i) {
    if (wanted[i] || !tape.requires_grad(i)) continue;
    for (std::size_t k = 0; k < tape.node_parent_count(i) && !wanted[i]; ++k)
      wanted[i] = wanted[tape.node_parent(i, k)];
  }
  return wanted;
}

// Refuses an input that no gradient of the roots reaches (a reverse scan),
// unless allow_unused.
template <class T>
void check_used(const detail::Check& check, const Tape<T>& tape,
                const std::vector<std::size_t>& roots, const std::vector<char>& wanted,
                const std::vector<std::vector<std::size_t>>& nodes, bool allow_unused) {
  const std::size_t top = wanted.size() - 1;
  std::vector<char> reached(top + 1, 0);
  for (const std::size_t r : roots) reached[r] = 1;
  for (std::size_t i = top + 1; i-- > 0;) {
    if (!reached[i] || !wanted[i]) continue;
    for (std::size_t k = 0; k < tape.node_parent_count(i); ++k) reached[tape.node_parent(i, k)] = 1;
  }
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    bool used = false;
    for (const std::size_t i : nodes[k]) used = used || (i <= top && reached[i] && wanted[i]);
    check.argument(used || allow_unused, nth("inputs", k).c_str(),
                   "is not used to compute the outputs (no gradient reaches it); pass "
                   "allow_unused = true to get zeros for it");
  }
}

}  // namespace

template <class T>
std::vector<Var<T>> grad(Tape<T>& tape, const std::vector<Var<T>>& outputs,
                         const std::vector<GradInput<T>>& inputs, const GradOptions<T>& options) {
  using Pass = detail::GraphPass<T>;
  const detail::Check check("grad");
  check.argument(!outputs.empty(), "outputs", "is empty, expected at least one Var");
  check.argument(!inputs.empty(), "inputs", "is empty, expected at least one input");
  const std::vector<xt::xarray<T>>& given = options.grad_outputs;
  const std::vector<std::size_t> roots = checked_roots(check, tape, outputs, given);
  const std::size_t top = *std::max_element(roots.begin(), roots.end());
  const std::vector<std::vector<std::size_t>> nodes = input_nodes(tape, inputs);
  Pass::check_params(tape, top, check.function());
  std::vector<char> wanted = wanted_nodes(tape, top, nodes);
  check_used(check, tape, roots, wanted, nodes, options.allow_unused);
  Pass pass(tape, top, std::move(wanted));
  if (options.create_graph) pass.check_rules(check.function(), roots);

  // Nothing was changed so far. grad reads the graph and records onto it
  // (its results are leaves of it): keep it. Each output's seed:
  // grad_outputs[k], or ones.
  const auto seed = [&](std::size_t k) {
    return given.empty() ? xt::xarray<T>(xt::ones<T>(outputs[k].shape())) : given[k];
  };
  const auto zeros_for = [&](std::size_t k) {
    const Shape shape =
        inputs[k].param() ? inputs[k].param()->value.shape() : inputs[k].var()->shape();
    return tape.leaf(xt::xarray<T>(xt::zeros<T>(shape)), false);
  };
  tape.keep_graph();
  std::vector<Var<T>> out;
  if (!options.create_graph) {
    std::vector<xt::xarray<T>> ones;
    ones.reserve(outputs.size());  // stable addresses
    std::vector<const xt::xarray<T>*> seeds;
    for (std::size_t k = 0; k < outputs.size(); ++k)
      seeds.push_back(given.empty() ? &ones.emplace_back(seed(k)) : &given[k]);
    const auto values = pass.first_order(roots, seeds, nodes);
    for (std::size_t k = 0; k < inputs.size(); ++k)
      out.push_back(values[k] ? tape.leaf(*values[k], false) : zeros_for(k));
    return out;
  }
  detail::EnableGradGuard<T> recording(tape);
  for (std::size_t k = 0; k < outputs.size(); ++k)
    pass.accumulate(roots[k], tape.leaf(seed(k), false), roots[k]);
  pass.run();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::optional<Var<T>> sum;
    for (const std::size_t i : nodes[k]) {
      if (i > top || pass.grad_of(i) == Pass::k_none) continue;
      const Var<T> g = tape.var(pass.grad_of(i));
      sum = sum ? add(*sum, g) : g;
    }
    out.push_back(sum ? *sum : zeros_for(k));
  }
  return out;
}

template <class T>
std::vector<Var<T>> hvp(Tape<T>& tape, const Var<T>& output,
                        const std::vector<GradInput<T>>& inputs,
                        const std::vector<xt::xarray<T>>& v, const HvpOptions& options) {
  static constexpr const char* fn = "hvp";
  tape.check_owns(output, fn, "output");
  if (output.size() != 1)
    detail::fail_shape(fn, "output", output.shape(), "one element (a scalar function)");
  const detail::Check check(fn);
  check.argument(!inputs.empty(), "inputs", "is empty, expected at least one input");
  if (v.size() != inputs.size())
    detail::fail_argument(fn, "v",
                          "has " + std::to_string(v.size()) + " entries, expected " +
                              std::to_string(inputs.size()) + " (one per input)");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (const Var<T>* x = inputs[k].var()) tape.check_owns(*x, fn, nth("inputs", k).c_str());
    const Shape& shape =
        inputs[k].param() ? inputs[k].param()->value.shape() : inputs[k].var()->shape();
    if (v[k].shape() != shape)
      detail::fail_shape(
          fn, nth("v", k), v[k].shape(),
          detail::shape_str(shape) + " (the shape of inputs[" + std::to_string(k) + "])");
  }
  // g = df/dx, recorded; then H v = d<g, v>/dx.
  const std::vector<Var<T>> g = grad(tape, {output}, inputs, GradOptions<T>{{}, true, true});
  std::optional<Var<T>> dot;
  {
    detail::EnableGradGuard<T> recording(tape);
    for (std::size_t k = 0; k < g.size(); ++k) {
      if (!g[k].requires_grad()) continue;  // constant in the inputs: no second derivative
      const Var<T> term = sum(mul(g[k], tape.leaf(v[k], false)));
      dot = dot ? add(*dot, term) : term;
    }
  }
  if (!dot) {  // f is at most linear in the inputs: H = 0
    std::vector<Var<T>> zeros;
    for (const Var<T>& gk : g)
      zeros.push_back(tape.leaf(xt::xarray<T>(xt::zeros<T>(gk.shape())), false));
    return zeros;
  }
  return grad(tape, {*dot}, inputs, GradOptions<T>{{}, options.create_graph, true});
}

#define XTGRAD_GRAD_INSTANTIATE(T)                                                            \
  template std::vector<Var<T>> grad(Tape<T>&, const std::vector<Var<T>>&,                     \
                                    const std::vector<GradInput<T>>&, const GradOptions<T>&); \
  template std::vector<Var<T>> hvp(Tape<T>&, const Var<T>&, const std::vector<GradInput<T>>&, \
                                   const std::vector<xt::xarray<T>>&, const HvpOptions&);
XTGRAD_GRAD_INSTANTIATE(float)
XTGRAD_GRAD_INSTANTIATE(double)
#undef XTGRAD_GRAD_INSTANTIATE

}  // namespace xtgrad
