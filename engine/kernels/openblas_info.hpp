#pragma once
// What OpenBLAS says of itself, and whether its kernel set fits the CPU.
//
// OpenBLAS (DYNAMIC_ARCH builds, as Debian's) picks one kernel set at load
// time from a table of CPU models. 0.3.21's table predates Sapphire and
// Emerald Rapids (they get the SSE3 "Prescott" kernels) and Zen 5 ("Haswell",
// AVX2 only, on a CPU with AVX-512): GEMMs then run several times below the
// CPU's speed. OPENBLAS_CORETYPE overrides the choice.

#include <string>

namespace xtgrad::detail {

// The widest vector instruction set of a CPU or of a kernel set.
enum class VectorIsa { unknown, sse, avx, avx2, avx512 };

const char* isa_name(VectorIsa isa);

// This CPU's (__builtin_cpu_supports).
VectorIsa cpu_vector_isa();

// The instruction set an OpenBLAS core name's kernels use ("Haswell": AVX2);
// unknown for a name not in the table.
VectorIsa openblas_core_isa(const std::string& core);

// The warning for float GEMMs on `core` on a CPU with `cpu`, or "" when the
// kernel set uses the CPU's widest instruction set (or either is unknown).
std::string stale_kernel_warning(const std::string& core, VectorIsa cpu);

// openblas_get_corename() ("Haswell"), "" when the BLAS is not OpenBLAS.
std::string openblas_core();

// "OpenBLAS 0.3.21 (Haswell)".
std::string openblas_info();

// Prints stale_kernel_warning(openblas_core(), cpu_vector_isa()) on stderr,
// once per process, if it is not empty.
void warn_if_stale_openblas();

}  // namespace xtgrad::detail
