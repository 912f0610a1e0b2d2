#pragma once
// What bench_xtgrad measures, each as a factory that allocates and initializes
// everything (model, inputs, output buffers) and returns a Runner doing one
// iteration. Nothing is allocated inside a Runner that the measured library
// would not allocate itself in a training loop.
//
// FFN families, float32, d_model D = 512, d_hidden H = 2048:
//   relu    PositionwiseFFN:  relu(x W1^T + b1) W2^T + b2
//   gelu    FeedForward with the exact (erf) GELU in between
//   swiglu  GatedFFN, silu gate, no biases: (x Wu * silu(x Wg)) Wd
// Pass::forward records the forward on a tape (autograd on, as in training);
// Pass::forward_backward also runs the backward to x and every parameter,
// from a fixed upstream gradient dy [N, D], after zero_grad.
//
// Batched matmul, float32: y [B, M, N] = a [B, M, K] . b [B, K, N], and for
// Pass::forward_backward da = dy . b^T and db = a^T . dy per batch.
//
// Row-wise ops, float32, x [N, D] (N = 8192, D = 1024: 32 MiB): layer_norm
// (weight and bias), rms_norm (weight), softmax(-1), log_softmax(-1) and
// cross_entropy (class targets, mean). Pass::forward records the op with
// autograd on; Pass::forward_backward also runs the backward to x (and weight,
// bias) from a fixed upstream gradient dy [N, D] (cross_entropy: from its
// scalar loss). The copy floor of each: rowwise_floor. xtgrad's backward
// from an explicit dy includes Tape::backward(y, dy) keeping dy as y's
// gradient, a copy of dy that the floor does not count (LibTorch's does not
// make it); in a network the next op's backward writes that gradient itself.

#include <cstddef>
#include <string>

#include <xtgrad/engine/activation.hpp>

#include "harness.hpp"

