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

constexpr const char* k_parallel_route = "moe_route";
constexpr const char* k_parallel_experts = "moe_experts";

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
  // This rank's rows of `width` values (its permuted layout) to their
  // experts' ranks; `theirs` gets the rows this rank's experts compute
  // (expert-major).
  template <class T>
  void to_experts(const MoeExchange& exchange, const T* mine, T* theirs, std::size_t width) const {
    std::vector<T> in(received * width);
    exchange.all_to_all_v(mine, send_elements(width), in.data(), recv_elements(width));
    reorder(in.data(), theirs, width, true);
  }
  // The other way: the experts' rows back to the ranks of their tokens.
  template <class T>
  void to_tokens(const MoeExchange& exchange, const T* theirs, T* mine, std::size_t width) const {
    std::vector<T> in(received * width);
    reorder(theirs, in.data(), width, false);
    exchange.all_to_all_v(in.data(), recv_elements(width), mine, send_elements(width));
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
// (expert-major).
template <class T>
struct ParallelSaved {
  T *x_rows, *g, *u;
  static std::size_t size(std::size_t received, std::size_t c, std::size_t h) {
    return received * (c + 2 * h);
  }
  static ParallelSaved in(T* b, std::size_t received, std::size_t c, std::size_t h) {
    return {b, b + received * c, b + received * (c + h)};
  }
};

// The node of a parallel moe_experts: its parents x, weights and the
// experts' weights, recorded as k_moe_experts_all_to_all.
template <class T>
std::shared_ptr<ParallelNode> record_parallel_node(const detail::MoeDims& dims, const Var<T>& x,
                                                   const Var<T>& weights, const MoeRouting& routing,
                                                   const std::vector<Var<T>>& w1,
                                                   const std::vector<Var<T>>& w3,
                                                   const std::vector<Var<T>>& w2, Activation f,
                                                   std::shared_ptr<const MoeExchange> exchange) {
  const std::size_t p = exchange->size();
  Plan plan(routing, p, dims.experts, *exchange);
  auto nd = std::make_shared<ParallelNode>(ParallelNode{routing,
                                                        std::move(exchange),
                                                        std::move(plan),
                                                        x.index(),
                                                        weights.index(),
                                                        0,
                                                        {},
                                                        {},
                                                        {},
                                                        dims.c,
                                                        dims.h,
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
  nd->yi = x.tape().record(k_moe_experts_all_to_all, parents, true);
  return nd;
}

// This rank's experts over the rows of the plan's layout.
template <class T>
detail::TapeExpertSet<T> local_experts(const Tape<T>& t, const ParallelNode& nd) {
  return {t, nd.w1, nd.w3, nd.w2, nd.f, nd.c, nd.h, nd.plan.offsets};
}

// Forward: this rank's x rows to their experts' ranks (kept in `saved`),
// the experts over the rows they received, the o rows back, and y [N, C]
// the weighted sum of each token's o rows, expert after expert (as in one
// process).
template <class T>
void parallel_forward(const Tape<T>& tape, const ParallelNode& nd, const ParallelSaved<T>& saved,
                      T* y) {
  const MoeRouting& r = nd.routing;
  const std::size_t c = nd.c, rows = r.rows();
  const T* const none = nullptr;
  std::vector<T> mine(rows * c), o_e(nd.plan.received * c);
  // x_rows[r] = x[source[r] / k], rank q's range to rank q
  detail::moe_gather_rows(r, c, tape.value(nd.xi).data(), none, 0, rows, mine.data());
  nd.plan.to_experts(*nd.exchange, mine.data(), saved.x_rows, c);
  // g, u [R, H], o_e [R, C]: this rank's experts over their rows from every rank
  detail::moe_expert_rows_forward(k_parallel_experts, local_experts(tape, nd).set,
                                  detail::MoeRows<T>{saved.x_rows, saved.g, saved.u, o_e.data()});
  nd.plan.to_tokens(*nd.exchange, o_e.data(), mine.data(), c);
  // y[t] = sum over t's kept choices ch of weights[ch] * o[row_of[ch]]
  std::fill(y, y + r.tokens * c, T(0));
  detail::moe_scatter_rows(r, c, mine.data(), tape.value(nd.wi).data(), 0, rows, y);
}

// Backward, the same exchange in reverse: each kept choice's dy[t] / P and
// weight to its expert's rank, the experts' backward over the rows they
// received (the expert weights' gradient: the mean over ranks), the
// gradients of the x rows and of the weights back, times P (exact for P a
// power of two).
template <class T>
void parallel_backward(Tape<T>& t, const ParallelNode& nd, const T* dy) {
  const Plan& plan = nd.plan;
  const MoeRouting& r = nd.routing;
  const std::size_t c = nd.c, rows = r.rows(), received = plan.received;
  const T ranks = static_cast<T>(plan.ranks), *const none = nullptr;
  const T* const weights = t.value(nd.wi).data();
  // in the forward pass: y[t] += weights[ch] * o[r], so now the gradient of
  // o[r] is weights[ch] dy[t]: dy[t] / P and weights[ch] go to the expert's rank
  std::vector<T> mine(rows * c), w_mine(rows), d_e(received * c), w_e(received);
  detail::moe_gather_rows(r, c, dy, none, 0, rows, mine.data());
  for (T& v : mine) v /= ranks;
  for (std::size_t i = 0; i < rows; ++i) w_mine[i] = weights[r.source[i]];
  plan.to_experts(*nd.exchange, mine.data(), d_e.data(), c);
  plan.to_experts(*nd.exchange, w_mine.data(), w_e.data(), 1);
  // dW += (the experts' backward over their rows), the targets one per
  // distinct node (grad_slot's rule); dx_e [R, C] and dw_e [R] of the rows
  detail::MoeTargets<T> targets(t, 3 * nd.w1.size());
  const detail::MoeWeightGrads<T> dw = targets.experts(nd.w1, nd.w3, nd.w2);
  const auto saved = ParallelSaved<const T>::in(t.template saved<T>(nd.yi), received, c, nd.h);
  std::vector<T> dx_e(received * c), dw_e(received);
  detail::moe_expert_rows_backward<T>(
      k_parallel_experts, local_experts(t, nd).set,
      detail::MoeRows<const T>{saved.x_rows, saved.g, saved.u, nullptr}, d_e.data(), w_e.data(), dw,
      dx_e.data(), dw_e.data());
  for (std::vector<T>* v : {&dx_e, &dw_e})
    for (T& e : *v) e *= ranks;
  // in the forward pass: the x rows went to the experts' ranks, so now their
  // gradients come back: dx[t] += weights[ch] dx_rows[r], dweights[ch] += dw_rows[r]
  plan.to_tokens(*nd.exchange, dx_e.data(), mine.data(), c);
  plan.to_tokens(*nd.exchange, dw_e.data(), w_mine.data(), 1);
  detail::MoeTargets<T> home(t, 2);
  if (detail::MoeGradTarget<T>* dx = home(nd.xi)) {
    if (!dx->accumulate) std::fill(dx->data, dx->data + dx->size, T(0));
    detail::moe_scatter_rows(r, c, static_cast<const T*>(mine.data()), weights, 0, rows, dx->data);
  }
  if (detail::MoeGradTarget<T>* dweights = home(nd.wi)) {
    if (!dweights->accumulate) std::fill(dweights->data, dweights->data + dweights->size, T(0));
    for (std::size_t i = 0; i < rows; ++i) dweights->data[r.source[i]] += w_mine[i];
  }
}

}  // namespace

template <class T>
MoeRouting moe_route(const xt::xarray<T>& probs, std::size_t k,
                     std::optional<double> capacity_factor, const MoeExchange& exchange) {
  const detail::Check check(k_parallel_route);
  check.shape(probs.dimension() >= 1, "probs", probs.shape(), "[..., E], at least one axis");
  const std::size_t experts = probs.shape().back();
  check.argument(experts >= 1, "probs", "has 0 experts (its last axis), expected at least 1");
  detail::check_moe_route(k_parallel_route, k, experts, capacity_factor);

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
  const detail::Check check(k_parallel_experts);
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
  const detail::Check check(k_parallel_experts);
  const std::size_t p = exchange->size(), local = dims.experts;
  check.argument(routing.experts == local * p, "routing", "is for ", routing.experts,
                 " experts, expected ", local * p, " (the length of 'w1', ", local, ", times ", p,
                 " ranks)");
  MoeDims global = dims;
  global.experts = routing.experts;
  detail::check_moe_routing(check, routing, global);

  // 2. forward: the counts, the x rows out, the experts, the o rows back, the combine
  Tape<T>& tape = x.tape();
  const std::shared_ptr<ParallelNode> nd =
      record_parallel_node(dims, x, weights, routing, w1, w3, w2, f, std::move(exchange));
  xt::xarray<T>& y = tape.value_mut(nd->yi);
  y.resize(dims.y_shape);
  T* const buffer =
      tape.template save<T>(nd->yi, ParallelSaved<T>::size(nd->plan.received, dims.c, dims.h));
  parallel_forward(tape, *nd, ParallelSaved<T>::in(buffer, nd->plan.received, dims.c, dims.h),
                   y.data());

  // 3. set_backward: the same exchange in reverse
  tape.set_backward(
      nd->yi, [nd](Tape<T>& t, const xt::xarray<T>& dy) { parallel_backward(t, *nd, dy.data()); });
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
