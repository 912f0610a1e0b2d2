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

#include <cstddef>
#include <string>

#include <xtgrad/engine/activation.hpp>

#include "harness.hpp"

namespace xtgrad::bench {

enum class Family { relu, gelu, swiglu };
enum class Pass { forward, forward_backward };

struct FfnShape {
  std::size_t tokens;
  std::size_t d_model = 512;
  std::size_t d_hidden = 2048;
};

struct MatmulShape {
  std::size_t batch, m, k, n;
};

const char* family_name(Family family);
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

// ---- the floors (cases_floor.cpp) ----

// The GEMMs an FFN cannot avoid, through cblas_sgemm on preallocated buffers:
// 2 forward + 4 backward (3 + 6 for swiglu), nothing else.
Runner gemm_floor(Family family, Pass pass, FfnShape shape);
// The GEMMs of a batched matmul, per batch: 1 forward, 2 backward
// (accumulating, as xtgrad_matmul's).
Runner matmul_floor(Pass pass, MatmulShape shape);
// A copy of n floats (vector loads and stores): the bandwidth floor of an
// elementwise pass.
Runner copy_floor(std::size_t n);

// Sets OpenBLAS's thread count; returns OpenBLAS's description of itself.
std::string init_openblas(int threads);

// ---- LibTorch (cases_libtorch.cpp, only with XTGRAD_BENCH_LIBTORCH) ----

#ifdef XTGRAD_BENCH_LIBTORCH
// torch::set_num_threads(threads); returns the LibTorch version.
std::string init_libtorch(int threads);
Runner libtorch_ffn(Family family, Pass pass, FfnShape shape);
Runner libtorch_toy_step();
// An empty Runner when LibTorch has no such op (gelu_sigmoid).
Runner libtorch_activation(Activation activation, Pass pass, std::size_t n);
#endif

}  // namespace xtgrad::bench
