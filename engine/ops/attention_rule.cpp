#include "support/attention_rule.hpp"  // first (through simd.hpp): see simd.hpp

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dropout.hpp"
#include "elementwise.hpp"
#include "mask.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "shape.hpp"
#include "slice.hpp"
#include "softmax.hpp"

// The create_graph rules of the fused attention (support/attention_rule.hpp
// states the formulas): the forward's probabilities recomputed with
// differentiable ops, then the fused backward's five products on them.

namespace xtgrad::detail {

namespace {

// The masks of the scores [.., Tq, Tk], as constants: hidden (causal, a false
// boolean element, an additive -inf), the additive mask's finite part, and
// the rows that see no key (there nothing is hidden, and P is set to 0 after
// the softmax, so that no -inf row makes a NaN that a product would spread).
template <class T>
struct ScoreMasks {
  xt::xarray<bool> hidden, dead;
  xt::xarray<T> additive;
  bool any_hidden = false, any_dead = false;
};

template <class T>
ScoreMasks<T> score_masks(const attention::Problem<T>& p, const AttentionMask<T>* mask,
                          const Shape& scores) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  ScoreMasks<T> m;
  m.hidden = xt::xarray<bool>::from_shape(scores);
  m.dead = xt::xarray<bool>::from_shape(scores);
  if (mask != nullptr && mask->is_additive()) m.additive = xt::xarray<T>::from_shape(scores);
  const attention::MaskView<T>& view = p.mask;
  const bool* keep = mask != nullptr && mask->is_boolean() ? mask->keep().data() : nullptr;
  const T* add = mask != nullptr && mask->is_additive() ? mask->additive().data() : nullptr;
  const std::size_t tq = p.q_len, tk = p.k_len;
  for (std::size_t b = 0; b < p.batch; ++b)
    for (std::size_t h = 0; h < p.heads; ++h)
      for (std::size_t i = 0; i < tq; ++i) {
        const std::size_t row = ((b * p.heads + h) * tq + i) * tk;
        const std::ptrdiff_t base = static_cast<std::ptrdiff_t>(b) * view.batch +
                                    static_cast<std::ptrdiff_t>(h) * view.head +
                                    static_cast<std::ptrdiff_t>(i) * view.row;
        bool sees = false;
        for (std::size_t j = 0; j < tk; ++j) {
          const std::ptrdiff_t at = base + static_cast<std::ptrdiff_t>(j) * view.col;
          bool hide = p.causal && j > i;
          if (keep != nullptr) hide = hide || !keep[at];
          if (add != nullptr) {
            hide = hide || add[at] == minus_inf;
            m.additive.data()[row + j] = add[at] == minus_inf ? T(0) : add[at];
          }
          m.hidden.data()[row + j] = hide;
          sees = sees || !hide;
        }
        std::fill(m.dead.data() + row, m.dead.data() + row + tk, !sees);
        if (!sees) std::fill(m.hidden.data() + row, m.hidden.data() + row + tk, false);
        m.any_dead = m.any_dead || !sees;
      }
  m.any_hidden = std::find(m.hidden.begin(), m.hidden.end(), true) != m.hidden.end();
  return m;
}

// k or v [.., Hkv, Tk, D] repeated to the query heads [.., H, Tk, D] (head h
// reads kv head h / group), and its gradient summed back over each group.
template <class T>
Var<T> repeat_heads(const Var<T>& x, std::size_t group) {
  if (group == 1) return x;
  const Shape& s = x.shape();
  std::vector<std::int64_t> split(s.begin(), s.end()), wide, merged;
  split.insert(split.end() - 2, 1);  // [.., Hkv, 1, Tk, D]
  wide = split;
  wide[wide.size() - 3] = static_cast<std::int64_t>(group);  // [.., Hkv, G, Tk, D]
  merged.assign(s.begin(), s.end());
  merged[merged.size() - 3] *= static_cast<std::int64_t>(group);  // [.., H, Tk, D]
  return reshape(expand(reshape(x, split), wide), merged);
}

template <class T>
Var<T> sum_heads(const Var<T>& g, std::size_t group) {
  if (group == 1) return g;
  const Shape& s = g.shape();
  std::vector<std::int64_t> split(s.begin(), s.end());
  split[split.size() - 3] /= static_cast<std::int64_t>(group);
  split.insert(split.end() - 2, static_cast<std::int64_t>(group));  // [.., Hkv, G, Tk, D]
  return sum(reshape(g, split), {static_cast<std::int64_t>(split.size()) - 3});
}

}  // namespace

