#include "openblas_info.hpp"

#include <iostream>
#include <mutex>
#include <sstream>
#include <utility>

// OpenBLAS's own API, weak: any CBLAS links, and then these are null.
extern "C" char* openblas_get_corename(void) __attribute__((weak));
extern "C" char* openblas_get_config(void) __attribute__((weak));

namespace xtgrad::detail {

const char* isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse:
      return "SSE";
    case VectorIsa::avx:
      return "AVX";
    case VectorIsa::avx2:
      return "AVX2";
    case VectorIsa::avx512:
      return "AVX-512";
    case VectorIsa::unknown:
      break;
  }
  return "unknown";
}

VectorIsa cpu_vector_isa() {
  __builtin_cpu_init();
  // OpenBLAS's AVX-512 kernels (SkylakeX) need F, BW, DQ and VL.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return VectorIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::avx2;
  if (__builtin_cpu_supports("avx")) return VectorIsa::avx;
  if (__builtin_cpu_supports("sse3")) return VectorIsa::sse;
  return VectorIsa::unknown;
}

VectorIsa openblas_core_isa(const std::string& core) {
  // OpenBLAS 0.3's x86-64 DYNAMIC_ARCH core names (its gotoblas_corename()).
  static const std::pair<const char*, VectorIsa> table[] = {{"Katmai", VectorIsa::sse},
                                                            {"Coppermine", VectorIsa::sse},
                                                            {"Northwood", VectorIsa::sse},
                                                            {"Prescott", VectorIsa::sse},
                                                            {"Banias", VectorIsa::sse},
                                                            {"Atom", VectorIsa::sse},
                                                            {"Core2", VectorIsa::sse},
                                                            {"Penryn", VectorIsa::sse},
                                                            {"Dunnington", VectorIsa::sse},
                                                            {"Nehalem", VectorIsa::sse},
                                                            {"Athlon", VectorIsa::sse},
                                                            {"Opteron", VectorIsa::sse},
                                                            {"Opteron_SSE3", VectorIsa::sse},
                                                            {"Barcelona", VectorIsa::sse},
                                                            {"Nano", VectorIsa::sse},
                                                            {"Sandybridge", VectorIsa::avx},
                                                            {"Bulldozer", VectorIsa::avx},
                                                            {"Piledriver", VectorIsa::avx},
                                                            {"Steamroller", VectorIsa::avx},
                                                            {"Excavator", VectorIsa::avx},
                                                            {"Haswell", VectorIsa::avx2},
                                                            {"Zen", VectorIsa::avx2},
                                                            {"SkylakeX", VectorIsa::avx512},
                                                            {"Cooperlake", VectorIsa::avx512},
                                                            {"SapphireRapids", VectorIsa::avx512}};
  for (const auto& [name, isa] : table)
    if (core == name) return isa;
  return VectorIsa::unknown;
}

std::string stale_kernel_warning(const std::string& core, VectorIsa cpu) {
  const VectorIsa kernels = openblas_core_isa(core);
  if (kernels == VectorIsa::unknown || cpu == VectorIsa::unknown || kernels >= cpu) return "";
  const char* fix = cpu == VectorIsa::avx512 ? "SkylakeX"
                    : cpu == VectorIsa::avx2 ? "Haswell"
                                             : "Sandybridge";
  std::ostringstream out;
  out << "xtgrad: float GEMMs run on OpenBLAS's \"" << core << "\" kernels (" << isa_name(kernels)
      << ") on a CPU with " << isa_name(cpu)
      << ": this OpenBLAS does not know this CPU, and its GEMMs run several times below the "
         "CPU's speed. Set OPENBLAS_CORETYPE="
      << fix << " in the environment, or build xtgrad with oneDNN (libdnnl-dev, XTGRAD_ONEDNN).";
  return out.str();
}

std::string openblas_core() {
  return openblas_get_corename ? openblas_get_corename() : "";
}

std::string openblas_info() {
  if (!openblas_get_config) return "CBLAS (not OpenBLAS)";
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  std::istringstream config(openblas_get_config());
  std::string name, version;
  config >> name >> version;
  return name + " " + version + " (" + openblas_core() + ")";
}

void warn_if_stale_openblas() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string warning = stale_kernel_warning(openblas_core(), cpu_vector_isa());
    if (!warning.empty()) std::cerr << warning << "\n";
  });
}

}  // namespace xtgrad::detail
