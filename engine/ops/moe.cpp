#include "moe.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include "../check.hpp"
#include "../kernels/moe_kernels.hpp"
#include "support/moe_targets.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_moe_route = "moe_route";
constexpr const char* k_moe_experts = "moe_experts";

std::string indexed_name(const char* role, std::size_t e) {
  return std::string(role) + "[" + std::to_string(e) + "]";
}

}  // namespace

// routing is a valid routing of dims' N tokens, k choices and E experts:
// sizes, and every kept choice in its expert's rows exactly once.
void detail::check_moe_routing(const detail::Check& check, const MoeRouting& r,
                               const detail::MoeDims& dims) {
  check.argument(r.tokens == dims.tokens && r.k == dims.k && r.experts == dims.experts, "routing",
                 "is for ", r.tokens, " tokens, k = ", r.k, " and ", r.experts,
                 " experts, expected ", dims.tokens, " tokens (the rows of 'x'), k = ", dims.k,
                 " (the last axis of 'weights') and ", dims.experts,
                 " experts (the length of 'w1')");
  const std::size_t choices = r.tokens * r.k;
  const bool sized = r.expert.size() == choices && r.row_of.size() == choices &&
                     r.counts.size() == r.experts && r.offsets.size() == r.experts + 1 &&
                     r.offsets.front() == 0 && r.source.size() == r.offsets.back();
  check.argument(sized, "routing", "has tables of the wrong sizes (expert and row_of ", choices,
                 ", counts E, offsets E + 1 from 0, source offsets[E]); build it with moe_route");
  std::size_t bad = r.experts;  // the first expert whose rows are inconsistent
  for (std::size_t e = 0; e < r.experts && bad == r.experts; ++e) {
    if (r.offsets[e + 1] < r.offsets[e] || r.offsets[e + 1] > r.source.size() ||
        r.offsets[e + 1] - r.offsets[e] != r.counts[e])
      bad = e;
    for (std::size_t row = r.offsets[e]; row < r.offsets[e + 1] && bad == r.experts; ++row) {
      const std::size_t c = r.source[row];
      if (c >= choices || r.expert[c] != e || r.row_of[c] != row) bad = e;
    }
  }
  check.argument(bad == r.experts, "routing", "lists the rows of expert ", bad,
                 " inconsistently (offsets, counts, source, row_of and expert disagree); build it "
                 "with moe_route");
  std::size_t kept = 0;
  for (std::size_t c = 0; c < choices; ++c) {
    check.argument(r.expert[c] < r.experts, "routing", "chooses expert ", r.expert[c],
                   " for choice ", c, ", expected an expert in [0, ", r.experts, ")");
    kept += r.row_of[c] != MoeRouting::k_dropped;
  }
  check.argument(kept == r.rows(), "routing", "keeps ", kept, " choices in row_of but has ",
                 r.rows(), " rows; build it with moe_route");
}

namespace {

// What the backward rule reads besides the tape: node indices and the routing.
struct MoeNode {
  MoeRouting routing;
  std::size_t xi, wi, yi;
  std::vector<std::size_t> w1, w3, w2;
  std::size_t c, h;
  Activation f;
};

// The experts over the routing's offsets of their rows.
template <class T>
detail::TapeExpertSet<T> expert_set(const Tape<T>& t, const MoeNode& nd) {
  return {t, nd.w1, nd.w3, nd.w2, nd.f, nd.c, nd.h, nd.routing.offsets};
}

}  // namespace

void detail::check_moe_route(const char* op, std::size_t k, std::size_t experts,
                             std::optional<double> capacity_factor) {
  const detail::Check check(op);
  check.argument(k >= 1 && k <= experts, "k", "is ", k, ", expected 1 <= k <= ", experts,
                 " (the number of experts)");
  const double cf = capacity_factor.value_or(1.0);
  check.argument(std::isfinite(cf) && cf > 0.0, "capacity_factor", "is ", cf,
                 ", expected a finite value > 0 (or none: dropless)");
}

