#include "../kernels/attention_record.hpp"  // first (through simd.hpp): see simd.hpp

#include "attention.hpp"

#include <string>

#include "../check.hpp"
#include "../errors.hpp"

namespace xtgrad {

namespace {

constexpr const char* op_name = "scaled_dot_product_attention";

// Size of axis `from_end` counted from the end (1 = last).
std::size_t axis(const Shape& s, std::size_t from_end) {
  return s[s.size() - from_end];
}

// [B, H, T, D], [H, T, D] or [T, D] placed contiguously: (b, h, t) -> offset.
detail::attention::Operand contiguous(const Shape& s) {
  const std::size_t t = axis(s, 2), d = axis(s, 1);
  const std::size_t h = s.size() >= 3 ? axis(s, 3) : 1;
  return {static_cast<std::ptrdiff_t>(h * t * d), static_cast<std::ptrdiff_t>(t * d),
          static_cast<std::ptrdiff_t>(d)};
}

}  // namespace

template <class T>
Var<T> scaled_dot_product_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                    const AttentionMask<NoDeduce<T>>& mask, bool is_causal,
                                    double dropout_p, std::optional<double> scale,
                                    const DropoutKey& dropout_key, bool enable_gqa) {
  Tape<T>& tape = detail::common_tape<T>(op_name, {{"q", &q}, {"k", &k}, {"v", &v}});
  const Shape& qs = q.shape();
  const Shape& ks = k.shape();
  const Shape& vs = v.shape();
  const std::size_t rank = qs.size();
  if (rank < 2 || rank > 4)
    detail::fail_shape(op_name, "q", qs, "rank 4 [B, H, Tq, Dh], 3 [H, Tq, Dh] or 2 [Tq, Dh]");
  const std::string layout = rank == 4 ? "[B, Hkv, Tk, D]" : rank == 3 ? "[Hkv, Tk, D]" : "[Tk, D]";
  if (ks.size() != rank)
    detail::fail_shape(op_name, "k", ks,
                       "rank " + std::to_string(rank) + " " + layout + " like 'q' of shape " +
                           detail::shape_str(qs));
  if (vs.size() != rank)
    detail::fail_shape(op_name, "v", vs,
                       "rank " + std::to_string(rank) + " " + layout + " like 'q' of shape " +
                           detail::shape_str(qs));
  if (rank == 4 && ks[0] != qs[0])
    detail::fail_shape(op_name, "k", ks,
                       "batch size " + std::to_string(qs[0]) + " of 'q' " + detail::shape_str(qs));
  if (rank == 4 && vs[0] != qs[0])
    detail::fail_shape(op_name, "v", vs,
                       "batch size " + std::to_string(qs[0]) + " of 'q' " + detail::shape_str(qs));
  if (axis(ks, 1) != axis(qs, 1))
    detail::fail_shape(
        op_name, "k", ks,
        "last axis Dh = " + std::to_string(axis(qs, 1)) + " of 'q' " + detail::shape_str(qs));
  if (axis(vs, 2) != axis(ks, 2))
    detail::fail_shape(
        op_name, "v", vs,
        "Tk = " + std::to_string(axis(ks, 2)) + " keys like 'k' " + detail::shape_str(ks));
  const std::size_t heads = rank >= 3 ? axis(qs, 3) : 1;
  const std::size_t kv_heads = rank >= 3 ? axis(ks, 3) : 1;
  if (rank >= 3 && axis(vs, 3) != kv_heads)
    detail::fail_shape(op_name, "v", vs,
                       std::to_string(kv_heads) + " heads like 'k' " + detail::shape_str(ks));
  if (kv_heads != heads) {
    if (!enable_gqa)
      detail::fail_shape(op_name, "k", ks,
                         std::to_string(heads) + " heads like 'q' " + detail::shape_str(qs) +
                             " (a different number of kv heads needs enable_gqa)");
    if (kv_heads == 0 || heads % kv_heads != 0)
      detail::fail_shape(op_name, "k", ks,
                         "a number of heads that divides the " + std::to_string(heads) +
                             " heads of 'q' " + detail::shape_str(qs) + " (enable_gqa)");
  }
  if (!scale && axis(qs, 1) == 0)
    detail::fail_shape(op_name, "q", qs, "Dh >= 1 for the default scale 1 / sqrt(Dh)");

  detail::attention::Problem<T> p;
  p.batch = rank == 4 ? qs[0] : 1;
  p.heads = heads;
  p.kv_heads = std::max<std::size_t>(kv_heads, 1);
  p.q_len = axis(qs, 2);
  p.k_len = axis(ks, 2);
  p.qk_dim = axis(qs, 1);
  p.v_dim = axis(vs, 1);
  p.causal = is_causal;
  detail::attention::set_scalars(op_name, p, dropout_p, scale, dropout_key);
  Shape scores(qs.begin(), qs.end());  // [..., Tq, Tk]
  scores.back() = p.k_len;
  p.mask = detail::attention::mask_strides(op_name, mask, scores);
  Shape out_shape(qs.begin(), qs.end());  // [..., Tq, Dv]
  out_shape.back() = p.v_dim;
  p.q = contiguous(qs);
  p.k = contiguous(ks);
  p.v = contiguous(vs);
  p.o = contiguous(out_shape);
  const detail::attention::Sources src{{q.index(), k.index(), v.index()}, {0, 0, 0}, false};
  return detail::attention::record(op_name, tape, p, src, out_shape, mask);
}

template Var<float> scaled_dot_product_attention(const Var<float>&, const Var<float>&,
                                                 const Var<float>&, const AttentionMask<float>&,
                                                 bool, double, std::optional<double>,
                                                 const DropoutKey&, bool);
template Var<double> scaled_dot_product_attention(const Var<double>&, const Var<double>&,
                                                  const Var<double>&, const AttentionMask<double>&,
                                                  bool, double, std::optional<double>,
                                                  const DropoutKey&, bool);

}  // namespace xtgrad
