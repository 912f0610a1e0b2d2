#pragma once
// Which library runs xtgrad's large float GEMMs, and a way to choose it.
//
// Built with oneDNN (CMake option XTGRAD_ONEDNN, on when libdnnl-dev is
// found), float products go through oneDNN's matmul primitive, which picks
// its kernels from the CPU's feature bits; otherwise, and for double always,
// through OpenBLAS. OpenBLAS 0.3.21 (Debian 12) picks its kernel set from a
// table of CPU models that predates recent CPUs: Sapphire and Emerald Rapids
// get its SSE3 "Prescott" kernels, Zen 5 its AVX2 "Haswell" ones (see
// docs/performance.md). When float GEMMs run on such a stale kernel set,
// the first one prints a warning on stderr naming the fix.
//
// Small products and products of a few rows never reach either library
// (gemm.hpp's own loops are faster there), whatever the choice.
//
// The two libraries round differently in the last bits; either gives the
// same bits at a given thread count from run to run.
//
// At MatmulPrecision::bf16 (matmul_precision.hpp) the large float GEMMs run
// on oneDNN's bf16 matmul whichever backend is chosen here (OpenBLAS has no
// bf16 GEMM through xtgrad); the backend applies again at highest.

#include <string>

namespace xtgrad {

enum class GemmBackend { onednn, openblas };

// True when this build can run GEMMs on `backend` (OpenBLAS: always).
bool gemm_backend_available(GemmBackend backend);

// Sets the float backend for every thread of the process (default: oneDNN
// when available). std::invalid_argument when `backend` is not available.
// Call it between steps, not while another thread is inside an op.
void set_gemm_backend(GemmBackend backend);

// The float backend in use.
GemmBackend get_gemm_backend();

// The library, its version and the kernel set that runs large float GEMMs
// now, for benchmarks and demos to print: "oneDNN 2.6.3 (brg:avx512_core)",
// "OpenBLAS 0.3.21 (Haswell)", and at MatmulPrecision::bf16 oneDNN's bf16
// kernel, "oneDNN 2.6.3 (brg:avx512_core_bf16)".
std::string gemm_backend_info();

// One line for benchmarks, demos and logs to print at start: the CPU model
// (/proc/cpuinfo's, "unknown CPU" elsewhere), the thread count
// (get_num_threads), gemm_backend_info() and the matmul precision
// (matmul_precision.hpp): "AMD EPYC 9R45 (1 thread): float GEMMs on oneDNN
// 2.6.3 (brg:avx512_core_bf16), matmul precision bf16".
std::string compute_info();

}  // namespace xtgrad
