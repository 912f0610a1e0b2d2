#include "moe.hpp"

#include <cmath>
#include <cstdint>
#include <iterator>
#include <utility>

#include "../engine/errors.hpp"
#include "../engine/ops/elementwise.hpp"
#include "../engine/ops/fused_linear.hpp"
#include "../engine/ops/gated.hpp"
#include "../engine/ops/index.hpp"
#include "../engine/ops/math.hpp"
#include "../engine/ops/moe.hpp"
#include "../engine/ops/reduce.hpp"
#include "../engine/ops/shape.hpp"
#include "../engine/ops/softmax.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_sparse_moe = "SparseMoe";

const char* projection_name(ExpertNames names, int which) {
  static constexpr const char* mixtral[] = {"w1", "w3", "w2"};
  static constexpr const char* llama[] = {"gate_proj", "up_proj", "down_proj"};
  return names == ExpertNames::mixtral ? mixtral[which] : llama[which];
}

// "experts.3.w1.weight" or "experts.3.gate_proj.weight": the parameter an
// expert weight's error names (role "w1", "w3" or "w2", as moe_experts calls them).
std::string mixtral_weight_name(const char* role, std::size_t e) {
  return "experts." + std::to_string(e) + "." + role + ".weight";
}
std::string llama_weight_name(const char* role, std::size_t e) {
  const std::string r(role);
  const int which = r == "w1" ? 0 : r == "w3" ? 1 : 2;
  return "experts." + std::to_string(e) + "." + projection_name(ExpertNames::llama, which) +
         ".weight";
}

// The constructor's checks, before any member is built; returns hidden_size.
std::size_t checked(std::size_t hidden_size, std::size_t intermediate_size,
                    const SparseMoeOptions& o) {
  const detail::Check check(k_sparse_moe);
  detail::check_positive_size(k_sparse_moe, "hidden_size", hidden_size);
  detail::check_positive_size(k_sparse_moe, "intermediate_size", intermediate_size);
  detail::check_positive_size(k_sparse_moe, "num_experts", o.num_experts);
  detail::check_positive_size(k_sparse_moe, "top_k", o.top_k);
  check.argument(o.top_k <= o.num_experts, "top_k", "is ", o.top_k,
                 ", expected at most num_experts = ", o.num_experts);
  const double cf = o.capacity_factor.value_or(1.0);
  check.argument(std::isfinite(cf) && cf > 0.0, "capacity_factor", "is ", cf,
                 ", expected a finite value > 0 (or none: dropless)");
  detail::activation_name(o.activation, k_sparse_moe, "activation");
  return hidden_size;
}

// The shared expert's and its gate's shapes (Qwen2MoeMLP and [1, C]).
template <class T>
void check_shared_expert(const detail::Check& check, const GatedExpert<T>& s, const Linear<T>& gate,
                         std::size_t c) {
  const Shape& gp = s.gate.weight.value.shape();
  const std::size_t hs = gp.size() == 2 ? gp[0] : 0;
  const Shape hc{hs, c}, ch{c, hs}, gate_shape{1, c};
  check.shape(gp.size() == 2 && gp[1] == c, "shared_expert.gate_proj.weight", gp, "[Hs, ", c,
              "] (hidden_size)");
  check.shape(s.up.weight.value.shape() == hc, "shared_expert.up_proj.weight",
              s.up.weight.value.shape(), hc);
  check.shape(s.down.weight.value.shape() == ch, "shared_expert.down_proj.weight",
              s.down.weight.value.shape(), ch);
  check.shape(gate.weight.value.shape() == gate_shape, "shared_expert_gate.weight",
              gate.weight.value.shape(), gate_shape);
}