detail::MoeDims detail::check_moe_shapes(
    const char* op, const Shape& x, const Shape* weights, const std::vector<const Shape*>& w1,
    const std::vector<const Shape*>& w3, const std::vector<const Shape*>& w2,
    const std::function<std::string(const char*, std::size_t)>& name) {
  const detail::Check check(op);
  const std::size_t experts = w1.size();
  check.argument(experts > 0, "w1", "is empty, expected one weight per expert");
  check.argument(w3.size() == experts, "w3", "has ", w3.size(), " weights, expected ", experts,
                 " (one per expert, as 'w1')");
  check.argument(w2.size() == experts, "w2", "has ", w2.size(), " weights, expected ", experts,
                 " (one per expert, as 'w1')");
  check.shape(!x.empty(), "x", x, "[..., C], at least one axis");
  const std::size_t c = x.back();
  const Shape& first = *w1[0];
  check.shape(first.size() == 2 && first[1] == c, name("w1", 0).c_str(), first, "[H, ", c,
              "] (C = ", c, ", the last axis of 'x')");
  const std::size_t h = first[0];
  const Shape hc{h, c}, ch{c, h};
  for (std::size_t e = 0; e < experts; ++e) {
    check.shape(*w1[e] == hc, name("w1", e).c_str(), *w1[e], hc, " ([H, C] as ", name("w1", 0),
                ")");
    check.shape(*w3[e] == hc, name("w3", e).c_str(), *w3[e], hc, " ([H, C] as ", name("w1", 0),
                ")");
    check.shape(*w2[e] == ch, name("w2", e).c_str(), *w2[e], ch, " ([C, H] for ", name("w1", 0),
                ")");
  }
  MoeDims dims{1, c, h, 0, experts, x};
  for (std::size_t a = 0; a + 1 < x.size(); ++a) dims.tokens *= x[a];
  if (weights) {
    const bool ok = weights->size() == x.size() && !weights->empty() &&
                    std::equal(x.begin(), x.end() - 1, weights->begin());
    Shape expected(x.begin(), x.end() - 1);
    expected.push_back(weights->empty() ? 0 : weights->back());
    check.shape(ok, "weights", *weights, expected, " ([..., k] on the leading axes of 'x')");
    dims.k = weights->back();
  }
  return dims;
}

template <class T>
MoeRouting moe_route(const xt::xarray<T>& probs, std::size_t k,
                     std::optional<double> capacity_factor) {
  const detail::Check check(k_moe_route);
  check.shape(probs.dimension() >= 1, "probs", probs.shape(), "[..., E], at least one axis");
  const std::size_t experts = probs.shape().back();
  check.argument(experts >= 1, "probs", "has 0 experts (its last axis), expected at least 1");
  detail::check_moe_route(k_moe_route, k, experts, capacity_factor);

  MoeRouting r;
  r.tokens = probs.size() / experts;
  r.k = k;
  r.experts = experts;
  const std::size_t choices = r.tokens * k;
  // Switch Transformer's capacity, ceil(cf * N * k / E), at most every choice
  r.capacity = choices;
  if (capacity_factor)
    r.capacity = static_cast<std::size_t>(
        std::min(std::ceil(*capacity_factor * static_cast<double>(r.tokens) *
                           static_cast<double>(k) / static_cast<double>(experts)),
                 static_cast<double>(choices)));
  r.expert.resize(choices);
  detail::moe_top_k(probs.data(), r.tokens, experts, k, r.expert.data());
  detail::moe_sort(r);
  r.global_tokens = r.tokens;
  r.global_routed = r.routed;
  r.global_counts = r.counts;
  return r;
}

template <class T>
detail::MoeDims detail::check_moe_experts(const Var<T>& x, const Var<T>& weights,
                                          const std::vector<Var<T>>& w1,
                                          const std::vector<Var<T>>& w3,
                                          const std::vector<Var<T>>& w2, Activation f) {
  detail::common_tape<T>(k_moe_experts, {{"x", &x}, {"weights", &weights}});
  std::vector<const Shape*> s1, s3, s2;
  for (auto [list, shapes, role] :
       {std::tuple{&w1, &s1, "w1"}, std::tuple{&w3, &s3, "w3"}, std::tuple{&w2, &s2, "w2"}})
    for (std::size_t e = 0; e < list->size(); ++e) {
      detail::common_tape<T>(k_moe_experts,
                             {{"x", &x}, {indexed_name(role, e).c_str(), &(*list)[e]}});
      shapes->push_back(&(*list)[e].shape());
    }
  detail::activation_name(f, k_moe_experts, "f");  // validates f
  return detail::check_moe_shapes(k_moe_experts, x.shape(), &weights.shape(), s1, s3, s2,
                                  indexed_name);
}

