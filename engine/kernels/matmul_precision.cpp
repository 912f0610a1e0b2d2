#include "../matmul_precision.hpp"
#include "../weight_packing.hpp"

#include "../errors.hpp"
#include "onednn_gemm.hpp"

#include <atomic>

namespace xtgrad {

namespace {

std::atomic<MatmulPrecision>& precision() {
  static std::atomic<MatmulPrecision> current{MatmulPrecision::highest};
  return current;
}

bool known(MatmulPrecision p) {
  return p == MatmulPrecision::highest || p == MatmulPrecision::bf16;
}

// Why bf16 cannot run here, "" when it can.
std::string bf16_unsupported_reason() {
  if (!detail::onednn_compiled())
    return "bf16 GEMMs run on oneDNN, which this build does not include (configure with "
           "XTGRAD_ONEDNN=ON)";
  const std::string& kernel = detail::onednn_bf16_kernel();
  if (kernel.empty()) return "oneDNN has no bf16 matmul for this CPU";
  if (!detail::native_bf16_kernel(kernel))
    return "this CPU has neither AMX nor AVX512-BF16: oneDNN would only emulate bf16 (" + kernel +
           ") at below float speed";
  return "";
}

}  // namespace

bool matmul_precision_supported(MatmulPrecision p) {
  if (p == MatmulPrecision::highest) return true;
  return p == MatmulPrecision::bf16 && bf16_unsupported_reason().empty();
}

void set_matmul_precision(MatmulPrecision p) {
  const detail::Check check("set_matmul_precision");
  check.argument(known(p), "precision", "is ", matmul_precision_name(p),
                 ", expected MatmulPrecision::highest or MatmulPrecision::bf16");
  if (p == MatmulPrecision::bf16) {
    const std::string reason = bf16_unsupported_reason();
    check.argument(reason.empty(), "precision", "is bf16, which cannot run here: ", reason);
  }
  precision().store(p, std::memory_order_relaxed);
}

MatmulPrecision get_matmul_precision() {
  return precision().load(std::memory_order_relaxed);
}

std::string matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::highest:
      return "highest";
    case MatmulPrecision::bf16:
      return "bf16";
  }
  return "MatmulPrecision(" + std::to_string(static_cast<int>(p)) + ")";
}

void set_weight_packing(bool on) {
  detail::set_weight_packing(on);
}

bool weight_packing() {
  return detail::weight_packing();
}

}  // namespace xtgrad
