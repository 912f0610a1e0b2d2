// moe_route and moe_experts with the experts sharded over the ranks of a
// MoeExchange (ops/moe.hpp): the exchange of the routed rows, forward and
// backward side by side; the per-expert math is the single-process op's
// kernels (kernels/moe_kernels.hpp).
#include <algorithm>
#include <cmath>
#include <utility>

#include "../check.hpp"
#include "../kernels/moe_kernels.hpp"
#include "moe.hpp"
#include "support/moe_targets.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_moe_route = "moe_route";
constexpr const char* k_moe_experts = "moe_experts";

// How this rank's rows travel. Rank r's permuted layout (moe_route's) lists
// the rows of experts 0..E-1 in order, so the rows for rank q, experts
// [q L, (q + 1) L), are one contiguous range: `send[q]` rows. What rank q
// receives from the ranks s = 0..P-1 arrives rank after rank, each rank's
// rows expert after expert (`from[s L + j]` rows of local expert j); the
// experts compute on the expert-major order (for j, for s), which is the
// global batch's token order within each expert, as in one process.
struct Plan {
  std::size_t ranks = 1, local = 0;  // P, L = E / P
  std::vector<std::size_t> send;     // [P] rows to each rank
  std::vector<std::size_t> from;     // [P L] rows from rank s for local expert j
  std::vector<std::size_t> offsets;  // [L + 1] local expert j's rows in expert-major order
  std::size_t received = 0;          // R, rows this rank's experts compute

  Plan(const MoeRouting& r, std::size_t p, std::size_t l, const MoeExchange& exchange)
      : ranks(p), local(l), send(p), offsets(l + 1, 0) {
    const std::vector<std::uint64_t> counts(r.counts.begin(), r.counts.end());
    const std::vector<std::uint64_t> got = exchange.all_to_all(counts, l);
    from.assign(got.begin(), got.end());
    for (std::size_t q = 0; q < p; ++q) send[q] = r.offsets[(q + 1) * l] - r.offsets[q * l];
    for (std::size_t j = 0; j < l; ++j) {
      std::size_t n = 0;
      for (std::size_t s = 0; s < p; ++s) n += from[s * l + j];
      offsets[j + 1] = offsets[j] + n;
    }
    received = offsets[l];
  }
  // Elements per rank of rows of c values: sent, received.
  std::vector<std::size_t> send_elements(std::size_t c) const {
    std::vector<std::size_t> out(ranks);
    for (std::size_t q = 0; q < ranks; ++q) out[q] = send[q] * c;
    return out;
  }
  std::vector<std::size_t> recv_elements(std::size_t c) const {
    std::vector<std::size_t> out(ranks, 0);
    for (std::size_t s = 0; s < ranks; ++s)
      for (std::size_t j = 0; j < local; ++j) out[s] += from[s * local + j] * c;
    return out;
  }
  // Rows of c values between the received order (rank-major) and the
  // experts' (expert-major), either way.
  template <class T>
  void reorder(const T* in, T* out, std::size_t c, bool to_expert_major) const {
    std::vector<std::size_t> rank_start(ranks + 1, 0);
    for (std::size_t s = 0; s < ranks; ++s) {
      rank_start[s + 1] = rank_start[s];
      for (std::size_t j = 0; j < local; ++j) rank_start[s + 1] += from[s * local + j];
    }
    std::size_t at = 0;  // expert-major row
    for (std::size_t j = 0; j < local; ++j) {
      for (std::size_t s = 0; s < ranks; ++s) {
        std::size_t r = rank_start[s];  // rank-major row of (s, j)
        for (std::size_t i = 0; i < j; ++i) r += from[s * local + i];
        const std::size_t n = from[s * local + j] * c;
        const T* a = to_expert_major ? in + r * c : in + at * c;
        T* b = to_expert_major ? out + at * c : out + r * c;
        std::copy(a, a + n, b);
        at += from[s * local + j];
      }
    }
  }
};

