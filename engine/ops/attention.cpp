#include "../kernels/attention_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include "attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/attention_tiles_bf16.hpp"
#include "../kernels/dropout_mask.hpp"
#include "../kernels/scratch.hpp"
#include "../matmul_precision.hpp"
#include "support/attention_rule.hpp"

// scaled_dot_product_attention and packed_qkv_attention: the checks, where q,
// k, v and the output live (kernels/attention_problem.hpp), and one recorder
// that runs the forward kernel and sets the backward closure around the
// backward kernel (kernels/attention_kernels.hpp).

namespace xtgrad {

namespace {

namespace attention = detail::attention;

// Whether the kernels run their products in bfloat16 (Problem::bf16): float,
// at MatmulPrecision::bf16, on a build with the bf16 kernel. Read once per
// kernel call, as a GEMM reads it, so a forward and its backward each use
// the precision in force when they run.
template <class T>
bool bf16_products() {
  return std::is_same_v<T, float> && attention::k_bf16_kernel &&
         get_matmul_precision() == MatmulPrecision::bf16;
}

// Size of axis `from_end` counted from the end (1 = last).
std::size_t axis(const Shape& s, std::size_t from_end) {
  return s[s.size() - from_end];
}

// [B, H, T, D], [H, T, D] or [T, D] placed contiguously: (b, h, t) -> offset.
attention::Operand contiguous(const Shape& s) {
  const std::size_t t = axis(s, 2), d = axis(s, 1);
  const std::size_t h = s.size() >= 3 ? axis(s, 3) : 1;
  return {static_cast<std::ptrdiff_t>(h * t * d), static_cast<std::ptrdiff_t>(t * d),
          static_cast<std::ptrdiff_t>(d)};
}

// The shapes of q, k and v of scaled_dot_product_attention (attention.hpp
// lists what is refused).
void check_qkv(const detail::Check& check, const Shape& qs, const Shape& ks, const Shape& vs,
               bool enable_gqa, bool default_scale) {
  const std::size_t rank = qs.size();
  check.shape(rank >= 2 && rank <= 4, "q", qs,
              "rank 4 [B, H, Tq, Dh], 3 [H, Tq, Dh] or 2 [Tq, Dh]");
  const char* layout = rank == 4 ? "[B, Hkv, Tk, D]" : rank == 3 ? "[Hkv, Tk, D]" : "[Tk, D]";
  check.shape(ks.size() == rank, "k", ks, "rank ", rank, " ", layout, " like 'q' of shape ", qs);
  check.shape(vs.size() == rank, "v", vs, "rank ", rank, " ", layout, " like 'q' of shape ", qs);
  check.shape(rank != 4 || ks[0] == qs[0], "k", ks, "batch size ", qs[0], " of 'q' ", qs);
  check.shape(rank != 4 || vs[0] == qs[0], "v", vs, "batch size ", qs[0], " of 'q' ", qs);
  check.shape(axis(ks, 1) == axis(qs, 1), "k", ks, "last axis Dh = ", axis(qs, 1), " of 'q' ", qs);
  check.shape(axis(vs, 2) == axis(ks, 2), "v", vs, "Tk = ", axis(ks, 2), " keys like 'k' ", ks);
  const std::size_t heads = rank >= 3 ? axis(qs, 3) : 1;
  const std::size_t kv_heads = rank >= 3 ? axis(ks, 3) : 1;
  check.shape(rank < 3 || axis(vs, 3) == kv_heads, "v", vs, kv_heads, " heads like 'k' ", ks);
  check.shape(kv_heads == heads || enable_gqa, "k", ks, heads, " heads like 'q' ", qs,
              " (a different number of kv heads needs enable_gqa)");
  check.shape(kv_heads == heads || (kv_heads != 0 && heads % kv_heads == 0), "k", ks,
              "a number of heads that divides the ", heads, " heads of 'q' ", qs, " (enable_gqa)");
  check.shape(!default_scale || axis(qs, 1) != 0, "q", qs,
              "Dh >= 1 for the default scale 1 / sqrt(Dh)");
}

// [..., Tq, Dv]: the output of attention of q [..., Tq, Dh].
Shape output_shape(const Shape& qs, std::size_t v_dim) {
  Shape out(qs.begin(), qs.end());
  out.back() = v_dim;
  return out;
}

// dropout_p and scale (default 1 / sqrt(Dh)) checked into p.
template <class T>
void set_scalars(const detail::Check& check, attention::Problem<T>& p, double dropout_p,
                 std::optional<double> scale, const DropoutKey& key) {
  check.argument(dropout_p >= 0.0 && dropout_p < 1.0, "dropout_p", "is ", dropout_p,
                 ", expected a probability in [0, 1)");
  check.argument(!scale || (std::isfinite(*scale) && *scale > 0.0), "scale", "is ",
                 scale.value_or(0.0), ", expected a finite number > 0");
  p.scale = static_cast<T>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(p.qk_dim)));
  const detail::DropoutMask<T> m = detail::dropout_mask<T>(dropout_p, true);
  p.dropout = !m.identity;
  p.threshold = m.threshold;
  p.keep_scale = m.scale;
  p.key = key;
}