// forward's checks, before anything is recorded: x [..., C], the router's
// and every expert's weights (named as their parameters), the shared
// expert's; the experts op's sizes, with k = top_k.
template <class T>
detail::MoeDims check_forward(const SparseMoe<T>& m, const Var<T>& x) {
  const detail::Check check(k_sparse_moe);
  const std::size_t c = m.hidden_size(), e_count = m.options().num_experts;
  check.shape(!x.shape().empty() && x.shape().back() == c, "x", x.shape(), "[..., ", c,
              "] (hidden_size)");
  const Shape router{e_count, c};
  check.shape(m.gate.weight.value.shape() == router, "gate.weight", m.gate.weight.value.shape(),
              router, " ([num_experts, hidden_size])");
  std::vector<const Shape*> s1, s3, s2;
  for (const GatedExpert<T>& ex : m.experts) {
    s1.push_back(&ex.gate.weight.value.shape());
    s3.push_back(&ex.up.weight.value.shape());
    s2.push_back(&ex.down.weight.value.shape());
  }
  const Shape x2_shape{x.size() / c, c};
  const std::size_t first = m.first_expert();
  const auto weight_name =
      m.options().expert_names == ExpertNames::mixtral ? mixtral_weight_name : llama_weight_name;
  detail::MoeDims dims =
      detail::check_moe_shapes(k_sparse_moe, x2_shape, nullptr, s1, s3, s2,
                               [first, weight_name](const char* role, std::size_t e) {
                                 return weight_name(role, first + e);
                               });
  dims.k = m.options().top_k;
  if (m.shared_expert) check_shared_expert(check, *m.shared_expert, *m.shared_expert_gate, c);
  return dims;
}

// The routing statistics of the global batch (this batch's in one process).
MoeStats global_stats(const MoeRouting& routing) {
  std::size_t kept = 0;
  for (const std::size_t count : routing.global_counts) kept += count;
  return {routing.global_routed, routing.global_counts, routing.global_tokens,
          routing.global_tokens * routing.k - kept};
}

// The auxiliary losses into `out` (see moe.hpp): E * sum_e f_e P_e, f_e =
// routed_e / N (no gradient), P_e = mean_t p[t, e], and mean_t
// logsumexp(logits[t])^2, with f_e and N of the global batch. With the
// experts sharded over `ranks` processes (0: not sharded), this rank's
// share: (P / N) sum over its tokens in place of the mean (P n / N times
// its mean; 0, not 0 / 0, for a rank without tokens).
template <class T>
void auxiliary_losses(MoeOutput<T>& out, Tape<T>& tape, const Var<T>& logits, const Var<T>& probs,
                      const MoeRouting& routing, std::size_t ranks) {
  const std::size_t global_n = routing.global_tokens, e_count = routing.experts;
  xt::xarray<T> f = xt::zeros<T>({e_count});
  for (std::size_t e = 0; e < e_count && global_n > 0; ++e)
    f(e) = static_cast<T>(e_count) * static_cast<T>(routing.global_routed[e]) /
           static_cast<T>(global_n);
  if (ranks == 0) {
    out.load_balancing_loss = sum(mul(mean(probs, {0}), tape.leaf(f, false)));
    out.z_loss = mean(square(logsumexp(logits, {1})));
    return;
  }
  const T per_token =
      global_n > 0 ? static_cast<T>(static_cast<double>(ranks) / static_cast<double>(global_n))
                   : T(0);
  out.load_balancing_loss = sum(mul(sum(probs, {0}), tape.leaf(f * per_token, false)));
  out.z_loss = scale(sum(square(logsumexp(logits, {1}))), per_token);
}

}  // namespace

template <class T>
GatedExpert<T>::GatedExpert(std::size_t d_model, std::size_t d_hidden, Activation activation,
                            ExpertNames names, Generator& generator)
    : gate(d_model, d_hidden, false, generator),
      up(d_model, d_hidden, false, generator),
      down(d_hidden, d_model, false, generator),
      activation_(activation),
      names_(names) {
  detail::activation_name(activation, "GatedExpert", "activation");
}