namespace xtgrad::bench {

enum class Family { relu, gelu, swiglu };
// Pass::inference: Module::infer (xtgrad), the forward under NoGradGuard (LibTorch).
enum class Pass { forward, forward_backward, inference };

struct FfnShape {
  std::size_t tokens;
  std::size_t d_model = 512;
  std::size_t d_hidden = 2048;
};

struct MatmulShape {
  std::size_t batch, m, k, n;
};

// The classifiers of train_fashion (make_model of zoo/fashion/models.hpp), images
// [B, 784] to logits [B, 10]: one training step at batch 128 on fixed random
// data shaped like the standardized images (normal pixels, labels 0..9):
// forward with dropout on, cross_entropy (label_smoothing 0.1, mean),
// backward, AdamW (lr 1e-3, weight_decay 1e-2) step, zero_grad.
enum class FashionModel { mlp, mixer };
constexpr std::size_t k_fashion_batch = 128;
constexpr std::size_t k_fashion_steps_per_epoch = 469;  // ceil(60000 / 128), last batch kept

enum class RowOp { layer_norm, rms_norm, softmax, log_softmax, cross_entropy };

struct RowShape {
  std::size_t rows = 8192;
  std::size_t cols = 1024;
};

const char* family_name(Family family);
const char* row_op_name(RowOp op);
const char* fashion_model_name(FashionModel model);
const char* pass_name(Pass pass);

// ---- xtgrad (cases_xtgrad.cpp) ----

Runner xtgrad_ffn(Family family, Pass pass, FfnShape shape);
// One full step of the toy model of demos/train_toy (N = 128 tokens, D = 2,
// H = 16, ReLU): forward, mse, backward, Adam step, zero_grad, tape clear.
Runner xtgrad_toy_step();
// Pass::forward: the activation op on a recording tape (cleared each call);
// Pass::forward_backward stands for the backward kernel alone, dx = dy f'(x).
Runner xtgrad_activation(Activation activation, Pass pass, std::size_t n);
// matmul of two Parameters (recorded without a copy) on a recording tape,
// then backward from a fixed dy; the gradients accumulate from step to step
// (no zero_grad), so that the backward GEMMs are the floor's, beta = 1.
Runner xtgrad_matmul(Pass pass, MatmulShape shape);
// A row-wise op on a recording tape; x (and weight, bias) are Parameters
// (recorded without a copy) whose gradients are written afresh each step
// (has_grad reset, as zero_grad would leave them, without its fill pass).
Runner xtgrad_rowwise(RowOp op, Pass pass, RowShape shape);
// One training step of a fashion model (see FashionModel), one tape reused.
Runner xtgrad_fashion_step(FashionModel model);
// Profiler::table of `steps` such steps after `warmup` untimed ones (each a
// ProfileStep; the optimizer's step and zero_grad as regions).
std::string xtgrad_fashion_profile(FashionModel model, int warmup, int steps);

// ---- the floors (cases_floor.cpp) ----

// The GEMMs an FFN cannot avoid, on preallocated buffers: 2 forward + 4
// backward (3 + 6 for swiglu), nothing else, each through the faster of
// OpenBLAS's cblas_sgemm and oneDNN's matmul for its shape (timed when the
// floor is made, at the thread count in force).
Runner gemm_floor(Family family, Pass pass, FfnShape shape);
// The GEMMs of a batched matmul, per batch: 1 forward, 2 backward
// (accumulating, as xtgrad_matmul's), each by the faster library likewise.
Runner matmul_floor(Pass pass, MatmulShape shape);
// A copy of n floats (vector loads and stores): the bandwidth floor of an
// elementwise pass.
Runner copy_floor(std::size_t n);
// The copy floor of a row-wise op: streaming passes over the [N, D] arrays
// the op must read and write at least (per-row statistics and [D] weights are
// negligible), on buffers x, y, dy, dx that the passes share as the op's do:
//   forward:  y = x (read x, write y); cross_entropy: read x (a sum)
//   backward: dx = dy + x (norms) or dy + y (softmax, log_softmax): read two,
//             write one; cross_entropy: dx = x, read one, write one.
// An output is a copy of the first input; a second input is loaded and added
// in, which costs nothing beside its loads. forward_backward runs both.
Runner rowwise_floor(RowOp op, Pass pass, RowShape shape);

// The roofline of N = shape.tokens rows through an FFN: one read of its
// weights (2 matrices [H, D], 3 for swiglu; at D = 512, H = 2048: 8 MiB or
// 12 MiB, larger than L2, so read from L3 or memory) with the N multiply-adds
// per weight that the product needs, in registers, split over xtgrad's
// threads. Its time is the larger of the weight read at the machine's
// streaming bandwidth (N = 1, 2) and the multiply-adds at its FMA peak (N = 8
// on a 2-core AVX-512 machine): no kernel that reads the weights beats it.
// N from 1 to k_roofline_rows (std::invalid_argument otherwise).
inline constexpr std::size_t k_roofline_rows = 8;
Runner roofline_floor(Family family, FfnShape shape);

// Sets OpenBLAS's thread count; returns OpenBLAS's description of itself.
std::string init_openblas(int threads);
// The kernels OpenBLAS chose for this CPU ("Haswell", "SkylakeX", ...).
std::string openblas_core();

// ---- LibTorch (cases_libtorch.cpp, only with XTGRAD_BENCH_LIBTORCH) ----

#ifdef XTGRAD_BENCH_LIBTORCH
// torch::set_num_threads(threads); returns the LibTorch version.
std::string init_libtorch(int threads);
Runner libtorch_ffn(Family family, Pass pass, FfnShape shape);
// torch::set_num_threads(threads), between rows of different thread counts.
void libtorch_set_threads(int threads);
Runner libtorch_toy_step();
// An empty Runner when LibTorch has no such op (gelu_sigmoid).
Runner libtorch_activation(Activation activation, Pass pass, std::size_t n);
// The same op through LibTorch's autograd: torch::layer_norm, torch::softmax,
// torch::log_softmax, torch::cross_entropy; rms_norm (no op in LibTorch 1.13)
// as LLaMA's RMSNorm module writes it, x * rsqrt(mean(x^2, -1) + eps) * w.
Runner libtorch_rowwise(RowOp op, Pass pass, RowShape shape);
// The same training step through torch::nn modules of the same architecture
// (PyTorch's default initialization, as make_model's), torch::optim::AdamW and
// torch::nn::functional::cross_entropy; as demos/train_fashion/reference_torch.py.
Runner libtorch_fashion_step(FashionModel model);
#endif

}  // namespace xtgrad::bench
