#include "fused_linear.hpp"

#include <algorithm>
#include <string>

#include "../check.hpp"
#include "../kernels/activation_kernels.hpp"
#include "../kernels/dropout_mask.hpp"
#include "../kernels/gemm.hpp"
#include "../kernels/parallel.hpp"
#include "../kernels/row_blocks.hpp"
#include "../kernels/scratch.hpp"
#include "activation_derivatives.hpp"
#include "activations.hpp"
#include "elementwise.hpp"
#include "gated.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "shape.hpp"

namespace xtgrad {

namespace {

using detail::block_rows;  // a block of a (and da): kernels/row_blocks.hpp
using detail::forward_block_rows;

template <class T>
detail::MatrixRef<const T> matrix(const T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}
template <class T>
detail::MatrixRef<T> matrix(T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}

// The hidden dropout of a row block: block[count] = m * block / (1 - p) in
// place, m the mask of the block's elements (counters from `first`).
template <class T>
struct BlockDropout {
  detail::DropoutMask<T> mask;
  DropoutKey key;

  void apply(T* block, std::size_t first, std::size_t count) const {
    if (mask.all_dropped) {
      std::fill(block, block + count, T(0));
      return;
    }
    // element i's word is the stream's word first_element + first + i, wherever
    // the split puts it
    detail::parallel_for(count, detail::k_parallel_heavy, [&](std::size_t b, std::size_t e) {
      const DropoutKey at{key.seed, key.step, key.first_element + first + b};
      detail::masked_scale<T, false>(at, mask.threshold, mask.scale, block + b, block + b, e - b);
    });
  }
};

// The create_graph rule of both ops (grad_rule.hpp): the backward of the
// unfused composition as differentiable ops, a = f(h) or u * f(g) (then
// dropped) recomputed as ops where dW needs it:
//   da' = dy . op(W)^T = linear(dy, W) in the other layout,  da = m / (1 - p) * da'
//   dh = da * f'(h);  du = da * f(g) = gated(da, g);  dg = (da * u) * f'(g)
//   dW = dy^T . a' (out_in) or a'^T . dy (in_out) over the N rows;  db = sum of dy's rows
// Parents: (h, W, b) or (u, g, W, b), the last being g (or h) again without a bias.
template <class T>
void fused_grad_rule(GradSink<T>& s, bool gated_op, Activation f, WeightLayout layout,
                     bool has_bias, const std::optional<HiddenDropout>& hidden) {
  const std::size_t gk = gated_op ? 1 : 0, wk = gk + 1, bk = gk + 2;
  const Var<T> dy = s.grad_output(), g = s.input(gk), w = s.input(wk);
  const auto drop = [&hidden](const Var<T>& v) {
    return hidden ? dropout(v, hidden->p, true, hidden->key) : v;
  };
  if (s.needs_grad(gk) || (gated_op && s.needs_grad(0))) {
    const WeightLayout other =
        layout == WeightLayout::out_in ? WeightLayout::in_out : WeightLayout::out_in;
    const Var<T> da = drop(linear(dy, w, std::nullopt, other));  // [..., in]
    if (gated_op && s.needs_grad(0)) s.add(0, gated(da, g, f));
    const Var<T> scaled = gated_op ? mul(da, s.input(0)) : da;
    if (s.needs_grad(gk)) s.add(gk, mul(scaled, activation_derivative(g, f, 1)));
  }
  const auto rows = static_cast<std::int64_t>(detail::leading_rows(dy.shape()));
  const auto out = static_cast<std::int64_t>(dy.shape().back());
  const auto in = static_cast<std::int64_t>(g.shape().back());
  const Var<T> dy2 = reshape(dy, {rows, out});  // [N, out]
  if (s.needs_grad(wk)) {
    const Var<T> a = drop(gated_op ? gated(s.input(0), g, f) : activation(g, f));
    const Var<T> a2 = reshape(a, {rows, in});                                      // [N, in]
    s.add(wk, layout == WeightLayout::out_in ? matmul(transpose(dy2, 0, 1), a2)    // [out, in]
                                             : matmul(transpose(a2, 0, 1), dy2));  // [in, out]
  }
  if (has_bias && s.needs_grad(bk)) s.add(bk, sum(dy2, std::vector<std::int64_t>{0}));  // [out]
}

// The two ops differ only in the input a: f(h) (u null, g = h) or u * f(g).

// What the fused node's forward and backward read: the parents' node
// indices (u absent for fused_linear_activation, b absent without a bias)
// and the sizes. An input that is also the weight or the bias shares its
// gradient buffer with it: then backward runs as one block (one_block), each
// gradient complete before the next is added onto it.
template <class T>
struct FusedNode {
  std::optional<std::size_t> ui;
  std::size_t gi, wi;
  std::optional<std::size_t> bi;
  std::size_t n, in, out;
  bool out_in;
  Activation f;
  bool one_block;
  std::optional<BlockDropout<T>> drop;