// The mask's strides over [B, H, Tq, Tk], after checking that its shape
// broadcasts to `target` (the last target.size() axes of [B, H, Tq, Tk]).
template <class T>
attention::MaskView<T> mask_strides(const detail::Check& check, const AttentionMask<T>& mask,
                                    const Shape& target) {
  attention::MaskView<T> view;
  if (mask.empty()) return view;
  const Shape& shape = mask.is_boolean() ? mask.keep().shape() : mask.additive().shape();
  const char* against = " (NumPy rules, against [B, H, Tq, Tk])";
  check.shape(shape.size() <= target.size(), "mask", shape, "a shape that broadcasts to ", target,
              against);
  std::ptrdiff_t strides[4] = {0, 0, 0, 0};
  std::ptrdiff_t stride = 1;
  for (std::size_t k = 1; k <= shape.size(); ++k) {  // k-th axis from the right
    const std::size_t n = shape[shape.size() - k], want = target[target.size() - k];
    check.shape(n == want || n == 1, "mask", shape, "a shape that broadcasts to ", target, against);
    strides[4 - k] = n == 1 ? 0 : stride;
    stride *= static_cast<std::ptrdiff_t>(n);
  }
  view.batch = strides[0];
  view.head = strides[1];
  view.row = strides[2];
  view.col = strides[3];
  return view;
}

// The mask's data in view (null pointers for an empty mask).
template <class T>
void point_mask(attention::MaskView<T>& view, const AttentionMask<T>& mask) {
  view.keep = mask.is_boolean() ? mask.keep().data() : nullptr;
  view.additive = mask.is_additive() ? mask.additive().data() : nullptr;
}

// The sizes and scalars of attention of q [..., Tq, Dh] (q and the output
// contiguous; the caller places k and v) over kv_heads heads of k_len keys,
// values of v_dim; dropout_p, scale and the mask (against [..., Tq, k_len])
// checked.
template <class T>
attention::Problem<T> query_problem(const detail::Check& check, const Shape& qs,
                                    std::size_t kv_heads, std::size_t k_len, std::size_t v_dim,
                                    const AttentionMask<T>& mask, bool is_causal, double dropout_p,
                                    std::optional<double> scale, const DropoutKey& dropout_key) {
  const std::size_t rank = qs.size();
  attention::Problem<T> p;
  p.batch = rank == 4 ? qs[0] : 1;
  p.heads = rank >= 3 ? axis(qs, 3) : 1;
  p.kv_heads = kv_heads;
  p.q_len = axis(qs, 2);
  p.k_len = k_len;
  p.qk_dim = axis(qs, 1);
  p.v_dim = v_dim;
  p.causal = is_causal;
  set_scalars(check, p, dropout_p, scale, dropout_key);
  Shape scores(qs.begin(), qs.end());  // [..., Tq, Tk]
  scores.back() = p.k_len;
  p.mask = mask_strides(check, mask, scores);
  p.q = contiguous(qs);
  p.o = contiguous(output_shape(qs, v_dim));
  return p;
}