template <class T>
Var<T> GatedExpert<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("GatedExpert", "x");
  // Every shape is checked before anything is recorded.
  const detail::LinearDims g = detail::check_linear_shapes(
      "GatedExpert", "x", x.shape(), gate.weight.value.shape(), nullptr, WeightLayout::out_in);
  const detail::LinearDims u = detail::check_linear_shapes(
      "GatedExpert", "x", x.shape(), up.weight.value.shape(), nullptr, WeightLayout::out_in);
  const detail::LinearDims d = detail::check_linear_shapes(
      "GatedExpert", "hidden", g.y_shape, down.weight.value.shape(), nullptr, WeightLayout::out_in);
  detail::Check("GatedExpert")
      .shape(u.y_shape == g.y_shape, projection_name(names_, 1), up.weight.value.shape(),
             gate.weight.value.shape(), " (the shape of ", projection_name(names_, 0), ")");
  const auto adapted = [](const Linear<T>& l) { return l.lora && !l.lora->merged(); };
  if (adapted(gate) || adapted(up) || adapted(down)) {
    // LoRA adapters add to their layers' outputs: gate and up through their
    // own forwards; down's input, the hidden, is then formed (and stored)
    // only when down has an adapter too.
    const Var<T> gv = gate.forward(x), uv = up.forward(x);
    if (adapted(down)) return down.forward(gated(uv, gv, activation_));  // down(u * f(g))
    return detail::record_gated_linear<T>(d, uv, gv, activation_, tape.param(down.weight),
                                          std::nullopt, WeightLayout::out_in);
  }
  const Var<T> gv =
      detail::record_linear<T>(g, x, tape.param(gate.weight), std::nullopt, WeightLayout::out_in);
  const Var<T> uv =
      detail::record_linear<T>(u, x, tape.param(up.weight), std::nullopt, WeightLayout::out_in);
  // down(u * f(g)), the hidden never stored (ops/fused_linear.hpp)
  return detail::record_gated_linear<T>(d, uv, gv, activation_, tape.param(down.weight),
                                        std::nullopt, WeightLayout::out_in);
}

template <class T>
void GatedExpert<T>::collect_parameters(const std::string& prefix,
                                        typename Module<T>::NamedParameters& out) {
  // Hugging Face's order: w1, w2, w3 (Mixtral); gate_proj, up_proj, down_proj (LLaMA)
  if (names_ == ExpertNames::mixtral) {
    this->add_child(prefix, "w1", gate, out);
    this->add_child(prefix, "w2", down, out);
    this->add_child(prefix, "w3", up, out);
  } else {
    this->add_child(prefix, "gate_proj", gate, out);
    this->add_child(prefix, "up_proj", up, out);
    this->add_child(prefix, "down_proj", down, out);
  }
}

template <class T>
ModuleConfig GatedExpert<T>::config() const {
  return ModuleConfig("GatedExpert")
      .add("d_model", gate.in_features())
      .add("d_hidden", gate.out_features())
      .add("activation", std::string(to_string(activation_)))
      .add("names", std::string(names_ == ExpertNames::mixtral ? "mixtral" : "llama"));
}

template <class T>
SparseMoe<T>::SparseMoe(std::size_t hidden_size, std::size_t intermediate_size,
                        SparseMoeOptions options)
    : SparseMoe(hidden_size, intermediate_size, options,
                detail::lvalue(Generator(k_default_seed))) {}

template <class T>
SparseMoe<T>::SparseMoe(std::size_t hidden_size, std::size_t intermediate_size,
                        SparseMoeOptions options, Generator& generator)
    : gate(checked(hidden_size, intermediate_size, options), options.num_experts, false, generator),
      options_(options),
      hidden_size_(hidden_size),
      intermediate_size_(intermediate_size) {
  experts.reserve(options.num_experts);
  for (std::size_t e = 0; e < options.num_experts; ++e)
    experts.emplace_back(hidden_size, intermediate_size, options.activation, options.expert_names,
                         generator);
  if (options.shared_expert_intermediate_size > 0) {
    shared_expert.emplace(hidden_size, options.shared_expert_intermediate_size, options.activation,
                          ExpertNames::llama, generator);
    shared_expert_gate.emplace(hidden_size, 1, false, generator);
  }
}

template <class T>
Var<T> SparseMoe<T>::forward(const Var<T>& x) {
  return run(x, false).y;
}

template <class T>
MoeOutput<T> SparseMoe<T>::forward_with_losses(const Var<T>& x) {
  return run(x, true);
}