  std::size_t w_rows() const { return out_in ? out : in; }
  std::size_t w_cols() const { return out_in ? in : out; }
};

// Row blocks per thread before the blocks of a fused op are shared out
// whole, a block a thread, instead of every pass of a block being split over
// the threads: then a thread's GEMM reads the activation it has just written
// from its own cache, and no thread waits for the others between a block's
// activation and its GEMM.
constexpr std::size_t k_fused_blocks_per_thread = 2;

// How many of `blocks` row blocks run at once, a block a thread: the threads
// in use when a block's GEMM ([block, k] . [k, n]) runs on xtgrad's threads
// (gemm_on_pool_threads: then it computes the same bits inside a pool job as
// on its own), else 1.
template <class T>
std::size_t blocks_at_once(std::size_t blocks, std::size_t block, std::size_t n, std::size_t k) {
  return detail::gemm_on_pool_threads<T>(block, n, k)
             ? detail::parallel_chunks(blocks, k_fused_blocks_per_thread)
             : 1;
}

// block(index, slot) for the `count` blocks from `first`, at once: slot is
// the block's place in the round (its part of the round's buffers, which the
// calling thread owns: a worker never allocates, since an exception there
// would end the program).
template <class Block>
void run_round(std::size_t first, std::size_t count, const Block& block) {
  detail::parallel_for_rows(count, 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t slot = begin; slot < end; ++slot) block(first + slot, slot);
  });
}