// Where the inputs of the node live: inputs[part] is the node holding q
// (part 0), k (1) and v (2) at element offset offsets[part]. Packed: one
// node [B, T, 3C] holds all three (and its gradient is one array).
struct Sources {
  std::size_t inputs[3];
  std::size_t offsets[3];
  bool packed;
};

// The gradients of the parts that need one, written by the backward kernel:
// d[part] points into the part's gradient slot when the kernel may write it
// straight there, else into own[part], added to the slot by finish().
template <class T>
struct PartGradients {
  xt::xarray<T> own[3];
  GradPointer<T> direct[3];
  T* d[3] = {nullptr, nullptr, nullptr};

  // The kernel overwrites each gradient element once. A part written
  // straight into its slot must be the first claim of a node that no other
  // part shares (q = k self-attention gets two claims of one buffer); the
  // others go through an array of their own, then are added.
  PartGradients(Tape<T>& t, const Sources& src) {
    const std::size_t parts = src.packed ? 1 : 3;
    for (std::size_t part = 0; part < parts; ++part) {
      const std::size_t node = src.inputs[part];
      if (!t.requires_grad(node)) continue;
      bool shared = false;
      for (std::size_t other = 0; other < parts; ++other)
        shared = shared || (other != part && src.inputs[other] == node);
      if (!shared) direct[part] = t.grad_pointer(node);
      if (direct[part].data == nullptr || direct[part].accumulate) {
        own[part].resize(t.value(node).shape());
        d[part] = own[part].data();
      } else {
        d[part] = direct[part].data;
      }
    }
    if (src.packed && d[0] != nullptr) {  // k and v: columns [C, 3C) of the same array
      d[1] = d[0] + src.offsets[1];
      d[2] = d[0] + src.offsets[2];
    }
  }

  // own[part] added onto (or written into) the part's gradient slot.
  void finish(Tape<T>& t, const Sources& src) {
    for (std::size_t part = 0; part < (src.packed ? 1 : 3); ++part) {
      if (d[part] == nullptr || d[part] == direct[part].data) continue;
      const T* in = own[part].data();
      if (T* out = direct[part].data; out != nullptr) {  // claimed above: accumulate onto it
        for (std::size_t e = 0; e < own[part].size(); ++e) out[e] += in[e];
      } else {  // the write-or-accumulate rule of a gradient slot
        GradSlot<T> slot = t.grad_slot(src.inputs[part]);
        T* s = slot.buffer.data();
        if (slot.accumulate)
          for (std::size_t e = 0; e < own[part].size(); ++e) s[e] += in[e];
        else
          std::copy(in, in + own[part].size(), s);
      }
    }
  }
};