template <class T>
std::array<Var<T>, 3> attention_gradients(const AttentionRule<T>& rule, const Var<T>& q,
                                          const Var<T>& k, const Var<T>& v, const Var<T>& dy) {
  const attention::Problem<T>& p = rule.problem;
  Tape<T>& tape = q.tape();
  const std::size_t group = p.group();
  const Var<T> kx = repeat_heads(k, group), vx = repeat_heads(v, group);
  // S[.., Tq, Tk] = scale q[.., Tq, Dh] . k^T[.., Dh, Tk] (+ A), -inf where hidden
  Var<T> s = scale(matmul(q, transpose(kx, -2, -1)), p.scale);
  Shape scores = s.shape();
  const ScoreMasks<T> m = score_masks(p, rule.mask.get(), scores);
  if (m.additive.size() != 0) s = add(s, tape.leaf(m.additive, false));
  if (m.any_hidden) s = masked_fill(s, m.hidden, -std::numeric_limits<double>::infinity());
  Var<T> prob = softmax(s, -1);  // P[.., Tq, Tk]
  if (m.any_dead) prob = masked_fill(prob, m.dead, 0.0);
  const auto drop = [&](const Var<T>& x) {  // x m / (1 - p), the forward's mask
    return rule.dropout_p > 0.0 ? dropout(x, rule.dropout_p, true, p.key) : x;
  };
  // dv[.., Tk, Dv] = P'^T[.., Tk, Tq] . dy[.., Tq, Dv]
  const Var<T> dv = matmul(transpose(drop(prob), -2, -1), dy);
  // dP[.., Tq, Tk] = dropout(dy[.., Tq, Dv] . v^T[.., Dv, Tk])
  const Var<T> d_prob = drop(matmul(dy, transpose(vx, -2, -1)));
  // dS = scale P (dP - rowsum(dP P))   (the scale of dq and dk folded in)
  const Var<T> d_scores =
      scale(mul(prob, sub(d_prob, sum(mul(d_prob, prob), {-1}, true))), p.scale);
  // dq[.., Tq, Dh] = dS . k;  dk[.., Tk, Dh] = dS^T . q
  const Var<T> dq = matmul(d_scores, kx);
  const Var<T> dk = matmul(transpose(d_scores, -2, -1), q);
  return {dq, sum_heads(dk, group), sum_heads(dv, group)};
}

template <class T>
Var<T> packed_attention_gradient(const AttentionRule<T>& rule, const Var<T>& qkv,
                                 const Var<T>& dy) {
  const Shape& s = qkv.shape();
  const auto c = static_cast<std::int64_t>(s.back() / 3);
  const auto heads = static_cast<std::int64_t>(rule.problem.heads);
  const auto length = static_cast<std::int64_t>(s[s.size() - 2]);
  // [.., T, C] <-> [.., H, T, Dh]: head h at columns h Dh .. (h + 1) Dh
  const bool batched = s.size() == 3;
  const std::vector<std::int64_t> swap =
      batched ? std::vector<std::int64_t>{0, 2, 1, 3} : std::vector<std::int64_t>{1, 0, 2};
  std::vector<std::int64_t> split{length, heads, c / heads}, merged{length, c};
  if (batched) {
    split.insert(split.begin(), static_cast<std::int64_t>(s[0]));
    merged.insert(merged.begin(), static_cast<std::int64_t>(s[0]));
  }
  const auto to_heads = [&](const Var<T>& x) { return permute(reshape(x, split), swap); };
  const auto part = [&](std::int64_t i) { return to_heads(slice(qkv, -1, i * c, (i + 1) * c)); };
  const std::array<Var<T>, 3> g =
      attention_gradients(rule, part(0), part(1), part(2), to_heads(dy));
  const auto merge = [&](const Var<T>& x) { return reshape(permute(x, swap), merged); };
  return concat({merge(g[0]), merge(g[1]), merge(g[2])}, -1);
}

template std::array<Var<float>, 3> attention_gradients(const AttentionRule<float>&,
                                                       const Var<float>&, const Var<float>&,
                                                       const Var<float>&, const Var<float>&);
template std::array<Var<double>, 3> attention_gradients(const AttentionRule<double>&,
                                                        const Var<double>&, const Var<double>&,
                                                        const Var<double>&, const Var<double>&);
template Var<float> packed_attention_gradient(const AttentionRule<float>&, const Var<float>&,
                                              const Var<float>&);
template Var<double> packed_attention_gradient(const AttentionRule<double>&, const Var<double>&,
                                               const Var<double>&);

}  // namespace xtgrad::detail