// y[n, out] = b + act . op(W), act = f(h) or u * f(g), in blocks of rows.
template <class T>
void fused_forward(const char* op, const Tape<T>& tape, const FusedNode<T>& nd, T* y) {
  const std::size_t in = nd.in, out = nd.out, n = nd.n;
  const T* uv = nd.ui ? tape.value(*nd.ui).data() : nullptr;
  const T* gv = tape.value(nd.gi).data();
  const T* bv = nd.bi ? tape.value(*nd.bi).data() : nullptr;
  const detail::WeightTag tag = detail::weight_tag(tape.node_param(nd.wi));  // read packed
  // The gated forward keeps the backward's shorter blocks: its products over
  // the floor were 1.01x with them, 1.02-1.05x with the longer ones (Zen 5,
  // N 4096, H 2048), where f(h) gained 1.09-1.11x -> 1.03-1.04x.
  const std::size_t block =
      nd.ui ? block_rows<T>(n, in, detail::k_backward_buffers) : forward_block_rows<T>(n, in);
  auto w = matrix(tape.value(nd.wi).data(), nd.w_rows(), nd.w_cols());
  if (detail::gemm_runs_bf16<T>(block, out, in))  // read by every block: rounded once here
    w = detail::with_bf16_rounding(w, detail::ScratchSlot::fused_weight_bf16);
  const std::size_t blocks = (n + block - 1) / block;
  const std::size_t round = blocks_at_once<T>(blocks, block, out, in);
  T* const a_round =
      detail::thread_scratch<T>(detail::ScratchSlot::fused_activation, round * block * in);
  const auto forward_block = [&](std::size_t index, std::size_t slot) {
    const std::size_t r0 = index * block, rows = std::min(block, n - r0);
    T* const a = a_round + slot * block * in;
    // a[rows, in] = f(h) or u * f(g), rows [r0, r0 + rows)
    if (uv)
      detail::gated_forward(nd.f, uv + r0 * in, gv + r0 * in, a, rows * in);
    else
      detail::activation_forward(nd.f, gv + r0 * in, a, rows * in);
    // a[rows, in] = m * a / (1 - p)   (hidden dropout)
    if (nd.drop) nd.drop->apply(a, r0 * in, rows * in);
    // y[rows, out] = a[rows, in] . op(W) + b   (the bias fused into the GEMM)
    const auto a_rows = matrix(static_cast<const T*>(a), rows, in);
    const auto y_rows = matrix(y + r0 * out, rows, out);
    if (bv)
      detail::gemm_bias<T>(op, a_rows, false, w, nd.out_in, y_rows, bv, tag);
    else
      detail::gemm<T>(op, a_rows, false, w, nd.out_in, y_rows, false, tag);
  };
  for (std::size_t first = 0; first < blocks; first += round)
    run_round(first, std::min(round, blocks - first), forward_block);
}

// db[out] (+)= sum_r dy[r, out], when the bias wants a gradient.
template <class T>
void finish_bias(Tape<T>& t, const FusedNode<T>& nd, const xt::xarray<T>& dy) {
  if (nd.bi && t.requires_grad(*nd.bi)) {
    GradSlot<T> db = t.grad_slot(*nd.bi);
    detail::sum_rows(dy.data(), nd.n, nd.out, db.buffer.data(), db.accumulate);
  }
}

// What the blocks of one fused backward share: dy, the operands, the
// gradients' buffers (null: not wanted) and the round's buffers, a and da
// of each block of a round one block after the other.
template <class T>
struct FusedBackward {
  const char* op;
  const FusedNode<T>& nd;
  const T* dy;
  const T *uv, *gv;  // u (or null) and g
  detail::MatrixRef<const T> w;
  detail::WeightTag tag;
  T *du, *dg, *dw;
  bool du_accumulate, dg_accumulate, dw_accumulate;
  std::size_t block;
  T *a_round, *da_round;

  T* slot_of(T* round, std::size_t slot) const {
    return round ? round + slot * block * nd.in : nullptr;
  }

  // du, dg (and a, into its slot) of block `index`.
  void input_side(std::size_t index, std::size_t slot) const {
    const std::size_t in = nd.in, r0 = index * block, rows = std::min(block, nd.n - r0);
    const std::size_t offset = r0 * in, count = rows * in;
    T* const a = slot_of(a_round, slot);
    T* const da = slot_of(da_round, slot);
    // da[rows,in] = dy[rows,out] . W[out,in] (out_in), or dy[rows,out] . W^T[out,in] (in_out)
    if (da)
      detail::gemm<T>(op, matrix(dy + r0 * nd.out, rows, nd.out), false, w, !nd.out_in,
                      matrix(da, rows, in), false, tag);
    // da[rows,in] = m * da / (1 - p)   (hidden dropout: the gradient of a before the mask)
    if (da && nd.drop) nd.drop->apply(da, offset, count);
    // One pass: a[rows,in] = f(h) or u * f(g) (when dW is wanted), and
    // dh (+)= da * f'(h), or du (+)= da * f(g) and dg (+)= da * u * f'(g)
    if (uv)
      detail::gated_value_and_backward(nd.f, uv + offset, gv + offset, da,
                                       du ? du + offset : nullptr, du_accumulate,
                                       dg ? dg + offset : nullptr, dg_accumulate, a, count);
    else if (dg)
      detail::activation_value_and_backward(nd.f, gv + offset, da, dg + offset, dg_accumulate, a,
                                            count);
    else
      detail::activation_forward(nd.f, gv + offset, a, count);
    // a[rows,in] = m * a / (1 - p), the dropped hidden that dW is made of
    if (a && nd.drop) nd.drop->apply(a, offset, count);
  }

