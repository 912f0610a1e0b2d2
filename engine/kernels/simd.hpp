#pragma once
// xsimd for the engine's hand-written kernels (internal).
//
// GCC 12.1-12.2 warn about the deliberately undefined pass-through operand of
// the AVX-512 intrinsics (_mm512_undefined_*) once xsimd's math is inlined:
// GCC bug 105593, fixed in 12.3; the warning is about GCC's own header. The
// pragma only covers <immintrin.h> if xsimd is the first to include it, so
// include this header before anything that pulls in xtensor.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop
#else
#include <xsimd/xsimd.hpp>
#endif
