#pragma once
// How xtgrad's float GEMMs compute, as torch.set_float32_matmul_precision.
//
//   highest  float inputs, float accumulation (the default).
//   bf16     each operand rounded to bfloat16 (round to nearest, ties to
//            even), products accumulated in float, the result float: about
//            three significant decimal digits per input, at up to twice the
//            multiply-add rate on CPUs with bf16 instructions.
//
// Tensors, Parameters, gradients and optimizer state stay float: only the
// inputs of a GEMM are rounded, inside the GEMM. double GEMMs are never
// affected. bf16 runs on oneDNN's bf16 matmul (AMX where the CPU has it,
// AVX512-BF16 otherwise), whichever GemmBackend runs the float GEMMs at the
// highest precision. Products that never reach a GEMM library stay float at
// either precision: the small ones (at most 16384 multiply-adds) and those of
// one to eight rows (the weight-streaming serving path), where converting the
// operands would cost more than the product gains (gemm_backend.hpp,
// docs/performance.md), as torch keeps float the shapes it cannot run in
// reduced precision. The fused attention (ops/attention.hpp) follows the
// precision with its own bf16 kernel where the build targets AVX512-BF16.
//
// The precision is read once per GEMM (all the parts of a GEMM split over the
// threads use the same one), so a change takes effect at the next op. Set it
// between steps, not while another thread is inside an op.

#include <string>

namespace xtgrad {

enum class MatmulPrecision { highest, bf16 };

// True when this build and CPU run `precision` natively: highest always;
// bf16 when xtgrad is built with oneDNN and oneDNN has a bf16 matmul kernel
// for this CPU (AMX or AVX512-BF16; it would otherwise emulate bf16 at below
// float speed, or has no kernel). False for a value outside the enum.
bool matmul_precision_supported(MatmulPrecision precision);

// Sets the precision of float GEMMs for every thread of the process.
// std::invalid_argument for a value outside the enum, or for bf16 when
// matmul_precision_supported(bf16) is false (the message says why).
void set_matmul_precision(MatmulPrecision precision);

// The precision in use (highest until set).
MatmulPrecision get_matmul_precision();

// "highest" or "bf16".
std::string matmul_precision_name(MatmulPrecision precision);

}  // namespace xtgrad