  // dW (+)= the shares of the `count` blocks from `first`, in row order.
  void add_weight_gradient(std::size_t first, std::size_t count) {
    const std::size_t in = nd.in, out = nd.out;
    for (std::size_t slot = 0; slot < count; ++slot) {
      const std::size_t r0 = (first + slot) * block, rows = std::min(block, nd.n - r0);
      const auto dy_rows = matrix(dy + r0 * out, rows, out);
      const auto a_rows = matrix(static_cast<const T*>(slot_of(a_round, slot)), rows, in);
      if (nd.out_in)  // dW[out,in] (+)= dy^T[out,rows] . a[rows,in]
        detail::gemm<T>(op, dy_rows, true, a_rows, false, matrix(dw, out, in), dw_accumulate);
      else  // dW[in,out] (+)= a^T[in,rows] . dy[rows,out]
        detail::gemm<T>(op, a_rows, true, dy_rows, false, matrix(dw, in, out), dw_accumulate);
      dw_accumulate = true;  // the next blocks add their rows' share
    }
  }
};

// du, dg, dW and db from dy, block by block: da = dy . op(W)^T, then the
// activation's backward, then dW from the recomputed activation. The first
// two steps of a round of blocks run at once, a block a thread (as in
// fused_forward); dW then adds the round's blocks in row order, so its sums
// run in the same order whatever the round's size.
template <class T>
void fused_backward(const char* op, Tape<T>& t, const FusedNode<T>& nd, const xt::xarray<T>& dy) {
  const std::size_t in = nd.in, n = nd.n;
  // Slots in parent order (u, g, weight, bias), as the unfused ops would claim them.
  const GradPointer<T> du_slot = nd.ui ? t.grad_pointer(*nd.ui) : GradPointer<T>{};
  const GradPointer<T> dg_slot = t.grad_pointer(nd.gi);
  const GradPointer<T> dw_slot = t.grad_pointer(nd.wi);
  // no rows: dW is an empty sum
  if (dw_slot.data && n == 0 && !dw_slot.accumulate)
    std::fill(dw_slot.data, dw_slot.data + t.value(nd.wi).size(), T(0));
  const bool want_input = du_slot.data || dg_slot.data;
  if (n == 0 || !(want_input || dw_slot.data)) return finish_bias(t, nd, dy);
  const std::size_t block = nd.one_block ? n : block_rows<T>(n, in, detail::k_backward_buffers);
  const std::size_t blocks = (n + block - 1) / block;
  const std::size_t round = blocks_at_once<T>(blocks, block, in, nd.out);
  // a's and da's round buffers one after the other in one slot, the scratch
  // that the forward's (up to twice as long) blocks of a took
  const bool want_a = dw_slot.data != nullptr;
  const std::size_t round_size = round * block * in;
  T* const buffers = detail::thread_scratch<T>(detail::ScratchSlot::fused_activation,
                                               (std::size_t(want_a) + want_input) * round_size);
  // W is read only by the blocks' da products: at bf16 rounded once here for all of them
  auto w = matrix(t.value(nd.wi).data(), nd.w_rows(), nd.w_cols());
  if (want_input && detail::gemm_runs_bf16<T>(block, in, nd.out))
    w = detail::with_bf16_rounding(w, detail::ScratchSlot::fused_weight_bf16);
  FusedBackward<T> b{op,
                     nd,
                     dy.data(),
                     nd.ui ? t.value(*nd.ui).data() : nullptr,
                     t.value(nd.gi).data(),
                     w,
                     detail::weight_tag(t.node_param(nd.wi)),  // read packed
                     du_slot.data,
                     dg_slot.data,
                     dw_slot.data,
                     du_slot.accumulate,
                     dg_slot.accumulate,
                     dw_slot.accumulate,
                     block,
                     want_a ? buffers : nullptr,
                     want_input ? buffers + (want_a ? round_size : 0) : nullptr};
  for (std::size_t first = 0; first < blocks; first += round) {
    const std::size_t count = std::min(round, blocks - first);
    run_round(first, count,
              [&b](std::size_t index, std::size_t slot) { b.input_side(index, slot); });
    if (b.dw) b.add_weight_gradient(first, count);
  }
  finish_bias(t, nd, dy);
}