// What the backward rule reads besides the tape.
struct ParallelNode {
  MoeRouting routing;
  std::shared_ptr<const MoeExchange> exchange;
  Plan plan;
  std::size_t xi, wi, yi;
  std::vector<std::size_t> w1, w3, w2;
  std::size_t c, h;
  Activation f;
};

// The saved rows: x_e, g, u of the rows this rank's experts computed
// (expert-major), and o of this rank's own kept choices (its permuted layout).
template <class T>
struct ParallelSaved {
  T *x_rows, *g, *u, *o;
  static std::size_t size(std::size_t received, std::size_t rows, std::size_t c, std::size_t h) {
    return received * (c + 2 * h) + rows * c;
  }
  static ParallelSaved in(T* b, std::size_t received, std::size_t c, std::size_t h) {
    return {b, b + received * c, b + received * (c + h), b + received * (c + 2 * h)};
  }
};

}  // namespace

template <class T>
MoeRouting moe_route(const xt::xarray<T>& probs, std::size_t k,
                     std::optional<double> capacity_factor, const MoeExchange& exchange) {
  const detail::Check check(k_moe_route);
  check.shape(probs.dimension() >= 1, "probs", probs.shape(), "[..., E], at least one axis");
  const std::size_t experts = probs.shape().back();
  check.argument(experts >= 1, "probs", "has 0 experts (its last axis), expected at least 1");
  detail::check_moe_route(k_moe_route, k, experts, capacity_factor);

  MoeRouting r;
  r.tokens = probs.size() / experts;
  r.k = k;
  r.experts = experts;
  r.expert.resize(r.tokens * k);
  detail::moe_top_k(probs.data(), r.tokens, experts, k, r.expert.data());
  // Every rank's token count and choices per expert: the global batch's N,
  // the choices of each expert on the ranks before this one.
  std::vector<std::uint64_t> mine(experts + 1, 0);
  mine[0] = r.tokens;
  for (const std::size_t e : r.expert) ++mine[e + 1];
  const std::vector<std::uint64_t> all = exchange.all_gather(mine);
  const std::size_t me = exchange.rank();
  r.global_tokens = 0;
  r.global_routed.assign(experts, 0);
  std::vector<std::size_t> before(experts, 0);
  for (std::size_t s = 0; s < exchange.size(); ++s) {
    const std::uint64_t* theirs = all.data() + s * (experts + 1);
    r.global_tokens += theirs[0];
    for (std::size_t e = 0; e < experts; ++e) {
      r.global_routed[e] += theirs[e + 1];
      if (s < me) before[e] += theirs[e + 1];
    }
  }
  // Switch Transformer's capacity of the global batch, ceil(cf * N * k / E),
  // at most every choice; this rank keeps what the ranks before it left.
  const std::size_t choices = r.global_tokens * k;
  std::size_t capacity = choices;
  if (capacity_factor)
    capacity = static_cast<std::size_t>(
        std::min(std::ceil(*capacity_factor * static_cast<double>(r.global_tokens) *
                           static_cast<double>(k) / static_cast<double>(experts)),
                 static_cast<double>(choices)));
  r.capacity = capacity;
  std::vector<std::size_t> left(experts);
  r.global_counts.resize(experts);
  for (std::size_t e = 0; e < experts; ++e) {
    left[e] = capacity > before[e] ? capacity - before[e] : 0;
    r.global_counts[e] = std::min(r.global_routed[e], capacity);
  }
  detail::moe_sort(r, left);
  return r;
}

template <class T>
Var<T> moe_experts(const Var<T>& x, const Var<T>& weights, const MoeRouting& routing,
                   const std::vector<Var<T>>& w1, const std::vector<Var<T>>& w3,
                   const std::vector<Var<T>>& w2, Activation f,
                   std::shared_ptr<const MoeExchange> exchange) {
  // 1. checks
  const detail::Check check(k_moe_experts);
  check.argument(exchange != nullptr, "exchange", "is null, expected the ranks' MoeExchange");
  const detail::MoeDims dims = detail::check_moe_experts(x, weights, w1, w3, w2, f);
  return detail::record_moe_experts_parallel(dims, x, weights, routing, w1, w3, w2, f,
                                             std::move(exchange));
}

