#pragma once
// What scaled_dot_product_attention and packed_qkv_attention share
// (internal): the checks of the scalar arguments and of the mask, the mask's
// broadcast strides, and recording the node with its backward rule once the
// caller has described where q, k, v and the output live (attention_problem.hpp).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "../errors.hpp"
#include "../ops/attention.hpp"
#include "../tape.hpp"
#include "attention_kernels.hpp"  // first (through simd.hpp): see simd.hpp
#include "dropout_mask.hpp"
#include "scratch.hpp"

namespace xtgrad::detail::attention {

// dropout_p and scale (default 1 / sqrt(Dh)) checked into p.
template <class T>
void set_scalars(const char* op, Problem<T>& p, double dropout_p, std::optional<double> scale,
                 const DropoutKey& key) {
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    fail_argument(op, "dropout_p",
                  "is " + number_str(dropout_p) + ", expected a probability in [0, 1)");
  if (scale && !(std::isfinite(*scale) && *scale > 0.0))
    fail_argument(op, "scale", "is " + number_str(*scale) + ", expected a finite number > 0");
  p.scale = static_cast<T>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(p.qk_dim)));
  const DropoutMask<T> m = dropout_mask<T>(dropout_p, true);
  p.dropout = !m.identity;
  p.threshold = m.threshold;
  p.keep_scale = m.scale;
  p.key = key;
}

// The mask's strides over [B, H, Tq, Tk], after checking that its shape
// broadcasts to `target` (the last target.size() axes of [B, H, Tq, Tk]).
template <class T>
MaskView<T> mask_strides(const char* op, const AttentionMask<T>& mask, const Shape& target) {
  MaskView<T> view;
  if (mask.empty()) return view;
  const Shape& shape = mask.is_boolean() ? mask.keep().shape() : mask.additive().shape();
  const std::string expected =
      "a shape that broadcasts to " + shape_str(target) + " (NumPy rules, against [B, H, Tq, Tk])";
  if (shape.size() > target.size()) fail_shape(op, "mask", shape, expected);
  std::ptrdiff_t strides[4] = {0, 0, 0, 0};
  std::ptrdiff_t stride = 1;
  for (std::size_t k = 1; k <= shape.size(); ++k) {  // k-th axis from the right
    const std::size_t n = shape[shape.size() - k], want = target[target.size() - k];
    if (n != want && n != 1) fail_shape(op, "mask", shape, expected);
    strides[4 - k] = n == 1 ? 0 : stride;
    stride *= static_cast<std::ptrdiff_t>(n);
  }
  view.batch = strides[0];
  view.head = strides[1];
  view.row = strides[2];
  view.col = strides[3];
  return view;
}

template <class T>
void point_mask(MaskView<T>& view, const AttentionMask<T>& mask) {
  view.keep = mask.is_boolean() ? mask.keep().data() : nullptr;
  view.additive = mask.is_additive() ? mask.additive().data() : nullptr;
}

// Where the inputs of the node live: inputs[part] is the node holding q
// (part 0), k (1) and v (2) at element offset offsets[part]. Packed: one
// node [B, T, 3C] holds all three (and its gradient is one array).
struct Sources {
  std::size_t inputs[3];
  std::size_t offsets[3];
  bool packed;
};

// out (+)= in over n elements: the write-or-accumulate rule of a gradient slot.
template <class T>
void put_gradient(GradSlot<T> slot, const xt::xarray<T>& in) {
  T* out = slot.buffer.data();
  const T* src = in.data();
  if (slot.accumulate)
    for (std::size_t e = 0; e < in.size(); ++e) out[e] += src[e];
  else
    std::copy(src, src + in.size(), out);
}

// Records the attention node (all checks done) and returns its output.
template <class T>
Var<T> record(const char* op, Tape<T>& tape, Problem<T> p, const Sources& src,
              const Shape& out_shape, const AttentionMask<T>& mask) {
  const std::vector<std::size_t> parents(src.inputs, src.inputs + (src.packed ? 1 : 3));
  bool any = false;
  for (std::size_t i : parents) any = any || tape.requires_grad(i);
  const std::size_t yi = tape.record(op, parents, any);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(out_shape);
  const std::size_t lse_size = p.batch * p.heads * p.q_len;
  T* lse = tape.requires_grad(yi)
               ? tape.template save<T>(yi, lse_size)
               : thread_scratch<T>(ScratchSlot::attention_rows, std::max<std::size_t>(lse_size, 1));
  point_mask(p.mask, mask);
  const auto input = [&](std::size_t part) {
    return tape.value(src.inputs[part]).data() + src.offsets[part];
  };
  forward(p, input(0), input(1), input(2), y.data(), lse);

  tape.set_backward(yi, [p, src, mask, yi](Tape<T>& t, const xt::xarray<T>& dy) {
    Problem<T> problem = p;
    point_mask(problem.mask, mask);
    const auto value = [&](std::size_t part) {
      return t.value(src.inputs[part]).data() + src.offsets[part];
    };
    // The kernel overwrites each gradient element once. A part written
    // straight into its slot must be the first claim of a node that no
    // other part shares (q = k self-attention gets two claims of one
    // buffer); the others go through an array of their own, then are added.
    const std::size_t parts = src.packed ? 1 : 3;
    xt::xarray<T> own[3];
    GradPointer<T> direct[3];
    T* d[3] = {nullptr, nullptr, nullptr};
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
    backward(problem, value(0), value(1), value(2), t.value(yi).data(), dy.data(),
             t.template saved<T>(yi), d[0], d[1], d[2]);
    for (std::size_t part = 0; part < parts; ++part) {
      if (d[part] == nullptr || d[part] == direct[part].data) continue;
      T* out = direct[part].data;
      const T* in = own[part].data();
      if (out != nullptr)  // claimed above: accumulate onto it
        for (std::size_t e = 0; e < own[part].size(); ++e) out[e] += in[e];
      else
        put_gradient(t.grad_slot(src.inputs[part]), own[part]);
    }
  });
  return tape.var(yi);
}

}  // namespace xtgrad::detail::attention