// f and f' are the formulas of kernels/activation_formulas.hpp (one struct per
// activation, value() and slope() side by side); the kernels called below
// apply them a vector at a time.
// Shapes and tape were checked by the caller (dims from check_linear_shapes).
template <class T>
Var<T> record_fused(const char* op, const detail::LinearDims& dims, const Var<T>* u,
                    const Var<T>& g, Activation f, const Var<T>& weight,
                    const std::optional<Var<T>>& bias, WeightLayout layout,
                    const std::optional<HiddenDropout>& dropout) {
  Tape<T>& tape = g.tape();
  const std::optional<std::size_t> ui = u ? std::optional(u->index()) : std::nullopt;
  const std::optional<std::size_t> bi = bias ? std::optional(bias->index()) : std::nullopt;
  const std::size_t gi = g.index(), wi = weight.index();
  FusedNode<T> nd{ui,        gi,      wi,          bi,
                  dims.rows, dims.in, dims.out,    layout == WeightLayout::out_in,
                  f,         false,   std::nullopt};
  nd.one_block = gi == wi || (bi && gi == *bi) || (ui && (*ui == wi || (bi && *ui == *bi)));
  // p == 0 is no dropout: then the op is exactly the one without it.
  if (dropout && dropout->p > 0.0)
    nd.drop = BlockDropout<T>{detail::dropout_mask<T>(dropout->p, true), dropout->key};
  const bool needs_grad = (ui && tape.requires_grad(*ui)) || tape.requires_grad(gi) ||
                          tape.requires_grad(wi) || (bi && tape.requires_grad(*bi));
  const std::size_t yi = ui ? tape.record(op, {*ui, gi, wi, bi.value_or(gi)}, needs_grad)
                            : tape.record(op, {gi, wi, bi.value_or(gi)}, needs_grad);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(dims.y_shape);
  fused_forward(op, tape, nd, y.data());

  tape.set_backward(
      yi, [op, nd](Tape<T>& t, const xt::xarray<T>& dy) { fused_backward(op, t, nd, dy); });
  tape.set_grad_rule(yi, [gated_op = ui.has_value(), f, layout, has_bias = bi.has_value(),
                          hidden = nd.drop ? dropout : std::nullopt](GradSink<T>& s) {
    fused_grad_rule(s, gated_op, f, layout, has_bias, hidden);
  });
  return tape.var(yi);
}

// The checks both ops share: one tape, a valid f, x (u) [..., in] against the
// weight and bias, and for gated_linear g with the shape of u.
template <class T>
detail::LinearDims check_fused(const char* op, const Var<T>* u, const Var<T>& g, const char* g_name,
                               Activation f, const Var<T>& weight,
                               const std::optional<Var<T>>& bias, WeightLayout layout) {
  detail::common_tape<T>(
      op, {{"u", u}, {g_name, &g}, {"weight", &weight}, {"bias", bias ? &*bias : nullptr}});
  detail::activation_name(f, op, "f");  // validates f
  const Var<T>& first = u ? *u : g;
  const Shape bias_shape = bias ? bias->shape() : Shape{};
  const detail::LinearDims dims = detail::check_linear_shapes(
      op, u ? "u" : g_name, first.shape(), weight.shape(), bias ? &bias_shape : nullptr, layout);
  detail::Check(op).shape(!u || g.shape() == first.shape(), g_name, g.shape(), first.shape(),
                          " (the shape of 'u')");
  return dims;
}

}  // namespace