template <class T>
MoeOutput<T> SparseMoe<T>::run(const Var<T>& x, bool losses) {
  // Every shape is checked before anything is recorded: a bad x or a
  // parameter reshaped since construction leaves the tape as it was.
  Tape<T>& tape = x.tape_for(k_sparse_moe, "x");
  const detail::MoeDims dims = check_forward(*this, x);
  const auto rows = static_cast<std::int64_t>(dims.tokens);
  const Var<T> x2 =
      x.shape().size() == 2 ? x : reshape(x, {rows, static_cast<std::int64_t>(hidden_size())});
  const Var<T> logits = gate.forward(x2);  // [N, E]
  const Var<T> probs = softmax(logits, -1);
  const MoeRouting routing =
      exchange_ ? moe_route(probs.value(), options_.top_k, options_.capacity_factor, *exchange_)
                : moe_route(probs.value(), options_.top_k, options_.capacity_factor);
  Var<T> weights = gather(probs, 1, routing.indices());  // [N, k]
  if (options_.norm_topk_prob) weights = div(weights, sum(weights, {1}, true));
  std::vector<Var<T>> w1, w3, w2;
  for (GatedExpert<T>& ex : experts) {
    w1.push_back(tape.param(ex.gate.weight));
    w3.push_back(tape.param(ex.up.weight));
    w2.push_back(tape.param(ex.down.weight));
  }
  Var<T> y = exchange_ ? detail::record_moe_experts_parallel(dims, x2, weights, routing, w1, w3, w2,
                                                             options_.activation, exchange_)
                       : detail::record_moe_experts(dims, x2, weights, routing, w1, w3, w2,
                                                    options_.activation);
  if (shared_expert)
    y = add(y, mul(sigmoid(shared_expert_gate->forward(x2)), shared_expert->forward(x2)));
  if (x.shape().size() != 2) {
    std::vector<std::int64_t> shape(x.shape().begin(), x.shape().end());
    y = reshape(y, shape);
  }
  MoeOutput<T> out{y, {}, {}, global_stats(routing)};
  // infer may run on several threads at once: it leaves the module as it was
  if (!detail::InferenceScope::active()) stats_ = out.stats;
  if (losses)
    auxiliary_losses(out, tape, logits, probs, routing, exchange_ ? exchange_->size() : 0);
  return out;
}

template <class T>
void SparseMoe<T>::collect_parameters(const std::string& prefix,
                                      typename Module<T>::NamedParameters& out) {
  this->add_child(prefix, "gate", gate, out);
  for (std::size_t e = 0; e < experts.size(); ++e)
    this->add_child(prefix, "experts." + std::to_string(first_expert_ + e), experts[e], out);
  if (shared_expert) {
    this->add_child(prefix, "shared_expert", *shared_expert, out);
    this->add_child(prefix, "shared_expert_gate", *shared_expert_gate, out);
  }
}

template <class T>
void SparseMoe<T>::shard_experts(std::shared_ptr<const MoeExchange> exchange) {
  const detail::Check check("SparseMoe::shard_experts");
  check.argument(exchange != nullptr, "exchange", "is null, expected the ranks' MoeExchange");
  check.logic(exchange_ == nullptr, "the experts are sharded already");
  const std::size_t ranks = exchange->size(), e_count = options_.num_experts;
  check.argument(ranks > 0 && e_count % ranks == 0, "num_experts", "is ", e_count,
                 ", expected a multiple of the ", ranks, " ranks (each holds num_experts / ranks)");
  check.argument(experts.size() == e_count, "experts", "holds ", experts.size(),
                 " experts, expected num_experts = ", e_count);
  const std::size_t local = e_count / ranks, first = exchange->rank() * local;
  std::vector<GatedExpert<T>> mine(std::make_move_iterator(experts.begin() + first),
                                   std::make_move_iterator(experts.begin() + first + local));
  experts = std::move(mine);
  first_expert_ = first;
  exchange_ = std::move(exchange);
}

template <class T>
std::vector<Parameter<T>*> SparseMoe<T>::expert_parameters() {
  std::vector<Parameter<T>*> out;
  for (GatedExpert<T>& ex : experts)
    for (auto& [name, p] : ex.named_parameters()) {
      (void)name;
      out.push_back(p);
    }
  return out;
}

template <class T>
ModuleConfig SparseMoe<T>::config() const {
  return ModuleConfig("SparseMoe")
      .add("hidden_size", hidden_size())
      .add("intermediate_size", intermediate_size_)
      .add("num_experts", options_.num_experts)
      .add("top_k", options_.top_k)
      .add("norm_topk_prob", options_.norm_topk_prob)
      .add("activation", std::string(to_string(options_.activation)))
      .add("capacity_factor", options_.capacity_factor.value_or(0.0))
      .add("shared_expert_intermediate_size", options_.shared_expert_intermediate_size)
      .add("expert_names",
           std::string(options_.expert_names == ExpertNames::mixtral ? "mixtral" : "llama"));
}

template class GatedExpert<float>;
template class GatedExpert<double>;
template class SparseMoe<float>;
template class SparseMoe<double>;

}  // namespace xtgrad
