#include "../gemm_backend.hpp"
#include "../matmul_precision.hpp"

#include "../errors.hpp"
#include "onednn_gemm.hpp"
#include "openblas_info.hpp"

#include <atomic>

namespace xtgrad {

namespace {

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

}  // namespace xtgrad