// Records the attention node (all checks done) and returns its output.
template <class T>
Var<T> record(const char* op, Tape<T>& tape, attention::Problem<T> p, const Sources& src,
              const Shape& out_shape, const AttentionMask<T>& user_mask, double dropout_p) {
  // the mask, kept once for backward and the create_graph rule (none: null)
  const std::shared_ptr<const AttentionMask<T>> mask =
      user_mask.empty() ? nullptr : std::make_shared<const AttentionMask<T>>(user_mask);
  const std::vector<std::size_t> parents(src.inputs, src.inputs + (src.packed ? 1 : 3));
  bool any = false;
  for (std::size_t i : parents) any = any || tape.requires_grad(i);
  const std::size_t yi = tape.record(op, parents, any);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(out_shape);
  // forward: y and the row log-sum-exps L [B, H, Tq] (saved for backward)
  const std::size_t lse_size = p.batch * p.heads * p.q_len;
  T* lse = tape.requires_grad(yi) ? tape.template save<T>(yi, lse_size)
                                  : detail::thread_scratch<T>(detail::ScratchSlot::attention_rows,
                                                              std::max<std::size_t>(lse_size, 1));
  if (mask) point_mask(p.mask, *mask);  // (empty: the pointers stay null)
  p.bf16 = bf16_products<T>();
  const auto input = [&](std::size_t part) {
    return tape.value(src.inputs[part]).data() + src.offsets[part];
  };
  attention::forward(p, input(0), input(1), input(2), y.data(), lse);

  // backward: dq, dk, dv from dy, q, k, v, y and L, P recomputed tile by tile
  // (attention.hpp states the formulas)
  tape.set_backward(yi, [p, src, m = mask, yi](Tape<T>& t, const xt::xarray<T>& dy) {
    (void)m;  // keeps the mask that p.mask points into
    const auto value = [&](std::size_t part) {
      return t.value(src.inputs[part]).data() + src.offsets[part];
    };
    PartGradients<T> g(t, src);
    attention::Problem<T> now = p;
    now.bf16 = bf16_products<T>();
    attention::backward(now, value(0), value(1), value(2), t.value(yi).data(), dy.data(),
                        t.template saved<T>(yi), g.d[0], g.d[1], g.d[2]);
    g.finish(t, src);
  });
  // create_graph: the same gradients composed of differentiable ops
  // (support/attention_rule.hpp)
  const detail::AttentionRule<T> rule{p, mask, dropout_p};
  tape.set_grad_rule(yi, [rule, packed = src.packed](GradSink<T>& g) {
    if (packed) {
      if (g.needs_grad(0))
        g.add(0, detail::packed_attention_gradient(rule, g.input(0), g.grad_output()));
      return;
    }
    const std::array<Var<T>, 3> d =
        detail::attention_gradients(rule, g.input(0), g.input(1), g.input(2), g.grad_output());
    for (std::size_t part = 0; part < 3; ++part)
      if (g.needs_grad(part)) g.add(part, d[part]);
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> scaled_dot_product_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                    const AttentionMask<NoDeduce<T>>& mask, bool is_causal,
                                    double dropout_p, std::optional<double> scale,
                                    const DropoutKey& dropout_key, bool enable_gqa) {
  const detail::Check check("scaled_dot_product_attention");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"q", &q}, {"k", &k}, {"v", &v}});
  const Shape& qs = q.shape();
  const Shape& ks = k.shape();
  const Shape& vs = v.shape();
  check_qkv(check, qs, ks, vs, enable_gqa, !scale);

  const std::size_t kv_heads = std::max<std::size_t>(qs.size() >= 3 ? axis(ks, 3) : 1, 1);
  attention::Problem<T> p = query_problem(check, qs, kv_heads, axis(ks, 2), axis(vs, 1), mask,
                                          is_causal, dropout_p, scale, dropout_key);
  p.k = contiguous(ks);
  p.v = contiguous(vs);
  const Sources src{{q.index(), k.index(), v.index()}, {0, 0, 0}, false};
  return record(check.function(), tape, p, src, output_shape(qs, p.v_dim), mask, dropout_p);
}

template <class T>
Var<T> attention_over_rows(const Var<T>& q, const KeyValueRows<NoDeduce<T>>& kv,
                           const AttentionMask<NoDeduce<T>>& mask) {
  const detail::Check check("attention_over_rows");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"q", &q}});
  check.logic(!tape.grad_enabled(),
              "reads keys and values outside the tape and has no backward: record on a tape "
              "whose recording is off (NoGradGuard)");
  const Shape& qs = q.shape();
  check.shape(qs.size() == 4 && qs[0] == kv.batch && qs[3] == kv.head_dim && kv.head_dim != 0 &&
                  kv.kv_heads != 0 && qs[1] % kv.kv_heads == 0,
              "q", qs, "[", kv.batch, ", H, Tq, ", kv.head_dim, "] with H a multiple of the ",
              kv.kv_heads, " key/value heads");
  attention::Problem<T> p = query_problem(check, qs, kv.kv_heads, kv.length, kv.head_dim, mask,
                                          false, 0.0, std::nullopt, DropoutKey{});
  p.k =
      p.v = {static_cast<std::ptrdiff_t>(kv.batch_stride),
             static_cast<std::ptrdiff_t>(kv.head_stride), static_cast<std::ptrdiff_t>(kv.head_dim)};
  const std::size_t yi = tape.record(check.function(), {q.index()}, false);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(output_shape(qs, p.v_dim));
  T* lse = detail::thread_scratch<T>(detail::ScratchSlot::attention_rows,
                                     std::max<std::size_t>(p.batch * p.heads * p.q_len, 1));
  point_mask(p.mask, mask);
  attention::forward(p, tape.value(q.index()).data(), kv.k, kv.v, y.data(), lse);
  tape.set_backward(yi, [](Tape<T>&, const xt::xarray<T>&) {});  // dropped: nothing records
  return tape.var(yi);
}