template <class T>
Var<T> detail::record_moe_experts_parallel(const MoeDims& dims, const Var<T>& x,
                                           const Var<T>& weights, const MoeRouting& routing,
                                           const std::vector<Var<T>>& w1,
                                           const std::vector<Var<T>>& w3,
                                           const std::vector<Var<T>>& w2, Activation f,
                                           std::shared_ptr<const MoeExchange> exchange) {
  const detail::Check check(k_moe_experts);
  const std::size_t p = exchange->size(), local = dims.experts;
  check.argument(routing.experts == local * p, "routing", "is for ", routing.experts,
                 " experts, expected ", local * p, " (the length of 'w1', ", local, ", times ", p,
                 " ranks)");
  MoeDims global = dims;
  global.experts = routing.experts;
  detail::check_moe_routing(check, routing, global);

  // 2. forward: the counts, the x rows out, the experts, the o rows back, the combine
  Tape<T>& tape = x.tape();
  const std::size_t c = dims.c, h = dims.h, rows = routing.rows();
  auto nd = std::make_shared<ParallelNode>(ParallelNode{routing,
                                                        exchange,
                                                        Plan(routing, p, local, *exchange),
                                                        x.index(),
                                                        weights.index(),
                                                        0,
                                                        {},
                                                        {},
                                                        {},
                                                        c,
                                                        h,
                                                        f});
  std::vector<std::size_t> parents{nd->xi, nd->wi};
  for (auto [list, indices] :
       {std::pair{&w1, &nd->w1}, std::pair{&w3, &nd->w3}, std::pair{&w2, &nd->w2}})
    for (const Var<T>& w : *list) {
      indices->push_back(w.index());
      parents.push_back(w.index());
    }
  // Its backward is collective: it runs on every rank whatever this rank's
  // inputs require.
  nd->yi = tape.record(k_moe_experts_all_to_all, parents, true);
  xt::xarray<T>& y = tape.value_mut(nd->yi);
  y.resize(dims.y_shape);
  const Plan& plan = nd->plan;
  const std::size_t received = plan.received;
  T* const buffer = tape.template save<T>(nd->yi, ParallelSaved<T>::size(received, rows, c, h));
  const ParallelSaved<T> saved = ParallelSaved<T>::in(buffer, received, c, h);
  std::vector<T> out(rows * c), in(received * c);
  // x_rows[r] = x[source[r] / k], rank q's range to rank q
  detail::moe_gather_rows(routing, c, tape.value(nd->xi).data(), out.data());
  exchange->all_to_all_v(out.data(), plan.send_elements(c), in.data(), plan.recv_elements(c));
  plan.reorder(in.data(), saved.x_rows, c, true);
  // g, u [R, H], o_e [R, C]: this rank's experts over their rows from every rank
  std::vector<T> o_e(received * c);
  const std::vector<detail::MoeExpertWeights<T>> weights_e =
      detail::moe_expert_weights(tape, nd->w1, nd->w3, nd->w2);
  detail::moe_expert_rows_forward(k_moe_experts,
                                  {f, c, h, plan.offsets, weights_e, detail::k_moe_tile_macs},
                                  detail::MoeSaved<T>{saved.x_rows, saved.g, saved.u, o_e.data()});
  plan.reorder(o_e.data(), in.data(), c, false);
  exchange->all_to_all_v(in.data(), plan.recv_elements(c), saved.o, plan.send_elements(c));
  // y[t] = sum over t's kept choices ch of weights[ch] * o[row_of[ch]]
  detail::moe_combine_rows(routing, c, tape.value(nd->wi).data(), static_cast<const T*>(saved.o),
                           y.data());

  // 3. set_backward: the same exchange in reverse
  tape.set_backward(nd->yi, [nd](Tape<T>& t, const xt::xarray<T>& dy) {
    const Plan& plan = nd->plan;
    const MoeRouting& r = nd->routing;
    const std::size_t c = nd->c, h = nd->h, rows = r.rows(), received = plan.received;
    const ParallelSaved<const T> saved =
        ParallelSaved<const T>::in(t.template saved<T>(nd->yi), received, c, h);
    // in the forward pass: y[t] += weights[ch] * o[r], so now dweights[ch] (+)= dy[t] . o[r]
    if (t.requires_grad(nd->wi)) {
      const GradPointer<T> slot = t.grad_pointer(nd->wi);
      detail::MoeGradTarget<T> dw{slot.data, t.value(nd->wi).size(), slot.accumulate};
      detail::moe_weights_backward(r, c, saved.o, dy.data(), dw);
    }
    // d_out[r] = weights[ch] * dy[t] / P, to the expert's rank: the expert
    // weights' gradient is the mean over ranks (the rows' gradients are
    // multiplied by P again below, exactly when P is a power of two)
    const T ranks = static_cast<T>(plan.ranks);
    std::vector<T> out(rows * c), in(received * c), d_e(received * c);
    detail::moe_out_grad_rows(r, c, t.value(nd->wi).data(), dy.data(), T(1) / ranks, 0, rows,
                              out.data());
    nd->exchange->all_to_all_v(out.data(), plan.send_elements(c), in.data(), plan.recv_elements(c));
    plan.reorder(in.data(), d_e.data(), c, true);
    // The expert weights' targets (one per distinct node, grad_slot's rule).
    detail::MoeTargets<T> targets(t, 3 * nd->w1.size());
    const detail::MoeWeightGrads<T> dw = targets.experts(nd->w1, nd->w3, nd->w2);
    // dW += (the experts' backward over their rows); dx_e [R, C] (the x rows' gradients)
    std::vector<T> dx_e(received * c);
    const std::vector<detail::MoeExpertWeights<T>> weights_e =
        detail::moe_expert_weights(t, nd->w1, nd->w3, nd->w2);
    detail::moe_expert_rows_backward<T>(
        k_moe_experts, {nd->f, c, h, plan.offsets, weights_e, detail::k_moe_tile_macs},
        detail::MoeSaved<const T>{saved.x_rows, saved.g, saved.u, nullptr},
        static_cast<const T*>(d_e.data()), dw, dx_e.data());
    for (T& v : dx_e) v *= ranks;
    // in the forward pass: the x rows went to the experts' ranks, so now
    // their gradients come back, and dx[t] += dx_rows[r]
    plan.reorder(dx_e.data(), in.data(), c, false);
    nd->exchange->all_to_all_v(in.data(), plan.recv_elements(c), out.data(), plan.send_elements(c));
    if (t.requires_grad(nd->xi)) {
      const GradPointer<T> slot = t.grad_pointer(nd->xi);
      if (!slot.accumulate) std::fill(slot.data, slot.data + t.value(nd->xi).size(), T(0));
      detail::moe_scatter_rows(r, c, static_cast<const T*>(out.data()), 0, rows, slot.data);
    }
  });
  // 4. create_graph: no GradRule ("not twice differentiable"), as moe_experts.
  return tape.var(nd->yi);
}

#define XTGRAD_INSTANTIATE_MOE_PARALLEL(T)                                                         \
  template MoeRouting moe_route(const xt::xarray<T>&, std::size_t, std::optional<double>,          \
                                const MoeExchange&);                                               \
  template Var<T> moe_experts(const Var<T>&, const Var<T>&, const MoeRouting&,                     \
                              const std::vector<Var<T>>&, const std::vector<Var<T>>&,              \
                              const std::vector<Var<T>>&, Activation,                              \
                              std::shared_ptr<const MoeExchange>);                                 \
  template Var<T> detail::record_moe_experts_parallel(                                             \
      const MoeDims&, const Var<T>&, const Var<T>&, const MoeRouting&, const std::vector<Var<T>>&, \
      const std::vector<Var<T>>&, const std::vector<Var<T>>&, Activation,                          \
      std::shared_ptr<const MoeExchange>);
XTGRAD_INSTANTIATE_MOE_PARALLEL(float)
XTGRAD_INSTANTIATE_MOE_PARALLEL(double)
#undef XTGRAD_INSTANTIATE_MOE_PARALLEL

}  // namespace xtgrad
