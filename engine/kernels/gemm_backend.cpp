#include "../gemm_backend.hpp"
#include "../matmul_precision.hpp"
#include "../threads.hpp"

#include "../errors.hpp"
#include "onednn_gemm.hpp"
#include "openblas_info.hpp"

#include <atomic>
#include <fstream>

namespace xtgrad {

namespace {

// /proc/cpuinfo's first "model name", "unknown CPU" when there is none.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  return "unknown CPU";
}

std::atomic<GemmBackend>& backend() {
  static std::atomic<GemmBackend> current{detail::onednn_compiled() ? GemmBackend::onednn
                                                                    : GemmBackend::openblas};
  return current;
}

}  // namespace

bool gemm_backend_available(GemmBackend backend) {
  return backend == GemmBackend::openblas || detail::onednn_compiled();
}

void set_gemm_backend(GemmBackend b) {
  const detail::Check check("set_gemm_backend");
  check.argument(gemm_backend_available(b), "backend",
                 "is oneDNN, which this build does not include (configure with XTGRAD_ONEDNN=ON)");
  backend().store(b, std::memory_order_relaxed);
}

GemmBackend get_gemm_backend() {
  return backend().load(std::memory_order_relaxed);
}

std::string gemm_backend_info() {
  if (get_matmul_precision() == MatmulPrecision::bf16)
    return detail::onednn_info(MatmulPrecision::bf16);
  return get_gemm_backend() == GemmBackend::onednn ? detail::onednn_info()
                                                   : detail::openblas_info();
}

std::string compute_info() {
  const int threads = get_num_threads();
  return cpu_model() + " (" + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
         "): float GEMMs on " + gemm_backend_info() + ", matmul precision " +
         matmul_precision_name(get_matmul_precision());
}

}  // namespace xtgrad