template <class T>
Var<T> packed_qkv_attention(const Var<T>& qkv, std::size_t n_heads,
                            const AttentionMask<NoDeduce<T>>& mask, bool is_causal,
                            double dropout_p, std::optional<double> scale,
                            const DropoutKey& dropout_key) {
  const detail::Check check("packed_qkv_attention");
  Tape<T>& tape = detail::common_tape<T>(check.function(), {{"qkv", &qkv}});
  const Shape& s = qkv.shape();
  check.shape(s.size() == 2 || s.size() == 3, "qkv", s, "rank 3 [B, T, 3C] or 2 [T, 3C]");
  const std::size_t width = s.back(), c = width / 3;
  check.shape(width % 3 == 0, "qkv", s, "a last axis 3C that is a multiple of 3");
  check.argument(n_heads != 0 && c % n_heads == 0, "n_heads", "is ", n_heads,
                 ", expected a positive divisor of C = ", c, " (qkv of shape ", s, ")");
  const std::size_t batch = s.size() == 3 ? s[0] : 1, length = s[s.size() - 2];
  const std::size_t dh = c / n_heads;
  check.shape(scale || dh != 0, "qkv", s, "Dh = C / n_heads >= 1 for the default scale");

  attention::Problem<T> p;
  p.batch = batch;
  p.heads = n_heads;
  p.kv_heads = n_heads;
  p.q_len = length;
  p.k_len = length;
  p.qk_dim = dh;
  p.v_dim = dh;
  p.causal = is_causal;
  set_scalars(check, p, dropout_p, scale, dropout_key);
  const Shape scores =
      s.size() == 3 ? Shape{batch, n_heads, length, length} : Shape{n_heads, length, length};
  p.mask = mask_strides(check, mask, scores);
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
  const Sources src{{i, i, i}, {0, c, 2 * c}, true};
  return record(check.function(), tape, p, src, out_shape, mask, dropout_p);
}

template Var<float> scaled_dot_product_attention(const Var<float>&, const Var<float>&,
                                                 const Var<float>&, const AttentionMask<float>&,
                                                 bool, double, std::optional<double>,
                                                 const DropoutKey&, bool);
template Var<double> scaled_dot_product_attention(const Var<double>&, const Var<double>&,
                                                  const Var<double>&, const AttentionMask<double>&,
                                                  bool, double, std::optional<double>,
                                                  const DropoutKey&, bool);
template Var<float> attention_over_rows(const Var<float>&, const KeyValueRows<float>&,
                                        const AttentionMask<float>&);
template Var<double> attention_over_rows(const Var<double>&, const KeyValueRows<double>&,
                                         const AttentionMask<double>&);
template Var<float> packed_qkv_attention(const Var<float>&, std::size_t,
                                         const AttentionMask<float>&, bool, double,
                                         std::optional<double>, const DropoutKey&);
template Var<double> packed_qkv_attention(const Var<double>&, std::size_t,
                                          const AttentionMask<double>&, bool, double,
                                          std::optional<double>, const DropoutKey&);

}  // namespace xtgrad
