#pragma once
// float -> bfloat16 conversion (internal), the input pass of the bf16 GEMMs
// (onednn_gemm.hpp, matmul_precision.hpp).
//
// A bfloat16 is the upper 16 bits of a float (sign, 8 exponent bits, 7
// mantissa bits), held here as std::uint16_t. Rounding is IEEE 754's
// roundTiesToEven on the 16 bits dropped: add 0x7fff plus the lowest kept bit,
// then truncate, so a tie (dropped bits exactly 0x8000) rounds to an even
// kept mantissa, as Intel's VCVTNEPS2BF16, oneDNN and PyTorch's
// c10::BFloat16 round. Overflow rounds to infinity as IEEE 754 does;
// subnormals round the same way (bfloat16 has float's exponent range);
// infinities are exact; a NaN stays a NaN of the same sign, made quiet, so
// that rounding can never carry its payload into an infinity.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xtgrad::detail {

// One float, rounded to nearest, ties to even.
inline std::uint16_t to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded >> 16);
}

// The float a bfloat16 stands for (exact).
inline float from_bf16(std::uint16_t h) {
  const std::uint32_t bits = std::uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// dst[r * cols + c] = to_bf16(src[r * ld + c]) for a [rows, cols] block of
// a row-major matrix of leading dimension ld >= cols; dst is contiguous.
// One vectorized pass (the loop compiles to integer vector instructions),
// its rows split over the threads in use above k_parallel_light elements.
void to_bf16_matrix(const float* src, std::size_t ld, std::size_t rows, std::size_t cols,
                    std::uint16_t* dst);

}  // namespace xtgrad::detail