void detail::check_hidden_dropout(const char* op, const std::optional<HiddenDropout>& dropout) {
  if (dropout)
    detail::Check(op).argument(dropout->p >= 0.0 && dropout->p <= 1.0, "dropout.p", "is ",
                               dropout->p, ", expected a probability in [0, 1]");
}

namespace {

constexpr const char* k_activation_linear = "activation_linear";
constexpr const char* k_gated_linear = "gated_linear";

}  // namespace

template <class T>
Var<T> activation_linear(const Var<T>& h, Activation f, const Var<T>& weight,
                         const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout,
                         const std::optional<HiddenDropout>& dropout) {
  const detail::LinearDims dims =
      check_fused<T>(k_activation_linear, nullptr, h, "h", f, weight, bias, layout);
  detail::check_hidden_dropout(k_activation_linear, dropout);
  return record_fused<T>(k_activation_linear, dims, nullptr, h, f, weight, bias, layout, dropout);
}

template <class T>
Var<T> gated_linear(const Var<T>& u, const Var<T>& g, Activation f, const Var<T>& weight,
                    const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout,
                    const std::optional<HiddenDropout>& dropout) {
  const detail::LinearDims dims =
      check_fused<T>(k_gated_linear, &u, g, "g", f, weight, bias, layout);
  detail::check_hidden_dropout(k_gated_linear, dropout);
  return record_fused<T>(k_gated_linear, dims, &u, g, f, weight, bias, layout, dropout);
}

template <class T>
Var<T> detail::record_activation_linear(const LinearDims& dims, const Var<T>& h, Activation f,
                                        const Var<T>& weight,
                                        const std::optional<Var<NoDeduce<T>>>& bias,
                                        WeightLayout layout,
                                        const std::optional<HiddenDropout>& dropout) {
  return record_fused<T>(k_activation_linear, dims, nullptr, h, f, weight, bias, layout, dropout);
}

template <class T>
Var<T> detail::record_gated_linear(const LinearDims& dims, const Var<T>& u, const Var<T>& g,
                                   Activation f, const Var<T>& weight,
                                   const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout,
                                   const std::optional<HiddenDropout>& dropout) {
  return record_fused<T>(k_gated_linear, dims, &u, g, f, weight, bias, layout, dropout);
}

#define XTGRAD_INSTANTIATE_FUSED_LINEAR(T)                                                       \
  template Var<T> activation_linear(const Var<T>&, Activation, const Var<T>&,                    \
                                    const std::optional<Var<T>>&, WeightLayout,                  \
                                    const std::optional<HiddenDropout>&);                        \
  template Var<T> gated_linear(const Var<T>&, const Var<T>&, Activation, const Var<T>&,          \
                               const std::optional<Var<T>>&, WeightLayout,                       \
                               const std::optional<HiddenDropout>&);                             \
  template Var<T> detail::record_activation_linear(                                              \
      const LinearDims&, const Var<T>&, Activation, const Var<T>&, const std::optional<Var<T>>&, \
      WeightLayout, const std::optional<HiddenDropout>&);                                        \
  template Var<T> detail::record_gated_linear(                                                   \
      const LinearDims&, const Var<T>&, const Var<T>&, Activation, const Var<T>&,                \
      const std::optional<Var<T>>&, WeightLayout, const std::optional<HiddenDropout>&);
XTGRAD_INSTANTIATE_FUSED_LINEAR(float)
XTGRAD_INSTANTIATE_FUSED_LINEAR(double)
#undef XTGRAD_INSTANTIATE_FUSED_LINEAR

}  // namespace xtgrad