template <class T>
Var<T> moe_experts(const Var<T>& x, const Var<T>& weights, const MoeRouting& routing,
                   const std::vector<Var<T>>& w1, const std::vector<Var<T>>& w3,
                   const std::vector<Var<T>>& w2, Activation f) {
  // 1. checks
  const detail::MoeDims dims = detail::check_moe_experts(x, weights, w1, w3, w2, f);
  detail::check_moe_routing(detail::Check(k_moe_experts), routing, dims);
  return detail::record_moe_experts(dims, x, weights, routing, w1, w3, w2, f);
}

template <class T>
Var<T> detail::record_moe_experts(const MoeDims& dims, const Var<T>& x, const Var<T>& weights,
                                  const MoeRouting& routing, const std::vector<Var<T>>& w1,
                                  const std::vector<Var<T>>& w3, const std::vector<Var<T>>& w2,
                                  Activation f) {
  // 2. forward
  Tape<T>& tape = x.tape();
  auto nd = std::make_shared<MoeNode>(
      MoeNode{routing, x.index(), weights.index(), 0, {}, {}, {}, dims.c, dims.h, f});
  std::vector<std::size_t> parents{nd->xi, nd->wi};
  bool needs_grad = x.requires_grad() || weights.requires_grad();
  for (auto [list, indices] :
       {std::pair{&w1, &nd->w1}, std::pair{&w3, &nd->w3}, std::pair{&w2, &nd->w2}})
    for (const Var<T>& w : *list) {
      indices->push_back(w.index());
      parents.push_back(w.index());
      needs_grad = needs_grad || w.requires_grad();
    }
  nd->yi = tape.record(k_moe_experts, parents, needs_grad);
  xt::xarray<T>& y = tape.value_mut(nd->yi);
  y.resize(dims.y_shape);
  const std::size_t rows = routing.rows();
  T* const buffer = tape.template save<T>(nd->yi, detail::MoeHidden<T>::size(rows, dims.h));
  const detail::TapeExpertSet<T> experts = expert_set(tape, *nd);
  detail::moe_experts_forward(k_moe_experts, routing, experts.set, tape.value(nd->xi).data(),
                              tape.value(nd->wi).data(),
                              detail::MoeHidden<T>::in(buffer, rows, dims.h), y.data());

  // 3. set_backward: each input's gradient from the kernel (every line there)
  tape.set_backward(nd->yi, [nd](Tape<T>& t, const xt::xarray<T>& dy) {
    const std::size_t rows = nd->routing.rows();
    // The targets in parent order: x, weights, then the experts' weights.
    detail::MoeTargets<T> target(t, 2 + 3 * nd->w1.size());
    detail::MoeGrads<T> grads;
    grads.dx = target(nd->xi);
    grads.dweights = target(nd->wi);
    grads.experts = target.experts(nd->w1, nd->w3, nd->w2);
    const detail::TapeExpertSet<T> experts = expert_set(t, *nd);
    detail::moe_experts_backward(
        k_moe_experts, nd->routing, experts.set, t.value(nd->xi).data(), t.value(nd->wi).data(),
        detail::MoeHidden<const T>::in(t.template saved<T>(nd->yi), rows, nd->h), dy.data(), grads);
  });
  // 4. create_graph: no GradRule. The permutation and the per-expert GEMMs
  // are not ops, so backward with create_graph refuses this node ("not
  // twice differentiable: moe_experts").
  return tape.var(nd->yi);
}

#define XTGRAD_INSTANTIATE_MOE(T)                                                                  \
  template MoeRouting moe_route(const xt::xarray<T>&, std::size_t, std::optional<double>);         \
  template Var<T> moe_experts(const Var<T>&, const Var<T>&, const MoeRouting&,                     \
                              const std::vector<Var<T>>&, const std::vector<Var<T>>&,              \
                              const std::vector<Var<T>>&, Activation);                             \
  template detail::MoeDims detail::check_moe_experts(                                              \
      const Var<T>&, const Var<T>&, const std::vector<Var<T>>&, const std::vector<Var<T>>&,        \
      const std::vector<Var<T>>&, Activation);                                                     \
  template Var<T> detail::record_moe_experts(                                                      \
      const MoeDims&, const Var<T>&, const Var<T>&, const MoeRouting&, const std::vector<Var<T>>&, \
      const std::vector<Var<T>>&, const std::vector<Var<T>>&, Activation);
XTGRAD_INSTANTIATE_MOE(float)
XTGRAD_INSTANTIATE_MOE(double)
#undef XTGRAD_INSTANTIATE_MOE

}  // namespace xtgrad
