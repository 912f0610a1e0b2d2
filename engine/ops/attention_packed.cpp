#include "../kernels/attention_record.hpp"  // first (through simd.hpp): see simd.hpp

#include <string>

#include "../check.hpp"
#include "../errors.hpp"
#include "attention.hpp"

namespace xtgrad {

namespace {

constexpr const char* op_name = "packed_qkv_attention";

}  // namespace

template <class T>
Var<T> packed_qkv_attention(const Var<T>& qkv, std::size_t n_heads,
                            const AttentionMask<NoDeduce<T>>& mask, bool is_causal,
                            double dropout_p, std::optional<double> scale,
                            const DropoutKey& dropout_key) {
  Tape<T>& tape = detail::common_tape<T>(op_name, {{"qkv", &qkv}});
  const Shape& s = qkv.shape();
  if (s.size() != 2 && s.size() != 3)
    detail::fail_shape(op_name, "qkv", s, "rank 3 [B, T, 3C] or 2 [T, 3C]");
  const std::size_t width = s.back();
  if (width % 3 != 0)
    detail::fail_shape(op_name, "qkv", s, "a last axis 3C that is a multiple of 3");
  const std::size_t c = width / 3;
  if (n_heads == 0 || c % n_heads != 0)
    detail::fail_argument(op_name, "n_heads",
                          "is " + std::to_string(n_heads) +
                              ", expected a positive divisor of C = " + std::to_string(c) +
                              " (qkv of shape " + detail::shape_str(s) + ")");
  const std::size_t batch = s.size() == 3 ? s[0] : 1, length = s[s.size() - 2];
  const std::size_t dh = c / n_heads;
  if (!scale && dh == 0)
    detail::fail_shape(op_name, "qkv", s, "Dh = C / n_heads >= 1 for the default scale");

  detail::attention::Problem<T> p;
  p.batch = batch;
  p.heads = n_heads;
  p.kv_heads = n_heads;
  p.q_len = length;
  p.k_len = length;
  p.qk_dim = dh;
  p.v_dim = dh;
  p.causal = is_causal;
  detail::attention::set_scalars(op_name, p, dropout_p, scale, dropout_key);
  const Shape scores =
      s.size() == 3 ? Shape{batch, n_heads, length, length} : Shape{n_heads, length, length};
  p.mask = detail::attention::mask_strides(op_name, mask, scores);
  // (b, h, t) of q, k and v at b * T * 3C + t * 3C + h * Dh (+ C, + 2C);
  // of the output [B, T, C] at b * T * C + t * C + h * Dh
  const auto row = static_cast<std::ptrdiff_t>(width);
  p.q = p.k =
      p.v = {static_cast<std::ptrdiff_t>(length * width), static_cast<std::ptrdiff_t>(dh), row};
  p.o = {static_cast<std::ptrdiff_t>(length * c), static_cast<std::ptrdiff_t>(dh),
         static_cast<std::ptrdiff_t>(c)};
  Shape out_shape(s.begin(), s.end());
  out_shape.back() = c;
  const std::size_t i = qkv.index();
  const detail::attention::Sources src{{i, i, i}, {0, c, 2 * c}, true};
  return detail::attention::record(op_name, tape, p, src, out_shape, mask);
}

template Var<float> packed_qkv_attention(const Var<float>&, std::size_t,
                                         const AttentionMask<float>&, bool, double,
                                         std::optional<double>, const DropoutKey&);
template Var<double> packed_qkv_attention(const Var<double>&, std::size_t,
                                          const AttentionMask<double>&, bool, double,
                                          std::optional<double>, const DropoutKey&);

}  // namespace xtgrad
